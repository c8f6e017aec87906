//! Injecting the JVM agent: find the agent library, create the thread work
//! area and the tree-dump directory, and build the `JAVA_TOOL_OPTIONS` that
//! load the agent into every JVM the recorded command starts.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context};
use idleflow_format::twa::WorkArea;

use crate::cli::RecordArgs;

/// History entries per thread in the work area: with the tracer reading
/// every 5 ms while a JVM has threads in the work area, enough for threads that
/// replace a node lasting Δ every few µs (interpreted `System.nanoTime` loops
/// were measured at ~50 entries/ms; 1,024 entries were overwritten before
/// the tracer read them at 25 ms).
const RING_LEN: u32 = 4096;

/// What `record` needs to run a command with the agent.
pub struct Agent {
    /// The work area, shared with the tracer.
    pub work_area: Arc<WorkArea>,
    /// Where the agents dump their call trees.
    pub tree_dir: PathBuf,
    /// The value for the command's `JAVA_TOOL_OPTIONS`.
    pub java_tool_options: String,
    /// Removed on drop.
    _dir: tempfile::TempDir,
}

/// The agent library beside the idleflow executable.
fn default_agent() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let p = exe.parent()?.join("libidleflow_agent.so");
    p.exists().then_some(p)
}

/// Prepares the agent for `args`; `None` when no agent library is found
/// and none was asked for (the recording then has no call trees).
pub fn prepare(args: &RecordArgs) -> anyhow::Result<Option<Agent>> {
    let lib = match &args.agent {
        Some(p) => {
            if !p.exists() {
                bail!("--agent {}: no such file", p.display());
            }
            p.canonicalize()
                .with_context(|| format!("--agent {}", p.display()))?
        }
        None => match default_agent() {
            Some(p) => p,
            None => {
                eprintln!(
                    "idleflow: note: no libidleflow_agent.so beside the idleflow executable; \
                     JVMs run without the agent (no call trees). Build it with `cargo build --release`."
                );
                return Ok(None);
            }
        },
    };
    check_plain(&lib, "the agent library path")?;
    let dir = tempfile::Builder::new()
        .prefix("idleflow-")
        .tempdir()
        .context("cannot create a directory for the JVM work area")?;
    check_plain(dir.path(), "the temporary directory")?;
    let twa_path = dir.path().join("twa");
    let tree_dir = dir.path().join("trees");
    std::fs::create_dir(&tree_dir)
        .with_context(|| format!("cannot create {}", tree_dir.display()))?;
    let work_area = WorkArea::create(&twa_path, args.max_threads, RING_LEN, args.delta)
        .context("cannot create the JVM work area")?;
    let options = format!(
        "-agentpath:{}=twa={},trees={},interval_ms={}",
        lib.display(),
        twa_path.display(),
        tree_dir.display(),
        args.snapshot_interval
    );
    let java_tool_options = match std::env::var("JAVA_TOOL_OPTIONS") {
        Ok(existing) if !existing.trim().is_empty() => format!("{existing} {options}"),
        _ => options,
    };
    Ok(Some(Agent {
        work_area: Arc::new(work_area),
        tree_dir,
        java_tool_options,
        _dir: dir,
    }))
}

/// `JAVA_TOOL_OPTIONS` is split at white space and agent options at commas
/// and `=`: refuse paths that would be cut.
fn check_plain(p: &Path, what: &str) -> anyhow::Result<()> {
    let s = p.to_string_lossy();
    if s.chars().any(|c| c.is_whitespace() || c == ',' || c == '=') {
        bail!("{what} {s} contains white space, ',' or '=', which JAVA_TOOL_OPTIONS cannot carry");
    }
    Ok(())
}
