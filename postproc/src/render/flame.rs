//! Flame graphs of idle-causing paths, drawn by `inferno` from folded
//! stacks: the merged paths of every recording by default
//! ([`crate::sections::idle_paths::folded`]), or one source's own view: the arcflow
//! call trees ([`crate::pass::call_tree`]), the flight recorders' Java wait stacks
//! ([`crate::pass::java_waits::folded`]), the user stacks with the kernel's on top
//! ([`crate::sections::call_paths::folded`]), the kernel stacks
//! ([`crate::sections::kernel_waits::folded`]), or the blocking paths.

use std::io::Write;

use crate::pass::Analysis;

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
    /// `--view tree` asks for call trees, and the recording has none.
    #[error("--view tree needs call trees: record with `idleflow record --java tree`")]
    NoTrees,
    /// `--view java` asks for Java waits, and there are none.
    #[error("--view java needs Java waits: a JVM recorded with `--java waits` (the default) whose flight recording was read")]
    NoWaits,
    /// `--view user` or `--view kernel` asks for stacks, and there are none.
    #[error("the recording has no stacks at the switch-outs (recorded with `--no-stacks`, or by an older idleflow)")]
    NoStacks,
    /// `--blocked` asks for blocking paths, and the recording has none.
    #[error("--blocked needs stacks at every wait: record with `idleflow record --stacks waits`")]
    NoBlocked,
    /// No dispatch to idle was attributed to any path.
    #[error("no thread of the recorded program left a CPU idle in the window: nothing to draw")]
    Empty,
    /// inferno or the output failed.
    #[error("drawing the flame graph")]
    Io(#[from] std::io::Error),
}

/// Which paths to draw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum View {
    /// The merged paths ([`crate::sections::idle_paths`]): any recording.
    #[default]
    Paths,
    /// The arcflow call trees.
    Tree,
    /// The flight recorders' Java wait stacks.
    Java,
    /// The user stacks at the switch-outs, the kernel's on top.
    User,
    /// The kernel stacks at the switch-outs.
    Kernel,
    /// The blocking call paths (`record --stacks waits`): off-CPU.
    Blocking,
    /// The blame chains: victims at the bottom, root causes on top
    /// ([`crate::sections::root_causes::folded`]).
    Blame,
}

/// What to draw.
#[derive(Debug, Clone, Copy, Default)]
pub struct Source {
    /// Which paths.
    pub view: View,
    /// Reasons first (merged paths, Java waits).
    pub by_reason: bool,
    /// The kernel frames left out (merged paths, user stacks).
    pub user_only: bool,
}

/// The folded stacks of `a` for `source`, weighted and with pool threads
/// merged by name pattern as its [`crate::path::FoldOptions`] say
/// ([`crate::path::thread_pattern`]).
pub fn folded(a: &Analysis, source: Source) -> Result<Vec<String>, FlameError> {
    let fold = a.view_options.fold.unwrap_or(crate::path::FoldOptions {
        dispatches: false,
        merge_threads: true,
    });
    let shown = |tid| a.shows(tid) && !a.tool_tids.contains(&tid);
    let caused = || {
        a.kernel
            .caused
            .iter()
            .map(|(&key, c)| (key, c.dispatches, c.idle_ns))
    };
    let lines = match source.view {
        View::Blame => crate::sections::root_causes::folded(a, fold.merge_threads),
        View::Paths => {
            crate::sections::idle_paths::folded(a, fold, source.by_reason, source.user_only)
        }
        View::Tree if a.views.jvms.is_empty() => return Err(FlameError::NoTrees),
        View::Tree => a.views.folded.clone(),
        View::Java if a.java.is_empty() => return Err(FlameError::NoWaits),
        View::Java => {
            crate::pass::java_waits::folded(&a.java, &a.java_idle, fold, source.by_reason)
        }
        View::User if a.kernel.switch_user_stacks > 0 => crate::sections::call_paths::folded(
            &a.kernel,
            caused(),
            &a.names,
            shown,
            fold,
            source.user_only,
        ),
        View::User | View::Kernel if a.kernel.is_empty() => return Err(FlameError::NoStacks),
        View::User | View::Kernel => {
            crate::sections::kernel_waits::folded(&a.kernel, &a.names, shown, fold)
        }
        View::Blocking if !a.kernel.tracks_blocked() => return Err(FlameError::NoBlocked),
        View::Blocking => {
            let rows = a
                .kernel
                .blocked
                .iter()
                .map(|(&key, b)| (key, b.waits, b.blocked_ns));
            crate::sections::call_paths::folded(
                &a.kernel,
                rows,
                &a.names,
                shown,
                fold,
                source.user_only,
            )
        }
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
