//! The flight recorder's heartbeat (`--heartbeat DUR`, with
//! `--history-job`): every DUR the ring's window (its last DUR, at most the
//! ring's length) is written like a dump, checked against the job's
//! history (`idleflow history check`), and kept in it as a normal time when
//! no path's share of the idle rose beyond the job's band (`history add`).
//! A window in which one did is not kept as normal: it is said, and it
//! fires the `history` trigger when the policy has it — the patent's
//! comparison with a history of jobs, made while the program runs.
//!
//! Invariant: one heartbeat at a time; its file is private, in the dumps'
//! directory under a name no dump has (`.heartbeat-N.idleflow`), and
//! removed whatever happens; the check and the add run as `idleflow
//! history` children of this executable, as a dump's `--history-job` does.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::job::Job;
use super::HeartbeatOptions;

/// What a heartbeat found, for the recorder's loop.
pub(super) struct Beat {
    /// The line to say.
    pub line: String,
    /// A path rose: the state of the `history` trigger, in words.
    pub rose: Option<String>,
}

/// When the next heartbeat is due, and whether one is being made.
pub(super) struct Heartbeat {
    every: Duration,
    min_change_pts: Option<f64>,
    next: Instant,
    busy: Arc<AtomicBool>,
    number: u32,
}

impl Heartbeat {
    pub fn new(o: HeartbeatOptions) -> Heartbeat {
        let every = o.every;
        Heartbeat {
            every,
            min_change_pts: o.min_change_pts,
            next: Instant::now() + every,
            busy: Arc::new(AtomicBool::new(false)),
            number: 0,
        }
    }

    /// How long a heartbeat's window is at most.
    pub fn every(&self) -> Duration {
        self.every
    }

    /// Whether one is due now; a heartbeat still being made makes the next
    /// one wait a period more.
    pub fn due(&mut self, now: Instant) -> bool {
        if now < self.next {
            return false;
        }
        self.next = now + self.every;
        !self.busy.load(Ordering::Relaxed)
    }

    /// The next heartbeat's file in `dir`, and its number.
    pub fn path(&mut self, dir: &Path) -> (PathBuf, u32) {
        self.number += 1;
        (
            dir.join(format!(".heartbeat-{}.idleflow", self.number)),
            self.number,
        )
    }

    /// Completes `job` on a thread of its own, checks it against the job's
    /// history `(job, store)` and keeps it there unless a path rose; what
    /// it found goes to `said`.
    pub fn start(
        &self,
        job: Job,
        number: u32,
        history: (String, Option<String>),
        said: mpsc::Sender<Beat>,
    ) -> std::io::Result<std::thread::JoinHandle<()>> {
        self.busy.store(true, Ordering::Relaxed);
        let busy = Arc::clone(&self.busy);
        let min_change = self.min_change_pts;
        std::thread::Builder::new()
            .name("idleflow-beat".into())
            .spawn(move || {
                let path = job.path.clone();
                let beat = match job.complete() {
                    Ok(w) => {
                        let secs = w.dumped.summary.stop_ns.saturating_sub(w.base_ns) as f64 / 1e9;
                        judge(&path, number, secs, &history, min_change)
                    }
                    Err(why) => Beat {
                        line: format!("heartbeat {number}: {why}"),
                        rose: None,
                    },
                };
                let _ = std::fs::remove_file(&path);
                busy.store(false, Ordering::Relaxed);
                let _ = said.send(beat);
            })
    }
}

/// `idleflow history SUB FILE --job JOB [--history STORE] ARGS`, run as
/// a child of this executable.
pub(super) fn history_command(
    sub: &str,
    file: &Path,
    (job, store): &(String, Option<String>),
    args: &[&str],
) -> Command {
    let mut cmd =
        Command::new(std::env::current_exe().unwrap_or_else(|_| PathBuf::from("idleflow")));
    cmd.arg("history")
        .arg(sub)
        .arg(file)
        .args(["--job", job])
        .args(args);
    if let Some(s) = store {
        cmd.args(["--history", s]);
    }
    cmd
}

/// Checks the heartbeat at `file` (`secs` long) against the history, and
/// keeps it there when nothing rose (or the job has no runs yet).
fn judge(
    file: &Path,
    number: u32,
    secs: f64,
    history: &(String, Option<String>),
    min_change: Option<f64>,
) -> Beat {
    let job = &history.0;
    let head = format!("heartbeat {number} ({secs:.1} s)");
    let mut args = vec!["--format".to_string(), "json".to_string()];
    if let Some(m) = min_change {
        args.extend(["--min-change".to_string(), m.to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let checked = history_command("check", file, history, &args).output();
    let o = match checked {
        Ok(o) => o,
        Err(e) => {
            return Beat {
                line: format!("{head}: cannot run `idleflow history check`: {e}"),
                rose: None,
            }
        }
    };
    let err = String::from_utf8_lossy(&o.stderr);
    let err = err.trim().trim_start_matches("idleflow: error: ");
    let verdict = match o.status.code() {
        Some(0) => format!("no path rose beyond job {job}'s history"),
        Some(1) => {
            let r = rose(&o.stdout)
                .unwrap_or_else(|| format!("a path rose beyond job {job}'s history"));
            return Beat {
                line: format!("{head}: {r}; not kept as a normal time"),
                rose: Some(format!("{head}: {r}")),
            };
        }
        _ if err.contains("no runs") => format!("the first of job {job}"),
        _ => {
            return Beat {
                line: format!("{head}: not checked against the history: {err}"),
                rose: None,
            }
        }
    };
    let kept = match history_command("add", file, history, &[]).output() {
        Ok(o) if o.status.success() => "kept in the history".to_string(),
        Ok(o) => format!(
            "not kept in the history: {}",
            String::from_utf8_lossy(&o.stderr)
                .trim()
                .trim_start_matches("idleflow: error: ")
        ),
        Err(e) => format!("not kept in the history: {e}"),
    };
    Beat {
        line: format!("{head}: {verdict}; {kept}"),
        rose: None,
    }
}

/// The first path that rose, in words, from `history check --format json`.
fn rose(json: &[u8]) -> Option<String> {
    let c: Value = serde_json::from_slice(json).ok()?;
    let r = c["rose"].as_array()?.first()?;
    let frames = r["frames"].as_array();
    let at = r["program_frame"]
        .as_u64()
        .and_then(|i| frames?.get(i as usize))
        .or_else(|| frames?.first())
        .and_then(|f| f["name"].as_str())
        .unwrap_or("(no frame)");
    // (A path new in this window has a mean of -0.0 in JSON.)
    let pct = |v: &Value| v.as_f64().unwrap_or(0.0).max(0.0);
    let band = match r["runs_sd_pts"].as_f64() {
        Some(sd) => format!("{:.1} % ± {sd:.1}", pct(&r["runs_mean_pct"])),
        None => format!("{:.1} %", pct(&r["runs_mean_pct"])),
    };
    Some(format!(
        "path {} in {at} rose to {:.1} % of the idle (the job's history: {band})",
        r["process"].as_str().unwrap_or("?"),
        pct(&r["new"]["share_pct"]),
    ))
}
