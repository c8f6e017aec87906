//! `record --flight`: the session that keeps the recording in the
//! recorder's ring ([`idleflow_tracer::flight`]) and dumps its window when
//! a trigger fires: one of the policy's (judged by the recorder after each
//! drain batch), SIGUSR2 (`signal`), or a request on the recorder's socket
//! (`idleflow trigger`).
//!
//! A dump is written by a thread of its own from a snapshot of the ring
//! (the segments are shared, never copied), over the recorder's spare file
//! when there is one ([`spare`]: pages already in memory), then its user
//! stacks are resolved in place: the recorder goes on while a dump is written, and
//! dumps may overlap. The JVMs of the tree run idleflow's recording in
//! their own flight recorders, kept for the window ([`crate::jfr`]); a
//! dump asks them for its span once written and adds their waits. Each
//! trigger is held to the cooldown and the caps
//! (`--cooldown`, `--max-dumps`, `--max-per-hour`) and, when it fires,
//! waits the tail (`--tail`) so that the dump also holds what followed.
//! Once a dump is written, this recorder's oldest dumps are removed while
//! more than `--keep-files` of them, or more than `--keep-bytes` together,
//! are in the directory (the newest always stays); nothing else there is
//! touched.
//!
//! The socket (`/run/idleflow/flight-PID.sock`) accepts a connection from
//! anyone and then checks who asks (`SO_PEERCRED`): root, the recorder's
//! own user, or a member of `--trigger-group`; anyone else is told "not
//! allowed" and nothing happens. A request runs nothing but a dump, at
//! most one a second.
//!
//! Invariant: every dump is created private (0600) as `NAME.partial` and
//! renamed only when complete; a dump that failed is said and counted, and
//! the recording goes on.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

mod heartbeat;
mod spare;

use idleflow_format::{FlightDump, RunInfo};
use idleflow_tracer::flight::policy::{Fired, Policy, Trigger};
use idleflow_tracer::flight::{Dumped, FlightLimits, Window};
use idleflow_tracer::ksyms::KernelNamer;
use idleflow_tracer::{procfs, sys, Recorder};

use crate::jfr::{Waits, Watch, WatchAsker};
use crate::record::{self, End};
use crate::{resolve, Options, Progress, SessionError};

/// Where recorders listen for `idleflow trigger`.
pub const SOCKET_DIR: &str = "/run/idleflow";

/// `record --flight`'s own options.
#[derive(Debug, Clone)]
pub struct FlightOptions {
    /// Where dumps go (created 0700 if missing).
    pub dir: PathBuf,
    /// How long and how big the ring is.
    pub limits: FlightLimits,
    /// The policy's triggers.
    pub triggers: Vec<Trigger>,
    /// No dump sooner than this after the last one.
    pub cooldown: Duration,
    /// At most this many dumps in the recorder's life.
    pub max_dumps: u32,
    /// At most this many dumps in any hour (0: no cap).
    pub max_per_hour: u32,
    /// Keep at most this many of the recorder's dumps in `dir`, removing
    /// the oldest (0: all).
    pub keep_files: u32,
    /// Keep the recorder's dumps in `dir` under this many bytes together,
    /// removing the oldest; the newest always stays (0: no cap).
    pub keep_bytes: u64,
    /// What a dump keeps after its trigger fired.
    pub tail: Duration,
    /// Members of this group may ask for dumps too (`--trigger-group`).
    pub trigger_group: Option<u32>,
    /// Raised by the caller's SIGUSR2 handler.
    pub signal: Arc<AtomicBool>,
    /// Keep each dump's summary in the history under this job
    /// (`--history-job`), in this store (`--history`; None: the default).
    pub history: Option<(String, Option<String>)>,
    /// Check the ring's windows against the history and keep them there as
    /// normal times ([`heartbeat`]; needs `history`). With heartbeats, dumps
    /// go into the history as job `JOB-dumps`: they are not normal times.
    pub heartbeat: Option<HeartbeatOptions>,
}

impl FlightOptions {
    /// Where dumps go in the history: the job's, or with heartbeats (the
    /// job's normal times) `JOB-dumps`.
    fn dumps_history(&self) -> Option<(String, Option<String>)> {
        let (job, store) = self.history.clone()?;
        Some(match self.heartbeat {
            Some(_) => (format!("{job}-dumps"), store),
            None => (job, store),
        })
    }
}

/// `--heartbeat` and how it judges.
#[derive(Debug, Clone, Copy)]
pub struct HeartbeatOptions {
    /// How often, and how long a window at most.
    pub every: Duration,
    /// The smallest rise that fails a heartbeat's check, points of share
    /// (`history check --min-change`; `None`: the check's default).
    pub min_change_pts: Option<f64>,
}

/// What a flight session did.
#[derive(Debug)]
pub struct Flown {
    /// The dumps written, in order.
    pub dumps: Vec<PathBuf>,
    /// Triggers that fired and were held back (cooldown, caps).
    pub held_back: u64,
    /// Dumps that failed.
    pub failed: u64,
    /// Dumps removed again for `--keep-files` or `--keep-bytes`.
    pub removed: u64,
    /// Why it ended.
    pub reason: &'static str,
    /// The command's exit status.
    pub exit: Option<i32>,
}

/// How much longer than the window and its tail the JVMs' flight
/// recorders keep: the time a dump takes to ask them.
const JVM_KEEP_MARGIN: Duration = Duration::from_secs(30);

/// How long a dump waits for the JVM watcher's answer.
const WATCH_ANSWERS_WITHIN: Duration = Duration::from_secs(10);

/// What a dump's thread asks of the JVMs.
struct DumpJvms {
    /// The perf maps of this process tree's JVMs (`--java stacks`).
    perf_maps_of: Option<u32>,
    /// Their waits (`--java waits`).
    waits: Option<JvmWaitsOf>,
}

/// What a dump's thread needs to add the JVMs' waits of its window.
#[derive(Clone)]
struct JvmWaitsOf {
    waits: Arc<Waits>,
    asker: WatchAsker,
    /// The recording's clock minus the wall clock.
    offset_ns: i64,
}

impl JvmWaitsOf {
    /// Adds the waits of the JVMs' last `last` to the dump at `path`; what
    /// to say of it.
    fn add_to(&self, path: &Path, last: Duration) -> Result<String, String> {
        let started = Instant::now();
        let Some(watched) = self.asker.snapshot(WATCH_ANSWERS_WITHIN) else {
            return Ok("; no JVM waits (the JVM watcher did not answer)".into());
        };
        if watched.started.is_empty() && watched.notes.is_empty() {
            return Ok(String::new());
        }
        let (records, notes) = self.waits.window_waits(&watched, last, self.offset_ns);
        let jvms = records
            .iter()
            .filter(|r| matches!(r, idleflow_format::Record::JvmWaits(_)))
            .count();
        let waits = records.len() - jvms;
        idleflow_format::add_after_stream(path, &records, |s| s.java_notes.extend(notes)).map_err(
            |e| {
                format!(
                    "dump {}: adding the JVMs' waits: {}",
                    path.display(),
                    crate::one_line(&e)
                )
            },
        )?;
        Ok(format!(
            "; {waits} Java waits of {jvms} JVM{} added in {} ms",
            if jvms == 1 { "" } else { "s" },
            started.elapsed().as_millis()
        ))
    }
}

/// A dump decided on, waiting for its tail.
struct Pending {
    fired: Fired,
    due: Instant,
    number: u32,
}

/// A window to write and complete, on a thread of its own: a dump, or a
/// heartbeat ([`heartbeat`]).
struct Job {
    window: Window,
    path: PathBuf,
    info: RunInfo,
    dump: FlightDump,
    namer: KernelNamer,
    /// The JVMs' waits to add.
    jvms: Option<JvmWaitsOf>,
    /// The JVMs whose perf maps name JIT frames.
    perf_maps_of: Option<u32>,
    resolve_stacks: bool,
    /// The file to write over, when there is one ([`spare`]).
    spare: Option<Arc<spare::Spare>>,
}

/// A window written and completed.
struct Written {
    dumped: Dumped,
    base_ns: u64,
    /// What the JVMs' waits added (a clause of the log line).
    java: String,
    /// How long resolving the user stacks took, or why it failed.
    resolved: Option<Result<Duration, String>>,
}

impl Job {
    /// Writes the window, adds the JVMs' waits and resolves the user
    /// stacks; `Err` (a line to say) when the file could not be written.
    fn complete(self) -> Result<Written, String> {
        // From the trigger to a complete file the dump's thread runs before
        // the program's (SCHED_FIFO 1, below the drain's): on CPUs the
        // program saturates it would otherwise wait its turn among all of
        // its threads. What follows (Java waits, stacks) runs as usual.
        // Without CAP_SYS_NICE it runs as usual throughout.
        let raised = sys::set_fifo_priority(DUMP_FIFO_PRIORITY).is_ok();
        let spare = self.spare.as_deref();
        let written =
            self.window
                .write_reusing(&self.path, &self.info, self.dump, &self.namer, |partial| {
                    spare.and_then(|s| s.take(partial))
                });
        if raised {
            let _ = sys::set_normal_priority();
        }
        let d = written.map_err(|e| {
            format!(
                "dump {} failed: {}",
                self.path.display(),
                crate::one_line(&e)
            )
        })?;
        let java = match &self.jvms {
            Some(j) => j.add_to(
                &d.path,
                Duration::from_nanos(sys::monotonic_ns().saturating_sub(self.window.base_ns)),
            )?,
            None => String::new(),
        };
        // A dump whose stacks cannot be resolved (a full disk: the
        // resolver writes a copy) stays complete, without the user stacks'
        // names.
        let resolved = self.resolve_stacks.then(|| {
            let resolving = Instant::now();
            // The JVMs' JIT code of now names the window's frames (`--java
            // stacks`, attached JVMs).
            resolve::write_perf_maps(self.perf_maps_of, true, &mut ());
            resolve::resolve_stacks(&d.path, true, &mut ())
                .map(|()| resolving.elapsed())
                .map_err(|e| crate::one_line(&e))
        });
        Ok(Written {
            dumped: d,
            base_ns: self.window.base_ns,
            java,
            resolved,
        })
    }
}

impl Written {
    /// The log line of a dump (`ring_bytes`: what the ring held).
    fn line(&self, ring_bytes: u64) -> String {
        let d = &self.dumped;
        let (resolved, unresolved) = match &self.resolved {
            Some(Ok(took)) => (
                format!(" (stacks resolved in {} ms more)", took.as_millis()),
                String::new(),
            ),
            Some(Err(why)) => (
                String::new(),
                format!(
                    "; its user stacks were not resolved ({why}): the dump reads without their names"
                ),
            ),
            None => (String::new(), String::new()),
        };
        format!(
            "flight: dump {} written: {:.1} s, {} dispatches, {:.1} MiB in {} ms{resolved}{}; \
             the ring held {:.1} MiB{unresolved}",
            d.path.display(),
            (d.summary.stop_ns.saturating_sub(self.base_ns)) as f64 / 1e9,
            d.summary.dispatches,
            d.bytes as f64 / (1 << 20) as f64,
            d.latency.as_millis(),
            self.java,
            ring_bytes as f64 / (1 << 20) as f64
        )
    }
}

/// Runs a flight recorder as `opts` and `flight` say until the target
/// ends, the duration passes or `stop` is raised.
pub fn fly(
    opts: &Options,
    flight: &FlightOptions,
    stop: &AtomicBool,
    progress: &mut dyn Progress,
) -> Result<Flown, SessionError> {
    record::check(opts)?;
    let history_trigger = Policy::has_history(&flight.triggers);
    match (&flight.history, &flight.heartbeat) {
        (None, Some(_)) => {
            return Err(SessionError::Flight(
                "--heartbeat keeps the ring's windows in a job's history: add --history-job JOB"
                    .into(),
            ))
        }
        (_, None) if history_trigger => {
            return Err(SessionError::Flight(
                "--trigger history fires on a heartbeat's check against the job's history: \
                 add --heartbeat DUR and --history-job JOB"
                    .into(),
            ))
        }
        _ => {}
    }
    make_private_dir(&flight.dir)?;
    let mut recorder = Recorder::open(&opts.recorder)?;
    recorder.enable()?;
    let started = Instant::now();
    // The JVMs' flight recorders keep the window, its tail and a margin for
    // the dump to ask them.
    let jvm_keep = Duration::from_nanos(flight.limits.keep_ns) + flight.tail + JVM_KEEP_MARGIN;
    let java = record::prepare_java(opts, &mut recorder, Some(jvm_keep), progress)?;
    let mut target = record::launch(opts, &java, progress)?;
    let target_pids = target.pids();
    let exit_fd = target.exit_fd();
    let perf_maps_of = java
        .jit_stacks
        .then(|| target_pids.first().copied())
        .flatten();
    if let Err(e) = recorder.begin_flight(
        flight.limits,
        flight.triggers.clone(),
        &opts.command,
        &target_pids,
    ) {
        target.wait_command();
        return Err(SessionError::RecorderAt {
            what: "cannot start the flight recorder".into(),
            source: e,
        });
    }
    let watch = match record::start_watch(&java, &target) {
        Ok(w) => w,
        Err(e) => {
            target.wait_command();
            return Err(e);
        }
    };
    // What a dump's thread needs to ask the JVMs for their waits.
    let mut jvms = DumpJvms {
        perf_maps_of,
        waits: java
            .waits
            .clone()
            .zip(watch.as_ref().map(Watch::asker))
            .map(|(waits, asker)| JvmWaitsOf {
                waits,
                asker,
                offset_ns: recorder.clock_offset_ns(),
            }),
    };
    let mut last_rate = Instant::now();
    let mut last_tended = Instant::now();
    let listener = Listener::open(flight.trigger_group);
    let listener = match listener {
        Ok(l) => Some(l),
        Err(e) => {
            progress.note(&format!(
                "no trigger socket ({}): `idleflow trigger` cannot reach this recorder",
                crate::one_line(&e)
            ));
            None
        }
    };
    if !opts.quiet {
        progress.info(&format!(
            "flight recorder: keeping the last {:.0} s (at most {} MiB) in memory; triggers: {}; dumps into {}{}",
            flight.limits.keep_ns as f64 / 1e9,
            flight.limits.max_bytes >> 20,
            recorder
                .flight_policy()
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| "none (SIGUSR2 and `idleflow trigger` only)".into()),
            flight.dir.display(),
            listener
                .as_ref()
                .map(|l| format!("; `idleflow trigger` asks through {}", l.path.display()))
                .unwrap_or_default()
        ));
    }
    let until = record::Until {
        deadline: opts.duration.map(|d| started + Duration::from_secs_f64(d)),
        stop,
        show_status: false,
    };
    let (done_tx, done_rx) = mpsc::channel::<Result<String, String>>();
    let (beat_tx, beat_rx) = mpsc::channel::<heartbeat::Beat>();
    let mut heartbeat = flight.heartbeat.map(heartbeat::Heartbeat::new);
    let mut state = State {
        flown: Flown {
            dumps: Vec::new(),
            held_back: 0,
            failed: 0,
            removed: 0,
            reason: "",
            exit: None,
        },
        pending: Vec::new(),
        last_decided: None,
        decided_at: VecDeque::new(),
        decided: 0,
        writers: Vec::new(),
        said_capped: false,
        spare: Arc::new(spare::Spare::new(&flight.dir)),
        growing: None,
        spare_failed: None,
        namer: KernelNamer::start().map_err(|e| SessionError::Io {
            what: "cannot start the kernel-symbol thread".into(),
            source: e,
        })?,
    };
    let end = loop {
        if let Err(e) = recorder.poll(exit_fd.as_ref().map(|f| f.as_fd()), 50) {
            break End::Failed(e);
        }
        match &watch {
            Some(w) => record::tend_watch(&mut recorder, w, &mut last_rate),
            None => drop(recorder.take_renamed_processes()),
        }
        let now_ns = sys::monotonic_ns();
        for fired in recorder.flight_fired() {
            state.consider(fired, flight, progress);
        }
        if flight.signal.swap(false, Ordering::Relaxed) {
            state.consider(
                Fired {
                    trigger: "signal".into(),
                    at_ns: now_ns,
                    state: "SIGUSR2".into(),
                },
                flight,
                progress,
            );
        }
        if let Some(l) = &listener {
            if let Some(asked) = l.serve(&state, flight) {
                state.consider(
                    Fired {
                        trigger: "request".into(),
                        at_ns: now_ns,
                        state: asked,
                    },
                    flight,
                    progress,
                );
            }
        }
        if let Err(e) = state.write_due(&mut recorder, opts, flight, &jvms, &done_tx, false) {
            break End::Failed(e);
        }
        if last_tended.elapsed() >= Duration::from_secs(1) {
            last_tended = Instant::now();
            state.tend_spare(&recorder, progress);
        }
        if let (Some(hb), Some(history)) = (&mut heartbeat, &flight.history) {
            if let Err(e) = state.beat(hb, &mut recorder, opts, flight, &jvms, history, &beat_tx) {
                break End::Failed(e);
            }
        }
        while let Ok(r) = done_rx.try_recv() {
            state.said(r, flight, progress);
        }
        while let Ok(b) = beat_rx.try_recv() {
            progress.info(&format!("flight: {}", b.line));
            if let Some(rose) = b.rose.filter(|_| history_trigger) {
                let fired = Fired {
                    trigger: "history".into(),
                    at_ns: sys::monotonic_ns(),
                    state: rose,
                };
                state.consider(fired, flight, progress);
            }
        }
        match record::ended(&mut target, &until) {
            Ok(Some((reason, exit))) => break End::Done(reason, exit),
            Ok(None) => {}
            Err(e) => return Err(e),
        }
    };
    // Dumps decided on are written with what there is.
    if let End::Done(..) = end {
        if let Err(e) = state.write_due(&mut recorder, opts, flight, &jvms, &done_tx, true) {
            progress.error(&crate::one_line(&SessionError::RecorderAt {
                what: "flight recorder".into(),
                source: e,
            }));
        }
    }
    drop(done_tx);
    for w in std::mem::take(&mut state.writers) {
        let _ = w.join();
    }
    if let Some(g) = state.growing.take() {
        let _ = g.join();
    }
    while let Ok(b) = beat_rx.try_recv() {
        progress.info(&format!("flight: {}", b.line));
    }
    // The JVMs that still run stop idleflow's recording and discard it.
    jvms.waits = None;
    if let (Some(w), Some(waits)) = (watch, &java.waits) {
        let watched = w.finish();
        for &pid in &watched.started {
            if crate::attach::is_jvm(pid) {
                if let Err(e) = waits.discard_in(pid) {
                    progress.note(&format!(
                        "JVM {pid}: idleflow's flight recording could not be stopped: {e}"
                    ));
                }
            }
        }
    }
    drop(jvms);
    while let Ok(r) = done_rx.try_recv() {
        state.said(r, flight, progress);
    }
    state.spare.remove();
    let _ = recorder.stop();
    drop(recorder);
    match end {
        End::Done(reason, exit) => {
            state.flown.reason = reason;
            state.flown.exit = exit;
            Ok(state.flown)
        }
        End::Failed(e) => {
            target.wait_command();
            Err(SessionError::RecorderAt {
                what: "flight recorder stopped".into(),
                source: e,
            })
        }
    }
}

struct State {
    flown: Flown,
    pending: Vec<Pending>,
    last_decided: Option<Instant>,
    /// When the dumps of the last hour were decided on.
    decided_at: VecDeque<Instant>,
    decided: u32,
    writers: Vec<JoinHandle<()>>,
    said_capped: bool,
    /// The file the next dump writes over.
    spare: Arc<spare::Spare>,
    /// The thread growing the spare to the ring's length, if one runs.
    growing: Option<JoinHandle<std::io::Result<()>>>,
    /// When the spare last failed to grow.
    spare_failed: Option<Instant>,
    /// Names the dumps' kernel stacks, `/proc/kallsyms` read once.
    namer: KernelNamer,
}

/// An hour, for `--max-per-hour`.
const HOUR: Duration = Duration::from_secs(3600);

/// The real-time priority a dump is written at (the drain's is 10 by
/// default: the drain still comes first).
const DUMP_FIFO_PRIORITY: i32 = 1;

impl State {
    /// A trigger fired: a dump is decided on unless the cooldown or the cap
    /// holds it back.
    fn consider(&mut self, fired: Fired, flight: &FlightOptions, progress: &mut dyn Progress) {
        if let Some((why, cap)) = self.held_back(flight) {
            self.flown.held_back += 1;
            if cap && !self.said_capped {
                self.said_capped = true;
                progress.note(&format!("flight: '{}' fired, but {why}", fired.trigger));
            }
            return;
        }
        let now = Instant::now();
        self.last_decided = Some(now);
        while self.decided_at.front().is_some_and(|t| t.elapsed() >= HOUR) {
            self.decided_at.pop_front();
        }
        self.decided_at.push_back(now);
        self.decided += 1;
        progress.info(&format!(
            "flight: '{}' fired: {}; dump {} in {:.1} s",
            fired.trigger,
            fired.state,
            self.decided,
            flight.tail.as_secs_f64()
        ));
        self.pending.push(Pending {
            fired,
            due: Instant::now() + flight.tail,
            number: self.decided,
        });
    }

    /// Why a dump decided on now would be held back, and whether that is a
    /// cap (said once) rather than the cooldown; None: it would not.
    fn held_back(&self, flight: &FlightOptions) -> Option<(String, bool)> {
        let last_hour: Vec<&Instant> = self
            .decided_at
            .iter()
            .filter(|t| t.elapsed() < HOUR)
            .collect();
        if self.decided >= flight.max_dumps {
            return Some((
                format!("--max-dumps {} is reached: no more dumps", flight.max_dumps),
                true,
            ));
        }
        if flight.max_per_hour > 0 && last_hour.len() >= flight.max_per_hour as usize {
            let next = last_hour
                .first()
                .map_or(HOUR, |t| HOUR.saturating_sub(t.elapsed()));
            return Some((
                format!(
                    "--max-per-hour {} is reached: the next dump in {:.0} min at the earliest",
                    flight.max_per_hour,
                    next.as_secs_f64() / 60.0
                ),
                true,
            ));
        }
        if self
            .last_decided
            .is_some_and(|t| t.elapsed() < flight.cooldown)
        {
            return Some((
                format!(
                    "cooling down (--cooldown {:.0} s)",
                    flight.cooldown.as_secs_f64()
                ),
                false,
            ));
        }
        None
    }

    /// Removes this recorder's oldest dumps beyond `--keep-files` and
    /// `--keep-bytes` (dumps still being written are not there yet).
    fn prune(&mut self, flight: &FlightOptions, progress: &mut dyn Progress) {
        if flight.keep_files == 0 && flight.keep_bytes == 0 {
            return;
        }
        let on_disk: Vec<(usize, u64)> = self
            .flown
            .dumps
            .iter()
            .enumerate()
            .filter_map(|(i, p)| std::fs::metadata(p).ok().map(|m| (i, m.len())))
            .collect();
        let sizes: Vec<u64> = on_disk.iter().map(|&(_, b)| b).collect();
        for k in beyond_caps(&sizes, flight.keep_files, flight.keep_bytes) {
            let path = &self.flown.dumps[on_disk[k].0];
            // Its pages are in memory: the next dump may write over them.
            let gone = if self.spare.recycle(path) {
                Ok(())
            } else {
                std::fs::remove_file(path)
            };
            match gone {
                Ok(()) => {
                    self.flown.removed += 1;
                    progress.info(&format!(
                        "flight: removed the oldest dump {} ({})",
                        path.display(),
                        if flight.keep_files > 0 && on_disk.len() > flight.keep_files as usize {
                            format!("--keep-files {}", flight.keep_files)
                        } else {
                            format!("--keep-bytes {}", flight.keep_bytes)
                        }
                    ));
                }
                Err(e) => progress.note(&format!(
                    "flight: cannot remove the old dump {}: {e}",
                    path.display()
                )),
            }
        }
    }

    /// Starts growing the spare when it is shorter than the ring (with an
    /// eighth and 4 MiB more for what a dump adds), unless it grows already.
    fn tend_spare(&mut self, recorder: &Recorder, progress: &mut dyn Progress) {
        if self.growing.as_ref().is_some_and(|g| !g.is_finished()) {
            return;
        }
        if let Some(Ok(Err(e))) = self.growing.take().map(JoinHandle::join) {
            // Tried again a minute later. A full disk is not said here: the
            // spare as grown is still written over first, and a dump that
            // finds the disk full says so.
            if self.spare_failed.is_none() && e.raw_os_error() != Some(libc::ENOSPC) {
                progress.note(&format!(
                    "flight: the spare file cannot grow ({e}): dumps are written into new files"
                ));
            }
            self.spare_failed = Some(Instant::now());
        }
        if self
            .spare_failed
            .is_some_and(|t| t.elapsed() < Duration::from_secs(60))
        {
            return;
        }
        let ring = recorder.flight_ring().map_or(0, |(bytes, _)| bytes);
        let target = ring + ring / 8 + (4 << 20);
        if self.spare.len() >= target {
            return;
        }
        let spare = self.spare.clone();
        self.growing = Some(std::thread::spawn(move || spare.grow(target)));
    }

    /// Starts a heartbeat when one is due: the ring's last period (at most
    /// its length) written, checked against `history` and kept there.
    #[allow(clippy::too_many_arguments)]
    fn beat(
        &mut self,
        hb: &mut heartbeat::Heartbeat,
        recorder: &mut Recorder,
        opts: &Options,
        flight: &FlightOptions,
        jvms: &DumpJvms,
        history: &(String, Option<String>),
        said: &mpsc::Sender<heartbeat::Beat>,
    ) -> Result<(), idleflow_tracer::RecorderError> {
        if !hb.due(Instant::now()) {
            return Ok(());
        }
        let now_ns = sys::monotonic_ns();
        let span = (hb.every().as_nanos() as u64).min(flight.limits.keep_ns);
        let Some((window, info)) = recorder.flight_window(now_ns.saturating_sub(span))? else {
            return Ok(());
        };
        let (path, number) = hb.path(&flight.dir);
        let dump = FlightDump {
            trigger: "heartbeat".into(),
            fired_ns: now_ns,
            state: format!(
                "heartbeat {number}: the ring's last {:.0} s, checked against job {}'s history",
                span as f64 / 1e9,
                history.0
            ),
            policy: recorder.flight_policy().unwrap_or_default(),
            keep_ns: flight.limits.keep_ns,
            number: 0,
            recorder_rss_bytes: idleflow_tracer::procfs::own_rss(),
            ring_bytes: recorder.flight_ring().map_or(0, |(bytes, _)| bytes),
        };
        let job = self.job(window, path, info, dump, opts, jvms);
        match hb.start(job, number, history.clone(), said.clone()) {
            Ok(t) => self.writers.push(t),
            Err(e) => {
                let _ = said.send(heartbeat::Beat {
                    line: format!("heartbeat {number}: no thread for it: {e}"),
                    rose: None,
                });
            }
        }
        Ok(())
    }

    /// A window's job, completed as `opts` and the JVMs say.
    fn job(
        &self,
        window: Window,
        path: PathBuf,
        info: RunInfo,
        dump: FlightDump,
        opts: &Options,
        jvms: &DumpJvms,
    ) -> Job {
        Job {
            window,
            path,
            info,
            dump,
            namer: self.namer.clone(),
            spare: None,
            jvms: jvms.waits.clone(),
            perf_maps_of: jvms.perf_maps_of,
            resolve_stacks: opts.recorder.user_stack_bytes > 0 && opts.resolve,
        }
    }

    /// Writes the dumps whose tail has passed (all, with `all`), each in a
    /// thread of its own.
    fn write_due(
        &mut self,
        recorder: &mut Recorder,
        opts: &Options,
        flight: &FlightOptions,
        jvms: &DumpJvms,
        done: &mpsc::Sender<Result<String, String>>,
        all: bool,
    ) -> Result<(), idleflow_tracer::RecorderError> {
        let now = Instant::now();
        let (due, later): (Vec<Pending>, Vec<Pending>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|p| all || p.due <= now);
        self.pending = later;
        for p in due {
            let from = p.fired.at_ns.saturating_sub(flight.limits.keep_ns);
            let Some((window, info)) = recorder.flight_window(from)? else {
                continue;
            };
            let ring_bytes = recorder.flight_ring().map_or(0, |(bytes, _)| bytes);
            let path = flight.dir.join(dump_name(p.number, &p.fired.trigger));
            self.flown.dumps.push(path.clone());
            let dump = FlightDump {
                trigger: p.fired.trigger.clone(),
                fired_ns: p.fired.at_ns,
                state: p.fired.state.clone(),
                policy: format!(
                    "{}; cooldown {:.0} s, at most {} dumps, tail {:.1} s",
                    recorder.flight_policy().unwrap_or_default(),
                    flight.cooldown.as_secs_f64(),
                    flight.max_dumps,
                    flight.tail.as_secs_f64()
                ),
                keep_ns: flight.limits.keep_ns,
                number: p.number,
                recorder_rss_bytes: idleflow_tracer::procfs::own_rss(),
                ring_bytes,
            };
            let mut job = self.job(window, path, info, dump, opts, jvms);
            job.spare = Some(self.spare.clone());
            let history = flight.dumps_history();
            let done = done.clone();
            self.writers.push(std::thread::spawn(move || {
                let r = job.complete().map(|w| {
                    w.line(ring_bytes)
                        + &history
                            .map(|h| keep_in_history(&w.dumped.path, &h))
                            .unwrap_or_default()
                });
                let _ = done.send(r);
            }));
        }
        Ok(())
    }

    fn said(
        &mut self,
        r: Result<String, String>,
        flight: &FlightOptions,
        progress: &mut dyn Progress,
    ) {
        match r {
            Ok(line) => {
                progress.info(&line);
                self.prune(flight, progress);
            }
            Err(line) => {
                self.flown.failed += 1;
                progress.error(&line);
            }
        }
    }
}

/// Which of the dumps of `sizes` (bytes, oldest first) go so that at most
/// `keep_files` (0: any number) stay, together at most `keep_bytes` (0: any
/// size): the oldest, never the newest. Indexes into `sizes`, oldest first.
fn beyond_caps(sizes: &[u64], keep_files: u32, keep_bytes: u64) -> Vec<usize> {
    let mut kept = 0u64;
    let mut stay = 0usize;
    for (n, &b) in sizes.iter().rev().enumerate() {
        let over_files = keep_files > 0 && n >= keep_files as usize;
        let over_bytes = keep_bytes > 0 && n > 0 && kept.saturating_add(b) > keep_bytes;
        if over_files || over_bytes {
            break;
        }
        kept = kept.saturating_add(b);
        stay += 1;
    }
    (0..sizes.len() - stay).collect()
}

/// Adds a dump to the history (`idleflow history add`, run as a child of
/// this executable): what it said, as the end of the dump's log line.
fn keep_in_history(dump: &Path, history: &(String, Option<String>)) -> String {
    match heartbeat::history_command("add", dump, history, &[]).output() {
        Ok(o) => {
            let said = String::from_utf8_lossy(&o.stderr);
            let said = said.trim().trim_start_matches("idleflow: ");
            if o.status.success() {
                format!("; {said}")
            } else {
                format!("; not kept in the history: {said}")
            }
        }
        Err(e) => format!("; not kept in the history: {e}"),
    }
}

/// `idleflow-20261126T143005Z-1-wait.idleflow`: when, which, what.
fn dump_name(number: u32, trigger: &str) -> String {
    let when = humantime::format_rfc3339_seconds(SystemTime::now())
        .to_string()
        .replace([':', '-'], "");
    let what: String = trigger
        .split(|c: char| !c.is_ascii_alphanumeric())
        .find(|w| !w.is_empty())
        .unwrap_or("dump")
        .to_string();
    format!("idleflow-{when}-{number}-{what}.idleflow")
}

/// Creates `dir` readable by its owner only, or checks that an existing
/// one is a directory.
fn make_private_dir(dir: &Path) -> Result<(), SessionError> {
    if dir.is_dir() {
        return Ok(());
    }
    std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)))
        .map_err(SessionError::io(format!(
            "cannot create the dump directory {}",
            dir.display()
        )))
}

/// The recorder's trigger socket.
struct Listener {
    listener: UnixListener,
    path: PathBuf,
    group: Option<u32>,
    last_request: std::cell::Cell<Option<Instant>>,
}

impl Listener {
    fn open(group: Option<u32>) -> Result<Listener, SessionError> {
        let dir = Path::new(SOCKET_DIR);
        let err = |what: String| SessionError::io(what);
        std::fs::create_dir_all(dir)
            .and_then(|()| std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)))
            .map_err(err(format!("cannot create {SOCKET_DIR}")))?;
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
    fn serve(&self, state: &State, flight: &FlightOptions) -> Option<String> {
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
        if let Some((why, _)) = state.held_back(flight) {
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

#[cfg(test)]
mod tests {
    use super::beyond_caps;

    #[test]
    fn the_oldest_dumps_go_beyond_the_caps_and_the_newest_stays() {
        // Oldest first: 10, 20, 30, 40 bytes.
        let sizes = [10, 20, 30, 40];
        assert_eq!(beyond_caps(&sizes, 0, 0), Vec::<usize>::new());
        assert_eq!(beyond_caps(&sizes, 2, 0), vec![0, 1]);
        assert_eq!(beyond_caps(&sizes, 9, 0), Vec::<usize>::new());
        // 40 + 30 = 70 fit in 75; 20 more would not.
        assert_eq!(beyond_caps(&sizes, 0, 75), vec![0, 1]);
        assert_eq!(beyond_caps(&sizes, 0, 100), Vec::<usize>::new());
        // The newest stays even when it alone is over the bytes.
        assert_eq!(beyond_caps(&sizes, 0, 5), vec![0, 1, 2]);
        // Both caps: the tighter one decides.
        assert_eq!(beyond_caps(&sizes, 3, 75), vec![0, 1]);
        assert_eq!(beyond_caps(&sizes, 1, 1000), vec![0, 1, 2]);
        assert_eq!(beyond_caps(&[], 1, 1), Vec::<usize>::new());
    }
}
