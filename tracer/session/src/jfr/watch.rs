//! The watcher thread of `--java waits`: it finds the JVMs of the
//! recorded process tree as they start, starts idleflow's flight recording
//! in each as soon as the JVM can take an attach, and runs the every-wait
//! policy ([`super::policy`]) on the blocking counts the recorder's loop
//! hands it ([`Watch`]).
//!
//! Invariant: SIGQUIT reaches only JVMs that are ready for it (through
//! [`attach::jcmd`]); the threads a JVM runs for idleflow are known
//! by tid ([`own_threads`]), never by name alone; the watcher sleeps while
//! nothing is pending.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant, SystemTime};

use idleflow_tracer::{procfs, Counted};

use super::policy::{uncounted, Rarity, Uncounted};
use super::Waits;
use crate::attach::{self, AttachError};
use crate::SessionError;

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
/// counts the blocking switch-outs of the JVMs' threads, HotSpot's own
/// left out ([`Watch::counted`], [`Watch::blocking`]); while they are rare, a second
/// flight recording records every wait ([`Waits::start_all_in`]). A JVM's
/// recording starts once its rate is known, so that both start together.
#[derive(Debug)]
pub struct Watch {
    news: mpsc::Sender<News>,
    counted: Arc<std::sync::Mutex<Vec<Counted>>>,
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
    /// What the watch did so far (a flight recorder's dump asks).
    Snapshot(mpsc::Sender<Watched>),
}

/// Asks a [`Watch`] what it did so far, from any thread.
#[derive(Debug, Clone)]
pub struct WatchAsker {
    news: mpsc::Sender<News>,
}

impl WatchAsker {
    /// What the watch did so far ([`Watched`], the threads that worked for
    /// idleflow and the spans of every wait recorded up to now), or `None`
    /// if it ended or did not answer within `within` (it may be busy with
    /// a JVM's attach).
    pub fn snapshot(&self, within: Duration) -> Option<Watched> {
        let (tx, rx) = mpsc::channel();
        self.news.send(News::Snapshot(tx)).ok()?;
        rx.recv_timeout(within).ok()
    }
}

/// How often the recorder's loop reports the JVMs' blocking switch-outs.
pub const RATE_PERIOD: Duration = Duration::from_millis(250);

/// What a [`Watch`] did.
#[derive(Debug, Default, Clone)]
pub struct Watched {
    /// JVMs whose flight recording idleflow started.
    pub started: Vec<u32>,
    /// JVMs it could not start one in, and why.
    pub notes: Vec<String>,
    /// JVMs whose own structures name their frames and waits: no flight
    /// recording was started in them.
    pub read: Vec<u32>,
    /// Each started JVM's flight-recorder repository (see
    /// [`repository_of`]) and when idleflow's recording started in it.
    pub repositories: HashMap<u32, (PathBuf, SystemTime)>,
    /// Each started JVM's user (the owner its files may have).
    pub owners: HashMap<u32, u32>,
    /// When each JVM recorded every wait (the policy), ns on the
    /// recording's clock.
    pub all_waits: HashMap<u32, Vec<(u64, u64)>>,
    /// Each JVM's threads that worked for idleflow ([`own_threads`]).
    pub own_tids: HashMap<u32, Vec<u32>>,
    /// When idleflow first attached to each JVM, ns on the recording's clock.
    pub attached: HashMap<u32, u64>,
    /// When idleflow's flight recording had started in each JVM, ns on the
    /// recording's clock: a JVM attached late redefined classes by then,
    /// and threw away their compiled code.
    pub jfr_started: HashMap<u32, u64>,
}

/// Whether `JFR.start` failed only because the JVM is still starting: its
/// attach listener runs, but the flight recorder's diagnostic commands are
/// not registered yet (measured on Tomcat 10 with `--java waits,stacks`:
/// `java.lang.IllegalArgumentException: Unknown diagnostic command`).
fn is_too_early(e: &AttachError) -> bool {
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

/// How long a JVM's structures may stay unreadable while it starts
/// (the recorder's walks try as long: `recorder/java.rs`).
const STRUCTURES_WITHIN: Duration = Duration::from_secs(5);

/// Whether JVM structures that could not be read never will be: all but
/// the tables of a JVM still starting.
fn is_final(e: &idleflow_hotspot::HotspotError) -> bool {
    use idleflow_hotspot::{HotspotError, VmStructsError};
    !matches!(e, HotspotError::Tables(VmStructsError::NotYet))
}

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
    /// Its structures could not be read (`Waits::only_unreadable`): its
    /// flight recorder names its waits.
    unreadable: bool,
}

impl Pending {
    fn new() -> Self {
        Self::exec_ago(Duration::ZERO)
    }

    /// A process of the tree as the watch starts: its `exec` is taken to
    /// be its start (`/proc` keeps no time of `exec`), so that one started
    /// long ago is looked at once, not for [`LOADS_JVM_WITHIN`] (reading a
    /// server's `maps` ten times a second cost PostgreSQL's recording 0.4 %
    /// of one CPU).
    fn in_tree(pid: u32) -> Self {
        Self::exec_ago(procfs::age(pid).unwrap_or_default())
    }

    fn exec_ago(ago: Duration) -> Self {
        let now = Instant::now();
        Pending {
            since: now.checked_sub(ago).unwrap_or(now),
            jvm: false,
            switches: None,
            too_early_since: None,
            unreadable: false,
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
        && attach::jcmd(pid, "JFR.check", "")
            .is_ok_and(|out| out.contains("No available recordings"))
}

/// How many times JVM `pid`'s threads now alive have left their CPU to
/// wait, those the policy leaves out ([`uncounted`]) aside.
fn program_switches(pid: u32) -> u64 {
    procfs::voluntary_switches(pid, |name| !uncounted(name))
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
    /// Each JVM's threads whose waits the policy leaves out.
    uncounted: HashMap<u32, Uncounted>,
    counted: Arc<std::sync::Mutex<Vec<Counted>>>,
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
        if !p.jvm && attach::is_jvm(pid) {
            p.jvm = true;
            self.rarity
                .insert(pid, Rarity::new(self.waits.all_waits_below));
            if self.waits.all_waits_below > 0.0 {
                p.switches = Some((Instant::now(), program_switches(pid)));
            }
        }
        if !p.jvm {
            return p.since.elapsed() < LOADS_JVM_WITHIN;
        }
        if self.waits.only_unreadable && !p.unreadable {
            // Its structures name its frames and waits: no flight recorder.
            // They need no attach: read before the JVM is ready for one.
            match idleflow_hotspot::BlockedThreads::open(pid) {
                Ok(_) => {
                    self.rarity.remove(&pid);
                    self.seen.insert(pid);
                    self.done.read.push(pid);
                    return false;
                }
                // A JVM still starting has not filled its tables yet.
                Err(e) if !is_final(&e) && p.since.elapsed() < STRUCTURES_WITHIN => {
                    return true;
                }
                Err(e) => {
                    p.unreadable = true;
                    self.done.notes.push(format!(
                        "JVM {pid}: its structures could not be read ({e}): its flight recorder \
                         names its waits"
                    ));
                }
            }
        }
        if !attach::is_ready(pid) {
            return p.since.elapsed() < READY_WITHIN;
        }
        if let (Some((since, n)), Some(r)) = (p.switches, self.rarity.get_mut(&pid)) {
            if !r.knows() {
                let span = since.elapsed();
                if span < FIRST_RATE_OVER {
                    return true;
                }
                r.first(program_switches(pid).saturating_sub(n), span);
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
                self.done
                    .jfr_started
                    .insert(pid, idleflow_tracer::sys::monotonic_ns());
                if let Some(r) = self.rarity.get_mut(&pid) {
                    r.restart(idleflow_tracer::sys::monotonic_ns());
                }
                self.done.started.push(pid);
                if let Some(uid) = idleflow_format::files::process_uid(pid) {
                    self.done.owners.insert(pid, uid);
                }
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

    /// Tells the recorder's loop which JVMs to count, those with a policy
    /// whose process lives, and which of their threads to leave out (looked
    /// at again now).
    fn publish_counted(&mut self) {
        let mut pids: Vec<u32> = self
            .rarity
            .iter()
            .filter(|(_, r)| r.below > 0.0)
            .map(|(&pid, _)| pid)
            .collect();
        pids.sort_unstable();
        self.uncounted.retain(|pid, _| pids.contains(pid));
        let counted = pids
            .into_iter()
            .map(|pid| Counted {
                pid,
                skip: self.uncounted.entry(pid).or_default().refresh(pid),
            })
            .collect();
        if let Ok(mut c) = self.counted.lock() {
            *c = counted;
        }
    }

    /// What was done so far: with each running JVM's threads that worked
    /// for idleflow up to now, and its spans of every wait recorded, the
    /// one still open ending now.
    fn snapshot(&mut self) -> Watched {
        let mut done = self.done.clone();
        let pids: Vec<u32> = self.running.keys().copied().collect();
        for pid in pids {
            self.note_own_threads(pid);
            let Some(run) = self.running.get(&pid) else {
                continue;
            };
            let mut windows = run.windows.clone();
            if let Some(from) = self.rarity.get(&pid).and_then(|r| r.on_since) {
                windows.push((from, idleflow_tracer::sys::monotonic_ns()));
            }
            if !windows.is_empty() {
                done.all_waits.insert(pid, windows);
            }
            done.own_tids.insert(pid, run.own.iter().copied().collect());
        }
        done
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
                if attach::is_jvm(pid) {
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
    pub fn start(waits: Arc<Waits>, root: u32) -> Result<Watch, SessionError> {
        let (tx, rx) = mpsc::channel::<News>();
        let counted = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut w = Watcher {
            waits,
            root,
            done: Watched::default(),
            seen: HashSet::new(),
            pending: attach::process_tree(root)
                .into_iter()
                .map(|pid| (pid, Pending::in_tree(pid)))
                .collect(),
            running: HashMap::new(),
            rarity: HashMap::new(),
            uncounted: HashMap::new(),
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
                        Some(News::Snapshot(reply)) => {
                            let _ = reply.send(w.snapshot());
                        }
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
            .map_err(SessionError::io(
                "cannot start the thread that finds the JVMs",
            ))?;
        Ok(Watch {
            news: tx,
            counted,
            thread,
        })
    }

    /// A handle that asks this watch what it did so far.
    pub fn asker(&self) -> WatchAsker {
        WatchAsker {
            news: self.news.clone(),
        }
    }

    /// Hands over the processes the recorder saw `exec` (any process:
    /// those outside the tree are left alone).
    pub fn renamed(&self, pids: Vec<u32>) {
        if !pids.is_empty() {
            let _ = self.news.send(News::Renamed(pids));
        }
    }

    /// The JVMs whose blocking switch-outs the policy needs counted, and
    /// their threads to leave out
    /// ([`Recorder::count_blocking_switch_outs`]).
    pub fn counted(&self) -> Vec<Counted> {
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
