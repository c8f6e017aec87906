//! `record --java waits`: turn on the flight recorder (JFR) of every JVM of
//! the recorded command's process tree (or of `--pid`'s), with idleflow's
//! own settings and recording name, and, once the window has closed, read
//! what each JVM wrote into the recording ([`idleflow_jfr`]).
//!
//! A watcher thread finds the JVMs of the tree as they start and, as soon
//! as one can take an attach ([`crate::attach::is_ready`]), starts a
//! recording named `idleflow` in it (so it never collides with one the user
//! started) with a settings file that enables only the wait events, with
//! stacks, above the threshold, written when idleflow stops it or when the
//! JVM exits, into a private directory, one file per JVM. Not
//! `-XX:StartFlightRecording` in `JAVA_TOOL_OPTIONS`: a runtime without the
//! `jdk.jfr` module (a `jlink` image) would refuse to start with it; through
//! the attach mechanism such a JVM just says so, and the report names it.
//! The directory is writable by the JVMs of any user (a service that drops
//! privileges still writes its file) but not listable, and sticky, so no
//! user can touch another's file.

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use idleflow_format::Record;
use idleflow_tracer::{procfs, Recorder};

/// JFR's recording name for idleflow's recording.
const RECORDING_NAME: &str = "idleflow";

/// The flight recorder's part of a recording in progress.
#[derive(Debug)]
pub struct Waits {
    dir: tempfile::TempDir,
    thresholds: idleflow_jfr::Thresholds,
    /// Blocking switch-outs per second (the machine's) under which a JVM
    /// records every wait ([`Rarity`]); 0: never.
    all_waits_below: f64,
}

/// JFR's recording name for the recording of every wait that idleflow's
/// policy runs beside [`RECORDING_NAME`]'s while a JVM waits rarely: JFR
/// records an event at the lowest threshold of the recordings that run, so
/// idleflow's file gets every wait then. It writes no file of its own.
const ALL_WAITS_NAME: &str = "idleflow-all";

/// Milliseconds from an option, as ns.
fn threshold_ns(option: &str, ms: f64) -> anyhow::Result<u64> {
    if !(ms.is_finite() && ms >= 0.0) {
        anyhow::bail!("{option} must be 0 or more ms, not {ms}");
    }
    Ok((ms * 1e6).round() as u64)
}

/// Prepares the directory and the options for JVM waits `wait_ms` or
/// longer, and contended monitor enters `monitor_ms` or longer; every wait
/// while a JVM's threads block fewer than `all_below` times a second per
/// CPU, of `cpus`.
pub fn prepare(
    wait_ms: f64,
    monitor_ms: f64,
    all_below: f64,
    cpus: usize,
) -> anyhow::Result<Waits> {
    let thresholds = idleflow_jfr::Thresholds {
        wait_ns: threshold_ns("--wait-threshold", wait_ms)?,
        monitor_enter_ns: threshold_ns("--monitor-threshold", monitor_ms)?,
    };
    if !(all_below.is_finite() && all_below >= 0.0) {
        anyhow::bail!(
            "--all-waits-below must be 0 or more waits a second per CPU, not {all_below}"
        );
    }
    // With every threshold at 0 there is nothing more to record.
    let all_waits_below = if thresholds == idleflow_jfr::Thresholds::all(0) {
        0.0
    } else {
        all_below * cpus.max(1) as f64
    };
    let dir = tempfile::Builder::new()
        .prefix("idleflow-jfr-")
        .tempdir()
        .context("cannot create a directory for the JVMs' flight recordings")?;
    crate::agent::check_plain(dir.path(), "the temporary directory")?;
    let jfc = dir.path().join("idleflow.jfc");
    std::fs::write(&jfc, idleflow_jfr::settings(&thresholds))
        .with_context(|| format!("cannot write {}", jfc.display()))?;
    std::fs::set_permissions(&jfc, std::fs::Permissions::from_mode(0o644))
        .with_context(|| format!("cannot set the permissions of {}", jfc.display()))?;
    let all = dir.path().join("idleflow-all.jfc");
    std::fs::write(
        &all,
        idleflow_jfr::settings(&idleflow_jfr::Thresholds::all(0)),
    )
    .with_context(|| format!("cannot write {}", all.display()))?;
    std::fs::set_permissions(&all, std::fs::Permissions::from_mode(0o644))
        .with_context(|| format!("cannot set the permissions of {}", all.display()))?;
    let out = dir.path().join("out");
    std::fs::create_dir(&out).with_context(|| format!("cannot create {}", out.display()))?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711))
        .with_context(|| format!("cannot set the permissions of {}", dir.path().display()))?;
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o1733))
        .with_context(|| format!("cannot set the permissions of {}", out.display()))?;
    Ok(Waits {
        dir,
        thresholds,
        all_waits_below,
    })
}

/// This machine's ephemeral port range (Linux's default if unreadable).
fn ephemeral_ports() -> (u16, u16) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let mut it = s.split_whitespace().map(|p| p.parse::<u16>().ok());
            Some((it.next()??, it.next()??))
        })
        .unwrap_or((32768, 60999))
}

/// Finds the JVMs of a process tree as they start and starts idleflow's
/// flight recording in each ([`Waits::start_in`]). It looks only where there
/// is something to see: at the tree as it is at the start, then at each
/// process of the tree that the recorder saw `exec` ([`Watch::renamed`]).
/// A process is looked at every [`WATCH_PERIOD`] while it may still load a
/// JVM ([`LOADS_JVM_WITHIN`] of its `exec`: the `java` launcher loads
/// `libjvm.so` in its first milliseconds) and, once it has, until the JVM is
/// ready for the attach request. With nothing pending the watcher sleeps
/// until the recorder's loop has news: no periodic `/proc` scans, which
/// cost a busy JVM's recording 18 % of idleflow's own CPU. A program that
/// embeds a JVM later than that after its `exec` is not found.
///
/// It also runs idleflow's policy for each JVM ([`Rarity`]): the recorder
/// counts the blocking switch-outs of the JVMs' threads
/// ([`Watch::counted`], [`Watch::blocking`]); while they are rare, a second
/// flight recording records every wait ([`Waits::start_all_in`]). A JVM's
/// recording starts once its rate is known, so that both start together.
#[derive(Debug)]
pub struct Watch {
    news: mpsc::Sender<News>,
    counted: Arc<std::sync::Mutex<Vec<u32>>>,
    thread: std::thread::JoinHandle<Watched>,
}

/// What the recorder's loop tells the watcher.
#[derive(Debug)]
enum News {
    /// Processes the recorder saw `exec`.
    Renamed(Vec<u32>),
    /// Blocking switch-outs of each counted JVM so far, as of `at_ns` on
    /// the recording's clock.
    Blocking { at_ns: u64, counts: Vec<(u32, u64)> },
}

/// How often the recorder's loop reports the JVMs' blocking switch-outs.
pub const RATE_PERIOD: Duration = Duration::from_millis(250);

/// The shortest span a rate is measured over, ns.
const RATE_SPAN_NS: u64 = 200_000_000;

/// Every wait stops being recorded when the rate exceeds this many times
/// the policy's rate; it starts again once the rate fell below the policy's
/// rate, no sooner than [`BACK_ON_AFTER_NS`] after it stopped: a load that
/// swings around the rate does not make the JVM start and stop recordings
/// (a chunk rotation each) several times a second.
const OFF_ABOVE: f64 = 1.5;

/// See [`OFF_ABOVE`], ns.
const BACK_ON_AFTER_NS: u64 = 2_000_000_000;

/// idleflow's policy for one JVM, the patent's: look at every wait where
/// waits are rare, at the thresholds' sample where they are frequent. Fed
/// the JVM's blocking switch-outs as the recorder counts them, it says when
/// to start and stop recording every wait.
#[derive(Debug, Clone)]
struct Rarity {
    /// Blocking switch-outs per second under which every wait is recorded
    /// (the machine's: `--all-waits-below` times the CPUs); 0: never.
    below: f64,
    /// The last count that started a span, and when.
    last: Option<(u64, u64)>,
    /// Blocking switch-outs per second over the last span.
    rate: Option<f64>,
    /// Every wait is recorded since then (ns).
    on_since: Option<u64>,
    /// When it last stopped (ns).
    off_at: Option<u64>,
    /// Counts taken before this are not part of any span (ns; see
    /// [`Rarity::restart`]).
    counted_from: u64,
}

impl Rarity {
    fn new(below: f64) -> Self {
        Rarity {
            below,
            last: None,
            rate: None,
            on_since: None,
            off_at: None,
            counted_from: 0,
        }
    }

    /// The JVM's threads blocked `n` times in `span` before its recording
    /// started (from `/proc`: the recorder's counts come later).
    fn first(&mut self, n: u64, span: Duration) {
        self.rate = Some(n as f64 / span.as_secs_f64().max(1e-3));
    }

    /// The rate starts over from the recorder's first count after `at_ns`:
    /// idleflow just started or stopped a flight recording in the JVM, and
    /// a span over that (the recorder's own threads, the classes it loads
    /// and compiles) says nothing of how often the program waits; once
    /// stopped, every wait stays off for [`BACK_ON_AFTER_NS`].
    fn restart(&mut self, at_ns: u64) {
        self.last = None;
        self.counted_from = at_ns;
    }

    /// The JVM's threads had blocked `count` times by `at_ns` (the
    /// recorder's count).
    fn observe(&mut self, at_ns: u64, count: u64) {
        if at_ns < self.counted_from {
            return;
        }
        match self.last {
            Some((t, c)) if at_ns >= t + RATE_SPAN_NS => {
                self.rate = Some(count.saturating_sub(c) as f64 * 1e9 / (at_ns - t) as f64);
                self.last = Some((at_ns, count));
            }
            Some(_) => {}
            None => self.last = Some((at_ns, count)),
        }
    }

    /// Whether the policy has what it needs to decide.
    fn knows(&self) -> bool {
        self.below <= 0.0 || self.rate.is_some()
    }

    /// `Some(true)`: start recording every wait now; `Some(false)`: stop.
    fn decide(&self, now_ns: u64) -> Option<bool> {
        let rate = self.rate.filter(|_| self.below > 0.0)?;
        match self.on_since {
            Some(_) if rate > OFF_ABOVE * self.below => Some(false),
            None if rate < self.below
                && self
                    .off_at
                    .is_none_or(|t| now_ns >= t.saturating_add(BACK_ON_AFTER_NS)) =>
            {
                Some(true)
            }
            _ => None,
        }
    }
}

/// What a [`Watch`] did.
#[derive(Debug, Default)]
pub struct Watched {
    /// JVMs whose flight recording idleflow started.
    pub started: Vec<u32>,
    /// JVMs it could not start one in, and why.
    pub notes: Vec<String>,
    /// Each started JVM's flight-recorder repository (see
    /// [`repository_of`]) and when idleflow's recording started in it.
    pub repositories: HashMap<u32, (PathBuf, SystemTime)>,
    /// When each JVM recorded every wait (the policy), ns on the
    /// recording's clock.
    pub all_waits: HashMap<u32, Vec<(u64, u64)>>,
    /// Each JVM's threads that worked for idleflow ([`own_threads`]).
    pub own_tids: HashMap<u32, Vec<u32>>,
    /// When idleflow first attached to each JVM, ns on the recording's clock.
    pub attached: HashMap<u32, u64>,
}

/// Whether `JFR.start` failed only because the JVM is still starting: its
/// attach listener runs, but the flight recorder's diagnostic commands are
/// not registered yet (measured on Tomcat 10 with `--java waits,stacks`:
/// `java.lang.IllegalArgumentException: Unknown diagnostic command`).
fn is_too_early(e: &crate::attach::AttachError) -> bool {
    e.to_string().contains("Unknown diagnostic command")
}

/// How long after its first attach a JVM may still be too early for
/// `JFR.start` ([`is_too_early`]); a JVM without the flight recorder's
/// commands at all answers the same, and gets its note after this.
const REGISTERED_WITHIN: Duration = Duration::from_secs(5);

/// How often a pending process is looked at again.
const WATCH_PERIOD: Duration = Duration::from_millis(100);

/// How long after its `exec` a process may still load a JVM.
const LOADS_JVM_WITHIN: Duration = Duration::from_secs(2);

/// How long a JVM may take to be ready for the attach request (an
/// interpreted JVM under the tree agent takes seconds).
const READY_WITHIN: Duration = Duration::from_secs(60);

/// How long a ready JVM's first rate is measured over, from `/proc`
/// ([`Rarity::first`]): the recorder's counts come later (they are read as
/// the rings are drained), and the flight recording starts once the
/// policy knows whether it records every wait, so that both start together.
const FIRST_RATE_OVER: Duration = Duration::from_millis(150);

/// A process the watcher looks at.
struct Pending {
    since: Instant,
    /// It has `libjvm.so` mapped.
    jvm: bool,
    /// Its threads' voluntary switches when it was first seen as a JVM
    /// ([`Rarity::first`]).
    switches: Option<(Instant, u64)>,
    /// When it first took an attach but was too early for `JFR.start`.
    too_early_since: Option<Instant>,
}

impl Pending {
    fn new() -> Self {
        Pending {
            since: Instant::now(),
            jvm: false,
            switches: None,
            too_early_since: None,
        }
    }
}

/// A JVM the watcher started idleflow's recording in.
struct Running {
    /// Its threads before idleflow's first attach.
    before: HashSet<u32>,
    /// Its flight recorder's threads were there, and no recording ran.
    jfr_was_idle: bool,
    /// Those that worked for idleflow.
    own: std::collections::BTreeSet<u32>,
    /// Past spans of every wait recorded.
    windows: Vec<(u64, u64)>,
    /// The policy could not start or stop a recording: it stays as it is.
    failed: bool,
}

/// The kernel's names (15 characters) of the flight recorder's own threads.
const JFR_THREADS: [&str; 5] = [
    "JFR Recorder Th",
    "JFR Periodic Ta",
    "JFR Recording S",
    "JFR Event Strea",
    "JFR Shutdown Ho",
];

/// The threads of JVM `pid` that work for idleflow: the attach listener
/// that serves idleflow's commands, and the flight recorder's threads —
/// those that were not there `before` its first attach and are named
/// `JFR …`, and, when no other recording ran (`jfr_was_idle`: the threads
/// are left from an earlier recording, idleflow's or not, and now serve
/// only idleflow's), those there before that bear a flight-recorder
/// thread's name. Known by tid, so that a program thread that calls itself
/// `JFR …` before idleflow attaches is never taken for one (unless it bears
/// the flight recorder's own thread names in a JVM whose recorder ran).
fn own_threads(pid: u32, before: &HashSet<u32>, jfr_was_idle: bool) -> Vec<u32> {
    procfs::tasks(pid)
        .into_iter()
        .filter(|(tid, comm)| {
            comm == "Attach Listener"
                || if before.contains(tid) {
                    jfr_was_idle && JFR_THREADS.contains(&comm.as_str())
                } else {
                    comm.starts_with("JFR ")
                }
        })
        .map(|(tid, _)| tid)
        .collect()
}

/// Whether JVM `pid`, whose threads (tid, name) are `tasks`, has flight
/// recorder threads left from earlier recordings while none runs now
/// (`JFR.check`; asked only where such threads exist).
fn jfr_left_idle(pid: u32, tasks: &[(u32, String)]) -> bool {
    tasks.iter().any(|(_, c)| JFR_THREADS.contains(&c.as_str()))
        && crate::attach::jcmd(pid, "JFR.check", "")
            .is_ok_and(|out| out.contains("No available recordings"))
}

/// The watcher thread's state.
struct Watcher {
    waits: Arc<Waits>,
    root: u32,
    done: Watched,
    seen: HashSet<u32>,
    pending: HashMap<u32, Pending>,
    running: HashMap<u32, Running>,
    rarity: HashMap<u32, Rarity>,
    counted: Arc<std::sync::Mutex<Vec<u32>>>,
}

impl Watcher {
    /// Looks at the pending processes once.
    fn look(&mut self) {
        let mut pending = std::mem::take(&mut self.pending);
        pending.retain(|&pid, p| self.look_at(pid, p));
        self.pending.extend(pending);
        self.publish_counted();
    }

    /// Looks at pending process `pid`: whether it stays pending.
    fn look_at(&mut self, pid: u32, p: &mut Pending) -> bool {
        if !procfs::process_exists(pid) {
            return false;
        }
        if !p.jvm && crate::attach::is_jvm(pid) {
            p.jvm = true;
            self.rarity
                .insert(pid, Rarity::new(self.waits.all_waits_below));
            if self.waits.all_waits_below > 0.0 {
                p.switches = Some((Instant::now(), procfs::voluntary_switches(pid)));
            }
        }
        if !p.jvm {
            return p.since.elapsed() < LOADS_JVM_WITHIN;
        }
        if !crate::attach::is_ready(pid) {
            return p.since.elapsed() < READY_WITHIN;
        }
        if let (Some((since, n)), Some(r)) = (p.switches, self.rarity.get_mut(&pid)) {
            if !r.knows() {
                let span = since.elapsed();
                if span < FIRST_RATE_OVER {
                    return true;
                }
                r.first(procfs::voluntary_switches(pid).saturating_sub(n), span);
            }
        }
        let tasks = procfs::tasks(pid);
        let jfr_was_idle = jfr_left_idle(pid, &tasks);
        let before: HashSet<u32> = tasks.into_iter().map(|t| t.0).collect();
        let at = SystemTime::now();
        self.done
            .attached
            .entry(pid)
            .or_insert_with(idleflow_tracer::sys::monotonic_ns);
        match self.waits.start_in(pid) {
            Ok(()) => {
                if let Some(r) = self.rarity.get_mut(&pid) {
                    r.restart(idleflow_tracer::sys::monotonic_ns());
                }
                self.done.started.push(pid);
                if let Some(dir) = repository_of(pid, &self.waits.out_dir()) {
                    self.done.repositories.insert(pid, (dir, at));
                }
                self.running.insert(
                    pid,
                    Running {
                        before,
                        jfr_was_idle,
                        own: Default::default(),
                        windows: Vec::new(),
                        failed: false,
                    },
                );
                self.apply_policy(pid);
                self.note_own_threads(pid);
            }
            // The attach listener answers before the JVM registered the
            // flight recorder's commands: ask again at the next look.
            Err(e)
                if is_too_early(&e)
                    && p.too_early_since.get_or_insert_with(Instant::now).elapsed()
                        < REGISTERED_WITHIN =>
            {
                return true;
            }
            Err(e) => {
                self.rarity.remove(&pid);
                self.done
                    .notes
                    .push(format!("JVM {pid}: no Java waits: {e}"))
            }
        }
        self.seen.insert(pid);
        false
    }

    /// Adds JVM `pid`'s threads that work for idleflow now.
    fn note_own_threads(&mut self, pid: u32) {
        if let Some(r) = self.running.get_mut(&pid) {
            r.own.extend(own_threads(pid, &r.before, r.jfr_was_idle));
        }
    }

    /// Starts or stops recording every wait in JVM `pid`, as its policy says.
    fn apply_policy(&mut self, pid: u32) {
        let (Some(rarity), Some(run)) = (self.rarity.get_mut(&pid), self.running.get_mut(&pid))
        else {
            return;
        };
        if run.failed {
            return;
        }
        let now = idleflow_tracer::sys::monotonic_ns();
        match rarity.decide(now) {
            Some(true) => match self.waits.start_all_in(pid) {
                Ok(()) => {
                    rarity.on_since = Some(now);
                    rarity.restart(idleflow_tracer::sys::monotonic_ns());
                }
                Err(e) => {
                    run.failed = true;
                    self.done.notes.push(format!(
                        "JVM {pid}: could not start recording every wait (its waits keep \
                         their thresholds): {e}"
                    ));
                }
            },
            Some(false) => {
                let result = self.waits.stop_all_in(pid);
                let end = idleflow_tracer::sys::monotonic_ns();
                if let Some(from) = rarity.on_since.take() {
                    run.windows.push((from, end));
                }
                rarity.off_at = Some(end);
                rarity.restart(end);
                if let Err(e) = result {
                    // Still recording every wait, as far as anyone knows.
                    run.failed = true;
                    rarity.on_since = Some(end);
                    self.done.notes.push(format!(
                        "JVM {pid}: could not stop recording every wait: {e}"
                    ));
                }
            }
            None => {}
        }
    }

    /// The recorder counted the JVMs' blocking switch-outs.
    fn blocking(&mut self, at_ns: u64, counts: &[(u32, u64)]) {
        for &(pid, count) in counts {
            if let Some(r) = self.rarity.get_mut(&pid) {
                r.observe(at_ns, count);
            }
        }
        let running: Vec<u32> = self.running.keys().copied().collect();
        for pid in running {
            self.apply_policy(pid);
        }
    }

    /// Tells the recorder's loop which JVMs to count: those with a policy
    /// whose process lives.
    fn publish_counted(&mut self) {
        let mut pids: Vec<u32> = self
            .rarity
            .iter()
            .filter(|(_, r)| r.below > 0.0)
            .map(|(&pid, _)| pid)
            .collect();
        pids.sort_unstable();
        if let Ok(mut c) = self.counted.lock() {
            *c = pids;
        }
    }

    /// Ends every recording of every wait, notes the threads that worked
    /// for idleflow; what was done.
    fn finish(mut self) -> Watched {
        let running: Vec<u32> = self.running.keys().copied().collect();
        for pid in running {
            self.note_own_threads(pid);
            let Some(run) = self.running.remove(&pid) else {
                continue;
            };
            let mut windows = run.windows;
            if let Some(from) = self.rarity.get(&pid).and_then(|r| r.on_since) {
                if crate::attach::is_jvm(pid) {
                    if let Err(e) = self.waits.stop_all_in(pid) {
                        self.done.notes.push(format!(
                            "JVM {pid}: could not stop recording every wait: {e}"
                        ));
                    }
                }
                windows.push((from, idleflow_tracer::sys::monotonic_ns()));
            }
            if !windows.is_empty() {
                self.done.all_waits.insert(pid, windows);
            }
            self.done
                .own_tids
                .insert(pid, run.own.into_iter().collect());
        }
        self.done
    }
}

impl Watch {
    /// Watches `root` and its descendants.
    pub fn start(waits: Arc<Waits>, root: u32) -> anyhow::Result<Watch> {
        let (tx, rx) = mpsc::channel::<News>();
        let counted = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut w = Watcher {
            waits,
            root,
            done: Watched::default(),
            seen: HashSet::new(),
            pending: crate::attach::process_tree(root)
                .into_iter()
                .map(|pid| (pid, Pending::new()))
                .collect(),
            running: HashMap::new(),
            rarity: HashMap::new(),
            counted: counted.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("idleflow-jvms".into())
            .spawn(move || {
                loop {
                    w.look();
                    let news = if w.pending.is_empty() {
                        rx.recv().ok()
                    } else {
                        match rx.recv_timeout(WATCH_PERIOD) {
                            Ok(news) => Some(news),
                            Err(mpsc::RecvTimeoutError::Timeout) => Some(News::Renamed(Vec::new())),
                            Err(mpsc::RecvTimeoutError::Disconnected) => None,
                        }
                    };
                    match news {
                        None => break,
                        Some(News::Blocking { at_ns, counts }) => w.blocking(at_ns, &counts),
                        Some(News::Renamed(pids)) => {
                            for pid in pids {
                                if !w.seen.contains(&pid)
                                    && (pid == w.root || procfs::descends_from(pid, w.root))
                                {
                                    // An exec starts the clock again.
                                    w.pending.insert(pid, Pending::new());
                                }
                            }
                        }
                    }
                }
                w.finish()
            })
            .context("cannot start the thread that finds the JVMs")?;
        Ok(Watch {
            news: tx,
            counted,
            thread,
        })
    }

    /// Hands over the processes the recorder saw `exec` (any process:
    /// those outside the tree are left alone).
    pub fn renamed(&self, pids: Vec<u32>) {
        if !pids.is_empty() {
            let _ = self.news.send(News::Renamed(pids));
        }
    }

    /// The JVMs whose blocking switch-outs the policy needs counted
    /// ([`Recorder::count_blocking_switch_outs`]).
    pub fn counted(&self) -> Vec<u32> {
        self.counted.lock().map(|c| c.clone()).unwrap_or_default()
    }

    /// Hands over the counts of [`Watch::counted`]'s JVMs' blocking
    /// switch-outs so far, as of `at_ns` on the recording's clock.
    pub fn blocking(&self, at_ns: u64, counts: &[(u32, u64)]) {
        if !counts.is_empty() {
            let _ = self.news.send(News::Blocking {
                at_ns,
                counts: counts.to_vec(),
            });
        }
    }

    /// Stops watching (and recording every wait); what was done.
    pub fn finish(self) -> Watched {
        drop(self.news);
        self.thread.join().unwrap_or_default()
    }
}

/// The directory of JVM `pid`'s flight-recorder repository, where JFR
/// keeps the chunks of all its recordings until it writes them out (by
/// default `<java.io.tmpdir>/<start time>_<pid>`): that of a `.jfr` file
/// the JVM has open outside idleflow's own directory `ours`.
fn repository_of(pid: u32, ours: &Path) -> Option<PathBuf> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()?
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .find(|p| p.extension().is_some_and(|x| x == "jfr") && !p.starts_with(ours))
        .and_then(|p| p.parent().map(Path::to_path_buf))
}

/// The pid in a JFR file name `hotspot-pid-PID-id-N-TIME.jfr`.
fn pid_of(name: &str) -> Option<u32> {
    name.strip_prefix("hotspot-pid-")?
        .split('-')
        .next()?
        .parse()
        .ok()
}

/// How long a converter child may take: a minute, and a second per MiB.
fn convert_timeout(bytes: u64) -> Duration {
    Duration::from_secs(60 + bytes / (1 << 20))
}

/// Spans of the recording's clock as `__jfr-convert` takes them:
/// `FROM-TO,…`, `-` for none.
fn format_spans(spans: &[(u64, u64)]) -> String {
    if spans.is_empty() {
        return "-".into();
    }
    let s: Vec<String> = spans.iter().map(|(a, b)| format!("{a}-{b}")).collect();
    s.join(",")
}

/// The inverse of [`format_spans`].
fn parse_spans(text: &str) -> anyhow::Result<Vec<(u64, u64)>> {
    if text == "-" {
        return Ok(Vec::new());
    }
    text.split(',')
        .map(|span| {
            let (a, b) = span
                .split_once('-')
                .with_context(|| format!("a span is FROM-TO, not {span:?}"))?;
            Ok((a.parse()?, b.parse()?))
        })
        .collect()
}

/// `idleflow __jfr-convert`: converts one `.jfr` into a recording of its
/// wait records alone (written by [`Waits::collect`]'s parent process).
pub fn convert_child(args: crate::cli::JfrConvertArgs) -> anyhow::Result<()> {
    use idleflow_format::{RunInfo, RunSummary, Writer};
    let file = std::fs::File::create(&args.output)
        .with_context(|| format!("cannot create {}", args.output.display()))?;
    let mut w = Writer::new(
        std::io::BufWriter::new(file),
        &RunInfo::minimal(Vec::new(), 0),
    )?;
    let opts = idleflow_jfr::Options {
        pid: args.pid,
        offset_ns: args.offset_ns,
        thresholds: idleflow_jfr::Thresholds {
            wait_ns: args.threshold_ns,
            monitor_enter_ns: args.monitor_threshold_ns,
        },
        all_waits: parse_spans(&args.all_waits)?,
        ephemeral_ports: (args.ports_from, args.ports_to),
    };
    let head = idleflow_jfr::convert(&args.input, &opts, |r| w.write(&r))?;
    w.write(&Record::JvmWaits(Box::new(head)))?;
    w.finish(&RunSummary::default())?;
    Ok(())
}

impl Waits {
    /// Converts JVM `pid`'s file in a child process (`__jfr-convert`: a
    /// damaged file may make the parser fail, loop or abort; the child is
    /// killed after [`convert_timeout`]) and copies its records into the
    /// recording. Returns what was read, or `None` if the child failed
    /// (the records it completed are copied all the same).
    fn convert_isolated(
        &self,
        pid: u32,
        path: &std::path::Path,
        offset_ns: i64,
        all_waits: &[(u64, u64)],
        recorder: &mut Recorder,
    ) -> anyhow::Result<Option<idleflow_format::JvmWaits>> {
        let out = self.dir.path().join(format!("waits-{pid}.idleflow"));
        let (lo, hi) = ephemeral_ports();
        let exe = std::env::current_exe().context("cannot find the idleflow executable")?;
        let mut child = std::process::Command::new(exe)
            .arg("__jfr-convert")
            .arg(path)
            .arg(&out)
            .args([
                pid.to_string(),
                offset_ns.to_string(),
                self.thresholds.wait_ns.to_string(),
                self.thresholds.monitor_enter_ns.to_string(),
                format_spans(all_waits),
                lo.to_string(),
                hi.to_string(),
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .context("cannot start the flight-recording converter")?;
        let bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        let deadline = std::time::Instant::now() + convert_timeout(bytes);
        let ok = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status.success(),
                Ok(None) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break false;
                }
            }
        };
        let mut head = None;
        if let Ok(file) = std::fs::File::open(&out) {
            if let Ok(mut reader) = idleflow_format::Reader::new(std::io::BufReader::new(file)) {
                while let Ok(Some(rec)) = reader.next_complete_record() {
                    match rec {
                        Record::JvmWaits(h) => head = Some(*h),
                        r => recorder.write_after(&r)?,
                    }
                }
            }
        }
        let _ = std::fs::remove_file(&out);
        Ok(if ok { head } else { None })
    }

    /// Where the JVMs write their files.
    fn out_dir(&self) -> PathBuf {
        self.dir.path().join("out")
    }

    /// The file JVM `pid` writes when idleflow stops its recording.
    fn attach_file(&self, pid: u32) -> PathBuf {
        self.out_dir()
            .join(format!("hotspot-pid-{pid}-id-0-attach.jfr"))
    }

    /// Starts idleflow's flight recording in the running JVM `pid`, through
    /// its attach mechanism; it is written to this directory when
    /// [`Waits::stop_in`] stops it or the JVM exits.
    pub fn start_in(&self, pid: u32) -> Result<(), crate::attach::AttachError> {
        crate::attach::jcmd(
            pid,
            &format!(
                "JFR.start name={RECORDING_NAME} settings={} filename={} dumponexit=true",
                self.dir.path().join("idleflow.jfc").display(),
                self.attach_file(pid).display()
            ),
            "Started recording",
        )
        .map(drop)
    }

    /// Starts the recording of every wait in JVM `pid` ([`ALL_WAITS_NAME`]).
    fn start_all_in(&self, pid: u32) -> Result<(), crate::attach::AttachError> {
        crate::attach::jcmd(
            pid,
            &format!(
                "JFR.start name={ALL_WAITS_NAME} settings={}",
                self.dir.path().join("idleflow-all.jfc").display()
            ),
            "Started recording",
        )
        .map(drop)
    }

    /// Stops (and discards) the recording of every wait in JVM `pid`.
    fn stop_all_in(&self, pid: u32) -> Result<(), crate::attach::AttachError> {
        crate::attach::jcmd(
            pid,
            &format!("JFR.stop name={ALL_WAITS_NAME}"),
            "Stopped recording",
        )
        .map(drop)
    }

    /// Stops idleflow's flight recording in JVM `pid` (started by
    /// [`Waits::start_in`] or by `JAVA_TOOL_OPTIONS`), which writes it.
    pub fn stop_in(&self, pid: u32) -> Result<(), crate::attach::AttachError> {
        crate::attach::jcmd(
            pid,
            &format!(
                "JFR.stop name={RECORDING_NAME} filename={}",
                self.attach_file(pid).display()
            ),
            "Stopped recording",
        )
        .map(drop)
    }

    /// For each JVM in `watched` that ended without writing its recording
    /// (killed with SIGKILL, crashed), joins the chunks its repository
    /// still holds from the time idleflow's recording started in it into
    /// the file [`Waits::collect`] reads: JFR flushes its chunk every
    /// second, so they hold the waits up to about a second before the
    /// end. Call after stopping the JVMs that still run. Returns a line
    /// for the report for each such JVM.
    pub fn salvage(&self, watched: &Watched) -> Vec<String> {
        let mut notes = Vec::new();
        for &pid in &watched.started {
            // JFR creates the file empty when the recording starts, and
            // fills it when the recording is stopped or the JVM exits.
            let file = self.attach_file(pid);
            if std::fs::metadata(&file).is_ok_and(|m| m.len() > 0) {
                continue;
            }
            let _ = std::fs::remove_file(&file);
            let Some((dir, since)) = watched.repositories.get(&pid) else {
                notes.push(format!(
                    "JVM {pid}: ended without writing its flight recording (killed?), \
                     and its repository was not found: no Java waits"
                ));
                continue;
            };
            match self.join_chunks(pid, dir, *since) {
                Ok(0) => notes.push(format!(
                    "JVM {pid}: ended without writing its flight recording (killed?), \
                     and left no chunks in its repository {}: no Java waits",
                    dir.display()
                )),
                Ok(n) => notes.push(format!(
                    "JVM {pid}: ended without writing its flight recording (killed?): \
                     its waits were read from the {n} chunk{} it left in its repository {}, \
                     up to its last flush (about a second before it ended)",
                    if n == 1 { "" } else { "s" },
                    dir.display()
                )),
                Err(e) => notes.push(format!(
                    "JVM {pid}: ended without writing its flight recording (killed?), \
                     and its repository {} could not be read: {e}",
                    dir.display()
                )),
            }
        }
        notes
    }

    /// Concatenates the chunk files of `dir` written since `since` (a
    /// `.jfr` file is a sequence of chunks), in time order, into JVM
    /// `pid`'s file; returns how many.
    fn join_chunks(&self, pid: u32, dir: &Path, since: SystemTime) -> std::io::Result<usize> {
        let mut chunks: Vec<PathBuf> = std::fs::read_dir(dir)?
            .flatten()
            .filter(|e| {
                e.metadata()
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| t >= since)
            })
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "jfr"))
            .collect();
        // Chunk files are named by their start time.
        chunks.sort();
        if chunks.is_empty() {
            return Ok(0);
        }
        let mut out = std::fs::File::create(
            self.out_dir()
                .join(format!("hotspot-pid-{pid}-id-0-repository.jfr")),
        )?;
        for c in &chunks {
            std::io::copy(&mut std::fs::File::open(c)?, &mut out)?;
        }
        Ok(chunks.len())
    }

    /// Reads every JVM's file into the recording (after
    /// [`Recorder::stop`]), with what `watched` knows of it (when it
    /// recorded every wait, its threads that worked for idleflow); returns
    /// a line for each JVM that left none or whose file could not be read
    /// whole, for the report.
    pub fn collect(
        &self,
        recorder: &mut Recorder,
        watched: &Watched,
        offset_ns: i64,
        quiet: bool,
    ) -> anyhow::Result<Vec<String>> {
        let mut notes = Vec::new();
        let mut files: Vec<(u32, PathBuf)> = std::fs::read_dir(self.out_dir())
            .with_context(|| format!("cannot read {}", self.out_dir().display()))?
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                Some((pid_of(&name)?, e.path()))
            })
            .filter(|(_, p)| p.extension().is_some_and(|x| x == "jfr"))
            .collect();
        files.sort();
        for (pid, path) in files {
            let started = std::time::Instant::now();
            let all_waits = watched.all_waits.get(&pid).map_or(&[][..], Vec::as_slice);
            let head = match self.convert_isolated(pid, &path, offset_ns, all_waits, recorder) {
                Ok(Some(head)) => head,
                Ok(None) => {
                    let note = format!(
                        "its flight recording {} could not be read whole (the converter failed or \
                         timed out; the waits read before are kept)",
                        path.display()
                    );
                    notes.push(format!("JVM {pid}: {note}"));
                    idleflow_format::JvmWaits {
                        pid,
                        source: "jfr".into(),
                        file: path.display().to_string(),
                        threshold_ns: self.thresholds.wait_ns,
                        monitor_enter_threshold_ns: Some(self.thresholds.monitor_enter_ns),
                        clock_offset_ns: offset_ns,
                        all_waits: all_waits.to_vec(),
                        ..Default::default()
                    }
                }
                Err(e) => return Err(e),
            };
            let mut head = head;
            head.own_tids = watched.own_tids.get(&pid).cloned().unwrap_or_default();
            head.attached_ns = watched.attached.get(&pid).copied().unwrap_or(0);
            if !quiet {
                eprintln!(
                    "idleflow: JVM {pid}: {} waits of {} events read from its flight recording ({:.1} MiB) in {:.2} s",
                    head.waits,
                    head.events,
                    head.file_bytes as f64 / (1 << 20) as f64,
                    started.elapsed().as_secs_f64()
                );
            }
            for n in &head.notes {
                notes.push(format!("JVM {pid}: flight recording: {n}"));
            }
            recorder.write_after(&Record::JvmWaits(Box::new(head)))?;
        }
        Ok(notes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jfr_file_names_give_the_pid() {
        assert_eq!(
            pid_of("hotspot-pid-20915-id-1-2026_11_23_03_32_14.jfr"),
            Some(20915)
        );
        assert_eq!(pid_of("other.jfr"), None);
    }

    #[test]
    fn spans_pass_to_the_converter_and_back() {
        for spans in [vec![], vec![(1, 2)], vec![(10, 20), (30, 5_000_000_000)]] {
            assert_eq!(parse_spans(&format_spans(&spans)).unwrap(), spans);
        }
        assert!(parse_spans("12").is_err());
        assert!(parse_spans("1-x").is_err());
    }

    /// 0.25 s spans at `rates` blocking switch-outs a second: what the
    /// policy said after each (`+` start, `-` stop, `.` nothing), applying it.
    fn run_policy(below: f64, rates: &[f64]) -> String {
        let mut r = Rarity::new(below);
        let (mut t, mut n) = (0u64, 0u64);
        r.observe(t, n);
        let mut said = String::new();
        for &rate in rates {
            t += 250_000_000;
            n += (rate / 4.0) as u64;
            r.observe(t, n);
            said.push(match r.decide(t) {
                Some(true) => {
                    r.on_since = Some(t);
                    '+'
                }
                Some(false) => {
                    r.on_since = None;
                    r.off_at = Some(t);
                    '-'
                }
                None => '.',
            });
        }
        said
    }

    #[test]
    fn every_wait_is_recorded_while_waits_are_rare() {
        // Rare from the start: on at once, and it stays on.
        assert_eq!(run_policy(3000.0, &[1800.0; 4]), "+...");
        // Frequent: never on.
        assert_eq!(run_policy(3000.0, &[47_000.0; 4]), "....");
        // Between the rate and 1.5x: stays as it is.
        assert_eq!(run_policy(3000.0, &[1000.0, 4000.0, 4400.0]), "+..");
        // A load arrives: off at once; it leaves: back on, but not within 2 s.
        let mut rates = vec![1000.0, 30_000.0];
        rates.extend([1000.0; 10]);
        assert_eq!(run_policy(3000.0, &rates), "+-.......+..");
        // 0: the policy is off.
        assert_eq!(run_policy(0.0, &[10.0; 3]), "...");
        assert!(Rarity::new(0.0).knows());
        assert!(!Rarity::new(3000.0).knows());
    }

    #[test]
    fn the_rate_over_a_jvms_start_does_not_stop_every_wait() {
        let mut r = Rarity::new(3000.0);
        // Counted from when the process turned out a JVM: 4,000 blocking
        // switch-outs while it loaded classes and started its recorder...
        r.observe(0, 0);
        // ...then /proc's count says its program waits rarely: on.
        r.first(400, Duration::from_millis(500));
        r.restart(550_000_000);
        assert_eq!(r.decide(600_000_000), Some(true));
        r.on_since = Some(600_000_000);
        r.restart(650_000_000);
        // A count taken while idleflow started the recordings (handed over
        // late) neither closes the start's span nor opens one.
        r.observe(640_000_000, 4_000);
        assert_eq!(r.decide(700_000_000), None);
        // The recorder's next count starts a span...
        r.observe(700_000_000, 4_100);
        assert_eq!(r.decide(700_000_000), None);
        // ...and a quarter second of the program's own rare waits keeps
        // every wait on.
        r.observe(950_000_000, 4_100 + 450);
        assert_eq!(r.rate, Some(1800.0));
        assert_eq!(r.decide(950_000_000), None);
    }
}
