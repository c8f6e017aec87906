//! Dispatch accounting: the device-driver algorithm of `ARCHITECTURE.md`,
//! written once as a pure state machine (no I/O, no clock, no kernel).
//!
//! Feed it the dispatches, wakeups and losses of a recording in global time
//! order ([`Accounting::dispatch`], [`Accounting::wakeup`],
//! [`Accounting::lost`]) and close the window with [`Accounting::finish`].
//! It keeps, per CPU, the dispatches to and from idle, the idle time and the
//! stream breaks; per thread, the work-area counters (`last_cpu`,
//! `idle_on_cpu`, `total_idle`, `dip`, `idle`) and the blocked-thread
//! statistics of the patent's table. Each call returns what happened at that
//! point (an idle interval closed, a trace record's deltas, a break) so that
//! callers can build distributions and attributions without keeping history.
//!
//! Invariants:
//! - Time on a CPU is accounted exactly once: between the window start and
//!   `finish`, every nanosecond of every CPU is in exactly one of `idle_ns`,
//!   `busy_ns` (running a thread) or `unknown_ns` (after a stream break).
//!   So idle time is known to lie in `[idle_ns, idle_ns + unknown_ns]`.
//! - A break (the thread that leaves a CPU is not the one that last got it)
//!   is counted, never repaired by guessing: the time since the CPU's last
//!   dispatch becomes unknown and no idle interval or timeslice spanning the
//!   break is recorded.

use idleflow_format::{Dispatch, PrevState, Wakeup, IDLE_TID};
use rustc_hash::FxHashMap;
use serde::Serialize;

/// Per-CPU counters.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CpuAccount {
    /// CPU number.
    pub cpu: u32,
    /// Dispatches on this CPU.
    pub dispatches: u64,
    /// Dispatches that left the CPU idle (`next` is the idle task).
    pub idle_dispatches_to: u64,
    /// Dispatches out of idle (`prev` is the idle task): the patent's
    /// per-processor idle count.
    pub idle_dispatches_from: u64,
    /// Idle time, ns.
    pub idle_ns: u64,
    /// Time running threads, ns.
    pub busy_ns: u64,
    /// Time the stream cannot account for after a break, ns.
    pub unknown_ns: u64,
    /// Continuity breaks: the thread leaving was not the one that got the CPU last.
    pub breaks: u64,
    /// Records the kernel dropped for this CPU.
    pub lost: u64,
    /// Switch-ins of threads that had left a CPU not runnable and whose
    /// wakeup was never seen (raised where the kernel reports nothing, e.g.
    /// on an idle CPU 1 here): counted, not invented; their wait counts as
    /// blocked up to the switch-in.
    pub unseen_wakeups: u64,
    /// Who has the CPU now, `None` before the first dispatch seen.
    #[serde(skip)]
    current: Option<u32>,
    /// Since when `current` has it (window start before the first dispatch).
    #[serde(skip)]
    since: u64,
    /// The thread whose leaving started the current idle interval, and why it left.
    #[serde(skip)]
    idle_cause: Option<(u32, PrevState)>,
    /// Whether the current interval began at a known dispatch (not a window edge or break).
    #[serde(skip)]
    since_known: bool,
    /// Index of the current thread in `Accounting::threads` (not for idle).
    #[serde(skip)]
    current_slot: Option<usize>,
    /// Records were lost since the last dispatch: the next one ends an
    /// unknown span even if it looks continuous.
    #[serde(skip)]
    lost_since: bool,
}

/// Per-thread work area and blocked-thread statistics.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ThreadAccount {
    /// Thread id.
    pub tid: u32,
    /// CPU of the last switch-in.
    pub last_cpu: Option<u32>,
    /// That CPU's dispatches from idle at the last switch-in.
    pub idle_on_cpu: u64,
    /// The total dispatches from idle at the last switch-in.
    pub total_idle: u64,
    /// Running sum of `cpu_delta`: dispatches from idle on the thread's CPU while it was away (DIP).
    pub dip: u64,
    /// Running sum of `total_delta`: dispatches from idle on all CPUs while it was away (IDLE).
    pub idle: u64,
    /// Time on a CPU, ns.
    pub runtime_ns: u64,
    /// Times dispatched.
    pub timeslices: u64,
    /// Longest time on a CPU in one go, ns.
    pub max_timeslice_ns: u64,
    /// Times it left a CPU not runnable (sleeping, waiting for I/O, …).
    pub non_runnable: u64,
    /// Times it was preempted while runnable.
    pub preempted: u64,
    /// Time runnable but not running (preempted, or woken and not yet dispatched), ns.
    pub runnable_wait_ns: u64,
    /// Time not runnable (blocked, sleeping), ns.
    pub blocked_ns: u64,
    #[serde(skip)]
    running: Option<(u32, u64)>,
    #[serde(skip)]
    off: Option<(u64, PrevState)>,
    #[serde(skip)]
    woken_at: Option<u64>,
    /// A waking of it seen while it still ran (see [`WAKE_BEFORE_BLOCK_NS`]).
    #[serde(skip)]
    woken_running: Option<u64>,
    /// Its last wait was woken before its switch-out's record: from that
    /// waking to the switch-out within [`WAKE_BEFORE_BLOCK_NS`].
    #[serde(skip)]
    woken_before_off: bool,
}

/// How long before a thread's non-runnable switch-out a waking of it can
/// be stamped and still be the one that ends that wait. The kernel takes a
/// thread off its run queue early in `__schedule` and raises `sched_switch`
/// only after it picked the next thread; a `try_to_wake_up` on another CPU
/// in between raises `sched_waking` (the thread was asleep), waits for the
/// switch to finish and queues it again. So the waking's record comes
/// first, stamped up to tens of µs before the switch-out's (≤ 37 µs, median
/// 1.5 µs, in 770 of them on a pipe ping-pong here); without this rule each
/// counted as a wait whose wake-up was never seen.
pub const WAKE_BEFORE_BLOCK_NS: u64 = 1_000_000;

impl ThreadAccount {
    /// Ends the time off a CPU at `until` (a switch-in or the window's end):
    /// preempted time is runnable; time after a non-runnable switch-out is
    /// blocked up to the wakeup, if one was seen, and runnable after it.
    /// Returns whether the thread had left not runnable and no wakeup of it
    /// was seen (its wait then counts as blocked up to `until`).
    fn end_off_cpu(&mut self, until: u64) -> bool {
        let mut unseen = false;
        if let Some((off, state)) = self.off.take() {
            match (state.is_runnable(), self.woken_at) {
                (true, _) => {
                    self.runnable_wait_ns = self
                        .runnable_wait_ns
                        .saturating_add(until.saturating_sub(off))
                }
                (false, Some(w)) => {
                    self.blocked_ns = self.blocked_ns.saturating_add(w.saturating_sub(off));
                    self.runnable_wait_ns = self
                        .runnable_wait_ns
                        .saturating_add(until.saturating_sub(w));
                }
                (false, None) if self.woken_before_off => {
                    // Woken as it left: runnable from its switch-out on.
                    self.runnable_wait_ns = self
                        .runnable_wait_ns
                        .saturating_add(until.saturating_sub(off))
                }
                (false, None) => {
                    self.blocked_ns = self.blocked_ns.saturating_add(until.saturating_sub(off));
                    unseen = true;
                }
            }
        }
        self.woken_at = None;
        self.woken_before_off = false;
        unseen
    }
}

/// An idle interval that ended (or was cut by the end of the window).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdleInterval {
    /// CPU.
    pub cpu: u32,
    /// Start, ns.
    pub start: u64,
    /// End, ns.
    pub end: u64,
    /// Both ends are dispatches (not a window edge).
    pub complete: bool,
    /// The thread whose leaving began it, and why it left (`None` at the window start).
    pub caused_by: Option<(u32, PrevState)>,
}

/// The patent's trace record: what a dispatch of a thread adds to its work area.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceRecord {
    /// Time of the dispatch, ns.
    pub time: u64,
    /// Thread dispatched.
    pub tid: u32,
    /// CPU it was dispatched on.
    pub cpu: u32,
    /// Dispatches from idle on this CPU since it last ran here (0 if it last ran elsewhere).
    pub cpu_delta: u64,
    /// Dispatches from idle on all CPUs since it last ran.
    pub total_delta: u64,
}

/// What one dispatch did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DispatchOutcome {
    /// The dispatch left its CPU idle.
    pub to_idle: bool,
    /// The idle interval this dispatch closed, if it was a dispatch from idle.
    pub closed_idle: Option<IdleInterval>,
    /// The work-area update of the dispatched thread (not for the idle task).
    pub trace: Option<TraceRecord>,
    /// The dispatch did not continue its CPU's stream: `(cpu, unknown ns)`.
    pub broke: Option<(u32, u64)>,
    /// On a break: the thread whose leaving had made the CPU idle and why,
    /// for an idle interval whose end the break hides (so it is never
    /// reported as [`DispatchOutcome::closed_idle`]).
    pub abandoned_cause: Option<(u32, PrevState)>,
}

/// The dispatch-accounting state machine. See the module documentation.
#[derive(Debug)]
pub struct Accounting {
    start_ns: u64,
    /// CPU number → index in `cpus` (`usize::MAX`: not seen yet).
    cpu_index: Vec<usize>,
    cpus: Vec<CpuAccount>,
    total_idle: u64,
    /// Every thread seen, in order of first sight; `thread_index` maps tids here.
    threads: Vec<ThreadAccount>,
    thread_index: FxHashMap<u32, usize>,
    finished: bool,
}

impl Accounting {
    /// Starts accounting for `cpus` at the window start `start_ns`.
    pub fn new(cpus: &[u32], start_ns: u64) -> Self {
        Accounting {
            start_ns,
            cpu_index: {
                let mut v = vec![usize::MAX; cpus.iter().max().map_or(0, |&m| m as usize + 1)];
                for (i, &c) in cpus.iter().enumerate() {
                    v[c as usize] = i;
                }
                v
            },
            cpus: cpus
                .iter()
                .map(|&cpu| CpuAccount {
                    cpu,
                    since: start_ns,
                    ..Default::default()
                })
                .collect(),
            total_idle: 0,
            threads: Vec::new(),
            thread_index: FxHashMap::default(),
            finished: false,
        }
    }

    /// Per-CPU counters, in the order the CPUs were given.
    pub fn cpus(&self) -> &[CpuAccount] {
        &self.cpus
    }

    /// Dispatches from idle on all CPUs so far (the patent's total idle count).
    pub fn total_idle(&self) -> u64 {
        self.total_idle
    }

    /// Every thread seen so far.
    pub fn threads(&self) -> impl Iterator<Item = &ThreadAccount> {
        self.threads.iter()
    }

    /// One thread's counters.
    pub fn thread(&self, tid: u32) -> Option<&ThreadAccount> {
        self.thread_index.get(&tid).map(|&i| &self.threads[i])
    }

    /// Window start, ns.
    pub fn start_ns(&self) -> u64 {
        self.start_ns
    }

    /// The index of `cpu` in [`Accounting::cpus`], adding it if new.
    #[inline]
    pub fn cpu_slot(&mut self, cpu: u32) -> usize {
        let c = cpu as usize;
        if let Some(&i) = self.cpu_index.get(c) {
            if i != usize::MAX {
                return i;
            }
        }
        if self.cpu_index.len() <= c {
            self.cpu_index.resize(c + 1, usize::MAX);
        }
        // A CPU not announced at the start (hot-plugged): account from the window start.
        let n = self.cpus.len();
        self.cpu_index[c] = n;
        self.cpus.push(CpuAccount {
            cpu,
            since: self.start_ns,
            ..Default::default()
        });
        n
    }

    fn cpu_mut(&mut self, cpu: u32) -> &mut CpuAccount {
        let i = self.cpu_slot(cpu);
        &mut self.cpus[i]
    }

    /// The index of `tid` in `threads`, adding it (with its work area
    /// starting at `total_idle`) on first sight.
    fn thread_slot(&mut self, tid: u32, total_idle: u64) -> usize {
        let n = self.threads.len();
        let i = *self.thread_index.entry(tid).or_insert(n);
        if i == n {
            self.threads.push(ThreadAccount {
                tid,
                total_idle,
                ..Default::default()
            });
        }
        i
    }

    /// The kernel dropped `count` records of `cpu`'s stream: the span from
    /// the last dispatch before them to the next one after them is unknown
    /// (a break), even if the next dispatch happens to look continuous —
    /// lost records never become idle or busy time.
    pub fn lost(&mut self, cpu: u32, count: u64) {
        let c = self.cpu_mut(cpu);
        c.lost = c.lost.saturating_add(count);
        if count > 0 {
            c.lost_since = true;
        }
    }

    /// A dispatch before the window start (`start_ns`): nothing is
    /// accounted, but who got the CPU is kept, so that the CPU's first
    /// dispatch inside the window is checked for continuity against it. A
    /// window that starts inside a stream break then counts the time from
    /// its edge as unknown, as the whole recording does, instead of as the
    /// first dispatch's `prev` running since the edge.
    pub fn before_window(&mut self, d: &Dispatch) {
        let c = self.cpu_mut(d.cpu);
        if c.dispatches == 0 {
            c.current = Some(d.next_tid);
            c.lost_since = false;
        }
    }

    /// Records of `cpu` lost before the window start: its first dispatch
    /// inside the window is a break (see [`Accounting::before_window`]).
    pub fn lost_before_window(&mut self, cpu: u32) {
        let c = self.cpu_mut(cpu);
        if c.dispatches == 0 {
            c.current = None;
            c.lost_since = true;
        }
    }

    /// A thread was made runnable.
    pub fn wakeup(&mut self, w: &Wakeup) {
        if let Some(t) = self
            .thread_index
            .get(&w.wakee_tid)
            .map(|&i| &mut self.threads[i])
        {
            match t.off {
                Some((off, _)) if t.woken_at.is_none() && w.time >= off => {
                    t.woken_at = Some(w.time);
                }
                Some(_) => {}
                None if t.running.is_some() => t.woken_running = Some(w.time),
                None => {}
            }
        }
    }

    /// Accounts one dispatch. Dispatches must come in global time order.
    #[inline]
    pub fn dispatch(&mut self, d: &Dispatch) -> DispatchOutcome {
        let total_idle_before = self.total_idle;
        let mut out = DispatchOutcome::default();
        let t = d.time;
        let ci = self.cpu_slot(d.cpu);
        let c = &mut self.cpus[ci];
        c.dispatches += 1;
        let continuous = match c.current {
            None => !c.lost_since, // first dispatch: `prev` had the CPU since before the window
            Some(cur) => cur == d.prev_tid && !c.lost_since,
        };
        c.lost_since = false;
        let span = t.saturating_sub(c.since);
        let mut prev_slice_known = continuous;
        if !continuous {
            c.breaks += 1;
            c.unknown_ns = c.unknown_ns.saturating_add(span);
            out.broke = Some((d.cpu, span));
            out.abandoned_cause = c.idle_cause.take();
            // The slice of whoever we last saw get the CPU ended at an unknown time.
            if let Some(cur) = c.current {
                if cur != IDLE_TID {
                    if let Some(th) = self.thread_index.get(&cur).map(|&i| &mut self.threads[i]) {
                        if th.running.is_some_and(|(rc, _)| rc == d.cpu) {
                            th.running = None;
                        }
                    }
                }
            }
            prev_slice_known = false;
        }

        // 1. prev is idle: a dispatch from idle.
        if d.prev_tid == IDLE_TID && d.next_tid != IDLE_TID {
            let c = &mut self.cpus[ci];
            c.idle_dispatches_from += 1;
            if continuous {
                c.idle_ns = c.idle_ns.saturating_add(span);
            }
            let interval = IdleInterval {
                cpu: d.cpu,
                start: c.since,
                end: t,
                complete: continuous && c.since_known,
                caused_by: if continuous { c.idle_cause } else { None },
            };
            c.idle_cause = None;
            self.total_idle += 1;
            if continuous {
                out.closed_idle = Some(interval);
            }
        }

        // Switch-out of prev (a thread).
        if d.prev_tid != IDLE_TID {
            if continuous {
                self.cpus[ci].busy_ns = self.cpus[ci].busy_ns.saturating_add(span);
            }
            // The thread leaving is the one the CPU's last dispatch gave it to.
            let slot = match self.cpus[ci].current_slot {
                Some(i) if continuous && self.threads[i].tid == d.prev_tid => i,
                _ => self.thread_slot(d.prev_tid, total_idle_before),
            };
            let th = &mut self.threads[slot];
            if let Some((rc, since)) = th.running.take() {
                if prev_slice_known && rc == d.cpu {
                    let slice = t.saturating_sub(since);
                    th.runtime_ns = th.runtime_ns.saturating_add(slice);
                    th.max_timeslice_ns = th.max_timeslice_ns.max(slice);
                }
            } else if prev_slice_known {
                // Running since before the window started: the part inside the window.
                let slice = t.saturating_sub(self.start_ns);
                if th.timeslices == 0 {
                    th.runtime_ns = th.runtime_ns.saturating_add(slice);
                    th.max_timeslice_ns = th.max_timeslice_ns.max(slice);
                }
            }
            match d.prev_state {
                PrevState::Preempted => th.preempted += 1,
                PrevState::Unknown => {}
                _ => th.non_runnable += 1,
            }
            th.off = Some((t, d.prev_state));
            th.woken_at = None;
            th.woken_before_off = th
                .woken_running
                .take()
                .is_some_and(|w| t.saturating_sub(w) <= WAKE_BEFORE_BLOCK_NS);
        }

        // 2. next is idle: a dispatch to idle.
        let c = &mut self.cpus[ci];
        if d.next_tid == IDLE_TID {
            out.to_idle = d.prev_tid != IDLE_TID;
            if out.to_idle {
                c.idle_dispatches_to += 1;
            }
            c.idle_cause = (d.prev_tid != IDLE_TID).then_some((d.prev_tid, d.prev_state));
        }
        c.current = Some(d.next_tid);
        c.current_slot = None;
        c.since = t;
        c.since_known = true;

        // 3. next is a thread: update its work area.
        if d.next_tid != IDLE_TID {
            let idle_on_cpu = c.idle_dispatches_from;
            let total_idle = self.total_idle;
            let slot = self.thread_slot(d.next_tid, total_idle);
            self.cpus[ci].current_slot = Some(slot);
            let th = &mut self.threads[slot];
            let cpu_delta = if th.last_cpu == Some(d.cpu) {
                idle_on_cpu - th.idle_on_cpu
            } else {
                0
            };
            let total_delta = total_idle - th.total_idle;
            th.last_cpu = Some(d.cpu);
            th.idle_on_cpu = idle_on_cpu;
            th.total_idle = total_idle;
            th.dip += cpu_delta;
            th.idle += total_delta;
            out.trace = Some(TraceRecord {
                time: t,
                tid: d.next_tid,
                cpu: d.cpu,
                cpu_delta,
                total_delta,
            });
            // 4. blocked statistics: a switch-in.
            th.timeslices += 1;
            let unseen = th.end_off_cpu(t);
            th.running = Some((d.cpu, t));
            self.cpus[ci].unseen_wakeups += u64::from(unseen);
        }
        out
    }

    /// Closes the window at `stop_ns`: open idle intervals and timeslices are
    /// cut there. Returns the idle intervals it closed (none `complete`).
    /// Calling it twice does nothing the second time.
    pub fn finish(&mut self, stop_ns: u64) -> Vec<IdleInterval> {
        let mut closed = Vec::new();
        if self.finished {
            return closed;
        }
        self.finished = true;
        for c in &mut self.cpus {
            let span = stop_ns.saturating_sub(c.since);
            if c.lost_since {
                // Records lost after the last dispatch: the rest is unknown.
                c.breaks += 1;
                c.unknown_ns = c.unknown_ns.saturating_add(span);
                continue;
            }
            match c.current {
                Some(IDLE_TID) => {
                    c.idle_ns = c.idle_ns.saturating_add(span);
                    closed.push(IdleInterval {
                        cpu: c.cpu,
                        start: c.since,
                        end: stop_ns,
                        complete: false,
                        caused_by: c.idle_cause,
                    });
                }
                // No dispatch in the whole window: what ran is not known.
                None => c.unknown_ns = c.unknown_ns.saturating_add(span),
                Some(_) => c.busy_ns = c.busy_ns.saturating_add(span),
            }
        }
        for th in &mut self.threads {
            if let Some((_, since)) = th.running.take() {
                let slice = stop_ns.saturating_sub(since);
                th.runtime_ns = th.runtime_ns.saturating_add(slice);
                th.max_timeslice_ns = th.max_timeslice_ns.max(slice);
            } else {
                th.end_off_cpu(stop_ns);
            }
        }
        closed
    }
}

#[cfg(test)]
mod tests;
