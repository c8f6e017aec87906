//! Injecting the JVM agent: find the agent library; for `record --java
//! tree`, create the thread work area and the tree-dump directory; and
//! build the `JAVA_TOOL_OPTIONS` part that loads the agent into every JVM
//! the recorded command starts (for `--java stacks` alone, its light mode,
//! which only writes the perf map).
//!
//! A JVM that runs as another user (`runuser`, `sudo -u`, a service that
//! drops privileges) cannot open the owner-only work area: it asks for it
//! over the hand-off socket ([`idleflow_wire::handoff`]), served here by
//! one thread that answers only processes of the recorded command's tree,
//! and gets a tree-dump directory owned by its user. The directory of it all
//! is traversable (0711) but not listable by others; nothing in it is
//! world-writable.
//!
//! Invariant: the work area is handed only to processes of the recorded
//! command's tree, and every path put into `JAVA_TOOL_OPTIONS` is one it
//! can carry whole ([`check_plain`]).

use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use idleflow_wire::twa::WorkArea;

use crate::{Options, Progress, SessionError};

/// History entries per thread in the work area: with the tracer reading
/// every 5 ms while a JVM has threads in the work area, enough for threads that
/// replace a node lasting Δ every few µs (interpreted `System.nanoTime` loops
/// were measured at ~50 entries/ms; 1,024 entries were overwritten before
/// the tracer read them at 25 ms).
const RING_LEN: u32 = 4096;

/// What `record` needs to run a command with the agent.
#[derive(Debug)]
pub struct Agent {
    /// The work area, shared with the tracer.
    pub work_area: Arc<WorkArea>,
    /// Where the agents dump their call trees.
    pub tree_dir: PathBuf,
    /// The agent's part of the command's `JAVA_TOOL_OPTIONS`.
    pub java_options: String,
    /// The recorded command's pid, once started: only its process tree is
    /// handed the work area.
    root: Arc<AtomicU32>,
    /// What agents said about running without call trees.
    notes: Arc<Mutex<Vec<String>>>,
    /// Removed on drop.
    _dir: tempfile::TempDir,
}

impl Agent {
    /// Names the recorded command's process, whose tree may ask for the work area.
    pub fn set_root(&self, pid: u32) {
        self.root.store(pid, Ordering::Relaxed);
    }

    /// The agents' notes so far (why a JVM runs without call trees).
    pub fn notes(&self) -> Vec<String> {
        self.notes.lock().map(|n| n.clone()).unwrap_or_default()
    }
}

/// Serves the hand-off socket: see the module documentation.
fn serve_handoff(
    listener: UnixListener,
    twa: std::fs::File,
    tree_dir: PathBuf,
    root: Arc<AtomicU32>,
    notes: Arc<Mutex<Vec<String>>>,
) {
    use idleflow_wire::handoff::{self, Request};
    for stream in listener.incoming().flatten() {
        // Any local user may connect: one who never sends its line must
        // not hold up the JVMs behind it.
        let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(2)));
        let Ok(peer) = handoff::peer(&stream) else {
            continue;
        };
        match handoff::read_request(&stream) {
            Ok(Request::Note(text)) => {
                if let Ok(mut n) = notes.lock() {
                    if n.len() < 100 {
                        n.push(format!("JVM {}: {text}", peer.pid));
                    }
                }
            }
            Ok(Request::WorkArea) => {
                let root = root.load(Ordering::Relaxed);
                if root == 0 || !idleflow_tracer::procfs::descends_from(peer.pid, root) {
                    let _ = handoff::refuse(&stream, "not a process of the recorded command");
                    continue;
                }
                let dir = tree_dir.join(peer.pid.to_string());
                let made = std::fs::create_dir(&dir)
                    .or_else(|e| match e.kind() {
                        std::io::ErrorKind::AlreadyExists => Ok(()),
                        _ => Err(e),
                    })
                    .and_then(|()| std::os::unix::fs::chown(&dir, Some(peer.uid), Some(peer.gid)))
                    .and_then(|()| {
                        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
                    });
                let _ = match made {
                    Ok(()) => handoff::grant(&stream, twa.as_fd(), &dir),
                    Err(e) => {
                        handoff::refuse(&stream, &format!("cannot make {}: {e}", dir.display()))
                    }
                };
            }
            Err(_) => {}
        }
    }
}

/// The agent library beside the idleflow executable.
fn default_agent() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    // `cargo build` puts the library beside the executable; `cargo test`
    // leaves it in `deps/` only: the newest of the two.
    [
        dir.join("libidleflow_agent.so"),
        dir.join("deps/libidleflow_agent.so"),
    ]
    .into_iter()
    .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
    .max()
    .map(|(_, p)| p)
}

/// The agent library to inject: `asked` (`--agent`), else the one beside
/// the idleflow executable; `None` (with a note) when there is none and
/// none was asked for.
pub fn library(
    asked: Option<&Path>,
    progress: &mut dyn Progress,
) -> Result<Option<PathBuf>, SessionError> {
    let lib = match asked {
        Some(p) => {
            if !p.exists() {
                return Err(SessionError::NoAgent {
                    path: p.to_path_buf(),
                });
            }
            p.canonicalize()
                .map_err(SessionError::io(format!("--agent {}", p.display())))?
        }
        None => match default_agent() {
            Some(p) => p,
            None => {
                progress.note(
                    "no libidleflow_agent.so beside the idleflow executable; \
                     JVMs run without the agent. Build it with `cargo build --release`.",
                );
                return Ok(None);
            }
        },
    };
    check_plain(&lib, "the agent library path")?;
    Ok(Some(lib))
}

/// The `JAVA_TOOL_OPTIONS` part that loads the agent's light mode alone
/// (`--java stacks` without `tree`): no method entries or exits, only the
/// JVM's perf map written as it compiles (see the agent's `perfmap`).
pub fn perf_map_options(lib: &Path) -> String {
    format!("-agentpath:{}={PERF_MAP_ONLY}", lib.display())
}

/// The agent options of the light mode alone.
const PERF_MAP_ONLY: &str = "tree=0,perfmap=1";

/// Whether process `pid` has the agent loaded (its perf map is then
/// written as the JVM compiles, not asked for at the end).
pub fn is_loaded_in(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .is_ok_and(|maps| maps.contains("/libidleflow_agent.so"))
}

/// Prepares the tree agent for `opts` (with the perf-map writer too when
/// `perf_map`); `None` when no agent library is found and none was asked
/// for (the recording then has no call trees).
pub fn prepare(
    opts: &Options,
    perf_map: bool,
    progress: &mut dyn Progress,
) -> Result<Option<Agent>, SessionError> {
    let Some(lib) = library(opts.java.agent.as_deref(), progress)? else {
        return Ok(None);
    };
    let dir = idleflow_format::files::private_tempdir("idleflow-").map_err(|e| {
        SessionError::io("cannot create a directory for the JVM work area")(e.into())
    })?;
    check_plain(dir.path(), "the temporary directory")?;
    let twa_path = dir.path().join("twa");
    let tree_dir = dir.path().join("trees");
    std::fs::create_dir(&tree_dir).map_err(SessionError::io(format!(
        "cannot create {}",
        tree_dir.display()
    )))?;
    let j = &opts.java;
    let work_area = WorkArea::create(&twa_path, j.max_threads, RING_LEN, j.delta_ns)
        .map_err(SessionError::WorkArea)?;
    // JVMs of other users reach the socket (and their own tree directory)
    // by path; they cannot list the directories or open the work area.
    for d in [dir.path(), tree_dir.as_path()] {
        set_mode(d, 0o711)?;
    }
    let socket = dir.path().join("handoff.sock");
    let listener = UnixListener::bind(&socket).map_err(SessionError::io(format!(
        "cannot create the socket {}",
        socket.display()
    )))?;
    set_mode(&socket, 0o666)?;
    let twa_file = std::fs::File::options()
        .read(true)
        .write(true)
        .open(&twa_path)
        .map_err(SessionError::io(format!(
            "cannot open {}",
            twa_path.display()
        )))?;
    let root = Arc::new(AtomicU32::new(0));
    let notes = Arc::new(Mutex::new(Vec::new()));
    {
        let (tree_dir, root, notes) = (tree_dir.clone(), root.clone(), notes.clone());
        std::thread::Builder::new()
            .name("idleflow-handoff".into())
            .spawn(move || serve_handoff(listener, twa_file, tree_dir, root, notes))
            .map_err(SessionError::io(
                "cannot start the work-area hand-off thread",
            ))?;
    }
    let java_options = format!(
        "-agentpath:{}=twa={},trees={},handoff={},interval_ms={}{}",
        lib.display(),
        twa_path.display(),
        tree_dir.display(),
        socket.display(),
        j.snapshot_interval_ms,
        if perf_map { ",perfmap=1" } else { "" }
    );
    Ok(Some(Agent {
        work_area: Arc::new(work_area),
        tree_dir,
        java_options,
        root,
        notes,
        _dir: dir,
    }))
}

/// `JAVA_TOOL_OPTIONS` is split at white space and agent options at commas
/// and `=`: refuse paths that would be cut.
pub(crate) fn check_plain(p: &Path, what: &'static str) -> Result<(), SessionError> {
    let s = p.to_string_lossy();
    if s.chars().any(|c| c.is_whitespace() || c == ',' || c == '=') {
        return Err(SessionError::NotPlain {
            what,
            path: p.to_path_buf(),
        });
    }
    Ok(())
}

/// Sets the permissions of `path` to `mode`.
pub(crate) fn set_mode(path: &Path, mode: u32) -> Result<(), SessionError> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(SessionError::io(
        format!("cannot set the permissions of {}", path.display()),
    ))
}
