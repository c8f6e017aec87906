//! Flame graphs of idle-causing paths, drawn by `inferno` from folded
//! stacks: the arcflow call trees' ([`crate::views`]) where a JVM ran the
//! tree agent, else the Java wait stacks of the JVMs' flight recorders
//! ([`crate::waits::folded`]), else the stacks taken at the switch-outs:
//! user frames with the kernel's on top where the user stacks were
//! unwound ([`crate::callpaths::folded`]), kernel frames alone otherwise
//! ([`crate::kwaits::folded`]).

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
    /// The recording has no call paths: no trees, Java waits or kernel stacks.
    #[error("the recording has no call paths: no JVM ran under `idleflow record` with `--java waits` (the default) or `--java tree`, and it has no kernel stacks (recorded with `--no-stacks`, or by an older idleflow)")]
    NoTrees,
    /// `--by-reason` asks for Java waits, and there are none.
    #[error("--by-reason needs Java waits (`record --java waits`, the default); this recording has call trees only")]
    NoWaits,
    /// `--blocked` asks for blocking paths, and the recording has none.
    #[error("--blocked needs stacks at every wait: record with `idleflow record --stacks waits`")]
    NoBlocked,
    /// No dispatch to idle was attributed to any call path.
    #[error("no dispatch to idle was attributed to a call path: nothing to draw")]
    Empty,
    /// inferno or the output failed.
    #[error("drawing the flame graph")]
    Io(#[from] std::io::Error),
}

/// Which paths to draw.
#[derive(Debug, Clone, Copy, Default)]
pub struct Source {
    /// Java waits grouped by their JVM reason first.
    pub by_reason: bool,
    /// The stacks taken at the switch-outs, even where Java paths exist.
    pub stacks: bool,
    /// Of those, the user frames only (no kernel frames on top).
    pub user_only: bool,
    /// The blocking call paths instead, by blocked time or waits
    /// (`record --stacks waits`): an off-CPU flame graph.
    pub blocked: bool,
}

/// The folded stacks of `a`: its call trees', built while it was read as
/// its [`crate::views::FoldOptions`] asked (weight, pool threads merged by
/// name pattern: [`crate::arcflow::thread_pattern`]); without trees, or
/// with `by_reason`, its Java wait stacks, the same way; without either,
/// or with `stacks`, the stacks taken at the switch-outs.
pub fn folded(a: &Analysis, source: Source) -> Result<Vec<String>, FlameError> {
    let by_reason = source.by_reason;
    let fold = a.view_options.fold.unwrap_or(crate::views::FoldOptions {
        dispatches: false,
        merge_threads: true,
    });
    let shown = |tid| a.shows(tid) && !a.tool_tids.contains(&tid);
    let user_stacks = a.kernel.switch_user_stacks > 0;
    let caused = || {
        a.kernel
            .caused
            .iter()
            .map(|(&key, c)| (key, c.dispatches, c.idle_ns))
    };
    let lines = if source.blocked {
        if !a.kernel.tracks_blocked() {
            return Err(FlameError::NoBlocked);
        }
        let rows = a
            .kernel
            .blocked
            .iter()
            .map(|(&key, b)| (key, b.waits, b.blocked_ns));
        crate::callpaths::folded(&a.kernel, rows, &a.names, shown, fold, source.user_only)
    } else if source.stacks && user_stacks {
        crate::callpaths::folded(&a.kernel, caused(), &a.names, shown, fold, source.user_only)
    } else if source.stacks && !a.kernel.is_empty() {
        crate::kwaits::folded(&a.kernel, &a.names, shown, fold)
    } else if source.stacks {
        return Err(FlameError::NoTrees);
    } else if !a.views.jvms.is_empty() && !by_reason {
        a.views.folded.clone()
    } else if !a.java.is_empty() {
        crate::waits::folded(&a.java, fold, by_reason)
    } else if by_reason && !a.views.jvms.is_empty() {
        return Err(FlameError::NoWaits);
    } else if user_stacks && !by_reason {
        crate::callpaths::folded(&a.kernel, caused(), &a.names, shown, fold, source.user_only)
    } else if !a.kernel.is_empty() && !by_reason {
        crate::kwaits::folded(&a.kernel, &a.names, shown, fold)
    } else {
        return Err(FlameError::NoTrees);
    };
    if lines.is_empty() {
        return Err(FlameError::Empty);
    }
    Ok(lines)
}

/// Writes the SVG flame graph of the folded stacks `lines` to `out`.
/// `blocked`: the lines are blocking paths (their weight blocked ns or waits).
pub fn svg(
    lines: &[String],
    weight: Weight,
    blocked: bool,
    out: impl Write,
) -> Result<(), FlameError> {
    let mut opts = inferno::flamegraph::Options::default();
    let (title, count) = match weight {
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
    opts.subtitle = Some(if blocked {
        format!("width: {count} of the threads that blocked in the frame's call path (idleflow)")
    } else {
        format!("width: {count} after the thread left the frame's call path (idleflow)")
    });
    inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), out)?;
    Ok(())
}
