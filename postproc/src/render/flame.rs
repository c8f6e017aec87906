//! Flame graphs of idle-causing paths, drawn by `inferno` from the folded
//! lines of one view ([`crate::sections::folded`]: the merged paths by
//! default, or one source's own), and the differential flame graph of two
//! runs.

use std::io::Write;

pub use crate::sections::folded::{FoldError, Source, View};

/// What a frame's width stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Weight {
    /// Idle time that followed a thread leaving in the path, ns.
    IdleNs,
    /// Dispatches to idle caused by a thread leaving in the path.
    Dispatches,
}

/// Errors of drawing.
#[derive(Debug, thiserror::Error)]
pub enum FlameError {
    /// The view cannot be drawn from the recording.
    #[error(transparent)]
    Fold(#[from] FoldError),
    /// inferno or the output failed.
    #[error("drawing the flame graph")]
    Io(#[from] std::io::Error),
}

/// Writes the SVG flame graph of the folded stacks `lines` to `out`.
/// `blocked`: the lines are blocking paths (their weight blocked ns or waits).
pub fn svg(
    lines: &[String],
    weight: Weight,
    view: View,
    out: impl Write,
) -> Result<(), FlameError> {
    let blocked = view == View::Blocking;
    let mut opts = inferno::flamegraph::Options::default();
    let (title, count) = match weight {
        _ if view == View::Blame => (
            "Idle time by wait chain: the threads that left CPUs idle at the bottom, what held them up on top",
            "ns idle",
        ),
        Weight::IdleNs if blocked => (
            "Time threads waited until they ran again, by call path (off-CPU)",
            "ns blocked",
        ),
        Weight::Dispatches if blocked => ("Waits (blocking switch-outs), by call path", "waits"),
        Weight::IdleNs => (
            "Idle time after a thread left a CPU, by call path",
            "ns idle",
        ),
        Weight::Dispatches => (
            "Dispatches to idle caused by a thread leaving a CPU, by call path",
            "dispatches to idle",
        ),
    };
    opts.title = title.to_string();
    // Frame kinds by async-profiler's suffixes: JIT green, inlined aqua,
    // kernel orange; JVM reasons (`[monitor enter] …`) red.
    opts.colors =
        inferno::flamegraph::Palette::Multi(inferno::flamegraph::color::MultiPalette::Java);
    opts.count_name = count.to_string();
    opts.subtitle = Some(if view == View::Blame {
        "width: idle ns that ended in the frame's root, through the chain below it (idleflow)"
            .to_string()
    } else if blocked {
        format!("width: {count} of the threads that blocked in the frame's call path (idleflow)")
    } else {
        format!("width: {count} after the thread left the frame's call path (idleflow)")
    });
    inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), out)?;
    Ok(())
}

/// Writes the differential flame graph of `lines` (`stack base new`, as
/// [`crate::compare::diff::differential_folded`] makes them) to `out`: widths the
/// new run's idle, red where a path's idle grew, blue where it shrank.
pub fn differential_svg(lines: &[String], out: impl Write) -> Result<(), FlameError> {
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = "Idle time after a thread left a CPU, by call path: new run against base".into();
    opts.subtitle =
        Some("width: ns idle in the new run; red: grew, blue: shrank (idleflow diff)".into());
    opts.count_name = "ns idle".into();
    inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), out)?;
    Ok(())
}
