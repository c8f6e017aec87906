//! The end of a recording, once its window closed and while the recorded
//! program's binaries are still there: every user-stack copy unwound and
//! named in place (`idleflow-unwind`), and the perf maps that name JIT
//! frames asked of the JVMs that do not write their own.
//!
//! Invariant: a failure here never damages the recording, which is
//! complete before this starts: the resolver rewrites it through a new
//! file, and a JVM that cannot write its perf map only leaves its JIT
//! frames unnamed, with a note.

use std::path::Path;
use std::time::Instant;

use crate::{agent, attach, Progress, SessionError};

/// Unwinds and names the recording's user-stack copies in place, now that
/// the program's window closed and while its binaries are still there.
pub fn resolve_stacks(
    path: &Path,
    quiet: bool,
    progress: &mut dyn Progress,
) -> Result<(), SessionError> {
    resolve_stacks_with(path, &Default::default(), quiet, progress)
}

/// [`resolve_stacks`], the JIT frames of the copies `stale` names cut off
/// ([`idleflow_unwind::StaleJitBefore`]).
pub fn resolve_stacks_with(
    path: &Path,
    stale: &idleflow_unwind::StaleJitBefore,
    quiet: bool,
    progress: &mut dyn Progress,
) -> Result<(), SessionError> {
    const WHAT: &str = "resolving user stacks";
    let total = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    progress.bytes(WHAT, 0, total);
    let started = Instant::now();
    let r = idleflow_unwind::resolve_with(path, stale, &mut |done, all| {
        progress.bytes(WHAT, done, all)
    });
    progress.bytes_done();
    let r = r.map_err(|source| SessionError::Resolve {
        path: path.to_path_buf(),
        source,
    })?;
    if !quiet {
        let c = &r.counts;
        progress.info(&format!(
            "{} user stacks unwound ({} distinct, {} truncated at the copy size, {} frames named) in {:.2} s",
            c.resolved,
            c.stacks,
            c.truncated,
            r.frames,
            started.elapsed().as_secs_f64()
        ));
    }
    Ok(())
}

/// Asks every JVM of `root`'s process tree that still runs without the
/// agent (`--pid`'s, or one started without our `JAVA_TOOL_OPTIONS`) to
/// write its perf map (`/tmp/perf-PID.map`, as `jcmd PID Compiler.perfmap`),
/// so the resolver names its JIT frames; the agent writes its JVM's map as
/// it compiles. What failed is a note each.
pub(crate) fn write_perf_maps(root: Option<u32>, quiet: bool, progress: &mut dyn Progress) {
    let Some(root) = root else {
        return;
    };
    let mut notes = Vec::new();
    for pid in attach::process_tree(root) {
        if !attach::is_jvm(pid) || agent::is_loaded_in(pid) {
            continue;
        }
        match attach::jcmd(pid, "Compiler.perfmap", "") {
            Ok(_) => {
                if !quiet {
                    progress.info(&format!(
                        "JVM {pid} wrote its perf map (/tmp/perf-{pid}.map)"
                    ));
                }
            }
            Err(e) => notes.push(format!(
                "JVM {pid}: its perf map could not be written, its JIT frames stay unnamed: {e}"
            )),
        }
    }
    for note in notes {
        progress.note(&note);
    }
}
