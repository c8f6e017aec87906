//! The flight recorder's triggers (the patent's policies): when to look.
//! Each is evaluated on the exact record stream, after every drain batch.
//!
//! The language (`record --trigger SPEC`, repeatable):
//!
//! ```text
//! cpu-idle [in PATTERN]             a thread of interest left a CPU idle (each time; with
//!                                   every:N, every Nth time)
//! wait>=DUR [in PATTERN]            a thread of interest has been waiting DUR (once per wait)
//! waiting>=N [for DUR] [in PATTERN] N threads of interest wait at once (for DUR on end)
//! idle>=P% [for DUR] [while waiting>=N [in PATTERN]]
//!                                   the CPUs were idle P % of the last DUR (default 1s),
//!                                   while N threads of interest wait
//! io-full>=P% [for DUR] [while idle>=Q%]
//!                                   the machine's pressure stall (PSI): some task stalled
//!                                   on I/O and none ran (`full`) P % of the last DUR
//!                                   (default 1s), while the CPUs were idle Q % of it;
//!                                   also io-some, memory-full, memory-some, cpu-some
//! unclaimed>=DUR [for DUR] [in PATTERN]
//!                                   a CPU idle DUR while a thread of interest has been
//!                                   runnable as long, not on a CPU (for DUR on end)
//! convoy>=K [in PATTERN]            K threads of interest of one pool in turn, each
//!                                   woken from its wait by the one before (a lock convoy:
//!                                   each unlock hands the lock to the next waiter)
//! signal                            SIGUSR2 to the recorder
//! history                           a heartbeat's window (`--heartbeat`) had a path whose
//!                                   share of the idle rose beyond the job's history band
//!                                   (`--history-job`; judged by the recording session)
//! ```
//!
//! `for DUR` after `waiting>=N` or `unclaimed>=DUR` is a sustain: the
//! condition must hold at every judgement for DUR before it counts (a
//! dip, even for one drain batch, starts it again); after `idle>=P%` it is
//! the window the share is taken over.
//!
//! Any of them may end in `every:N` (every Nth occurrence fires) or
//! `once-after:N` (only the Nth). An occurrence is the condition coming to
//! hold (it counts again only after it stopped holding); for `wait>=`,
//! each wait that reaches DUR; for `cpu-idle`, each switch to idle.
//!
//! DUR is `500ms`, `2s`, `1m` (humantime); PATTERN a glob on thread names
//! (`http-nio-*`, `H2 TCP*`: the rest of the trigger), as the kernel keeps
//! them: 15 bytes, so a longer pattern also takes the names of 15 bytes its
//! first 15 bytes match ([`NamePattern`]). Without a PATTERN, the threads of interest are the
//! recorded command's or process's (all the processes' threads, when the
//! whole machine is recorded: the kernel's own only when a PATTERN names
//! them), never idleflow's own. A thread waits from a switch-out in a
//! sleeping state (`S`, `D`, or not runnable) until its wake-up.
//!
//! A convoy is told from the wake-ups alone, as it happens: a thread's
//! wait ended by a thread of the same pool (same process, same
//! [`thread_pattern`]) in its own code (not an interrupt) is a hand-off,
//! one more link of the waker's chain (the chain of the waker's own
//! latest hand-off, if it came at most 100 ms before; else the waker
//! alone). Other wake-ups (a timer, another pool's thread) leave a
//! thread's chain as it was: a holder that sleeps with the lock held is
//! still handed the lock by the one before. A chain keeps the threads in
//! turn, each at most once (a thread met again starts the chain over
//! after its earlier place). `convoy>=K` holds at a judgement when a hand-off since
//! the last one made a chain of K threads of interest. The lock itself is
//! not known here (a Java monitor's waiters park each on their own futex):
//! the dump's paths name the code that waited.
//!
//! Submodules: [`language`] reads the triggers, [`pressure`] keeps the
//! kernel's pressure-stall samples.
//!
//! Invariant: the policy sees records in stream order and judges at
//! stream time: "now" is the latest time the stream reached, never the
//! wall clock, so a condition holds or not on what was recorded. The one
//! input from outside the stream, the kernel's pressure stall, is judged
//! on its samples' own times (the same clock, read at each judgement).

mod language;
mod pressure;
#[cfg(test)]
mod tests;

use std::collections::VecDeque;

use idleflow_format::names::thread_pattern;
use idleflow_format::{Dispatch, PrevState, Record, WakeContext, Wakeup};
use rustc_hash::{FxHashMap, FxHashSet};

pub use language::{Condition, Interest, NamePattern, Rate, Trigger, TriggerError};
use pressure::Samples;
pub use pressure::{Pressure, Stall};

/// A trigger's occurrences so far, and whether its condition holds.
#[derive(Debug, Clone, Copy, Default)]
struct Edge {
    /// The condition held long enough and counted (until it stops holding).
    holding: bool,
    /// Since when it has held at every judgement (its sustain).
    since: Option<u64>,
    occurrences: u64,
}

/// A trigger that fired.
#[derive(Debug, Clone, PartialEq)]
pub struct Fired {
    /// Its spec.
    pub trigger: String,
    /// When its condition held, ns (stream time).
    pub at_ns: u64,
    /// The state that made it hold, in words.
    pub state: String,
}

/// A hand-off extends its waker's chain when the waker was handed to at
/// most this long before, ns (a convoy hands on every few milliseconds).
const CHAIN_GAP_NS: u64 = 100_000_000;

/// The kernel's thread-creating thread: its children are the kernel's own
/// threads (kworkers, ksoftirqd, rcu_preempt, …).
const KTHREADD: u32 = 2;

/// Idle CPU-time is summed in bins this long, ns.
const BIN_NS: u64 = 10_000_000;

/// What of the stream a policy keeps, by what its triggers judge.
#[derive(Debug, Clone, Copy)]
struct Keeps {
    waiting: bool,
    runnable: bool,
    idle: bool,
}

impl Keeps {
    fn of(triggers: &[Trigger]) -> Self {
        let any = |f: fn(&Condition) -> bool| triggers.iter().any(|t| f(&t.condition));
        Keeps {
            waiting: any(|c| {
                matches!(
                    c,
                    Condition::Wait { .. }
                        | Condition::Waiting { .. }
                        | Condition::Convoy { .. }
                        | Condition::Idle { .. }
                )
            }),
            runnable: any(|c| matches!(c, Condition::Unclaimed { .. })),
            idle: any(|c| {
                matches!(
                    c,
                    Condition::Idle { .. }
                        | Condition::Unclaimed { .. }
                        | Condition::Pressure { .. }
                )
            }),
        }
    }
}

/// The stream's state the triggers judge, and the triggers.
#[derive(Debug)]
pub struct Policy {
    triggers: Vec<Trigger>,
    /// The target's processes (empty: every process).
    target_pids: FxHashSet<u32>,
    /// idleflow's own process: never of interest.
    own_pid: u32,
    /// tid → (pid, name).
    names: FxHashMap<u32, (u32, String)>,
    /// The kernel's own threads (kthreadd and its children): of interest
    /// only when a PATTERN names them.
    kernel_pids: FxHashSet<u32>,
    /// Threads waiting now: tid → since when, and whether a `wait>=`
    /// trigger already fired on this wait.
    waiting: FxHashMap<u32, (u64, bool)>,
    /// Threads runnable and not on a CPU: tid → since when.
    runnable: FxHashMap<u32, u64>,
    /// The machine's pressure totals as sampled: (when, totals), oldest
    /// first (only with a pressure trigger).
    pressure: Samples,
    /// Per trigger, in order.
    edges: Vec<Edge>,
    /// Per CPU: idle since when (None: running, or not known yet).
    idle_since: FxHashMap<u32, Option<u64>>,
    /// Idle CPU-ns per bin: (bin start, ns), oldest first.
    bins: VecDeque<(u64, u64)>,
    cpus: usize,
    /// The stream's first and latest times.
    first_ns: Option<u64>,
    now_ns: u64,
    /// The longest convoy a trigger asks for (0: no convoy trigger, no
    /// chains kept).
    longest_convoy: usize,
    /// Per thread: the chain of its latest hand-off, threads in turn,
    /// itself last (at most `longest_convoy`), and when it was handed.
    chains: FxHashMap<u32, (Vec<u32>, u64)>,
    /// Per trigger: the convoy a hand-off made since the last judgement.
    convoys: Vec<Option<Vec<u32>>>,
    /// Per trigger (`cpu-idle`): the switches to idle since the last
    /// judgement, and the latest (CPU, thread).
    to_idle: Vec<(u64, Option<(u32, u32)>)>,
    /// Some trigger is a `cpu-idle`.
    counts_to_idle: bool,
    /// What the triggers judge (each kept only if one does): the threads
    /// waiting (`wait`, `waiting`, `convoy`, `idle … with waiters`), those
    /// runnable (`unclaimed`), the CPUs' idle (`idle`, `unclaimed`,
    /// `pressure`).
    keeps: Keeps,
    /// Per thread, which of the first 64 triggers it is of interest to, as
    /// far as known: (bits known, bits of interest). Forgotten when the
    /// thread is named again or exits.
    interest: FxHashMap<u32, (u64, u64)>,
}

impl Policy {
    /// A policy of `triggers` for a recording of `cpus` CPUs whose target
    /// is `target_pids` (empty: the whole machine).
    pub fn new(triggers: Vec<Trigger>, cpus: usize, target_pids: &[u32]) -> Self {
        let longest_convoy = triggers
            .iter()
            .filter_map(|t| match t.condition {
                Condition::Convoy { threads, .. } => Some(threads as usize),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        let keeps = Keeps::of(&triggers);
        Policy {
            longest_convoy,
            chains: FxHashMap::default(),
            convoys: vec![None; triggers.len()],
            to_idle: vec![(0, None); triggers.len()],
            counts_to_idle: triggers
                .iter()
                .any(|t| matches!(t.condition, Condition::CpuIdle { .. })),
            edges: vec![Edge::default(); triggers.len()],
            runnable: FxHashMap::default(),
            pressure: Samples::default(),
            triggers,
            target_pids: target_pids.iter().copied().collect(),
            own_pid: std::process::id(),
            names: FxHashMap::default(),
            kernel_pids: FxHashSet::default(),
            waiting: FxHashMap::default(),
            idle_since: FxHashMap::default(),
            bins: VecDeque::new(),
            cpus: cpus.max(1),
            first_ns: None,
            now_ns: 0,
            interest: FxHashMap::default(),
            keeps,
        }
    }

    /// Sets idleflow's own process (tests: another one).
    pub fn set_own_pid(&mut self, pid: u32) {
        self.own_pid = pid;
    }

    /// The triggers, as given, for the dumps' record of the policy.
    pub fn describe(&self) -> String {
        self.triggers
            .iter()
            .map(|t| format!("'{}'", t.spec))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Whether a trigger watches the stream (not only signals).
    pub fn watches_stream(&self) -> bool {
        self.triggers
            .iter()
            .any(|t| !matches!(t.condition, Condition::Signal | Condition::History))
    }

    /// Whether a trigger judges the machine's pressure stall: then call
    /// [`Policy::observe_pressure`] before each [`Policy::evaluate`].
    pub fn wants_pressure(&self) -> bool {
        self.triggers
            .iter()
            .any(|t| matches!(t.condition, Condition::Pressure { .. }))
    }

    /// Takes note of the machine's pressure totals at `at_ns` (the
    /// stream's clock).
    pub fn observe_pressure(&mut self, at_ns: u64, totals: Pressure) {
        let longest = self
            .triggers
            .iter()
            .filter_map(|t| match t.condition {
                Condition::Pressure { for_ns, .. } => Some(for_ns),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        self.pressure.observe(at_ns, totals, longest);
    }

    /// Whether `signal` is among the triggers.
    pub fn has_signal(&self) -> bool {
        self.triggers
            .iter()
            .any(|t| matches!(t.condition, Condition::Signal))
    }

    /// Whether `history` is among `triggers` (the session judges it).
    pub fn has_history(triggers: &[Trigger]) -> bool {
        triggers
            .iter()
            .any(|t| matches!(t.condition, Condition::History))
    }

    fn add_idle(&mut self, from: u64, to: u64) {
        let mut t = from;
        while t < to {
            let bin = t - t % BIN_NS;
            let end = (bin + BIN_NS).min(to);
            match self.bins.back_mut() {
                Some((b, ns)) if *b == bin => *ns += end - t,
                _ => self.bins.push_back((bin, end - t)),
            }
            t = end;
        }
    }

    /// Takes note of one record, in stream order.
    pub fn observe(&mut self, r: &Record) {
        let time = match r {
            Record::Thread(t) => {
                self.names.insert(t.tid, (t.pid, t.comm.clone()));
                self.interest.remove(&t.tid);
                if t.tid == t.pid && (t.pid == KTHREADD || t.ppid == KTHREADD) {
                    self.kernel_pids.insert(t.pid);
                }
                t.time
            }
            Record::Dispatch(d) => {
                if self.keeps.waiting {
                    if d.prev_tid != 0
                        && matches!(
                            d.prev_state,
                            PrevState::Sleeping | PrevState::DiskSleep | PrevState::Blocked
                        )
                    {
                        self.waiting.entry(d.prev_tid).or_insert((d.time, false));
                    }
                    self.waiting.remove(&d.next_tid);
                }
                if self.keeps.runnable {
                    if d.prev_tid != 0 && d.prev_state == PrevState::Preempted {
                        self.runnable.insert(d.prev_tid, d.time);
                    }
                    self.runnable.remove(&d.next_tid);
                }
                if self.counts_to_idle && d.next_tid == 0 && d.prev_tid != 0 {
                    self.count_to_idle(d.cpu, d.prev_tid);
                }
                if self.keeps.idle {
                    self.idle_at(d);
                }
                d.time
            }
            Record::Wakeup(w) => {
                let waited = self.keeps.waiting && self.waiting.remove(&w.wakee_tid).is_some();
                if self.keeps.runnable && (waited || w.new_thread) {
                    self.runnable.entry(w.wakee_tid).or_insert(w.time);
                }
                if waited && self.longest_convoy > 0 {
                    self.hand_off(w);
                }
                w.time
            }
            Record::Exit(e) => {
                self.interest.remove(&e.tid);
                self.waiting.remove(&e.tid);
                self.runnable.remove(&e.tid);
                self.chains.remove(&e.tid);
                e.time
            }
            _ => return,
        };
        self.first_ns.get_or_insert(time);
        self.now_ns = self.now_ns.max(time);
    }

    /// Takes note of dispatch `d` for the CPUs' idle time (`idle`,
    /// `unclaimed`, `pressure`).
    fn idle_at(&mut self, d: &Dispatch) {
        // idleflow's own threads on an idle CPU leave it idle (they
        // run when the drain wakes, just before every judgement).
        let own = |tid: u32| {
            self.names
                .get(&tid)
                .is_some_and(|(pid, _)| *pid == self.own_pid)
        };
        let next_idle = d.next_tid == 0 || own(d.next_tid);
        let was_idle = d.prev_tid == 0 || own(d.prev_tid);
        let since = self.idle_since.entry(d.cpu).or_insert(None);
        match (*since, next_idle) {
            (Some(_), true) => {}
            (Some(s), false) => {
                *since = None;
                let s = s.max(d.time.saturating_sub(60_000_000_000));
                self.add_idle(s, d.time);
            }
            (None, true) if !was_idle || d.next_tid == 0 => *since = Some(d.time),
            (None, _) => {}
        }
    }

    /// The pool a thread is of: its process and its name's
    /// [`thread_pattern`] stem (None: unnamed, or idleflow's own).
    fn pool(&self, tid: u32) -> Option<(u32, &str)> {
        let (pid, name) = self.names.get(&tid)?;
        (*pid != self.own_pid).then(|| {
            let stem = name.trim_end_matches(|c: char| c.is_ascii_digit());
            (*pid, stem)
        })
    }

    /// Counts a switch of `tid` to idle on `cpu` for each `cpu-idle`
    /// trigger it is of interest to.
    fn count_to_idle(&mut self, cpu: u32, tid: u32) {
        for i in 0..self.triggers.len() {
            if matches!(self.triggers[i].condition, Condition::CpuIdle { .. })
                && self.interested(i, tid)
            {
                let e = &mut self.to_idle[i];
                e.0 += 1;
                e.1 = Some((cpu, tid));
            }
        }
    }

    /// Whether thread `tid` is of interest to trigger `i`'s threads
    /// ([`Policy::of_interest`], remembered per thread: a pattern is not
    /// matched again at each of its switches).
    fn interested(&mut self, i: usize, tid: u32) -> bool {
        let who = match &self.triggers[i].condition {
            Condition::CpuIdle { who } | Condition::Convoy { who, .. } => who,
            _ => return false,
        };
        if i >= 64 {
            return self.of_interest(tid, who);
        }
        let bit = 1u64 << i;
        if let Some(&(known, yes)) = self.interest.get(&tid) {
            if known & bit != 0 {
                return yes & bit != 0;
            }
        }
        let yes = self.of_interest(tid, who);
        let e = self.interest.entry(tid).or_default();
        e.0 |= bit;
        if yes {
            e.1 |= bit;
        }
        yes
    }

    /// Takes note of the wake-up `w` that ended its wakee's wait: its
    /// chain, and the convoys it completes.
    fn hand_off(&mut self, w: &Wakeup) {
        let handed = matches!(w.context, WakeContext::Task | WakeContext::Unknown)
            && w.waker_tid != 0
            && w.waker_tid != w.wakee_tid
            && self
                .pool(w.waker_tid)
                .is_some_and(|p| Some(p) == self.pool(w.wakee_tid));
        if !handed {
            return;
        }
        let mut chain = match self.chains.get(&w.waker_tid) {
            Some((chain, at)) if w.time.saturating_sub(*at) <= CHAIN_GAP_NS => chain.clone(),
            _ => vec![w.waker_tid],
        };
        if let Some(at) = chain.iter().position(|&t| t == w.wakee_tid) {
            chain.drain(..=at);
        }
        chain.push(w.wakee_tid);
        if chain.len() > self.longest_convoy {
            chain.remove(0);
        }
        for i in 0..self.triggers.len() {
            if let Condition::Convoy { threads, .. } = self.triggers[i].condition {
                let k = threads as usize;
                if chain.len() >= k
                    && chain[chain.len() - k..]
                        .iter()
                        .all(|&t| self.interested(i, t))
                {
                    self.convoys[i] = Some(chain[chain.len() - k..].to_vec());
                }
            }
        }
        self.chains.insert(w.wakee_tid, (chain, w.time));
    }

    fn of_interest(&self, tid: u32, who: &Interest) -> bool {
        let Some((pid, name)) = self.names.get(&tid) else {
            return false;
        };
        if *pid == self.own_pid {
            return false;
        }
        match who {
            Interest::Named(g) => g.is_match(name),
            Interest::Target if self.target_pids.is_empty() => !self.kernel_pids.contains(pid),
            Interest::Target => self.target_pids.contains(pid),
        }
    }

    fn waiters(&self, who: &Interest) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .waiting
            .keys()
            .copied()
            .filter(|&t| self.of_interest(t, who))
            .collect();
        v.sort_unstable();
        v
    }

    fn name(&self, tid: u32) -> String {
        match self.names.get(&tid) {
            Some((pid, name)) => format!("{name} (tid {tid}, pid {pid})"),
            None => format!("tid {tid}"),
        }
    }

    /// Idle CPU-ns in `[from, now]`, the CPUs idle now counted to now.
    fn idle_ns_since(&self, from: u64) -> u64 {
        let binned: u64 = self
            .bins
            .iter()
            .filter(|(b, _)| *b + BIN_NS > from)
            .map(|(b, ns)| {
                if *b >= from {
                    *ns
                } else {
                    ns * (b + BIN_NS - from) / BIN_NS
                }
            })
            .sum();
        let open: u64 = self
            .idle_since
            .values()
            .flatten()
            .map(|&s| self.now_ns.saturating_sub(s.max(from)))
            .sum();
        binned + open
    }

    /// Whether trigger `i`'s condition holds at `now`: the state in words.
    /// A `wait>=` holds once per wait (the wait is marked).
    fn holds(&mut self, i: usize, now: u64) -> Option<String> {
        match &self.triggers[i].condition {
            Condition::Signal | Condition::History => None,
            Condition::Convoy { .. } => {
                let chain = self.convoys[i].take()?;
                Some(self.convoy_state(&chain))
            }
            Condition::CpuIdle { .. } => {
                let (cpu, tid) = self.to_idle[i].1.filter(|_| self.to_idle[i].0 > 0)?;
                Some(format!("CPU {cpu} went idle as {} left it", self.name(tid)))
            }
            Condition::Pressure {
                resource,
                at_least_pct,
                for_ns,
                idle_pct,
            } => {
                let stall = self.pressure.stall_pct(*resource, *for_ns)?;
                if stall < *at_least_pct {
                    return None;
                }
                let mut state = format!(
                    "{} stall {stall:.1} % of the last {:.1} s",
                    resource.name(),
                    *for_ns as f64 / 1e9
                );
                if let Some(q) = idle_pct {
                    let first = self.first_ns?;
                    if now.saturating_sub(first) < *for_ns {
                        return None;
                    }
                    let idle = self.idle_ns_since(now - for_ns) as f64 * 100.0
                        / (*for_ns as f64 * self.cpus as f64);
                    if idle < *q {
                        return None;
                    }
                    state.push_str(&format!(", while {idle:.1} % of {} CPUs idle", self.cpus));
                }
                Some(state)
            }
            Condition::Wait { at_least_ns, who } => {
                let (tid, since) = self
                    .waiting
                    .iter()
                    .filter(|(tid, (since, done))| {
                        !done
                            && now.saturating_sub(*since) >= *at_least_ns
                            && self.of_interest(**tid, who)
                    })
                    .min_by_key(|(tid, (since, _))| (*since, **tid))
                    .map(|(tid, (since, _))| (*tid, *since))?;
                if let Some(w) = self.waiting.get_mut(&tid) {
                    w.1 = true;
                }
                Some(format!(
                    "{} waiting {:.0} ms",
                    self.name(tid),
                    now.saturating_sub(since) as f64 / 1e6
                ))
            }
            Condition::Waiting { at_least, who } => {
                let w = self.waiters(who);
                (w.len() >= *at_least as usize).then(|| self.waiters_state(&w))
            }
            Condition::Unclaimed { at_least_ns, who } => {
                let (cpu, idle_since) = self
                    .idle_since
                    .iter()
                    .filter_map(|(cpu, s)| s.map(|s| (*cpu, s)))
                    .filter(|(_, s)| now.saturating_sub(*s) >= *at_least_ns)
                    .min_by_key(|(cpu, s)| (*s, *cpu))?;
                let (tid, runnable_since) = self
                    .runnable
                    .iter()
                    .filter(|(tid, since)| {
                        now.saturating_sub(**since) >= *at_least_ns && self.of_interest(**tid, who)
                    })
                    .min_by_key(|(tid, since)| (**since, **tid))
                    .map(|(tid, since)| (*tid, *since))?;
                Some(format!(
                    "CPU {cpu} idle {:.1} ms while {} runnable {:.1} ms, not on a CPU",
                    now.saturating_sub(idle_since) as f64 / 1e6,
                    self.name(tid),
                    now.saturating_sub(runnable_since) as f64 / 1e6
                ))
            }
            Condition::Idle {
                at_least_pct,
                for_ns,
                waiting,
            } => {
                let first = self.first_ns?;
                if now.saturating_sub(first) < *for_ns {
                    return None;
                }
                let idle = self.idle_ns_since(now - for_ns);
                let pct = idle as f64 * 100.0 / (*for_ns as f64 * self.cpus as f64);
                if pct < *at_least_pct {
                    return None;
                }
                let state = format!(
                    "{pct:.1} % of {} CPUs idle over the last {:.1} s",
                    self.cpus,
                    *for_ns as f64 / 1e9
                );
                let also = match waiting {
                    None => return Some(state),
                    Some((n, who)) => {
                        let w = self.waiters(who);
                        if w.len() < *n as usize {
                            return None;
                        }
                        self.waiters_state(&w)
                    }
                };
                Some(format!("{state}, while {also}"))
            }
        }
    }

    /// Judges every trigger at stream time `now_ns` (at least the latest
    /// record's): the first that fires, if any. A condition that holds
    /// counts once until it stops holding (a `wait>=`: once per wait); its
    /// rate (`every:N`, `once-after:N`) picks which of those fire. Signals
    /// are not judged here.
    pub fn evaluate(&mut self, now_ns: u64) -> Option<Fired> {
        self.now_ns = self.now_ns.max(now_ns);
        let now = self.now_ns;
        let longest = self
            .triggers
            .iter()
            .filter_map(|t| match t.condition {
                Condition::Idle { for_ns, .. } | Condition::Pressure { for_ns, .. } => Some(for_ns),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        while self
            .bins
            .front()
            .is_some_and(|(b, _)| b + BIN_NS + longest < now)
        {
            self.bins.pop_front();
        }
        let mut first = None;
        for i in 0..self.triggers.len() {
            let state = self.holds(i, now);
            // Occurrences since the last judgement: each switch to idle for
            // a `cpu-idle`, else one.
            let n = match self.triggers[i].condition {
                Condition::CpuIdle { .. } => std::mem::take(&mut self.to_idle[i].0),
                _ => 1,
            };
            let per_event = matches!(
                self.triggers[i].condition,
                Condition::Wait { .. } | Condition::CpuIdle { .. }
            );
            let sustain_ns = self.triggers[i].sustain_ns;
            let edge = &mut self.edges[i];
            let Some(mut state) = state else {
                edge.holding = false;
                edge.since = None;
                continue;
            };
            if edge.holding && !per_event {
                continue;
            }
            let since = *edge.since.get_or_insert(now);
            if now - since < sustain_ns {
                continue;
            }
            if sustain_ns > 0 {
                state.push_str(&format!(", for {:.1} s", (now - since) as f64 / 1e9));
            }
            edge.holding = true;
            let before = edge.occurrences;
            edge.occurrences += n;
            let fires = match self.triggers[i].rate {
                Rate::Always => true,
                Rate::Every(k) => before / u64::from(k) != edge.occurrences / u64::from(k),
                Rate::OnceAfter(k) => before < u64::from(k) && edge.occurrences >= u64::from(k),
            };
            if matches!(self.triggers[i].condition, Condition::CpuIdle { .. }) {
                state.push_str(&format!("; {} switches to idle so far", edge.occurrences));
            }
            if fires && first.is_none() {
                first = Some(Fired {
                    trigger: self.triggers[i].spec.clone(),
                    at_ns: now,
                    state,
                });
            }
        }
        first
    }

    /// A convoy in words: its pool, then its threads in turn.
    fn convoy_state(&self, chain: &[u32]) -> String {
        let pool = self
            .names
            .get(&chain[0])
            .map_or_else(|| "?".to_string(), |(_, n)| thread_pattern(n));
        let turn: Vec<String> = chain
            .iter()
            .enumerate()
            .map(|(i, &t)| match (i, self.names.get(&t)) {
                (0, _) => self.name(t),
                (_, Some((_, name))) => format!("{name} (tid {t})"),
                (_, None) => format!("tid {t}"),
            })
            .collect();
        format!(
            "a convoy of {} threads of {pool} in turn, each woken from its wait by the one before: {}",
            chain.len(),
            turn.join(" → ")
        )
    }

    fn waiters_state(&self, tids: &[u32]) -> String {
        let shown: Vec<String> = tids.iter().take(3).map(|&t| self.name(t)).collect();
        format!(
            "{} threads waiting: {}{}",
            tids.len(),
            shown.join(", "),
            if tids.len() > 3 { ", …" } else { "" }
        )
    }
}
