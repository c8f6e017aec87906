//! Which folded view a flame graph draws: every view of the idle-causing
//! paths implements one interface ([`Fold`], as inferno's `Collapse`), and
//! [`view`] picks the one a [`Source`] names — the merged paths by
//! default, or one source's own: the blame chains, the arcflow call trees,
//! the flight recorders' Java wait stacks, the user stacks with the
//! kernel's on top, the kernel stacks, the blocking paths.
//!
//! Invariant: renderers get folded lines from here only; a view that the
//! recording cannot give is an error that says how to record it, never an
//! empty picture.

use crate::pass::call_tree::TreeStacks;
use crate::pass::java_waits::JavaWaitStacks;
use crate::pass::Analysis;
use crate::path::{Fold, FoldOptions};
use crate::sections::call_paths::{CallPathRows, CallPaths};
use crate::sections::idle_paths::MergedPaths;
use crate::sections::kernel_waits::KernelStacks;
use crate::sections::root_causes::BlameChains;

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
    /// ([`BlameChains`]).
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

/// Why a view cannot be drawn.
#[derive(Debug, thiserror::Error)]
pub enum FoldError {
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
}

/// The view of `a` that `source` names.
pub fn view<'a>(a: &'a Analysis, source: Source) -> Result<Box<dyn Fold + 'a>, FoldError> {
    let shown = move |tid| a.shows(tid) && !a.tool_tids.contains(&tid);
    let call_paths = |rows| CallPaths {
        kernel: &a.kernel,
        rows,
        names: &a.names,
        shown,
        user_only: source.user_only,
    };
    Ok(match source.view {
        View::Blame => Box::new(BlameChains(a)),
        View::Paths => Box::new(MergedPaths {
            analysis: a,
            by_reason: source.by_reason,
            user_only: source.user_only,
        }),
        View::Tree if a.views.jvms.is_empty() => return Err(FoldError::NoTrees),
        View::Tree => Box::new(TreeStacks(&a.views)),
        View::Java if a.java.is_empty() => return Err(FoldError::NoWaits),
        View::Java => Box::new(JavaWaitStacks {
            waits: &a.java,
            idle: &a.java_idle,
            by_reason: source.by_reason,
        }),
        View::User if a.kernel.switch_user_stacks > 0 => Box::new(call_paths(CallPathRows::Caused)),
        View::User | View::Kernel if a.kernel.is_empty() => return Err(FoldError::NoStacks),
        View::User | View::Kernel => Box::new(KernelStacks {
            kernel: &a.kernel,
            names: &a.names,
            shown,
        }),
        View::Blocking if !a.kernel.tracks_blocked() => return Err(FoldError::NoBlocked),
        View::Blocking => Box::new(call_paths(CallPathRows::Blocked)),
    })
}

/// The folded lines of `a` for `source`, weighted and with pool threads
/// merged by name pattern as the analysis's [`FoldOptions`] say
/// ([`crate::path::thread_pattern`]).
pub fn folded(a: &Analysis, source: Source) -> Result<Vec<String>, FoldError> {
    let fold = a.view_options.fold.unwrap_or(FoldOptions {
        dispatches: false,
        merge_threads: true,
    });
    let lines = view(a, source)?.folded_lines(fold);
    if lines.is_empty() {
        return Err(FoldError::Empty);
    }
    Ok(lines)
}
