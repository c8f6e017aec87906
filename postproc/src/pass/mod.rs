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

use hdrhistogram::Histogram;
use idleflow_accounting::{Accounting, IdleInterval};
use idleflow_format::{
    CutShort, FormatError, PrevState, Reader, Record, RunInfo, RunSummary, IDLE_TID,
};
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

/// Why a thread made a CPU idle, counted per (CPU, thread).
#[derive(Debug, Clone, Default)]
pub struct IdleCause {
    /// Dispatches to idle that followed the thread leaving.
    pub dispatches: u64,
    /// Idle time that followed, ns.
    pub idle_ns: u64,
    /// `dispatches` split by the thread's state when it left, indexed by [`PrevState::code`].
    pub by_state: [u64; PrevState::ALL.len()],
}

/// Everything one pass collects.
#[derive(Debug)]
pub struct Analysis {
    /// The recording's run information.
    pub info: RunInfo,
    /// How the recording ended.
    pub summary: RunSummary,
    /// The accounting after the whole stream.
    pub accounting: Accounting,
    /// Complete idle intervals per CPU (ns), in `info.cpus` order.
    pub intervals: Vec<Histogram<u64>>,
    /// Idle causes: (CPU index, tid) → counts.
    pub causes: FxHashMap<(usize, u32), IdleCause>,
    /// Latest known (pid, comm) of each thread.
    pub names: FxHashMap<u32, (u32, String)>,
    /// Each process's own name, as the kernel last named its main thread
    /// (a JVM's recorder names that thread `main`, the kernel `java`).
    pub process_names: FxHashMap<u32, String>,
    /// The processes whose threads the report shows (targets and their
    /// descendants); empty means all.
    pub shown_pids: FxHashSet<u32>,
    /// Dispatches read.
    pub dispatches: u64,
    /// Wakeups read.
    pub wakeups: u64,
    /// Of those, raised in an interrupt.
    pub interrupt_wakeups: u64,
    /// Wakeups with the waker's kernel stack (every sampled wake-up has
    /// one).
    pub wakeups_with_stacks: u64,
    /// Record kinds this version does not know, skipped.
    pub unknown_records: u64,
    /// The JVM agents' call trees, as the views asked for.
    pub views: BuiltViews,
    /// What the views were built with.
    pub view_options: ViewOptions,
    /// What the dispatch stream adds to each call-tree node.
    pub node_idle: NodeAttribution,
    /// idleflow's own threads (the recorder's, the JVM agents', the JVMs'
    /// flight recorder threads it turned on): never reported as causes of
    /// idle, shown apart.
    pub tool_tids: FxHashSet<u32>,
    /// Set when the recording ends without its end record (the recorder
    /// was killed, the disk filled up): it is read up to its last complete
    /// record, and the window ends there.
    pub cut_short: Option<CutShort>,
    /// The part of the recording analysed, ns on the recording's clock:
    /// the whole window, or what `--from` / `--to` chose.
    pub window: (u64, u64),
    /// Whether `window` is narrower than the recording (the kernel's
    /// `/proc/stat` readings then do not cover it).
    pub windowed: bool,
    /// The window starts where the program's start-up ended (`--skip-startup`).
    pub after_startup: bool,
    /// The JVMs' waits (their flight recorders), read before the pass.
    pub java: JavaWaits,
    /// What the dispatch stream adds to the JVMs' waits.
    pub java_idle: JavaIdle,
    /// The kernel stacks taken at switch-outs, and what they caused.
    pub kernel: KernelWaits,
    /// What each idle-causing dispatch's merged path is made of.
    pub idle_paths: IdlePathsAcc,
    /// Idle intervals begun by idleflow's own threads and charged to the
    /// dispatch whose idle they interrupted, and their idle (ns).
    pub continued_idle: (u64, u64),
    /// Each idle interval followed down its wait chain to its root.
    pub blame: BlameAcc,
    /// The time windows idle is split into ([`AnalysisOptions::windows`]).
    pub windows: Option<Windows>,
    /// Per CPU slot, its idle per window (with `windows`).
    pub cpu_windows: Vec<Series>,
}

/// Which part of a recording to analyse, in seconds from its start.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Window {
    /// Start, s (`None`: the recording's start).
    pub from_s: Option<f64>,
    /// End, s (`None`: the recording's end).
    pub to_s: Option<f64>,
    /// `from_s` is where the program's start-up ended ([`crate::pass::startup`]).
    pub after_startup: bool,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 2).expect("constant bounds are valid")
}

/// What to analyse and which views to build.
#[derive(Debug, Clone, Default)]
pub struct AnalysisOptions {
    /// The part of the recording.
    pub window: Window,
    /// The call-tree views.
    pub views: ViewOptions,
    /// Also split each path's and each CPU's idle into time windows
    /// ([`crate::pass::windows`]; at most [`MAX_WINDOWS`], at least
    /// [`MIN_WINDOW_NS`] wide): what compares runs by their own noise and
    /// draws idle over time.
    pub windows: bool,
}

/// The most time windows a series keeps.
pub const MAX_WINDOWS: usize = 64;
/// The narrowest time window, ns.
pub const MIN_WINDOW_NS: u64 = 50_000_000;

impl Analysis {
    /// Reads the whole recording from `input`, with the default views.
    pub fn run(input: impl Read + Seek + Send) -> Result<Self, FormatError> {
        Self::run_with_progress(input, &AnalysisOptions::default(), |_| {})
    }

    /// Like [`Analysis::run`], for the part of the recording and the views
    /// `opts` choose, calling `progress` with the bytes read so far every
    /// few hundred thousand records.
    ///
    /// A window is accounted like a recording that started and stopped at
    /// its edges: dispatches, wake-ups and losses outside it are skipped, a
    /// CPU's first dispatch inside it says who had the CPU since the edge —
    /// unless the dispatches before the edge say otherwise (a stream break:
    /// the time from the edge is unknown, as in the whole recording).
    /// Thread names and call trees come from the whole recording; the
    /// trees' own counts (CALLS, BASE, …) are the agent's, for the whole run.
    ///
    /// The call trees (after the dispatches in a recording) are read twice
    /// more once the dispatches are accounted, one thread at a time
    /// ([`crate::pass::call_tree`]): memory never holds a whole dump.
    pub fn run_with_progress(
        input: impl Read + Seek + Send,
        opts: &AnalysisOptions,
        progress: impl FnMut(u64),
    ) -> Result<Self, FormatError> {
        Self::run_observed(input, opts, progress, None)
    }

    /// [`Analysis::run_with_progress`], with one more [`Handler`] of the
    /// caller's, told every event after the pass's own (outputs that
    /// follow time: `export --format perfetto`).
    pub fn run_observed(
        input: impl Read + Seek + Send,
        opts: &AnalysisOptions,
        mut progress: impl FnMut(u64),
        extra: Option<&mut dyn Handler>,
    ) -> Result<Self, FormatError> {
        let mut reader = Reader::new(input)?;
        // Call trees are walked node by node, never held decoded.
        reader.keep_trees_encoded(true);
        let mut pass = Pass::new(&mut reader, opts, extra)?;
        let mut batches = 0u32;
        // The one pass over the dispatches: decoded on a second thread.
        let decoded = std::thread::scope(|scope| {
            crate::pass::ahead::read_ahead(scope, reader, |batch| {
                batches = batches.wrapping_add(1);
                if batches.is_multiple_of(64) {
                    progress(batch.offset);
                }
                for rec in batch.records {
                    pass.record(rec);
                }
            })
        })?;
        let (mut reader, trees_at) = (decoded.reader, decoded.trees_at);
        pass.settle_own_threads();
        let mut a = pass.finish(&reader)?;
        if let Some(at) = trees_at {
            a.views = a.build_views(&mut reader, at)?;
        }
        Ok(a)
    }

    /// The pass's handlers, in the order each event is told to them, and
    /// the [`Context`] they read: the one place a new accumulator is
    /// listed.
    fn handlers(&mut self) -> (Context<'_>, [&mut dyn Handler; 5]) {
        let ctx = Context {
            names: &self.names,
            own: &self.tool_tids,
            java: &self.java,
        };
        let handlers: [&mut dyn Handler; 5] = [
            &mut self.java_idle,
            &mut self.kernel,
            &mut self.blame,
            &mut self.node_idle,
            &mut self.idle_paths,
        ];
        (ctx, handlers)
    }

    /// The two passes of [`Views`] over the tree records from `at` on.
    fn build_views<R: Read + Seek>(
        &self,
        reader: &mut Reader<R>,
        at: idleflow_format::Position,
    ) -> Result<BuiltViews, FormatError> {
        let mut views = Views::new(self.view_options.clone());
        for pass in 0..2 {
            reader.seek(at)?;
            while let Some(rec) = reader.next_complete_record()? {
                match rec {
                    Record::TreeHead(h) => views.head(&h),
                    // idleflow's own threads (a flight recorder it started)
                    // are never a cause, in the tree either.
                    Record::TreeThreadEncoded(t) if self.tool_tids.contains(&t.tid) => {}
                    Record::TreeThreadEncoded(t) => views.thread(&t, &self.node_idle, &self.java),
                    _ => {}
                }
            }
            if pass == 0 {
                views.end_first_pass();
            }
        }
        Ok(views.build())
    }

    /// Whether `tid` is one of idleflow's own threads, as far as the pass
    /// knows by now (the recorder's, named in the stream; the JVMs' that
    /// worked for it, from their waits record; flight-recorder threads
    /// named after idleflow attached).
    fn note_own(&mut self, tid: u32, pid: u32, comm: &str, time: u64) {
        let own = (pid == self.info.tool_pid && pid != 0)
            || (comm.starts_with("JFR ")
                && self
                    .java
                    .jvms
                    .iter()
                    .any(|j| j.pid == pid && j.attached_ns != 0 && time >= j.attached_ns));
        if own {
            self.tool_tids.insert(tid);
        }
    }

    /// The JVMs of the recording (processes with HotSpot's `VM Thread`)
    /// among the shown ones.
    pub fn jvm_pids(&self) -> Vec<u32> {
        let mut jvms: Vec<u32> = self
            .names
            .values()
            .filter(|(pid, comm)| {
                comm == "VM Thread" && (self.shown_pids.is_empty() || self.shown_pids.contains(pid))
            })
            .map(|(pid, _)| *pid)
            .collect();
        jvms.sort_unstable();
        jvms.dedup();
        jvms
    }

    /// The name of process `pid` (`pid N` where unknown).
    pub fn process_name(&self, pid: u32) -> String {
        self.process_names
            .get(&pid)
            .or_else(|| self.names.get(&pid).map(|n| &n.1))
            .map_or_else(|| format!("pid {pid}"), Clone::clone)
    }

    /// Window length, ns.
    pub fn duration_ns(&self) -> u64 {
        self.window.1.saturating_sub(self.window.0)
    }

    /// Whether the report shows thread `tid` (in a target process, or all).
    pub fn shows(&self, tid: u32) -> bool {
        self.shown_pids.is_empty()
            || self
                .names
                .get(&tid)
                .is_some_and(|(pid, _)| self.shown_pids.contains(pid))
    }
}

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
        let c = Charge {
            tid,
            state,
            time,
            stacks: self.a.kernel.stacks_at(ci, tid, time),
            stacks_carried: self.previous.carried_at(ci, tid, time),
            node: self.a.idle_paths.node_at(ci, tid, time),
            wait: self.a.java.wait_at(tid, time).copied(),
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

/// Analyses a recording of `records` (constructed streams, for the
/// post-processor's unit tests) that ended at `stop_ns`.
#[cfg(test)]
pub(crate) fn analyse_records(info: &RunInfo, records: &[Record], stop_ns: u64) -> Analysis {
    analyse_records_told(info, records, stop_ns, None)
}

/// [`analyse_records`], telling `extra` every event of the pass.
#[cfg(test)]
pub(crate) fn analyse_records_told(
    info: &RunInfo,
    records: &[Record],
    stop_ns: u64,
    extra: Option<&mut dyn Handler>,
) -> Analysis {
    let mut w = idleflow_format::Writer::new(Vec::new(), info).unwrap();
    for r in records {
        w.write(r).unwrap();
    }
    let bytes = w
        .finish(&RunSummary {
            stop_ns,
            ..Default::default()
        })
        .unwrap();
    let opts = AnalysisOptions::default();
    Analysis::run_observed(std::io::Cursor::new(bytes), &opts, |_| {}, extra).unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;
    use idleflow_format::{Dispatch, NodeTag, ThreadInfo};

    const TOOL: u32 = 9;

    fn dispatch(time: u64, prev_tid: u32, prev_state: PrevState, next_tid: u32) -> Record {
        Record::Dispatch(Dispatch {
            time,
            cpu: 0,
            prev_tid,
            prev_state,
            next_tid,
            prev_node: NodeTag::Untraced,
        })
    }

    fn thread(tid: u32, pid: u32, comm: &str) -> Record {
        Record::Thread(ThreadInfo {
            time: 1,
            tid,
            pid,
            ppid: 1,
            comm: comm.into(),
        })
    }

    fn analyse(records: &[Record], stop_ns: u64) -> Analysis {
        analyse_told(records, stop_ns, None)
    }

    fn analyse_told(records: &[Record], stop_ns: u64, extra: Option<&mut dyn Handler>) -> Analysis {
        let info = RunInfo {
            tool_pid: TOOL,
            ..RunInfo::minimal(vec![0], 0)
        };
        analyse_records_told(&info, records, stop_ns, extra)
    }

    #[test]
    fn the_idle_after_idleflow_woke_on_an_idle_cpu_continues_the_idle_it_interrupted() {
        use PrevState::{Preempted, Sleeping};
        let a = analyse(
            &[
                thread(51, 50, "worker"),
                thread(10, TOOL, "idleflow-drain"),
                thread(61, 60, "other"),
                dispatch(10, IDLE_TID, Preempted, 51),
                // The worker waits: idle from 100...
                dispatch(100, 51, Sleeping, IDLE_TID),
                // ...the drain wakes on the idle CPU twice, and leaves...
                dispatch(200, IDLE_TID, Preempted, 10),
                dispatch(210, 10, Sleeping, IDLE_TID),
                dispatch(300, IDLE_TID, Preempted, 10),
                dispatch(305, 10, Sleeping, IDLE_TID),
                // ...until another thread runs and waits in turn...
                dispatch(500, IDLE_TID, Preempted, 61),
                dispatch(600, 61, Sleeping, 10),
                // ...handing the CPU to the drain, which leaves it idle:
                // it interrupted no idle, so the idle after it is its own.
                dispatch(620, 10, Sleeping, IDLE_TID),
            ],
            700,
        );
        let worker = &a.causes[&(0, 51)];
        assert_eq!(worker.dispatches, 1);
        assert_eq!(worker.idle_ns, 100 + 90 + 195);
        assert_eq!(a.continued_idle, (2, 90 + 195));
        let drain = &a.causes[&(0, 10)];
        assert_eq!((drain.dispatches, drain.idle_ns), (1, 80));
        assert!(!a.causes.contains_key(&(0, 61)));
        assert!(a.tool_tids.contains(&10));
    }

    mod carried;

    /// Counts what a caller's handler is told.
    #[derive(Default)]
    struct Seen {
        dispatches: Vec<u64>,
        credits: Vec<(u32, u64, u64)>,
        open_at_end: usize,
        finished: Option<u64>,
    }

    impl Handler for Seen {
        fn dispatch(&mut self, e: &DispatchEvent<'_>, _ctx: &Context<'_>) {
            self.dispatches.push(e.dispatch.time);
        }
        fn idle(&mut self, c: &Credit, _ctx: &Context<'_>) {
            self.credits.push((c.charge.tid, c.idle_ns, c.dispatches));
        }
        fn open_at_end(&mut self, _ci: usize, _iv: &IdleInterval, _ctx: &Context<'_>) {
            self.open_at_end += 1;
        }
        fn finish(&mut self, stop: u64, _ctx: &Context<'_>) {
            self.finished = Some(stop);
        }
    }

    #[test]
    fn a_callers_handler_is_told_the_windows_dispatches_and_every_credit_once() {
        use PrevState::{Preempted, Sleeping};
        let records = [
            thread(51, 50, "worker"),
            thread(10, TOOL, "idleflow-drain"),
            dispatch(10, IDLE_TID, Preempted, 51),
            dispatch(100, 51, Sleeping, IDLE_TID),
            // The drain interrupts the worker's idle: a credit of 0 dispatches.
            dispatch(200, IDLE_TID, Preempted, 10),
            dispatch(210, 10, Sleeping, IDLE_TID),
            dispatch(400, IDLE_TID, Preempted, 51),
            // Idle still open at the end: credited, then told as open.
            dispatch(450, 51, Sleeping, IDLE_TID),
        ];
        let mut seen = Seen::default();
        let a = analyse_told(&records, 500, Some(&mut seen));
        assert_eq!(seen.dispatches, [10, 100, 200, 210, 400, 450]);
        assert_eq!(seen.credits, [(51, 100, 1), (51, 190, 0), (51, 50, 1)]);
        assert_eq!((seen.open_at_end, seen.finished), (1, Some(500)));
        // The credits are the causes' idle, every nanosecond once.
        let total: u64 = seen.credits.iter().map(|c| c.1).sum();
        assert_eq!(total, a.causes[&(0, 51)].idle_ns);
    }
}
