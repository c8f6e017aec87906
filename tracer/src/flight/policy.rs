//! The flight recorder's triggers (the patent's policies): when to look.
//! Each is evaluated on the exact record stream, after every drain batch.
//!
//! The language (`record --trigger SPEC`, repeatable):
//!
//! ```text
//! wait>=DUR [in PATTERN]            a thread of interest has been waiting DUR (once per wait)
//! waiting>=N [for DUR] [in PATTERN] N threads of interest wait at once (for DUR on end)
//! idle>=P% [for DUR] [while waiting>=N|convoy>=K [in PATTERN]]
//!                                   the CPUs were idle P % of the last DUR (default 1s),
//!                                   while N threads of interest wait, or a convoy of K
//!                                   of them goes on
//! io-full>=P% [for DUR] [while idle>=Q%]
//!                                   the machine's pressure stall (PSI): some task stalled
//!                                   on I/O and none ran (`full`) P % of the last DUR
//!                                   (default 1s), while the CPUs were idle Q % of it;
//!                                   also io-some, memory-full, memory-some, cpu-some
//! unclaimed>=DUR [for DUR] [in PATTERN]
//!                                   a CPU idle DUR while a thread of interest has been
//!                                   runnable as long, not on a CPU (for DUR on end)
//! convoy>=K [for DUR] [in PATTERN]  K threads of interest (2–16) woken in turn within
//!                                   2K hand-offs, each while it waited by the one woken
//!                                   before (a lock passed down a queue; for DUR on end)
//! signal                            SIGUSR2 to the recorder
//! ```
//!
//! `for DUR` after `waiting>=N`, `unclaimed>=DUR` or `convoy>=K` is a sustain: the
//! condition must hold at every judgement for DUR before it counts (a
//! dip, even for one drain batch, starts it again); after `idle>=P%` it is
//! the window the share is taken over.
//!
//! Any of them may end in `every:N` (every Nth occurrence fires) or
//! `once-after:N` (only the Nth). An occurrence is the condition coming to
//! hold (it counts again only after it stopped holding); for `wait>=`,
//! each wait that reaches DUR.
//!
//! DUR is `500ms`, `2s`, `1m` (humantime); PATTERN a glob on thread names
//! (`http-nio-*`, `H2 TCP*`: the rest of the trigger), as the kernel keeps
//! them: 15 bytes, so a longer pattern also takes the names of 15 bytes its
//! first 15 bytes match ([`NamePattern`]). Without a PATTERN, the threads of interest are the
//! recorded command's or process's (all threads, when the whole machine is
//! recorded), never idleflow's own. A thread waits from a switch-out in a
//! sleeping state (`S`, `D`, or not runnable) until its wake-up. A
//! hand-off is a thread's wake-up raised by another thread of the same
//! process (not an interrupt) while it waited; a convoy's hand-offs follow
//! one another within [`CONVOY_GAP_NS`] (the holder may wait on other
//! things between, as one that sleeps under a lock does), and it holds
//! while they go on. Two threads waking each other in turn are a ping-pong,
//! not a convoy: K counts distinct threads. The wait path is not compared
//! (the policy sees no stacks): a pipeline of K stages handing work on in
//! turn counts too, which `in PATTERN` (one pool) keeps apart.
//!
//! Invariant: the policy sees records in stream order and judges at
//! stream time: "now" is the latest time the stream reached, never the
//! wall clock, so a condition holds or not on what was recorded.

use std::collections::VecDeque;
use std::time::Duration;

use globset::{Glob, GlobMatcher};
use idleflow_format::{PrevState, Record};
use rustc_hash::{FxHashMap, FxHashSet};

/// Who a trigger watches.
#[derive(Debug, Clone)]
pub enum Interest {
    /// The recorded command's or process's threads (all without one).
    Target,
    /// Threads whose name matches.
    Named(NamePattern),
}

/// The kernel keeps 15 bytes of a thread's name (`TASK_COMM_LEN` - 1).
const COMM_BYTES: usize = 15;

/// A glob on thread names, as the kernel names them: a name of the full
/// 15 bytes may have been cut, so it also matches when the pattern's
/// first 15 bytes do, followed by anything (`http-nio-8080-exec-*` takes
/// `http-nio-8080-e`, the kernel's name of `http-nio-8080-exec-1`).
#[derive(Debug, Clone)]
pub struct NamePattern {
    whole: GlobMatcher,
    /// The pattern's first 15 bytes and `*`, when it is longer.
    cut: Option<GlobMatcher>,
}

impl NamePattern {
    fn new(pattern: &str) -> Result<Self, globset::Error> {
        let whole = Glob::new(pattern)?.compile_matcher();
        let cut = if pattern.len() > COMM_BYTES {
            let mut end = COMM_BYTES;
            while !pattern.is_char_boundary(end) {
                end -= 1;
            }
            // A cut inside a bracket or after a backslash leaves no glob:
            // then only the whole pattern matches.
            Glob::new(&format!("{}*", &pattern[..end]))
                .ok()
                .map(|g| g.compile_matcher())
        } else {
            None
        };
        Ok(NamePattern { whole, cut })
    }

    fn is_match(&self, name: &str) -> bool {
        self.whole.is_match(name)
            || (name.len() == COMM_BYTES && self.cut.as_ref().is_some_and(|c| c.is_match(name)))
    }
}

/// A trigger's condition.
#[derive(Debug, Clone)]
pub enum Condition {
    /// A thread of interest has waited this long.
    Wait { at_least_ns: u64, who: Interest },
    /// This many threads of interest wait at once.
    Waiting { at_least: u32, who: Interest },
    /// The CPUs were idle this share of the last `for_ns`, while
    /// threads of interest wait, or a convoy of them goes on.
    Idle {
        at_least_pct: f64,
        for_ns: u64,
        waiting: Option<While>,
    },
    /// A CPU has been idle this long while a thread of interest has been
    /// runnable (woken or preempted, not on a CPU) as long: unclaimed idle.
    Unclaimed { at_least_ns: u64, who: Interest },
    /// This many distinct threads of interest in turn, each woken while
    /// it waited by the one before, which had been woken so itself.
    Convoy { at_least: u32, who: Interest },
    /// The machine's pressure stall on `resource` was at least this share
    /// of the last `for_ns`, while the CPUs were idle `idle_pct` of it.
    Pressure {
        resource: Stall,
        at_least_pct: f64,
        for_ns: u64,
        idle_pct: Option<f64>,
    },
    /// SIGUSR2 (the recording session raises it).
    Signal,
}

/// A pressure-stall line of the kernel's (`/proc/pressure/RESOURCE`,
/// `some` or `full`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stall {
    /// `cpu-some`: some runnable task waited for a CPU.
    CpuSome,
    /// `io-some`: some task stalled on I/O.
    IoSome,
    /// `io-full`: every non-idle task stalled on I/O at once.
    IoFull,
    /// `memory-some`.
    MemorySome,
    /// `memory-full`.
    MemoryFull,
}

impl Stall {
    fn parse(word: &str) -> Option<Stall> {
        Some(match word {
            "cpu-some" => Stall::CpuSome,
            "io-some" => Stall::IoSome,
            "io-full" => Stall::IoFull,
            "memory-some" => Stall::MemorySome,
            "memory-full" => Stall::MemoryFull,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Stall::CpuSome => "cpu some",
            Stall::IoSome => "io some",
            Stall::IoFull => "io full",
            Stall::MemorySome => "memory some",
            Stall::MemoryFull => "memory full",
        }
    }
}

/// The kernel's pressure stall totals at one moment, µs (`None`: not
/// shown, a kernel without PSI).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pressure {
    /// `cpu` `some`.
    pub cpu_some: Option<u64>,
    /// `io` `some`.
    pub io_some: Option<u64>,
    /// `io` `full`.
    pub io_full: Option<u64>,
    /// `memory` `some`.
    pub memory_some: Option<u64>,
    /// `memory` `full`.
    pub memory_full: Option<u64>,
}

impl Pressure {
    /// The `total=` of the `kind` (`some`, `full`) line of a
    /// `/proc/pressure/*` file.
    pub fn total(text: &str, kind: &str) -> Option<u64> {
        text.lines()
            .find(|l| l.starts_with(kind))?
            .split_whitespace()
            .find_map(|f| f.strip_prefix("total="))?
            .parse()
            .ok()
    }

    fn of(&self, s: Stall) -> Option<u64> {
        match s {
            Stall::CpuSome => self.cpu_some,
            Stall::IoSome => self.io_some,
            Stall::IoFull => self.io_full,
            Stall::MemorySome => self.memory_some,
            Stall::MemoryFull => self.memory_full,
        }
    }
}

/// The longest time between two hand-offs of one convoy, ns: a lock
/// passed down a queue goes on within a critical section's length.
pub const CONVOY_GAP_NS: u64 = 1_000_000_000;

/// The most threads in turn a `convoy>=` trigger may ask for.
const CONVOY_MAX_THREADS: usize = 16;

/// How many of a chain's last wakees are kept: a convoy of K threads is
/// looked for among the last 2K hand-offs (a lock need not go round in
/// order: HotSpot's monitors hand it to the thread queued last).
const CONVOY_KEPT: usize = 2 * CONVOY_MAX_THREADS;

/// How many of a convoy's last threads its state names.
const CONVOY_SHOWN: usize = 6;

/// The chain of hand-offs that ended with a thread's last wake-up.
#[derive(Debug, Clone, Default)]
struct Chain {
    /// Hand-offs in it.
    len: u32,
    /// When the first and the last happened, ns.
    first_ns: u64,
    last_ns: u64,
    /// The threads woken, the last [`CONVOY_KEPT`], oldest first.
    threads: VecDeque<u32>,
}

/// What must hold as well as an `idle>=` trigger's share (`while …`).
#[derive(Debug, Clone)]
pub enum While {
    /// At least this many threads of interest wait (`waiting>=N`).
    Waiting(u32, Interest),
    /// A convoy of this many of them goes on (`convoy>=K`).
    Convoy(u32, Interest),
}

/// Which of a trigger's occurrences fire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rate {
    /// Every one.
    Always,
    /// Every Nth (`every:N`).
    Every(u32),
    /// Only the Nth (`once-after:N`).
    OnceAfter(u32),
}

/// A trigger's occurrences so far, and whether its condition holds.
#[derive(Debug, Clone, Copy, Default)]
struct Edge {
    /// The condition held long enough and counted (until it stops holding).
    holding: bool,
    /// Since when it has held at every judgement (its sustain).
    since: Option<u64>,
    occurrences: u64,
}

/// One `--trigger`: its text and its condition.
#[derive(Debug, Clone)]
pub struct Trigger {
    /// As the user wrote it.
    pub spec: String,
    /// What it means.
    pub condition: Condition,
    /// Which occurrences fire.
    pub rate: Rate,
    /// How long the condition must hold before it counts, ns (`for DUR`
    /// after `waiting>=`/`unclaimed>=`/`convoy>=`; 0: at once).
    pub sustain_ns: u64,
}

/// A trigger that cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("--trigger '{spec}': {why} (e.g. 'wait>=500ms in http-nio-*', 'waiting>=4 for 2s', 'idle>=40% for 2s while waiting>=4', 'unclaimed>=5ms', 'convoy>=4 in pool-*', 'signal', any of them ending in every:N or once-after:N)")]
pub struct TriggerError {
    spec: String,
    why: String,
}

fn duration_ns(s: &str) -> Result<u64, String> {
    humantime::parse_duration(s)
        .map(|d: Duration| d.as_nanos() as u64)
        .map_err(|e| format!("'{s}' is not a duration ({e})"))
}

/// `in PATTERN` (the rest of the words: thread names have spaces, `H2 TCP
/// Server (`), or nothing; and how many words it took.
fn interest(words: &[&str]) -> Result<(Interest, usize), String> {
    match words {
        ["in", pat @ ..] if !pat.is_empty() => {
            let pat = pat.join(" ");
            NamePattern::new(&pat)
                .map(|g| (Interest::Named(g), words.len()))
                .map_err(|e| format!("'{pat}' is not a name pattern ({e})"))
        }
        ["in"] => Err("'in' needs a thread-name pattern".into()),
        _ => Ok((Interest::Target, 0)),
    }
}

/// A share like `40%`.
fn share(p: &str) -> Result<f64, String> {
    p.strip_suffix('%')
        .and_then(|v| v.parse().ok())
        .filter(|v: &f64| (0.0..=100.0).contains(v))
        .ok_or_else(|| format!("'{p}' is not a share like 40%"))
}

/// The K of `convoy>=K`.
fn convoy_threads(k: &str) -> Result<u32, String> {
    k.parse::<u32>()
        .ok()
        .filter(|&k| (2..=CONVOY_MAX_THREADS as u32).contains(&k))
        .ok_or_else(|| {
            format!("'{k}' is not a number of threads in turn (2 to {CONVOY_MAX_THREADS})")
        })
}

fn count(s: &str) -> Result<u32, String> {
    s.parse::<u32>()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("'{s}' is not a positive number of threads"))
}

impl Trigger {
    /// Reads one trigger.
    pub fn parse(spec: &str) -> Result<Trigger, TriggerError> {
        let err = |why: String| TriggerError {
            spec: spec.to_string(),
            why,
        };
        let mut words: Vec<&str> = spec.split_whitespace().collect();
        let mut rate = Rate::Always;
        if let Some(last) = words.last() {
            let n = |v: &str| {
                v.parse::<u32>()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| format!("'{last}' needs a positive count"))
            };
            if let Some(v) = last.strip_prefix("every:") {
                rate = Rate::Every(n(v).map_err(err)?);
                words.pop();
            } else if let Some(v) = last.strip_prefix("once-after:") {
                rate = Rate::OnceAfter(n(v).map_err(err)?);
                words.pop();
            }
        }
        let (first, mut rest) = words.split_first().ok_or_else(|| err("empty".into()))?;
        // `for DUR` right after a sustainable condition.
        let mut sustain_ns = 0;
        if (first.starts_with("waiting>=")
            || first.starts_with("unclaimed>=")
            || first.starts_with("convoy>="))
            && rest.first() == Some(&"for")
        {
            let d = rest
                .get(1)
                .ok_or_else(|| err("'for' needs a duration".into()))?;
            sustain_ns = duration_ns(d).map_err(err)?;
            rest = &rest[2..];
        }
        let (condition, used) = if *first == "signal" {
            (Condition::Signal, 0)
        } else if let Some(d) = first.strip_prefix("wait>=") {
            let (who, n) = interest(rest).map_err(err)?;
            (
                Condition::Wait {
                    at_least_ns: duration_ns(d).map_err(err)?,
                    who,
                },
                n,
            )
        } else if let Some(d) = first.strip_prefix("unclaimed>=") {
            let (who, n) = interest(rest).map_err(err)?;
            (
                Condition::Unclaimed {
                    at_least_ns: duration_ns(d).map_err(err)?,
                    who,
                },
                n,
            )
        } else if let Some((stall, p)) = first
            .split_once(">=")
            .and_then(|(w, p)| Some((Stall::parse(w)?, p)))
        {
            let at_least_pct = share(p).map_err(err)?;
            let mut i = 0;
            let mut for_ns = 1_000_000_000;
            if rest.first() == Some(&"for") {
                let d = rest
                    .get(1)
                    .ok_or_else(|| err("'for' needs a duration".into()))?;
                for_ns = duration_ns(d).map_err(err)?;
                i = 2;
            }
            let mut idle_pct = None;
            if rest.get(i) == Some(&"while") {
                let q = rest
                    .get(i + 1)
                    .and_then(|w| w.strip_prefix("idle>="))
                    .ok_or_else(|| err("'while' needs idle>=Q%".into()))?;
                idle_pct = Some(share(q).map_err(err)?);
                i += 2;
            }
            (
                Condition::Pressure {
                    resource: stall,
                    at_least_pct,
                    for_ns: for_ns.max(1),
                    idle_pct,
                },
                i,
            )
        } else if let Some(k) = first.strip_prefix("convoy>=") {
            let (who, used) = interest(rest).map_err(err)?;
            let at_least = convoy_threads(k).map_err(err)?;
            (Condition::Convoy { at_least, who }, used)
        } else if let Some(n) = first.strip_prefix("waiting>=") {
            let (who, used) = interest(rest).map_err(err)?;
            (
                Condition::Waiting {
                    at_least: count(n).map_err(err)?,
                    who,
                },
                used,
            )
        } else if let Some(p) = first.strip_prefix("idle>=") {
            let pct: f64 = p
                .trim_end_matches('%')
                .parse()
                .ok()
                .filter(|v: &f64| (0.0..=100.0).contains(v) && p.ends_with('%'))
                .ok_or_else(|| err(format!("'{p}' is not a share like 40%")))?;
            let mut i = 0;
            let mut for_ns = 1_000_000_000;
            if rest.first() == Some(&"for") {
                let d = rest
                    .get(1)
                    .ok_or_else(|| err("'for' needs a duration".into()))?;
                for_ns = duration_ns(d).map_err(err)?;
                i = 2;
            }
            let mut waiting = None;
            if rest.get(i) == Some(&"while") {
                let w = rest.get(i + 1).copied().unwrap_or_default();
                let (who, used) = interest(&rest[(i + 2).min(rest.len())..]).map_err(err)?;
                waiting = Some(if let Some(n) = w.strip_prefix("waiting>=") {
                    While::Waiting(count(n).map_err(err)?, who)
                } else if let Some(k) = w.strip_prefix("convoy>=") {
                    While::Convoy(convoy_threads(k).map_err(err)?, who)
                } else {
                    return Err(err("'while' needs waiting>=N or convoy>=K".into()));
                });
                i += 2 + used;
            }
            (
                Condition::Idle {
                    at_least_pct: pct,
                    for_ns: for_ns.max(1),
                    waiting,
                },
                i,
            )
        } else {
            return Err(err(format!("unknown condition '{first}'")));
        };
        if let Some(extra) = rest.get(used) {
            return Err(err(format!("unexpected '{extra}'")));
        }
        Ok(Trigger {
            spec: spec.split_whitespace().collect::<Vec<_>>().join(" "),
            condition,
            rate,
            sustain_ns,
        })
    }
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

/// Idle CPU-time is summed in bins this long, ns.
const BIN_NS: u64 = 10_000_000;

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
    /// Threads waiting now: tid → since when, and whether a `wait>=`
    /// trigger already fired on this wait.
    waiting: FxHashMap<u32, (u64, bool)>,
    /// Threads runnable and not on a CPU: tid → since when.
    runnable: FxHashMap<u32, u64>,
    /// Per thread, the chain of hand-offs its last wake-up ended (only
    /// with a `convoy>=` trigger).
    chains: FxHashMap<u32, Chain>,
    /// Whether hand-offs are followed (a `convoy>=` trigger).
    follows_convoys: bool,
    /// The machine's pressure totals as sampled: (when, totals), oldest
    /// first (only with a pressure trigger).
    pressure: VecDeque<(u64, Pressure)>,
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
}

impl Policy {
    /// A policy of `triggers` for a recording of `cpus` CPUs whose target
    /// is `target_pids` (empty: the whole machine).
    pub fn new(triggers: Vec<Trigger>, cpus: usize, target_pids: &[u32]) -> Self {
        Policy {
            edges: vec![Edge::default(); triggers.len()],
            runnable: FxHashMap::default(),
            chains: FxHashMap::default(),
            pressure: VecDeque::new(),
            follows_convoys: triggers.iter().any(|t| {
                matches!(
                    t.condition,
                    Condition::Convoy { .. }
                        | Condition::Idle {
                            waiting: Some(While::Convoy(..)),
                            ..
                        }
                )
            }),
            triggers,
            target_pids: target_pids.iter().copied().collect(),
            own_pid: std::process::id(),
            names: FxHashMap::default(),
            waiting: FxHashMap::default(),
            idle_since: FxHashMap::default(),
            bins: VecDeque::new(),
            cpus: cpus.max(1),
            first_ns: None,
            now_ns: 0,
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
            .any(|t| !matches!(t.condition, Condition::Signal))
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
        while self
            .pressure
            .get(1)
            .is_some_and(|(t, _)| at_ns.saturating_sub(*t) >= longest)
        {
            self.pressure.pop_front();
        }
        self.pressure.push_back((at_ns, totals));
    }

    /// The share of the last `for_ns` (to the latest sample) that the
    /// machine stalled on `s`, %, once the samples span it.
    fn stall_pct(&self, s: Stall, for_ns: u64) -> Option<f64> {
        let (last_at, last) = self.pressure.back()?;
        let (first_at, first) = self
            .pressure
            .iter()
            .rev()
            .find(|(t, _)| last_at.saturating_sub(*t) >= for_ns)?;
        let stalled_us = last.of(s)?.saturating_sub(first.of(s)?);
        Some(stalled_us as f64 * 1e3 * 100.0 / (last_at - first_at).max(1) as f64)
    }

    /// Whether `signal` is among the triggers.
    pub fn has_signal(&self) -> bool {
        self.triggers
            .iter()
            .any(|t| matches!(t.condition, Condition::Signal))
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
                t.time
            }
            Record::Dispatch(d) => {
                if d.prev_tid != 0
                    && matches!(
                        d.prev_state,
                        PrevState::Sleeping | PrevState::DiskSleep | PrevState::Blocked
                    )
                {
                    self.waiting.entry(d.prev_tid).or_insert((d.time, false));
                }
                if d.prev_tid != 0 && d.prev_state == PrevState::Preempted {
                    self.runnable.insert(d.prev_tid, d.time);
                }
                self.waiting.remove(&d.next_tid);
                self.runnable.remove(&d.next_tid);
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
                d.time
            }
            Record::Wakeup(w) => {
                let waited = self.waiting.remove(&w.wakee_tid).is_some();
                if waited || w.new_thread {
                    self.runnable.entry(w.wakee_tid).or_insert(w.time);
                }
                if waited && self.follows_convoys {
                    self.hand_off(w);
                }
                w.time
            }
            Record::Exit(e) => {
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

    /// A waiting thread's wake-up `w`: a hand-off if another thread of its
    /// process raised it, which extends the chain the waker's own last
    /// wake-up ended (if that went on recently) by the wakee.
    fn hand_off(&mut self, w: &idleflow_format::Wakeup) {
        let (waker, wakee) = (w.waker_tid, w.wakee_tid);
        let same_process = match (self.names.get(&waker), self.names.get(&wakee)) {
            (Some((a, _)), Some((b, _))) => a == b,
            _ => false,
        };
        // Another wake-up (a timer's, a device's) leaves the chain the
        // thread's last hand-off ended: a holder that sleeps under the lock
        // still passes it on.
        if w.context != idleflow_format::WakeContext::Task
            || waker == 0
            || waker == wakee
            || !same_process
        {
            return;
        }
        let mut chain = match self.chains.get(&waker) {
            Some(c) if w.time.saturating_sub(c.last_ns) <= CONVOY_GAP_NS => c.clone(),
            _ => Chain {
                len: 0,
                first_ns: w.time,
                last_ns: w.time,
                threads: VecDeque::new(),
            },
        };
        chain.len += 1;
        chain.last_ns = w.time;
        chain.threads.push_back(wakee);
        if chain.threads.len() > CONVOY_KEPT {
            chain.threads.pop_front();
        }
        self.chains.insert(wakee, chain);
    }

    /// Whether a convoy that goes on at `now` passed through `at_least`
    /// distinct threads of interest in turn, its last hand-offs all among
    /// them (of several, the one with the most hand-offs): the state in
    /// words.
    fn convoy(&self, now: u64, at_least: u32, who: &Interest) -> Option<String> {
        let mut going_on: Vec<&Chain> = self
            .chains
            .values()
            .filter(|c| now.saturating_sub(c.last_ns) <= CONVOY_GAP_NS)
            .collect();
        going_on.sort_unstable_by_key(|c| (std::cmp::Reverse(c.len), c.last_ns));
        going_on
            .into_iter()
            .find_map(|c| self.convoy_of(c, at_least, who))
    }

    /// [`Policy::convoy`] for one chain.
    fn convoy_of(&self, c: &Chain, at_least: u32, who: &Interest) -> Option<String> {
        // The shortest end of the chain with `at_least` distinct wakees,
        // within its last 2 × `at_least` hand-offs (two threads waking
        // each other are never more than two).
        let mut distinct = Vec::new();
        let mut taken = 0;
        for &t in c.threads.iter().rev().take(2 * at_least as usize) {
            if !self.of_interest(t, who) {
                return None;
            }
            taken += 1;
            if !distinct.contains(&t) {
                distinct.push(t);
                if distinct.len() == at_least as usize {
                    break;
                }
            }
        }
        if distinct.len() < at_least as usize {
            return None;
        }
        let threads: Vec<u32> = c
            .threads
            .iter()
            .skip(c.threads.len() - taken)
            .copied()
            .collect();
        let names: Vec<String> = threads
            .iter()
            .rev()
            .take(CONVOY_SHOWN)
            .rev()
            .map(|&t| {
                self.names
                    .get(&t)
                    .map_or_else(|| format!("tid {t}"), |(_, n)| format!("{n} ({t})"))
            })
            .collect();
        let pid = self.names.get(&threads[0]).map_or(0, |(p, _)| *p);
        Some(format!(
            "a convoy of {} hand-offs in {:.1} ms, {} threads in turn (pid {pid}): {}{}",
            c.len,
            (c.last_ns - c.first_ns) as f64 / 1e6,
            distinct.len(),
            if threads.len() > CONVOY_SHOWN {
                "… → "
            } else {
                ""
            },
            names.join(" → ")
        ))
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
            Interest::Target => self.target_pids.is_empty() || self.target_pids.contains(pid),
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
            Condition::Signal => None,
            Condition::Convoy { at_least, who } => self.convoy(now, *at_least, who),
            Condition::Pressure {
                resource,
                at_least_pct,
                for_ns,
                idle_pct,
            } => {
                let stall = self.stall_pct(*resource, *for_ns)?;
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
                    Some(While::Waiting(n, who)) => {
                        let w = self.waiters(who);
                        if w.len() < *n as usize {
                            return None;
                        }
                        self.waiters_state(&w)
                    }
                    Some(While::Convoy(k, who)) => self.convoy(now, *k, who)?,
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
            let per_wait = matches!(self.triggers[i].condition, Condition::Wait { .. });
            let sustain_ns = self.triggers[i].sustain_ns;
            let edge = &mut self.edges[i];
            let Some(mut state) = state else {
                edge.holding = false;
                edge.since = None;
                continue;
            };
            if edge.holding && !per_wait {
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
            edge.occurrences += 1;
            let fires = match self.triggers[i].rate {
                Rate::Always => true,
                Rate::Every(n) => edge.occurrences.is_multiple_of(u64::from(n)),
                Rate::OnceAfter(n) => edge.occurrences == u64::from(n),
            };
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

#[cfg(test)]
mod tests {
    use super::*;
    use idleflow_format::{Dispatch, NodeTag, ThreadInfo, WakeContext, Wakeup};

    const MS: u64 = 1_000_000;

    fn thread(tid: u32, comm: &str) -> Record {
        Record::Thread(ThreadInfo {
            time: 0,
            tid,
            pid: 100,
            ppid: 1,
            comm: comm.into(),
        })
    }

    fn switch(time: u64, cpu: u32, prev: u32, state: PrevState, next: u32) -> Record {
        Record::Dispatch(Dispatch {
            time,
            cpu,
            prev_tid: prev,
            prev_state: state,
            next_tid: next,
            prev_node: NodeTag::Untraced,
        })
    }

    fn wake(time: u64, tid: u32) -> Record {
        Record::Wakeup(Wakeup {
            time,
            cpu: 0,
            waker_tid: 0,
            wakee_tid: tid,
            target_cpu: 0,
            new_thread: false,
            context: WakeContext::Task,
        })
    }

    fn policy(specs: &[&str]) -> Policy {
        let t = specs.iter().map(|s| Trigger::parse(s).unwrap()).collect();
        let mut p = Policy::new(t, 2, &[]);
        p.set_own_pid(1);
        p.observe(&thread(7, "http-nio-1"));
        p.observe(&thread(8, "http-nio-2"));
        p.observe(&thread(9, "gc"));
        p
    }

    #[test]
    fn the_language_reads_and_bad_triggers_say_why() {
        for ok in [
            "wait>=500ms",
            "wait>=2s in http-nio-*",
            "waiting>=6 in H2 TCP Server*",
            "waiting>=4 in pool-*",
            "idle>=40% for 2s while waiting>=4 in http-nio-*",
            "idle>=90%",
            "idle>=30% for 2s while convoy>=4 in pool-*",
            "io-full>=20% for 2s while idle>=40%",
            "memory-some>=5%",
            "waiting>=4 for 2s in pool-*",
            "unclaimed>=5ms for 1s",
            "convoy>=4 in pool-*",
            "convoy>=16",
            "convoy>=4 for 2s in pool-*",
            "signal",
        ] {
            Trigger::parse(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for (bad, why) in [
            ("wait>=soon", "not a duration"),
            ("waiting>=0", "positive number"),
            ("idle>=40", "share like 40%"),
            ("idle>=40% for", "needs a duration"),
            ("wait>=1s in", "needs a thread-name pattern"),
            ("wait>=1s out x", "unexpected 'out'"),
            ("idle>=5% while waiting>=1 in [", "not a name pattern"),
            ("idle>=5% while busy>=1", "needs waiting>=N or convoy>=K"),
            ("io-full>=20", "share like 40%"),
            ("io-full>=20% while waiting>=1", "needs idle>=Q%"),
            ("disk-full>=20%", "unknown condition"),
            ("idle>=5% while convoy>=1", "number of threads in turn"),
            ("cpu>=3", "unknown condition"),
            ("convoy>=1", "number of threads in turn (2 to 16)"),
            ("convoy>=17", "number of threads in turn (2 to 16)"),
        ] {
            let e = Trigger::parse(bad).unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    /// `waker` (a thread) wakes `wakee`.
    fn hand(time: u64, waker: u32, wakee: u32) -> Record {
        Record::Wakeup(Wakeup {
            time,
            cpu: 0,
            waker_tid: waker,
            wakee_tid: wakee,
            target_cpu: 0,
            new_thread: false,
            context: WakeContext::Task,
        })
    }

    /// A policy with pool-1..pool-4 (tids 21–24) and http-nio-1 (7).
    fn pool_policy(specs: &[&str]) -> Policy {
        let mut p = policy(specs);
        for tid in 21..=24 {
            p.observe(&thread(tid, &format!("pool-{}", tid - 20)));
        }
        p
    }

    /// `tid` leaves CPU 0 to wait at `time`.
    fn waits(p: &mut Policy, time: u64, tid: u32) {
        p.observe(&switch(time, 0, tid, PrevState::Sleeping, 0));
    }

    #[test]
    fn a_convoy_fires_once_k_threads_passed_in_turn_and_goes_on_while_they_do() {
        let mut p = pool_policy(&["convoy>=4 in pool-*"]);
        for tid in 22..=24 {
            waits(&mut p, MS, tid);
        }
        // pool-1 wakes pool-2, which wakes pool-3: three threads woken.
        p.observe(&hand(2 * MS, 21, 22));
        p.observe(&hand(3 * MS, 22, 23));
        assert_eq!(p.evaluate(3 * MS), None);
        // pool-3, woken by a timer while it slept under the lock in
        // between, passes it on to pool-4, which wakes pool-1: four.
        waits(&mut p, 4 * MS, 23);
        p.observe(&Record::Wakeup(Wakeup {
            context: WakeContext::HardIrq,
            ..match wake(5 * MS, 23) {
                Record::Wakeup(w) => w,
                _ => unreachable!(),
            }
        }));
        p.observe(&hand(6 * MS, 23, 24));
        assert_eq!(p.evaluate(6 * MS), None);
        waits(&mut p, 7 * MS, 21);
        p.observe(&hand(8 * MS, 24, 21));
        let f = p.evaluate(8 * MS).expect("fired");
        assert_eq!(
            f.state,
            "a convoy of 4 hand-offs in 6.0 ms, 4 threads in turn (pid 100): \
             pool-2 (22) → pool-3 (23) → pool-4 (24) → pool-1 (21)"
        );
        // It goes on (one occurrence), then stops: a second later it no
        // longer holds, and a new one fires again.
        waits(&mut p, 9 * MS, 22);
        p.observe(&hand(10 * MS, 21, 22));
        assert_eq!(p.evaluate(10 * MS), None);
        assert_eq!(p.evaluate(1_100 * MS), None);
        for (i, (a, b)) in [(21, 22), (22, 23), (23, 24), (24, 21)]
            .into_iter()
            .enumerate()
        {
            waits(&mut p, 1_200 * MS, b);
            p.observe(&hand((1_201 + i as u64) * MS, a, b));
        }
        // pool-1's chain had ended more than a second before: a new convoy.
        assert!(p
            .evaluate(1_205 * MS)
            .is_some_and(|f| f.state.starts_with("a convoy of 4 hand-offs in 3.0 ms")));
    }

    #[test]
    fn a_ping_pong_is_no_convoy_nor_are_threads_not_of_interest() {
        let mut p = pool_policy(&["convoy>=3"]);
        for i in 0..20u64 {
            let (a, b) = if i % 2 == 0 { (21, 22) } else { (22, 21) };
            waits(&mut p, (2 * i + 1) * MS, b);
            p.observe(&hand((2 * i + 2) * MS, a, b));
        }
        assert_eq!(p.evaluate(40 * MS), None, "two threads in turn");
        // A thread that started them, in the chain's first hand-off, does
        // not make a third.
        let mut started = pool_policy(&["convoy>=3"]);
        for (t, (a, b)) in [(7, 21), (21, 22), (22, 21), (21, 22)]
            .into_iter()
            .enumerate()
        {
            waits(&mut started, 10 * MS, b);
            started.observe(&hand((11 + t as u64) * MS, a, b));
        }
        assert_eq!(started.evaluate(15 * MS), None);
        // Two in turn is a convoy of two.
        let mut two = pool_policy(&["convoy>=2"]);
        waits(&mut two, MS, 22);
        two.observe(&hand(2 * MS, 21, 22));
        assert_eq!(two.evaluate(2 * MS), None);
        waits(&mut two, 3 * MS, 21);
        two.observe(&hand(4 * MS, 22, 21));
        assert!(two.evaluate(4 * MS).is_some());
        // Idle while a convoy goes on: both must hold.
        let mut idle = pool_policy(&["idle>=50% for 10ms while convoy>=2 in pool-*"]);
        idle.observe(&switch(0, 0, 9, PrevState::Sleeping, 0));
        idle.observe(&switch(0, 1, 9, PrevState::Sleeping, 0));
        assert_eq!(idle.evaluate(20 * MS), None, "idle, no convoy");
        waits(&mut idle, 21 * MS, 22);
        idle.observe(&hand(22 * MS, 21, 22));
        waits(&mut idle, 23 * MS, 21);
        idle.observe(&hand(24 * MS, 22, 21));
        assert!(idle.evaluate(25 * MS).is_some_and(|f| f
            .state
            .contains("idle over the last 0.0 s, while a convoy of 2 hand-offs")));
        // With a sustain: once it went on that long.
        let mut sustained = pool_policy(&["convoy>=2 for 5ms"]);
        waits(&mut sustained, MS, 22);
        sustained.observe(&hand(2 * MS, 21, 22));
        waits(&mut sustained, 3 * MS, 21);
        sustained.observe(&hand(4 * MS, 22, 21));
        assert_eq!(sustained.evaluate(4 * MS), None);
        assert_eq!(sustained.evaluate(8 * MS), None);
        assert!(sustained
            .evaluate(9 * MS)
            .is_some_and(|f| f.state.ends_with(", for 0.0 s")));
        // gc (9) is in the chain: not a convoy of pool-*.
        let mut q = pool_policy(&["convoy>=3 in pool-*"]);
        for (t, (a, b)) in [(21, 9), (9, 22), (22, 23)].into_iter().enumerate() {
            waits(&mut q, 10 * MS, b);
            q.observe(&hand((11 + t as u64) * MS, a, b));
        }
        assert_eq!(q.evaluate(14 * MS), None);
        // An interrupt's wake-up is no hand-off (the thread it hit is no
        // waker).
        let mut r = pool_policy(&["convoy>=3"]);
        waits(&mut r, MS, 22);
        r.observe(&hand(2 * MS, 21, 22));
        waits(&mut r, 3 * MS, 23);
        r.observe(&hand(4 * MS, 22, 23));
        waits(&mut r, 5 * MS, 24);
        r.observe(&Record::Wakeup(Wakeup {
            context: WakeContext::SoftIrq,
            ..match hand(6 * MS, 23, 24) {
                Record::Wakeup(w) => w,
                _ => unreachable!(),
            }
        }));
        assert_eq!(r.evaluate(6 * MS), None);
    }

    #[test]
    fn io_pressure_fires_on_the_stall_share_while_the_cpus_idle() {
        let text = "some avg10=0.00 avg60=0.07 avg300=0.10 total=92186424\n\
                    full avg10=0.00 avg60=0.06 avg300=0.07 total=68605484\n";
        assert_eq!(Pressure::total(text, "full"), Some(68_605_484));
        assert_eq!(Pressure::total(text, "some"), Some(92_186_424));
        assert_eq!(Pressure::total("", "full"), None);
        let at = |io_full: u64| Pressure {
            io_full: Some(io_full),
            ..Default::default()
        };
        let mut p = policy(&["io-full>=20% for 100ms while idle>=50%"]);
        assert!(p.wants_pressure());
        // Both CPUs idle from 0 on.
        p.observe(&switch(0, 0, 9, PrevState::Sleeping, 0));
        p.observe(&switch(0, 1, 9, PrevState::Sleeping, 0));
        // 10 ms stalled in each 50 ms: 20 %, once a window is covered.
        for (i, total_us) in [0, 10_000, 20_000].into_iter().enumerate() {
            p.observe_pressure(i as u64 * 50 * MS, at(total_us));
        }
        let f = p.evaluate(100 * MS).expect("fired");
        assert_eq!(
            f.state,
            "io full stall 20.0 % of the last 0.1 s, while 100.0 % of 2 CPUs idle"
        );
        // Less than that: nothing.
        let mut q = policy(&["io-full>=20% for 100ms"]);
        for (i, total_us) in [0, 5_000, 15_000].into_iter().enumerate() {
            q.observe_pressure(i as u64 * 50 * MS, at(total_us));
        }
        assert_eq!(q.evaluate(100 * MS), None);
        // Busy CPUs: nothing either.
        let mut busy = policy(&["io-full>=20% for 100ms while idle>=50%"]);
        busy.observe(&switch(0, 0, 0, PrevState::Preempted, 9));
        busy.observe(&switch(0, 1, 0, PrevState::Preempted, 8));
        for (i, total_us) in [0, 50_000, 100_000].into_iter().enumerate() {
            busy.observe_pressure(i as u64 * 50 * MS, at(total_us));
        }
        assert_eq!(busy.evaluate(100 * MS), None);
    }

    #[test]
    fn a_pattern_longer_than_the_kernels_names_takes_the_names_it_cut() {
        let p = NamePattern::new("http-nio-8080-exec-*").unwrap();
        // `http-nio-8080-exec-1` as the kernel keeps it.
        assert!(p.is_match("http-nio-8080-e"));
        assert!(p.is_match("http-nio-8080-exec-1"));
        assert!(!p.is_match("http-nio-8080-P"), "the Poller");
        assert!(
            !p.is_match("http-nio-8080-"),
            "a name of 14 bytes was not cut"
        );
        let short = NamePattern::new("H2 TCP*").unwrap();
        assert!(short.is_match("H2 TCP Server ("));
        assert!(!short.is_match("H2 Log Writer D"));
        let mut q = policy(&["waiting>=2 in http-nio-8080-exec-*"]);
        q.observe(&thread(31, "http-nio-8080-e"));
        q.observe(&thread(32, "http-nio-8080-e"));
        q.observe(&thread(33, "http-nio-8080-P"));
        q.observe(&switch(MS, 0, 31, PrevState::Sleeping, 0));
        q.observe(&switch(MS, 1, 33, PrevState::Sleeping, 0));
        assert_eq!(q.evaluate(MS), None);
        q.observe(&switch(2 * MS, 1, 32, PrevState::Sleeping, 0));
        assert!(q
            .evaluate(2 * MS)
            .is_some_and(|f| f.state.starts_with("2 threads waiting")));
    }

    #[test]
    fn a_wait_fires_once_when_it_reaches_its_length_and_only_for_threads_of_interest() {
        let mut p = policy(&["wait>=500ms in http-nio-*"]);
        p.observe(&switch(10 * MS, 0, 9, PrevState::Sleeping, 0)); // gc: not of interest
        p.observe(&switch(20 * MS, 1, 7, PrevState::Sleeping, 0));
        assert_eq!(p.evaluate(400 * MS), None);
        let f = p.evaluate(520 * MS).expect("fired");
        assert_eq!(f.at_ns, 520 * MS);
        assert!(
            f.state
                .starts_with("http-nio-1 (tid 7, pid 100) waiting 500 ms"),
            "{}",
            f.state
        );
        // Once per wait.
        assert_eq!(p.evaluate(900 * MS), None);
        // Woken, then a new wait of another thread: a preempted one is not waiting.
        p.observe(&wake(950 * MS, 7));
        p.observe(&switch(960 * MS, 1, 8, PrevState::Preempted, 0));
        assert_eq!(p.evaluate(2_000 * MS), None);
    }

    #[test]
    fn a_condition_counts_once_while_it_holds_and_its_rate_picks_what_fires() {
        // Holding for several batches is one occurrence.
        let mut p = policy(&["waiting>=1 in http-nio-*"]);
        p.observe(&switch(10 * MS, 0, 7, PrevState::Sleeping, 0));
        assert!(p.evaluate(11 * MS).is_some());
        assert_eq!(p.evaluate(12 * MS), None, "still the same occurrence");
        // every:2 fires on the 2nd and 4th occurrence; once-after:3 on the 3rd only.
        let mut every = policy(&["waiting>=1 in http-nio-* every:2"]);
        let mut once = policy(&["waiting>=1 in http-nio-* once-after:3"]);
        let (mut e, mut o) = (Vec::new(), Vec::new());
        for i in 0..5u64 {
            let t = 100 * MS * (i + 1);
            for (p, fired) in [(&mut every, &mut e), (&mut once, &mut o)] {
                p.observe(&switch(t, 0, 7, PrevState::Sleeping, 0));
                if p.evaluate(t + MS).is_some() {
                    fired.push(i + 1);
                }
                p.observe(&wake(t + 2 * MS, 7));
                assert_eq!(p.evaluate(t + 3 * MS), None);
            }
        }
        assert_eq!(e, [2, 4]);
        assert_eq!(o, [3]);
        assert!(Trigger::parse("waiting>=1 every:0").is_err());
    }

    #[test]
    fn unclaimed_idle_is_a_cpu_idle_while_a_thread_waits_for_one() {
        let mut p = policy(&["unclaimed>=5ms"]);
        p.observe(&switch(0, 1, 9, PrevState::Sleeping, 0)); // CPU 1 idle from 0
        p.observe(&switch(0, 0, 0, PrevState::Unknown, 8)); // CPU 0 runs 8
        p.observe(&switch(MS, 0, 8, PrevState::Preempted, 7)); // 8 runnable from 1 ms
        assert_eq!(p.evaluate(4 * MS), None, "runnable 3 ms only");
        // idleflow's own thread (pid 1 here) running on the idle CPU leaves it idle.
        p.observe(&Record::Thread(ThreadInfo {
            time: 0,
            tid: 50,
            pid: 1,
            ppid: 0,
            comm: "idleflow-drain".into(),
        }));
        p.observe(&switch(5 * MS, 1, 0, PrevState::Unknown, 50));
        p.observe(&switch(5 * MS + 100_000, 1, 50, PrevState::Sleeping, 0));
        let f = p.evaluate(6 * MS).expect("fired");
        assert!(
            f.state
                .starts_with("CPU 1 idle 6.0 ms while http-nio-2 (tid 8, pid 100) runnable 5.0 ms"),
            "{}",
            f.state
        );
        // Dispatched: no longer.
        p.observe(&switch(7 * MS, 1, 0, PrevState::Unknown, 8));
        assert_eq!(p.evaluate(20 * MS), None);
    }

    #[test]
    fn a_sustained_condition_counts_once_it_held_at_every_judgement_for_its_duration() {
        let t = Trigger::parse("waiting>=2 for 50ms in http-nio-*").unwrap();
        assert_eq!(t.sustain_ns, 50 * MS);
        assert!(Trigger::parse("waiting>=2 for").is_err());
        assert!(
            Trigger::parse("wait>=2s for 1s").is_err(),
            "a wait is a length already"
        );
        let mut p = policy(&["waiting>=2 for 50ms in http-nio-*"]);
        p.observe(&switch(10 * MS, 0, 7, PrevState::Sleeping, 0));
        p.observe(&switch(10 * MS, 1, 8, PrevState::Sleeping, 0));
        assert_eq!(p.evaluate(20 * MS), None, "holds since 20 ms");
        assert_eq!(p.evaluate(60 * MS), None, "40 ms");
        // A dip at one judgement starts the sustain again.
        p.observe(&wake(61 * MS, 8));
        p.observe(&switch(62 * MS, 1, 0, PrevState::Unknown, 8));
        assert_eq!(p.evaluate(65 * MS), None, "one waiter");
        p.observe(&switch(66 * MS, 1, 8, PrevState::Sleeping, 0));
        assert_eq!(p.evaluate(70 * MS), None, "holds again since 70 ms");
        assert_eq!(p.evaluate(110 * MS), None, "40 ms");
        let f = p.evaluate(120 * MS).expect("50 ms held");
        assert!(f.state.ends_with(", for 0.1 s"), "{}", f.state);
        assert_eq!(f.at_ns, 120 * MS);
        assert_eq!(p.evaluate(200 * MS), None, "counted once while it holds");
    }

    #[test]
    fn waiting_threads_are_counted_at_once() {
        let mut p = policy(&["waiting>=2 in http-nio-*"]);
        p.observe(&switch(10 * MS, 0, 7, PrevState::Sleeping, 0));
        assert_eq!(p.evaluate(11 * MS), None);
        p.observe(&switch(12 * MS, 1, 8, PrevState::DiskSleep, 0));
        let f = p.evaluate(13 * MS).expect("fired");
        assert!(
            f.state.starts_with("2 threads waiting: http-nio-1"),
            "{}",
            f.state
        );
        p.observe(&switch(14 * MS, 1, 0, PrevState::Unknown, 8));
        assert_eq!(p.evaluate(15 * MS), None);
    }

    #[test]
    fn idle_share_over_a_window_with_waiters() {
        let mut p = policy(&["idle>=40% for 1s while waiting>=1 in http-nio-*"]);
        // CPU 0 busy throughout, CPU 1 idle from 0.2 s: 40 % at 1 s... from 1 s on.
        p.observe(&switch(0, 0, 0, PrevState::Unknown, 9));
        p.observe(&switch(0, 1, 0, PrevState::Unknown, 7));
        p.observe(&switch(200 * MS, 1, 7, PrevState::Sleeping, 0));
        assert_eq!(p.evaluate(900 * MS), None, "not a whole window yet");
        // 0.8 s of 2 CPU-s at 1 s: 40 %.
        let f = p.evaluate(1_000 * MS).expect("fired");
        assert!(f.state.starts_with("40.0 % of 2 CPUs idle"), "{}", f.state);
        assert!(
            f.state.contains("1 threads waiting: http-nio-1"),
            "{}",
            f.state
        );
        // The waiter woke: the idle alone does not fire.
        p.observe(&wake(1_100 * MS, 7));
        assert_eq!(p.evaluate(1_200 * MS), None);
        // Without waiters asked for, and the CPU busy again: the share falls.
        let mut q = policy(&["idle>=60% for 1s"]);
        q.observe(&switch(0, 0, 0, PrevState::Unknown, 9));
        q.observe(&switch(0, 1, 7, PrevState::Sleeping, 0));
        assert_eq!(q.evaluate(1_000 * MS), None, "50 %");
        q.observe(&switch(1_000 * MS, 0, 9, PrevState::Sleeping, 0));
        assert!(q.evaluate(1_500 * MS).is_some(), "75 % of the last second");
    }
}
