//! Blame chains (`ARCHITECTURE.md`, "Blame"): every idle CPU-nanosecond
//! followed from the thread whose leaving opened it, through what that
//! thread waited for, to a **root** — the code path that held things up,
//! a device, CPU contention, or unknown.
//!
//! While the recording is read ([`BlameAcc`]), each thread's recent life
//! is kept as a timeline of segments: running (ended by a switch-out whose
//! stacks name it), runnable, and blocked (a wait, ended by its waker: a
//! thread, an interrupt — a device's, never the task it hit — or unknown).
//! A CPU's idle interval charged to thread T ([`BlameAcc::idle`]) is
//! resolved once T's wait has a waker W: each instant of the idle inside
//! the wait goes to what W did then — running → W's path (its stacks at
//! the switch-out that ended that run), runnable → CPU contention,
//! blocked → W's own wait at that instant, recursively, with a visited set
//! against cycles. A wake from an interrupt ends the walk at the wait it
//! ended (the device's root: the sleep, the I/O). Several OS sleeps inside
//! one flight-recorder wait (a monitor's or a park's spurious wake-ups)
//! are one wait, ended by the last waker. A thread that woke on an idle
//! CPU by an interrupt and raised no wake-up before leaving it idle again
//! (a periodic tick) did not end that idle's cause: the idle after it goes
//! down the chain of the idle it interrupted. The walk covers every instant of
//! its window, so the roots of an idle interval add up to it exactly
//! (rounding aside), and the roots of a recording to its charged idle.
//!
//! Invariants: memory is bounded by threads (at most [`MAX_SEGMENTS`]
//! segments each, older ones dropped once no open wait can need them) and
//! distinct (root, chain) keys, never by the number of records; idleflow's
//! own threads' idle is never blamed (the report lists it apart).

use crate::pass::handler::{Context, Credit, DispatchEvent, Handler, OwnThreads, StackKind};
use idleflow_format::{Dispatch, PrevState, Wakeup, IDLE_TID};
use idleflow_format::{SwitchArg, SwitchStack};
use rustc_hash::FxHashMap;

mod roots;
mod timeline;
mod walk;

pub use roots::RootKind;
pub(crate) use roots::{Chains, RootKey};
pub use timeline::MAX_SEGMENTS;
pub(crate) use timeline::{Extra, Extras, WakeStacks};

use roots::{key_of, Leaf, Out};
use timeline::{id32, Line, Pending, Piece, Segment, Waker, What};
use walk::{scale, Walk, WALK_BUDGET};

use crate::pass::idle_paths::RowKey;
use crate::pass::java_waits::JavaWaits;

/// Dispatches between two prunings of the timelines.
const PRUNE_EVERY: u64 = 4096;

/// What one pass collects for the blame chains.
#[derive(Debug, Default)]
pub struct BlameAcc {
    lines: FxHashMap<u32, Line>,
    /// Per CPU slot: a running segment that just ended there and the roots
    /// waiting for its stacks (tid, switch-out time, roots).
    awaiting: Vec<Option<(u32, u64, Vec<Pending>)>>,
    /// Per CPU slot: since when it is idle.
    idle_since: Vec<Option<u64>>,
    /// Per CPU slot: the last idle's cause that an incidental run did not
    /// end (tid, state, switch-out time).
    carried: Vec<Option<(u32, PrevState, u64)>>,
    /// Idle intervals after an incidental run that continued the idle it
    /// interrupted, and their idle, ns.
    pub continued: (u64, u64),
    /// Idle per root and chain, ns.
    pub(crate) roots: FxHashMap<RootKey, u64>,
    /// The chains the roots' keys name.
    pub(crate) chains: Chains,
    /// Per root, the release sites and interrupt stacks its idle came with.
    pub(crate) extras: FxHashMap<RootKey, Extras>,
    /// The last wake-up that ended a wait (time, waker, wakee): the
    /// wake-up stacks that follow it in the recording go to that wait.
    last_wake: Option<(u64, u32, u32)>,
    /// Waits woken whose idle is followed once their wake-up's stacks (the
    /// next record) are known.
    deferred: Vec<(u32, Piece)>,
    /// A walk's buffers, kept between walks.
    scratch: (Vec<Out>, Vec<RowKey>, Vec<u32>),
    /// Idle charged to a thread's leaving (idleflow's own aside), ns.
    pub charged_ns: u64,
    /// Idle intervals followed.
    pub intervals: u64,
    /// Idle after a wait whose chain a walk's budget or depth cut, ns (in
    /// an `unknown` root).
    pub cut_ns: u64,
    dispatches: u64,
    /// Timelines are kept from here on (the oldest instant an open wait or
    /// an idle CPU can still ask about).
    keep_from: u64,
}

impl BlameAcc {
    fn line(&mut self, tid: u32, time: u64, what: What) -> &mut Line {
        self.lines
            .entry(tid)
            .or_insert_with(|| Line::new(time, what))
    }

    fn slot<T: Default + Clone>(v: &mut Vec<T>, ci: usize) -> &mut T {
        if v.len() <= ci {
            v.resize(ci + 1, T::default());
        }
        &mut v[ci]
    }

    /// Every dispatch of the window, in time order: `d.prev_tid`'s running
    /// segment ends (a wait, a preemption or an exit begins), `d.next_tid`'s
    /// wait or runnable time ends and it runs.
    /// `own` says which of the two threads are idleflow's own: one of them
    /// coming to an idle CPU does not end the idle it may be charged for.
    pub fn dispatch(&mut self, ci: usize, d: &Dispatch, own: OwnThreads, java: &JavaWaits) {
        self.settle(java);
        self.flush(ci, java);
        self.dispatches += 1;
        if self.dispatches.is_multiple_of(PRUNE_EVERY) {
            self.prune(d.time);
        }
        if d.prev_tid != IDLE_TID {
            use PrevState as S;
            let what = match d.prev_state {
                S::Preempted => What::Runnable,
                S::Dead => What::Gone,
                _ => What::Blocked(None),
            };
            let line = self.line(d.prev_tid, d.time, What::Running);
            if line.current.what == What::Running {
                line.last_run = Some((d.time, line.incidental));
                line.switch(d.time, what);
                line.current.node = d.prev_node.node().unwrap_or(0);
                if let Some(s) = line.segments.back_mut() {
                    s.node = line.current.node;
                }
                let pending = std::mem::take(&mut line.pending);
                // A thread that blocks again inside a flight-recorder wait
                // that went on: the idle charged to its first OS wait waits
                // for this one's waker.
                let mut resolve = Vec::new();
                for p in std::mem::take(&mut line.pieces) {
                    if d.time < p.jfr_end && what == What::Blocked(None) {
                        line.pieces.push(p);
                    } else {
                        resolve.push(p);
                    }
                }
                *Self::slot(&mut self.awaiting, ci) = Some((d.prev_tid, d.time, pending));
                for p in resolve {
                    self.resolve(d.prev_tid, p, java);
                }
            }
        }
        let since = Self::slot(&mut self.idle_since, ci);
        if d.next_tid == IDLE_TID {
            if !own.prev || since.is_none() {
                *since = Some(d.time);
            }
        } else if !own.next {
            *since = None;
        }
        if d.next_tid != IDLE_TID {
            let line = self.line(d.next_tid, d.time, What::Runnable);
            match line.current.what {
                What::Blocked(None) => {
                    // No wake-up record: on a CPU that was idle, an
                    // interrupt's (tracepoints raised in the idle task's
                    // context are dropped on this kernel).
                    let waker = if d.prev_tid == IDLE_TID {
                        Waker::Interrupt
                    } else {
                        Waker::Unknown
                    };
                    self.woken(d.next_tid, d.time, waker);
                    let line = self.line(d.next_tid, d.time, What::Runnable);
                    line.switch(d.time, What::Running);
                }
                What::Running => {}
                _ => line.switch(d.time, What::Running),
            }
            let line = self.line(d.next_tid, d.time, What::Running);
            line.incidental = d.prev_tid == IDLE_TID && line.last_waker == Some(Waker::Interrupt);
        }
    }

    /// A wake-up: the wakee's wait ends, by its waker (a thread) or by a
    /// device (raised in an interrupt, or by the idle task).
    pub fn wakeup(&mut self, w: &Wakeup, java: &JavaWaits) {
        self.settle(java);
        self.last_wake = None;
        // Any wake-up raised while the thread ran — its own, or a softirq's
        // on its time (a loopback send's, which cannot be told from an
        // interrupt that merely hit it) — makes its run more than a tick.
        if let Some(waker) = self.lines.get_mut(&w.waker_tid) {
            waker.incidental = false;
        }
        let Some(line) = self.lines.get(&w.wakee_tid) else {
            return;
        };
        if line.current.what != What::Blocked(None) {
            return;
        }
        let waker = if w.context.is_interrupt() || w.waker_tid == IDLE_TID {
            Waker::Interrupt
        } else {
            Waker::Thread(w.waker_tid)
        };
        self.last_wake = Some((w.time, w.waker_tid, w.wakee_tid));
        self.woken(w.wakee_tid, w.time, waker);
    }

    /// `tid`'s open wait ends at `time` by `waker`: the idle charged to it
    /// is followed now (or, inside a flight-recorder wait that goes on,
    /// when that ends).
    fn woken(&mut self, tid: u32, time: u64, waker: Waker) {
        let Some(line) = self.lines.get_mut(&tid) else {
            return;
        };
        line.current.what = What::Blocked(Some(waker));
        line.last_waker = Some(waker);
        line.switch(time, What::Runnable);
        for p in std::mem::take(&mut line.pieces) {
            self.deferred.push((
                tid,
                Piece {
                    last: Some((waker, time)),
                    ..p
                },
            ));
        }
    }

    /// Follows the waits woken since the last record (their wake-up's
    /// stacks, if any, came with it) — or keeps a piece inside a
    /// flight-recorder wait that goes on waiting for its end.
    fn settle(&mut self, java: &JavaWaits) {
        if self.deferred.is_empty() {
            return;
        }
        for (tid, mut p) in std::mem::take(&mut self.deferred) {
            if p.jfr_end == 0 {
                p.jfr_end = java.wait_at(tid, p.out).map_or(0, |w| w.end());
            }
            let woken = p.last.map_or(0, |l| l.1);
            if woken < p.jfr_end {
                if let Some(line) = self.lines.get_mut(&tid) {
                    line.pieces.push(p);
                }
            } else {
                self.resolve(tid, p, java);
            }
        }
    }

    /// The stacks taken at `tid`'s switch-out at `time` (kernel, user ids;
    /// `None`: not this kind).
    pub fn stacks(&mut self, tid: u32, time: u64, kernel: Option<u64>, user: Option<u64>) {
        let Some(line) = self.lines.get_mut(&tid) else {
            return;
        };
        let set = |s: &mut Segment| {
            if let Some(k) = kernel {
                s.kernel = id32(k);
            }
            if let Some(u) = user {
                s.user = id32(u);
            }
        };
        if line.current.start == time {
            set(&mut line.current);
        }
        if let Some(s) = line.segments.back_mut().filter(|s| s.end == time) {
            set(s);
        }
    }

    /// The first argument of the system call `tid` left in at `time` (its
    /// wait's: a futex's address).
    pub fn switch_arg(&mut self, tid: u32, time: u64, arg: u64) {
        let Some(line) = self.lines.get_mut(&tid) else {
            return;
        };
        if line.current.start == time && matches!(line.current.what, What::Blocked(_)) {
            line.current.arg = arg;
        }
    }

    /// The stacks taken at the wake-up `waker_tid` raised at `time` (the
    /// records just before: its kernel stack, then its user stack): they
    /// go to the wait it ended, whose idle is followed at the next record
    /// of another kind.
    pub fn wake_stacks(
        &mut self,
        waker_tid: u32,
        time: u64,
        kernel: Option<u64>,
        user: Option<u64>,
    ) {
        if let Some((t, waker, wakee)) = self.last_wake {
            if (t, waker) == (time, waker_tid) {
                let ended = self.lines.get_mut(&wakee).and_then(|l| {
                    l.segments
                        .iter_mut()
                        .rev()
                        .take(2)
                        .find(|s| s.end == time && matches!(s.what, What::Blocked(Some(_))))
                });
                if let Some(s) = ended {
                    if let Some(k) = kernel {
                        s.woke.kernel = id32(k);
                    }
                    if let Some(u) = user {
                        s.woke.user = id32(u);
                    }
                }
            }
        }
    }

    /// Idle `[start, end)` of CPU slot `ci`, `idle_ns` of it, charged to
    /// `tid` leaving in `state` at `out`: followed down `tid`'s wait chain
    /// — or, when `tid`'s run there was incidental (it woke on the idle CPU
    /// by its own timer and woke no one), down the chain of the idle it
    /// interrupted.
    #[allow(clippy::too_many_arguments)]
    pub fn idle(
        &mut self,
        ci: usize,
        tid: u32,
        state: PrevState,
        out: u64,
        (start, end): (u64, u64),
        idle_ns: u64,
        java: &JavaWaits,
    ) {
        self.settle(java);
        if idle_ns == 0 {
            return;
        }
        self.intervals += 1;
        self.charged_ns = self.charged_ns.saturating_add(idle_ns);
        let incidental = self
            .lines
            .get(&tid)
            .is_some_and(|l| l.last_run == Some((out, true)));
        let carried = Self::slot(&mut self.carried, ci);
        let (tid, state, out) = match *carried {
            Some(c) if incidental => {
                self.continued = (
                    self.continued.0 + 1,
                    self.continued.1.saturating_add(idle_ns),
                );
                c
            }
            _ => {
                *carried = Some((tid, state, out));
                (tid, state, out)
            }
        };
        let piece = Piece {
            out,
            start,
            end,
            idle_ns,
            last: None,
            jfr_end: 0,
        };
        let wait = self.lines.get(&tid).and_then(|l| l.wait_from(out)).copied();
        match wait {
            Some(w) if w.what == What::Blocked(None) => {
                self.lines
                    .get_mut(&tid)
                    .expect("its wait was found")
                    .pieces
                    .push(piece);
            }
            Some(Segment {
                what: What::Blocked(Some(waker)),
                end: woken,
                ..
            }) => {
                let jfr_end = java.wait_at(tid, out).map_or(0, |w| w.end());
                let line = self.lines.get_mut(&tid).expect("its wait was found");
                let piece = Piece {
                    last: Some((waker, woken)),
                    jfr_end,
                    ..piece
                };
                // Inside a flight-recorder wait that went on after this OS
                // wait: the last OS wait in it ends it.
                let later_open = line.current.what == What::Blocked(None)
                    && line.current.start < jfr_end
                    && line.current.start > out;
                if later_open {
                    line.pieces.push(piece);
                } else {
                    let last = line
                        .segments
                        .iter()
                        .rev()
                        .take_while(|s| s.start > out)
                        .find(|s| s.start < jfr_end && matches!(s.what, What::Blocked(Some(_))))
                        .map(|s| match s.what {
                            What::Blocked(Some(w)) => (w, s.end),
                            _ => unreachable!("matched a woken wait"),
                        });
                    let piece = Piece {
                        last: last.or(piece.last),
                        ..piece
                    };
                    self.resolve(tid, piece, java);
                }
            }
            _ => {
                // Not a wait (a preemption, an exit), or its history is
                // gone: the thread's own path is the root.
                let (kind, key) = match self.lines.get(&tid) {
                    Some(l) if state == PrevState::Preempted || state == PrevState::Dead => {
                        let s = l.segments.iter().rev().find(|s| s.end == out);
                        (RootKind::Path, key_of(java, tid, s, out))
                    }
                    _ => (RootKind::Unknown, key_of(java, tid, None, out)),
                };
                let none = self.chains.id(&[]);
                self.add_root(kind, key, none, idle_ns);
            }
        }
    }

    fn add_root(&mut self, kind: RootKind, path: RowKey, links: u32, ns: u64) {
        self.add_root_key(RootKey { kind, path, links }, ns, Extra::default());
    }

    fn add_root_key(&mut self, k: RootKey, ns: u64, extra: Extra) {
        let e = self.roots.entry(k).or_default();
        *e = e.saturating_add(ns);
        if extra != Extra::default() {
            self.extras.entry(k).or_default().add(extra, ns);
        }
    }

    /// Follows a piece whose wait has its (last) waker.
    fn resolve(&mut self, tid: u32, p: Piece, java: &JavaWaits) {
        let Some((waker, woken)) = p.last else {
            return;
        };
        let (victim, woke) = {
            let line = &self.lines[&tid];
            // The stacks of the wake-up that ended the last OS wait.
            let woke = line
                .segments
                .iter()
                .rev()
                .find(|s| s.end == woken && matches!(s.what, What::Blocked(Some(_))))
                .map_or_else(WakeStacks::default, |s| s.woke);
            (key_of(java, tid, line.wait_from(p.out), p.out), woke)
        };
        // The idle instants inside the wait; idle that went on after the
        // wait ended (or a piece that came after it) weighs the whole wait.
        let (mut a, mut b) = (p.start.max(p.out), p.end.min(woken));
        if b <= a {
            (a, b) = (p.out, woken);
        }
        let (mut out, mut links, mut visited) = std::mem::take(&mut self.scratch);
        out.clear();
        links.clear();
        visited.clear();
        links.push(victim);
        visited.push(tid);
        let mut walk = Walk {
            lines: &self.lines,
            chains: &mut self.chains,
            java,
            out,
            links,
            visited,
            budget: WALK_BUDGET,
            cut: 0,
            release: WakeStacks::default(),
        };
        if b <= a {
            let none = walk.chains.id(&[]);
            walk.out.push((
                Leaf::Root(RootKey {
                    kind: RootKind::Unknown,
                    path: victim,
                    links: none,
                }),
                1,
                Extra::default(),
            ));
        } else {
            walk.waker(waker, a, b, woke);
        }
        let (mut leaves, cut) = (walk.out, walk.cut);
        self.scratch.1 = walk.links;
        self.scratch.2 = walk.visited;
        let total = leaves
            .iter()
            .fold(0u64, |s, l| s.saturating_add(l.1))
            .max(1);
        self.cut_ns = self
            .cut_ns
            .saturating_add(scale(cut, p.idle_ns, total).min(p.idle_ns));
        // Scaled to the idle, the rounding's remainder to the largest leaf.
        let mut given = 0u64;
        let largest = (0..leaves.len()).max_by_key(|&i| leaves[i].1);
        for (_, ns, _) in leaves.iter_mut() {
            *ns = scale(*ns, p.idle_ns, total);
            given = given.saturating_add(*ns);
        }
        if let Some(i) = largest {
            leaves[i].1 = leaves[i].1.saturating_add(p.idle_ns.saturating_sub(given));
        }
        for &(leaf, ns, extra) in &leaves {
            match leaf {
                Leaf::Root(k) => self.add_root_key(k, ns, extra),
                Leaf::OpenRun(x, links) => {
                    if let Some(l) = self.lines.get_mut(&x) {
                        l.pending.push((links, ns, extra));
                    }
                }
            }
        }
        self.scratch.0 = leaves;
    }

    /// The roots waiting for the stacks of the switch-out just before the
    /// current dispatch of CPU slot `ci` (they came after its record).
    fn flush(&mut self, ci: usize, java: &JavaWaits) {
        let Some(Some((tid, time, pending))) = self.awaiting.get_mut(ci).map(Option::take) else {
            return;
        };
        if pending.is_empty() {
            return;
        }
        let key = {
            let s = self
                .lines
                .get(&tid)
                .and_then(|l| l.segments.iter().rev().find(|s| s.end == time));
            key_of(java, tid, s, time)
        };
        for (links, ns, extra) in pending {
            let k = RootKey {
                kind: RootKind::Path,
                path: key,
                links,
            };
            self.add_root_key(k, ns, extra);
        }
    }

    /// Drops the timelines' segments no open wait or idle CPU can still ask
    /// about.
    fn prune(&mut self, now: u64) {
        let mut keep = now;
        for s in self.idle_since.iter().flatten() {
            keep = keep.min(*s);
        }
        for l in self.lines.values() {
            for p in &l.pieces {
                keep = keep.min(p.out);
            }
        }
        self.keep_from = keep;
        for l in self.lines.values_mut() {
            while l.segments.front().is_some_and(|s| s.end < keep) {
                let s = l.segments.pop_front().expect("checked");
                l.known_from = s.end;
            }
        }
    }

    /// The recording ended at `stop`: waits never woken keep their own path
    /// as an unknown root; roots in running segments get the thread's path
    /// without stacks.
    pub fn finish(&mut self, stop: u64, java: &JavaWaits) {
        self.settle(java);
        for ci in 0..self.awaiting.len() {
            self.flush(ci, java);
        }
        let mut open = Vec::new();
        let mut open_runs = Vec::new();
        for (&tid, l) in &mut self.lines {
            for p in std::mem::take(&mut l.pieces) {
                open.push((tid, p));
            }
            for (links, ns, extra) in std::mem::take(&mut l.pending) {
                let key = key_of(java, tid, None, stop);
                let k = RootKey {
                    kind: RootKind::Path,
                    path: key,
                    links,
                };
                open_runs.push((k, ns, extra));
            }
        }
        for (k, ns, extra) in open_runs {
            self.add_root_key(k, ns, extra);
        }
        for (tid, p) in open {
            if p.last.is_some() {
                self.resolve(tid, p, java);
            } else {
                let key = key_of(java, tid, self.lines[&tid].wait_from(p.out), p.out);
                let none = self.chains.id(&[]);
                self.add_root(RootKind::Unknown, key, none, p.idle_ns);
            }
        }
    }
}

impl Handler for BlameAcc {
    fn dispatch(&mut self, e: &DispatchEvent<'_>, ctx: &Context<'_>) {
        BlameAcc::dispatch(self, e.ci, e.dispatch, e.own, ctx.java);
    }

    fn wakeup(&mut self, w: &Wakeup, ctx: &Context<'_>) {
        BlameAcc::wakeup(self, w, ctx.java);
    }

    fn switch_stack(&mut self, _ci: usize, s: &SwitchStack, kind: StackKind, _ctx: &Context<'_>) {
        match kind {
            StackKind::Kernel => self.stacks(s.tid, s.time, Some(s.stack), None),
            StackKind::User => self.stacks(s.tid, s.time, None, Some(s.stack)),
        }
    }

    fn wake_stack(&mut self, s: &SwitchStack, kind: StackKind, _ctx: &Context<'_>) {
        match kind {
            StackKind::Kernel => self.wake_stacks(s.tid, s.time, Some(s.stack), None),
            StackKind::User => self.wake_stacks(s.tid, s.time, None, Some(s.stack)),
        }
    }

    fn switch_arg(&mut self, a: &SwitchArg, _ctx: &Context<'_>) {
        BlameAcc::switch_arg(self, a.tid, a.time, a.arg);
    }

    /// idleflow's own threads' idle is never blamed.
    fn idle(&mut self, c: &Credit, ctx: &Context<'_>) {
        let ch = &c.charge;
        if !ctx.is_own(ch.tid) {
            let (ci, span) = (c.ci, c.span);
            BlameAcc::idle(
                self, ci, ch.tid, ch.state, ch.time, span, c.idle_ns, ctx.java,
            );
        }
    }

    fn finish(&mut self, stop: u64, ctx: &Context<'_>) {
        BlameAcc::finish(self, stop, ctx.java);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pass::Analysis;
    use idleflow_format::{NodeTag, Record, RunInfo, ThreadInfo, WakeContext};

    fn dispatch(
        time: u64,
        cpu: u32,
        prev_tid: u32,
        prev_state: PrevState,
        next_tid: u32,
    ) -> Record {
        Record::Dispatch(Dispatch {
            time,
            cpu,
            prev_tid,
            prev_state,
            next_tid,
            prev_node: NodeTag::Untraced,
        })
    }

    fn wakeup(time: u64, cpu: u32, waker_tid: u32, wakee_tid: u32, context: WakeContext) -> Record {
        Record::Wakeup(Wakeup {
            time,
            cpu,
            waker_tid,
            wakee_tid,
            target_cpu: 0,
            new_thread: false,
            context,
        })
    }

    fn analyse(records: &[Record], stop_ns: u64) -> Analysis {
        let mut all: Vec<Record> = [(1, "victim"), (2, "holder"), (5, "bystander")]
            .into_iter()
            .map(|(tid, comm)| {
                Record::Thread(ThreadInfo {
                    time: 0,
                    tid,
                    pid: 1,
                    ppid: 0,
                    comm: comm.into(),
                })
            })
            .collect();
        all.extend(records.iter().cloned());
        crate::pass::analyse_records(&RunInfo::minimal(vec![0, 1], 0), &all, stop_ns)
    }

    /// (kind, root tid, link tids) → idle ns.
    fn roots(a: &Analysis) -> Vec<(RootKind, u32, Vec<u32>, u64)> {
        let mut v: Vec<_> = a
            .blame
            .roots
            .iter()
            .map(|(k, ns)| {
                let links = a
                    .blame
                    .chains
                    .get(k.links)
                    .iter()
                    .map(|l| l.tid())
                    .collect();
                (k.kind, k.path.tid(), links, *ns)
            })
            .collect();
        v.sort();
        v
    }

    #[test]
    fn an_idle_interval_goes_to_what_the_waker_did_at_each_instant() {
        use PrevState::{Preempted, Sleeping};
        let a = analyse(
            &[
                dispatch(10, 0, IDLE_TID, Preempted, 1),
                dispatch(10, 1, IDLE_TID, Preempted, 2),
                // The victim waits from 100: CPU 0 idle until 1000.
                dispatch(100, 0, 1, Sleeping, IDLE_TID),
                // The holder runs to 300, then sleeps until a device wakes
                // it at 800 (in a softirq that hit the bystander's time),
                // runs again and wakes the victim at 1000.
                dispatch(300, 1, 2, Sleeping, IDLE_TID),
                dispatch(790, 1, IDLE_TID, Preempted, 5),
                wakeup(800, 1, 5, 2, WakeContext::SoftIrq),
                dispatch(800, 1, 5, Sleeping, 2),
                wakeup(1000, 1, 2, 1, WakeContext::Task),
                dispatch(1000, 0, IDLE_TID, Preempted, 1),
            ],
            1100,
        );
        use RootKind::*;
        assert_eq!(
            roots(&a),
            vec![
                // The holder's run before and after its sleep, for the victim.
                (Path, 2, vec![1], 400),
                // The holder's sleep, ended by the device: its own idle on
                // CPU 1 (300..790) and the victim's over 300..800.
                (Device, 2, vec![], 490),
                (Device, 2, vec![1], 500),
            ]
        );
        // Conserved: every idle ns charged to a thread is in one root.
        let sum: u64 = a.blame.roots.values().sum();
        assert_eq!(sum, a.blame.charged_ns);
        assert_eq!(sum, 900 + 490);
        // The bystander the interrupt hit is in no root.
        assert!(a.blame.roots.keys().all(|k| k.path.tid() != 5));
    }

    #[test]
    fn a_wait_through_a_blocked_holder_reaches_the_holders_waker_and_is_conserved() {
        use PrevState::{Preempted, Sleeping};
        // victim (1) waits for holder (2), which waits for the bystander
        // (5) running a long computation: the root is the bystander's run.
        let a = analyse(
            &[
                dispatch(10, 0, IDLE_TID, Preempted, 1),
                dispatch(10, 1, IDLE_TID, Preempted, 2),
                dispatch(50, 1, 2, Sleeping, 5),
                dispatch(100, 0, 1, Sleeping, IDLE_TID),
                // The bystander runs 50..600, is preempted by nothing,
                // wakes the holder at 600 and blocks.
                wakeup(600, 1, 5, 2, WakeContext::Task),
                dispatch(600, 1, 5, Sleeping, 2),
                // The holder wakes the victim at 700 and is preempted.
                wakeup(700, 1, 2, 1, WakeContext::Task),
                dispatch(760, 0, IDLE_TID, Preempted, 1),
                dispatch(900, 1, 2, Sleeping, IDLE_TID),
            ],
            1000,
        );
        use RootKind::*;
        // The victim's idle 100..760: 100..600 the bystander ran (through
        // the holder's wait), 600..700 the holder ran; 700..760 is after
        // the wake-up: weighed like the wait (scaled).
        let r = roots(&a);
        let through: u64 = r
            .iter()
            .filter(|x| x.1 == 5)
            .map(|x| {
                assert_eq!((x.0, x.2.as_slice()), (Path, &[1, 2][..]));
                x.3
            })
            .sum();
        assert_eq!(through, 660 * 500 / 600, "{r:?}");
        let sum: u64 = a.blame.roots.values().sum();
        assert_eq!(sum, a.blame.charged_ns);
        // The holder's own idle from 900 is still open at the end: unknown.
        assert!(r.contains(&(Unknown, 2, vec![], 100)), "{r:?}");
    }

    #[test]
    fn a_knot_is_a_set_of_pools_with_no_way_out_but_devices() {
        let c = |nodes: &[&str], ns: u64| (nodes.iter().map(|n| n.to_string()).collect(), ns);
        // handlers wait for the indexer, which waits for the writer, which
        // waits for the timer; two workers wait for each other (a cycle)
        // and nothing else; a tiny chain under 1 % is left out.
        let g = crate::sections::root_causes::WaitGraph::new(
            &[
                c(&["p: handler-*", "p: indexer", "p: writer", "timer"], 600),
                c(&["p: indexer", "p: writer", "timer"], 200),
                c(&["p: a", "p: b"], 100),
                c(&["p: b", "p: a"], 95),
                c(&["p: writer", "p: x"], 4),
            ],
            1000,
        );
        let knots: Vec<(Vec<&str>, u64)> = g
            .knots
            .iter()
            .map(|k| (k.pools.iter().map(String::as_str).collect(), k.idle_ns))
            .collect();
        assert_eq!(
            knots,
            vec![(vec!["p: writer"], 800), (vec!["p: a", "p: b"], 195)]
        );
        assert_eq!(g.knots[0].waits_on, vec!["timer"]);
        assert_eq!(
            (
                g.edges[0].from.as_str(),
                g.edges[0].to.as_str(),
                g.edges[0].idle_ns
            ),
            ("p: indexer", "p: writer", 800)
        );
    }

    #[test]
    fn a_thread_that_woke_on_an_idle_cpu_by_its_timer_and_woke_no_one_continues_the_idle() {
        use PrevState::{Preempted, Sleeping};
        // The victim waits for the holder from 100; CPU 0 idles; at 300 a
        // bystander wakes there by its timer (its wake-up raised by the idle
        // task), runs and sleeps again at 320 without waking anyone; the
        // holder (sleeping since 50, on CPU 1) is woken by a device at 800
        // and wakes the victim at 850.
        let a = analyse(
            &[
                dispatch(10, 0, IDLE_TID, Preempted, 1),
                dispatch(10, 1, IDLE_TID, Preempted, 5),
                dispatch(20, 1, 5, Sleeping, 2),
                dispatch(50, 1, 2, Sleeping, IDLE_TID),
                dispatch(100, 0, 1, Sleeping, IDLE_TID),
                dispatch(300, 0, IDLE_TID, Preempted, 5),
                dispatch(320, 0, 5, Sleeping, IDLE_TID),
                wakeup(800, 1, 0, 2, WakeContext::SoftIrq),
                dispatch(800, 1, IDLE_TID, Preempted, 2),
                wakeup(850, 1, 2, 1, WakeContext::Task),
                dispatch(850, 0, IDLE_TID, Preempted, 1),
            ],
            1000,
        );
        use RootKind::*;
        let r = roots(&a);
        // CPU 0's idle 100..300 and 320..850 both go down the victim's
        // chain (the holder's sleep until 800, its run until 850): the
        // bystander is no root.
        assert!(r.iter().all(|x| x.1 != 5), "{r:?}");
        assert!(r.contains(&(Device, 2, vec![1], 200 + 480)), "{r:?}");
        assert!(r.contains(&(Path, 2, vec![1], 50)), "{r:?}");
        assert_eq!(a.blame.continued, (1, 530));
    }
}
