//! `record --flight`: the session that keeps the recording in the
//! recorder's ring ([`idleflow_tracer::flight`]) and dumps its window when
//! a trigger fires: one of the policy's (judged by the recorder after each
//! drain batch), SIGUSR2 (`signal`), or a request on the recorder's socket
//! (`idleflow trigger`, [`socket`]).
//!
//! A dump is written by a thread of its own ([`job`]) from a snapshot of
//! the ring (the segments are shared, never copied), over the recorder's
//! spare file when there is one ([`spare`]: pages already in memory), then
//! its user stacks are resolved in place: the recorder goes on while a
//! dump is written, and dumps may overlap. In the default mode the
//! recorder's window carries the JVMs' waits read from their structures
//! (`idleflow_tracer::flight::Window::follow_with`); with `--java waits`
//! (or for a JVM whose structures cannot be read) the JVMs of the tree run
//! idleflow's recording in their own flight recorders, kept for the window
//! ([`crate::jfr`]), and a dump asks them for its span once written and
//! adds their waits. Each trigger is held to the cooldown and the caps
//! (`--cooldown`, `--max-dumps`, `--max-per-hour`) and, when it fires,
//! waits the tail (`--tail`) so that the dump also holds what followed.
//! Once a dump is written, this recorder's oldest dumps are removed (one
//! longer than the spare becomes it) while more than `--keep-files`
//! of them, or more than `--keep-bytes` together, are in the directory
//! (the newest always stays; [`caps`]); nothing else there is touched. Heartbeats
//! ([`heartbeat`]) write the ring's last period the same way and keep it in
//! the history when it is normal.
//!
//! Invariant: every dump is created new and private (0600) under an
//! unguessable temporary name in the dumps' directory, opened once (a
//! directory others can write only when it is sticky:
//! `idleflow_format::files`), and renamed only when complete; a dump that failed is said and counted, and
//! the recording goes on.

use std::collections::VecDeque;
use std::os::fd::AsFd;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

mod caps;
mod heartbeat;
mod job;
mod socket;
mod spare;

use caps::HOUR;
use job::{DumpJvms, Job, JvmWaitsOf};
pub use socket::ask;
use socket::Listener;

use idleflow_format::{FlightDump, RunInfo};
use idleflow_tracer::flight::policy::{Fired, Policy, Trigger};
use idleflow_tracer::flight::{FlightLimits, Window};
use idleflow_tracer::ksyms::KernelNamer;
use idleflow_tracer::{sys, Recorder};

use crate::jfr::Watch;
use crate::record::{self, End};
use crate::{Options, Progress, SessionError};

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

/// A dump decided on, waiting for its tail.
struct Pending {
    fired: Fired,
    due: Instant,
    number: u32,
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
    let dumps_dir = Arc::new(dumps_dir(&flight.dir, progress)?);
    let mut recorder = Recorder::open(&opts.recorder)?;
    let opts = &record::choose_java(opts, &mut recorder);
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
        spare: Arc::new(spare::Spare::new(&dumps_dir)),
        dir: dumps_dir,
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
    /// The dumps' directory, opened once: every file is made through it.
    dir: Arc<idleflow_format::files::Dir>,
    /// The thread growing the spare to the ring's length, if one runs.
    growing: Option<JoinHandle<std::io::Result<()>>>,
    /// When the spare last failed to grow.
    spare_failed: Option<Instant>,
    /// Names the dumps' kernel stacks, `/proc/kallsyms` read once.
    namer: KernelNamer,
}

impl State {
    /// A trigger fired: a dump is decided on unless the cooldown or the cap
    /// holds it back (an explicit request, SIGUSR2 or `idleflow trigger`,
    /// only the caps: someone asked for this moment).
    fn consider(&mut self, fired: Fired, flight: &FlightOptions, progress: &mut dyn Progress) {
        let asked = fired.trigger == "signal" || fired.trigger == "request";
        if let Some((why, cap)) = self.held_back(flight, asked) {
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
            dir: Arc::clone(&self.dir),
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

/// Opens the dumps' directory `dir`, created 0700 when it does not exist.
/// A directory others can write is refused unless it is sticky (`/tmp`),
/// where the dumps' temporary names are unguessable and nobody else can
/// rename what the recorder made: that is said, with the advice of a
/// private directory.
fn dumps_dir(
    dir: &Path,
    progress: &mut dyn Progress,
) -> Result<idleflow_format::files::Dir, SessionError> {
    if !dir.is_dir() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(SessionError::io(format!(
                "cannot create the dump directory {}",
                dir.display()
            )))?;
    }
    let opened = idleflow_format::files::Dir::open(dir)
        .map_err(|e| SessionError::Flight(format!("the dump directory: {e}")))?;
    if opened.shared() {
        progress.note(&format!(
            "flight: {} is writable by other users (sticky): dumps are made there under \
             unguessable names and renamed into place; a directory only you can write is \
             safer (-o DIR makes one, mode 0700, when DIR does not exist)",
            dir.display()
        ));
    }
    Ok(opened)
}
