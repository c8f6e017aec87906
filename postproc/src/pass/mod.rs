//! One streaming pass over a recording: every record goes through the
//! dispatch accounting once, and what the reports need is collected on the
//! way (idle interval distributions, who made each CPU idle, thread names).
//! Where the recorder sampled the stacks at the switch-outs to idle, a
//! switch-out without its own is given its thread's previous ones here,
//! once, for every handler ([`previous_stacks`]).
//!
//! Invariant: memory depends on the number of CPUs and threads, never on
//! the number of records: nothing per dispatch is kept.

pub mod ahead;
mod analysis;
pub mod blame;
pub mod call_tree;
pub mod file;
pub mod handler;
pub mod idle_paths;
pub mod java_waits;
pub mod kernel_waits;
pub mod nodes;
pub mod previous_stacks;
pub mod startup;
pub mod windows;

use std::io::{Read, Seek};

use idleflow_accounting::{Accounting, IdleInterval};
use idleflow_format::{CutShort, FormatError, PrevState, Reader, Record, RunSummary, IDLE_TID};
use rustc_hash::{FxHashMap, FxHashSet};

use crate::pass::call_tree::{BuiltViews, ViewOptions, Views};
use crate::pass::handler::{
    Charge, Context, Credit, DispatchEvent, Handler, OwnThreads, StackKind,
};
use crate::pass::java_waits::{JavaIdle, JavaWaits};
use crate::pass::kernel_waits::KernelWaits;
use crate::pass::nodes::NodeAttribution;
use crate::pass::previous_stacks::{Carried, PreviousStacks};
use crate::pass::windows::{Series, Windows};
use blame::BlameAcc;
pub use idle_paths::key::PathKey;
use idle_paths::IdlePathsAcc;

use analysis::histogram;
pub use analysis::{Analysis, AnalysisOptions, IdleCause, Window, MAX_WINDOWS, MIN_WINDOW_NS};

/// The pass as it runs: the [`Analysis`] it fills, the caller's handler,
/// and what it keeps only while it reads.
struct Pass<'o> {
    a: Analysis,
    /// The caller's handler, told every event after the pass's own.
    extra: Option<&'o mut dyn Handler>,
    /// The times that count: records before `skip_before` only say who had
    /// each CPU at the window's edge; records from `to` on are skipped.
    skip_before: u64,
    to: u64,
    /// Per CPU slot: while only idleflow's own threads ran since an idle
    /// interval ended, the dispatch to idle that began it. One of those
    /// threads waking on an idle CPU (the recorder's drain, a flight
    /// recorder idleflow started) interrupts the idle, it does not cause
    /// the idle after it: that is charged to this dispatch, with no second
    /// dispatch counted.
    carried: Vec<Option<Charge>>,
    /// Threads a call-tree dump named already (its first Java thread of a
    /// tid names it).
    named: FxHashSet<u32>,
    /// Threads named like a flight recorder's: (tid, pid, when named).
    jfr_named: Vec<(u32, u32, u64)>,
    /// The stacks carried to the switch-outs to idle without their own
    /// (recordings whose stacks there were sampled).
    previous: PreviousStacks,
    /// The stacks [`Pass::previous`] just carried, told to the handlers
    /// (kept between calls: no allocation per dispatch).
    carried_stacks: Vec<Carried>,
}

impl<'o> Pass<'o> {
    /// The pass over the recording behind `reader`, before its first
    /// record: the JVMs' waits are read first.
    fn new<R: Read + Seek>(
        reader: &mut Reader<R>,
        opts: &AnalysisOptions,
        extra: Option<&'o mut dyn Handler>,
    ) -> Result<Self, FormatError> {
        let window = opts.window;
        let info = reader.info().clone();
        let at =
            |s: Option<f64>| s.map(|s| info.start_ns.saturating_add((s.max(0.0) * 1e9) as u64));
        let from = at(window.from_s).unwrap_or(info.start_ns);
        let to = at(window.to_s).unwrap_or(u64::MAX);
        // Without --from, records stamped a little before the window start
        // (written between enabling the events and reading the clock) count.
        let skip_before = if window.from_s.is_some() { from } else { 0 };
        let mut a = Analysis {
            window: (from, to),
            windowed: window.from_s.is_some() || window.to_s.is_some(),
            after_startup: window.after_startup,
            accounting: Accounting::new(&info.cpus, from),
            intervals: info.cpus.iter().map(|_| histogram()).collect(),
            causes: FxHashMap::default(),
            names: FxHashMap::default(),
            process_names: FxHashMap::default(),
            shown_pids: info.target_pids.iter().copied().collect(),
            dispatches: 0,
            wakeups: 0,
            interrupt_wakeups: 0,
            wakeups_with_stacks: 0,
            unknown_records: 0,
            views: BuiltViews::default(),
            view_options: opts.views.clone(),
            node_idle: NodeAttribution::default(),
            tool_tids: FxHashSet::default(),
            cut_short: None,
            summary: RunSummary::default(),
            java: JavaWaits::default(),
            java_idle: JavaIdle::default(),
            kernel: KernelWaits::default(),
            idle_paths: IdlePathsAcc::default(),
            continued_idle: (0, 0),
            blame: BlameAcc::default(),
            windows: opts
                .windows
                .then(|| Windows::new(from, MIN_WINDOW_NS, MAX_WINDOWS)),
            cpu_windows: Vec::new(),
            info,
        };
        if a.info.stacks == "waits" {
            a.kernel.track_blocked(a.info.wait_sample_period);
        }
        let sampled = a.info.idle_stack_budget > 0;
        if sampled {
            a.kernel.count_stack_sources();
        }
        if a.info.java_waits {
            a.java = JavaWaits::load(reader)?;
            for j in &a.java.jvms {
                for (tid, name) in &j.threads {
                    a.names.insert(*tid, (j.pid, name.clone()));
                }
                // The thread dump's names, where the recording named no
                // thread of that tid itself (`JavaWaits::has_name` covers
                // both: their kernel names do not replace them).
                for (tid, name) in &j.dumped_names {
                    a.names.entry(*tid).or_insert_with(|| (j.pid, name.clone()));
                }
            }
        }
        // The JVMs' threads that worked for idleflow are known before the
        // pass, so that the idle after them continues what they interrupted.
        for j in &a.java.jvms {
            a.tool_tids.extend(j.own_tids.iter().copied());
        }
        Ok(Pass {
            a,
            extra,
            skip_before,
            to,
            carried: Vec::new(),
            named: FxHashSet::default(),
            jfr_named: Vec::new(),
            previous: PreviousStacks::new(sampled),
            carried_stacks: Vec::new(),
        })
    }

    /// Tells every handler, the caller's last.
    fn tell(&mut self, mut f: impl FnMut(&mut dyn Handler, &Context<'_>)) {
        let (ctx, handlers) = self.a.handlers();
        for h in handlers {
            f(h, &ctx);
        }
        if let Some(x) = self.extra.as_deref_mut() {
            f(x, &ctx);
        }
    }

    /// Offers `rec` to each handler in turn until one keeps it.
    fn offer(&mut self, rec: Record) {
        let (ctx, handlers) = self.a.handlers();
        let mut rec = Some(rec);
        for h in handlers {
            match rec.take() {
                Some(r) => rec = h.other(r, &ctx),
                None => return,
            }
        }
        if let (Some(x), Some(r)) = (self.extra.as_deref_mut(), rec) {
            x.other(r, &ctx);
        }
    }

    /// Whether time `t` lies in the window.
    fn inside(&self, t: u64) -> bool {
        t >= self.skip_before && t < self.to
    }

    /// One record of the pass over the recording.
    fn record(&mut self, rec: Record) {
        // A switch-out's own stack records come right after its dispatch
        // (same time and CPU; interned stacks and its system call's
        // argument among them): a record of these kinds comes after them.
        if self.previous.waiting()
            && matches!(
                rec,
                Record::Dispatch(_)
                    | Record::Wakeup(_)
                    | Record::WakeStack(_)
                    | Record::WakeUserStack(_)
                    | Record::Lost(_)
                    | Record::Exit(_)
            )
        {
            self.carry_stacks();
        }
        if let Record::Exit(e) = &rec {
            self.previous.exited(e.tid);
        }
        match rec {
            // Before the window: only who had each CPU at its edge is kept.
            Record::Dispatch(d) if d.time < self.skip_before => self.a.accounting.before_window(&d),
            Record::Lost(l) if l.time < self.skip_before => {
                self.a.accounting.lost_before_window(l.cpu)
            }
            Record::Lost(l) if l.time >= self.to => {}
            Record::Lost(l) => self.a.accounting.lost(l.cpu, l.count),
            Record::Dispatch(d) if d.time >= self.to => {}
            Record::Dispatch(d) => self.dispatch(&d),
            Record::Wakeup(w) if !self.inside(w.time) => {}
            Record::Wakeup(w) => {
                self.a.wakeups += 1;
                self.a.interrupt_wakeups += u64::from(w.context.is_interrupt());
                self.a.accounting.wakeup(&w);
                self.tell(|h, ctx| h.wakeup(&w, ctx));
            }
            Record::Thread(t) => {
                let a = &mut self.a;
                if !a.shown_pids.is_empty() && t.tid == t.pid && a.shown_pids.contains(&t.ppid) {
                    a.shown_pids.insert(t.pid);
                }
                if t.tid == t.pid {
                    a.process_names.insert(t.pid, t.comm.clone());
                }
                a.note_own(t.tid, t.pid, &t.comm, t.time);
                if t.comm.starts_with("JFR ") && self.jfr_named.len() < 1 << 16 {
                    self.jfr_named.push((t.tid, t.pid, t.time));
                }
                if !a.java.has_name(t.tid) {
                    a.names.insert(t.tid, (t.pid, t.comm));
                }
            }
            Record::SwitchStack(s) | Record::SwitchUserStack(s) if !self.inside(s.time) => {}
            Record::SwitchStack(s) => self.switch_stack(&s, StackKind::Kernel),
            Record::SwitchUserStack(s) => self.switch_stack(&s, StackKind::User),
            Record::WakeStack(s) | Record::WakeUserStack(s) if !self.inside(s.time) => {}
            Record::WakeStack(s) => {
                self.a.wakeups_with_stacks += 1;
                self.tell(|h, ctx| h.wake_stack(&s, StackKind::Kernel, ctx))
            }
            Record::WakeUserStack(s) => self.tell(|h, ctx| h.wake_stack(&s, StackKind::User, ctx)),
            Record::SwitchJavaState(j) if !self.inside(j.time) => {}
            Record::SwitchJavaState(j) => {
                let ci = self.a.accounting.cpu_slot(j.cpu);
                self.previous.java_state(ci, &j);
            }
            Record::SwitchArg(s) if !self.inside(s.time) => {}
            Record::SwitchArg(s) => {
                let ci = self.a.accounting.cpu_slot(s.cpu);
                self.previous.own_arg(ci, &s);
                self.tell(|h, ctx| h.switch_arg(&s, ctx))
            }
            Record::TreeHead(h) => {
                self.a.tool_tids.extend(h.agent_tids.iter().copied());
                // A tid's first Java thread in a dump names it: the JVM
                // renames `main` to `DestroyJavaVM` when `main` returns.
                self.named.clear();
            }
            Record::TreeThreadEncoded(th) => {
                // The JVM knows its threads' full names (the kernel's are
                // cut to 15 characters, and a JVM's main thread is `java`).
                // (`tid-N` is the agent's stand-in for a name it could not read.)
                if !th.name.is_empty()
                    && th.name != format!("tid-{}", th.tid)
                    && self.named.insert(th.tid)
                    && !self.a.java.has_name(th.tid)
                {
                    self.a.names.insert(th.tid, (th.pid, th.name));
                }
            }
            // Kept encoded (above); the JVMs' waits were read before the pass.
            Record::TreeThread(_)
            | Record::JvmWaits(_)
            | Record::JavaSymbol(_)
            | Record::JavaStack(_)
            | Record::JavaWait(_) => {}
            // Interned stacks and symbols, exits, module maps, and any kind
            // a new source adds: its handler takes it.
            other => self.offer(other),
        }
    }

    /// A dispatch inside the window.
    fn dispatch(&mut self, d: &idleflow_format::Dispatch) {
        self.a.dispatches += 1;
        let out = self.a.accounting.dispatch(d);
        let ci = self.a.accounting.cpu_slot(d.cpu);
        if self.carried.len() <= ci {
            self.carried.resize(ci + 1, None);
        }
        let own = OwnThreads {
            prev: self.a.tool_tids.contains(&d.prev_tid),
            next: self.a.tool_tids.contains(&d.next_tid),
        };
        let e = DispatchEvent {
            ci,
            dispatch: d,
            outcome: &out,
            own,
        };
        self.tell(|h, ctx| h.dispatch(&e, ctx));
        if out.to_idle {
            self.previous.to_idle(ci, d);
        }
        // Causes are counted when their idle interval ends, so one
        // lookup carries the count, the state and the idle time.
        // One of idleflow's own threads woke on an idle CPU: the
        // idle after it leaves again continues this one's.
        let charged = out.closed_idle.and_then(|iv| self.interval(&iv));
        if d.next_tid != IDLE_TID && !own.next {
            self.carried[ci] = None;
        } else if out.closed_idle.is_some() {
            // An idle interval ends only when a thread comes: one
            // of idleflow's here.
            self.carried[ci] = charged;
        }
        if let Some((tid, state)) = out.abandoned_cause {
            self.cause(ci, tid, state, (d.time, d.time), 0);
        }
    }

    /// A stack taken at the switch-out just read.
    fn switch_stack(&mut self, s: &idleflow_format::SwitchStack, kind: StackKind) {
        let ci = self.a.accounting.cpu_slot(s.cpu);
        self.previous.own_stack(ci, s, kind);
        self.tell(|h, ctx| h.switch_stack(ci, s, kind, ctx));
    }

    /// Tells every handler the stacks carried to the switch-outs to idle
    /// whose own records are over and had none ([`PreviousStacks`]).
    fn carry_stacks(&mut self) {
        let mut carried = std::mem::take(&mut self.carried_stacks);
        self.previous.settle(&mut carried);
        for c in carried.drain(..) {
            match c {
                Carried::Stack(ci, s, kind) => {
                    self.tell(|h, ctx| h.carried_stack(ci, &s, kind, ctx))
                }
                Carried::Arg(a) => self.tell(|h, ctx| h.switch_arg(&a, ctx)),
            }
        }
        self.carried_stacks = carried;
    }

    /// Accounts idle interval `iv` and charges it to its cause: the
    /// dispatch to idle that began it, or, when one of idleflow's own
    /// threads began it after running on an idle CPU, the dispatch whose
    /// idle that thread interrupted ([`Pass::carried`]). Returns what
    /// it was charged to.
    fn interval(&mut self, iv: &IdleInterval) -> Option<Charge> {
        let a = &mut self.a;
        let ci = a.accounting.cpu_slot(iv.cpu);
        if ci >= a.intervals.len() {
            a.intervals.resize_with(ci + 1, histogram);
        }
        let len = iv.end.saturating_sub(iv.start);
        if let Some(w) = &mut a.windows {
            if a.cpu_windows.len() <= ci {
                a.cpu_windows.resize_with(ci + 1, Series::default);
            }
            w.add(&mut a.cpu_windows[ci], (iv.start, iv.end), len);
        }
        if iv.complete {
            // Out-of-range values are clamped by the histogram's bounds.
            a.intervals[ci].saturating_record(len.max(1));
        }
        let (tid, state) = iv.caused_by?;
        if a.tool_tids.contains(&tid) {
            if let Some(c) = self.carried.get(ci).copied().flatten() {
                let a = &mut self.a;
                a.continued_idle = (
                    a.continued_idle.0 + 1,
                    a.continued_idle.1.saturating_add(len),
                );
                self.charge(ci, &c, len, 0, (iv.start, iv.end));
                return Some(c);
            }
        }
        self.cause(ci, tid, state, (iv.start, iv.end), len)
    }

    /// Counts one dispatch to idle on CPU slot `ci` caused by `tid` leaving
    /// in `state` at `span.0`, followed by `idle_ns` of idle time (until
    /// `span.1`).
    fn cause(
        &mut self,
        ci: usize,
        tid: u32,
        state: PrevState,
        span: (u64, u64),
        idle_ns: u64,
    ) -> Option<Charge> {
        let time = span.0;
        if tid == IDLE_TID {
            return None;
        }
        let carried_from = self.previous.carried_from(ci, tid, time);
        let java = &self.a.java;
        let c = Charge {
            tid,
            state,
            time,
            stacks: self.a.kernel.stacks_at(ci, tid, time),
            stacks_carried: carried_from.is_some(),
            node: self.a.idle_paths.node_at(ci, tid, time),
            wait: java
                .wait_at(tid, time)
                .or_else(|| carried_from.and_then(|from| java.carried_wait(tid, from)))
                .copied(),
        };
        self.charge(ci, &c, idle_ns, 1, span);
        Some(c)
    }

    /// Credits `idle_ns` to the dispatch to idle `c` everywhere, counting
    /// `dispatches` (1, or 0 for idle that continued it); `span` is the
    /// idle's instants. The merged path comes first: its key goes to every
    /// handler with the credit.
    fn charge(&mut self, ci: usize, c: &Charge, idle_ns: u64, dispatches: u64, span: (u64, u64)) {
        let a = &mut self.a;
        let wait = c.wait.as_ref().map(|w| (w, a.java.wait_group(w)));
        let key = a.idle_paths.add(
            c.tid,
            c.stacks.unwrap_or((0, 0)),
            c.node,
            wait,
            (idle_ns, span),
            dispatches,
            a.windows.as_mut(),
        );
        let credit = Credit {
            ci,
            cpu: a.accounting.cpus().get(ci).map_or(0, |x| x.cpu),
            charge: *c,
            idle_ns,
            dispatches,
            span,
            key: PathKey(key),
        };
        self.tell(|h, ctx| h.idle(&credit, ctx));
        let e = self.a.causes.entry((ci, c.tid)).or_default();
        e.dispatches += dispatches;
        e.by_state[c.state.code() as usize] += dispatches;
        e.idle_ns = e.idle_ns.saturating_add(idle_ns);
    }

    /// idleflow's own threads, once every thread is named: the recorder's
    /// process's, and the JVMs' flight-recorder threads.
    ///
    /// A JVM's flight recorder runs because idleflow turned it on: the
    /// threads the recorder noted as working for idleflow (by tid), and
    /// those the JVM named `JFR …` after idleflow's first attach (its
    /// flight recorder's: the shutdown hook comes at exit, after the
    /// recorder last looked). Recordings from before the recorder noted
    /// them: every thread named like the flight recorder's or the attach
    /// listener.
    fn settle_own_threads(&mut self) {
        let a = &mut self.a;
        let tool_pid = a.info.tool_pid;
        if tool_pid != 0 {
            a.tool_tids.extend(
                a.names
                    .iter()
                    .filter(|(_, (pid, _))| *pid == tool_pid)
                    .map(|(tid, _)| *tid),
            );
        }
        for j in &a.java.jvms {
            a.tool_tids.extend(j.own_tids.iter().copied());
            a.tool_tids.extend(
                self.jfr_named
                    .iter()
                    .filter(|&&(_, pid, time)| pid == j.pid && time >= j.attached_ns)
                    .map(|&(tid, _, _)| tid),
            );
            if j.attached_ns == 0 {
                a.tool_tids.extend(
                    a.names
                        .iter()
                        .filter(|(_, (pid, comm))| *pid == j.pid && comm == "Attach Listener")
                        .map(|(tid, _)| *tid),
                );
            }
        }
    }

    /// Ends the pass where the recording ended: the idle still open is
    /// credited, the handlers finish, the windows settle.
    fn finish<R: Read + Seek>(mut self, reader: &Reader<R>) -> Result<Analysis, FormatError> {
        self.a.unknown_records = reader.unknown_records();
        self.a.cut_short = reader.cut_short().cloned();
        self.a.summary = match (reader.summary(), &self.a.cut_short) {
            (Some(s), _) => s.clone(),
            (None, Some(cut)) => RunSummary {
                stop_ns: cut.last_time,
                stop_reason: "cut short (no end record)".into(),
                ..Default::default()
            },
            (None, None) => {
                return Err(FormatError::Truncated {
                    offset: reader.offset(),
                    what: "no end record",
                })
            }
        };
        let from = self.a.window.0;
        let stop = self.a.summary.stop_ns.max(from).min(self.to);
        self.a.window = (from, stop);
        self.carry_stacks();
        for iv in self.a.accounting.finish(stop) {
            let _ = self.interval(&iv);
            let ci = self.a.accounting.cpu_slot(iv.cpu);
            self.tell(|h, ctx| h.open_at_end(ci, &iv, ctx));
        }
        self.tell(|h, ctx| h.finish(stop, ctx));
        let a = &mut self.a;
        if let Some(w) = &a.windows {
            let count = w.count(stop);
            a.idle_paths.settle(w, count);
            a.cpu_windows
                .resize_with(a.accounting.cpus().len(), Series::default);
            for s in &mut a.cpu_windows {
                w.settle(s, count);
            }
        }
        Ok(self.a)
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
pub(crate) use tests::analyse_records;
