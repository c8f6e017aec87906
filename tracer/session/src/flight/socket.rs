//! The recorder's trigger socket (`/run/idleflow/flight-PID.sock`) and
//! `idleflow trigger`, its client. Anyone may connect; the recorder checks
//! who asks (`SO_PEERCRED`): root, its own user or a member of
//! `--trigger-group`; anyone else is told "not allowed" and nothing
//! happens. A request runs nothing but a dump, at most one a second.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use idleflow_tracer::{procfs, sys};

use super::{FlightOptions, State, SOCKET_DIR};
use crate::SessionError;

/// The recorder's trigger socket.
pub(super) struct Listener {
    listener: UnixListener,
    pub(super) path: PathBuf,
    group: Option<u32>,
    last_request: std::cell::Cell<Option<Instant>>,
}

impl Listener {
    pub(super) fn open(group: Option<u32>) -> Result<Listener, SessionError> {
        let dir = Path::new(SOCKET_DIR);
        let err = |what: String| SessionError::io(what);
        socket_dir(dir).map_err(err(format!("cannot use {SOCKET_DIR}")))?;
        let path = dir.join(format!("flight-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path)
            .map_err(err(format!("cannot listen on {}", path.display())))?;
        // Anyone may connect; who asks is checked on each connection.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).map_err(err(
            format!("cannot open {} to other users", path.display()),
        ))?;
        listener
            .set_nonblocking(true)
            .map_err(err(format!("cannot listen on {}", path.display())))?;
        Ok(Listener {
            listener,
            path,
            group,
            last_request: Default::default(),
        })
    }

    /// Answers the connections waiting; the first allowed request, as who
    /// asked, if one came.
    pub(super) fn serve(&self, state: &State, flight: &FlightOptions) -> Option<String> {
        let mut asked = None;
        while let Ok((stream, _)) = self.listener.accept() {
            if let Some(who) = self.answer(stream, state, flight) {
                asked.get_or_insert(who);
            }
        }
        asked
    }

    fn answer(&self, stream: UnixStream, state: &State, flight: &FlightOptions) -> Option<String> {
        let _ = stream.set_nonblocking(false);
        let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
        let _ = stream.set_write_timeout(Some(Duration::from_millis(200)));
        let mut out = &stream;
        let Ok((pid, uid, gid)) = sys::peer_credentials(stream.as_fd()) else {
            let _ = writeln!(out, "error: cannot tell who asks");
            return None;
        };
        let me = procfs::euid();
        let allowed = uid == 0
            || uid == me
            || self
                .group
                .is_some_and(|g| gid == g || procfs::process_groups(pid).contains(&g));
        if !allowed {
            let _ = writeln!(
                out,
                "not allowed: uid {uid} is not root, the recorder's user or in its --trigger-group"
            );
            return None;
        }
        let mut line = String::new();
        let _ = BufReader::new(&stream).read_line(&mut line);
        if line.trim() != "dump" {
            let _ = writeln!(
                out,
                "error: unknown request '{}' (only 'dump')",
                line.trim()
            );
            return None;
        }
        if self
            .last_request
            .get()
            .is_some_and(|t| t.elapsed() < Duration::from_secs(1))
        {
            let _ = writeln!(out, "busy: one request a second");
            return None;
        }
        self.last_request.set(Some(Instant::now()));
        if let Some((why, _)) = state.held_back(flight, true) {
            let _ = writeln!(out, "held back: {why}");
            return None;
        }
        let _ = writeln!(
            out,
            "dumping: recorder {} writes dump {} into {} after a {:.1} s tail",
            std::process::id(),
            state.decided + 1,
            flight.dir.display(),
            flight.tail.as_secs_f64()
        );
        Some(format!("asked by uid {uid} (pid {pid})"))
    }
}

/// Makes `dir` (0755) or checks an existing one: a directory, not a link,
/// owned by root or idleflow's user, that nobody else can write (anyone
/// who could would plant a socket of their own under the recorder's name).
fn socket_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    match std::fs::DirBuilder::new().mode(0o755).create(dir) {
        Ok(()) => std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = std::fs::symlink_metadata(dir)?;
    let me = procfs::euid();
    if !meta.is_dir() || (meta.uid() != 0 && meta.uid() != me) || meta.mode() & 0o022 != 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "not a directory of root's or idleflow's user that only its owner can write \
                 (uid {}, mode {:o}): remove it",
                meta.uid(),
                meta.mode() & 0o7777
            ),
        ));
    }
    Ok(())
}

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// `idleflow trigger`: asks the flight recorders on this machine (or the
/// one of `pid`) for a dump; their answers, by recorder pid.
pub fn ask(pid: Option<u32>) -> Result<Vec<(u32, String)>, SessionError> {
    let dir = Path::new(SOCKET_DIR);
    let mut socks: Vec<(u32, PathBuf)> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| {
                    let name = e.file_name().into_string().ok()?;
                    let p: u32 = name
                        .strip_prefix("flight-")?
                        .strip_suffix(".sock")?
                        .parse()
                        .ok()?;
                    Some((p, e.path()))
                })
                .collect()
        })
        .unwrap_or_default();
    socks.sort();
    if let Some(want) = pid {
        socks.retain(|(p, _)| *p == want);
    }
    let mut answers = Vec::new();
    for (p, path) in socks {
        let answer = match UnixStream::connect(&path) {
            Ok(mut s) => {
                let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                let _ = s.write_all(b"dump\n");
                let mut line = String::new();
                let _ = BufReader::new(&s).read_line(&mut line);
                if line.trim().is_empty() {
                    "no answer".to_string()
                } else {
                    line.trim().to_string()
                }
            }
            // A recorder that ended without removing its socket.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => continue,
            Err(e) => format!("cannot connect to {}: {e}", path.display()),
        };
        answers.push((p, answer));
    }
    Ok(answers)
}
