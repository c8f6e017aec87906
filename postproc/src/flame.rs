//! Flame graphs of idle-causing paths, drawn by `inferno` from the folded
//! stacks built by [`crate::views`].

use std::io::Write;

use crate::analysis::Analysis;

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
    /// The recording has no call trees (no JVM ran with the agent).
    #[error("the recording has no Java call trees (was a JVM run under `idleflow record` with its agent?)")]
    NoTrees,
    /// No dispatch to idle was attributed to any call path.
    #[error("no dispatch to idle was attributed to a Java call path: nothing to draw")]
    Empty,
    /// inferno or the output failed.
    #[error("drawing the flame graph")]
    Io(#[from] std::io::Error),
}

/// The folded stacks of `a`, built while it was read as its
/// [`crate::views::FoldOptions`] asked (weight, pool threads merged by name
/// pattern: [`crate::arcflow::thread_pattern`]).
pub fn folded(a: &Analysis) -> Result<&[String], FlameError> {
    if a.views.jvms.is_empty() {
        return Err(FlameError::NoTrees);
    }
    if a.views.folded.is_empty() {
        return Err(FlameError::Empty);
    }
    Ok(&a.views.folded)
}

/// Writes the SVG flame graph of the folded stacks `lines` to `out`.
pub fn svg(lines: &[String], weight: Weight, out: impl Write) -> Result<(), FlameError> {
    let mut opts = inferno::flamegraph::Options::default();
    let (title, count) = match weight {
        Weight::IdleNs => (
            "Idle time after a thread left each Java call path",
            "ns idle",
        ),
        Weight::Dispatches => (
            "Dispatches to idle caused by a thread leaving each Java call path",
            "dispatches to idle",
        ),
    };
    opts.title = title.to_string();
    opts.count_name = count.to_string();
    opts.subtitle = Some(format!(
        "width: {count} after the thread left the frame's call path (idleflow)"
    ));
    inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), out)?;
    Ok(())
}
