//! HotSpot's attach mechanism, as `jcmd PID COMMAND` uses it: how idleflow
//! starts and stops a flight recording in a JVM that is already running
//! (`record --pid`), or dumps one from a JVM the recorded command still runs
//! when the recording stops.
//!
//! Protocol (OpenJDK's `LinuxAttachListener`, version 1): the JVM listens on
//! the Unix socket `/tmp/.java_pid<PID>` (its PID and `/tmp` as seen in its
//! own namespaces), which it opens when it receives SIGQUIT while a trigger
//! file `.attach_pid<PID>` exists in its working directory or `/tmp`. A
//! request is `1\0jcmd\0<command>\0\0\0`; the reply is a result code line
//! and the command's output. The JVM accepts peers with its own effective
//! uid and gid, or root.
//!
//! Invariant: SIGQUIT is only ever sent to a process that maps `libjvm.so`
//! and already catches SIGQUIT with its `Signal Dispatcher` running (to any
//! other, or to a JVM still starting, it would be fatal), and the trigger
//! file is removed again.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How long a JVM may take to open its socket, and to answer.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Why a command could not be run in a JVM.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    /// The process is not a HotSpot JVM (no `libjvm.so` mapped).
    #[error("process {0} is not a Java virtual machine (no libjvm.so mapped)")]
    NotAJvm(u32),
    /// The JVM does not handle SIGQUIT yet (still starting): SIGQUIT would
    /// kill it. Try again later.
    #[error("JVM {0} is still starting (it does not handle SIGQUIT yet)")]
    NotReady(u32),
    /// The JVM did not open its attach socket (attach disabled with
    /// `-XX:+DisableAttachMechanism`, or the JVM is hung).
    #[error("JVM {0} did not open its attach socket within {1:?} (started with -XX:+DisableAttachMechanism?)")]
    NoSocket(u32, Duration),
    /// The socket or the trigger file failed.
    #[error("attaching to JVM {pid}: {what}")]
    Io {
        /// The JVM.
        pid: u32,
        /// What was being done.
        what: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// The JVM ran the command and said it failed (the message leaves the
    /// JVM out: callers name it).
    #[error("{command} answered: {answer}")]
    Refused {
        /// The JVM.
        pid: u32,
        /// The command.
        command: String,
        /// Its answer.
        answer: String,
    },
}

/// Whether `pid` is a HotSpot JVM: it maps `libjvm.so`.
pub fn is_jvm(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .is_ok_and(|m| m.lines().any(|l| l.ends_with("/libjvm.so")))
}

/// Whether `pid` catches SIGQUIT (its `SigCgt` mask) and runs HotSpot's
/// `Signal Dispatcher` thread, which serves the attach request: only then
/// is SIGQUIT safe to send (to a JVM still starting it is fatal).
pub fn is_ready(pid: u32) -> bool {
    let caught = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            let mask = s
                .lines()
                .find_map(|l| l.strip_prefix("SigCgt:"))?
                .trim()
                .to_string();
            u64::from_str_radix(&mask, 16).ok()
        })
        .is_some_and(|m| m & (1 << (libc::SIGQUIT - 1)) != 0);
    caught
        && std::fs::read_dir(format!("/proc/{pid}/task"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|t| {
                std::fs::read_to_string(t.path().join("comm"))
                    .is_ok_and(|c| c.trim_end() == "Signal Dispatch")
            })
}

/// The JVM's pid in its own pid namespace (the last `NStgid`).
fn namespace_pid(pid: u32) -> u32 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("NStgid:"))
                .and_then(|l| l.split_whitespace().last()?.parse().ok())
        })
        .unwrap_or(pid)
}

/// The longest answer read from a JVM's attach socket.
const ANSWER_LIMIT: u64 = 16 << 20;

/// Runs the diagnostic command `command` (as `jcmd PID command`) in JVM
/// `pid`; returns its output, which must contain `expect` (the command's
/// word for success), else the answer is the error.
pub fn jcmd(pid: u32, command: &str, expect: &str) -> Result<String, AttachError> {
    if !is_jvm(pid) {
        return Err(AttachError::NotAJvm(pid));
    }
    let io = |what: &str| {
        let what = what.to_string();
        move |source| AttachError::Io { pid, what, source }
    };
    let ns = namespace_pid(pid);
    let tmp = PathBuf::from(format!("/proc/{pid}/root/tmp"));
    let socket = tmp.join(format!(".java_pid{ns}"));
    if !socket.exists() {
        if !is_ready(pid) {
            return Err(AttachError::NotReady(pid));
        }
        // The trigger file: in the JVM's working directory, else its /tmp;
        // both are the target's: made new, never through a link planted
        // there, and removed only when made here.
        let mut failed = None;
        let (trigger, made) = [
            PathBuf::from(format!("/proc/{pid}/cwd/.attach_pid{ns}")),
            tmp.join(format!(".attach_pid{ns}")),
        ]
        .into_iter()
        .find_map(|p| match idleflow_format::files::create_marker(&p) {
            Ok(made) => Some((p, made)),
            Err(e) => {
                failed = Some(e);
                None
            }
        })
        .ok_or_else(|| {
            io("creating the trigger file .attach_pid")(
                failed.unwrap_or_else(std::io::Error::last_os_error),
            )
        })?;
        // SAFETY: kill has no memory effects; `pid` maps libjvm.so (checked
        // above), and a JVM answers SIGQUIT with its attach listener.
        let sent = unsafe { libc::kill(pid as i32, libc::SIGQUIT) };
        let started = Instant::now();
        let mut wait = Duration::from_millis(10);
        while sent == 0 && !socket.exists() && started.elapsed() < TIMEOUT {
            std::thread::sleep(wait);
            wait = (wait * 2).min(Duration::from_millis(200));
        }
        if made {
            let _ = std::fs::remove_file(&trigger);
        }
        if !socket.exists() {
            return Err(AttachError::NoSocket(pid, TIMEOUT));
        }
    }
    let mut s = UnixStream::connect(&socket).map_err(io("connecting to its attach socket"))?;
    s.set_read_timeout(Some(TIMEOUT))
        .and_then(|()| s.set_write_timeout(Some(TIMEOUT)))
        .map_err(io("setting a timeout"))?;
    let request = format!("1\0jcmd\0{command}\0\0\0");
    s.write_all(request.as_bytes())
        .map_err(io("sending the command"))?;
    // The target answers: at most a bounded answer is read.
    let mut answer = String::new();
    (&s).take(ANSWER_LIMIT)
        .read_to_string(&mut answer)
        .map_err(io("reading the answer"))?;
    let (code, text) = answer.split_once('\n').unwrap_or((answer.as_str(), ""));
    let text = text.trim().to_string();
    // Code 0 is success of the attach operation; a diagnostic command that
    // fails still answers 0 with its error as text, which the caller checks
    // (`expect`).
    if code.trim() != "0" || !text.contains(expect) {
        return Err(AttachError::Refused {
            pid,
            command: command.split_whitespace().next().unwrap_or("").to_string(),
            answer: if text.is_empty() {
                format!("result code {}", code.trim())
            } else {
                // One line: the JVM's lines joined.
                text.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .collect::<Vec<_>>()
                    .join(" ")
            },
        });
    }
    Ok(text)
}

/// `root` and its descendants, through `/proc/PID/task/TID/children`.
pub fn process_tree(root: u32) -> Vec<u32> {
    let mut all = vec![root];
    let mut i = 0;
    while i < all.len() && all.len() < 100_000 {
        let pid = all[i];
        i += 1;
        for task in std::fs::read_dir(format!("/proc/{pid}/task"))
            .into_iter()
            .flatten()
            .flatten()
        {
            if let Ok(children) = std::fs::read_to_string(task.path().join("children")) {
                all.extend(
                    children
                        .split_whitespace()
                        .filter_map(|c| c.parse::<u32>().ok()),
                );
            }
        }
    }
    all.sort_unstable();
    all.dedup();
    all
}
