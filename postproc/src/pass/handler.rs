//! The pass's handler interface: what each accumulator of the one pass
//! over a recording is told, and what it may look at while it is told.
//!
//! As perf's `struct perf_tool` gives each analysis one callback per event
//! kind over one event loop, the pass ([`crate::pass`]) keeps the dispatch
//! accounting, the thread names and the charging of each idle interval to
//! the dispatch that began it, and hands every event to each [`Handler`]
//! in turn: the accumulators of `pass/` (Java waits, kernel waits, blame,
//! call-tree nodes, idle paths) and, for outputs that follow time, one
//! handler of the caller's (`export --format perfetto`).
//!
//! Invariants: a handler sees only the window's dispatches, wake-ups and
//! samples, in the recording's time order, each dispatch after the
//! accounting took it and before the idle it closed is credited; it reads
//! the pass's shared state through [`Context`] and never another handler's.

use idleflow_accounting::{DispatchOutcome, IdleInterval};
use idleflow_format::{Dispatch, JavaWait, PrevState, Record, SwitchArg, SwitchStack, Wakeup};
use rustc_hash::{FxHashMap, FxHashSet};

use crate::pass::idle_paths::key::PathKey;
use crate::pass::java_waits::index::JavaWaits;

/// What every handler may read while it is told an event: the pass's own
/// state as known so far.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// tid → (pid, name), as known so far.
    pub names: &'a FxHashMap<u32, (u32, String)>,
    /// idleflow's own threads, as known so far (never a cause of idle).
    pub own: &'a FxHashSet<u32>,
    /// The JVMs' waits, read before the pass (empty without them).
    pub java: &'a JavaWaits,
}

impl Context<'_> {
    /// The process of thread `tid`, where known.
    pub fn pid_of(&self, tid: u32) -> Option<u32> {
        self.names.get(&tid).map(|n| n.0)
    }

    /// Whether `tid` is one of idleflow's own threads.
    pub fn is_own(&self, tid: u32) -> bool {
        self.own.contains(&tid)
    }
}

/// Which of a dispatch's two threads are idleflow's own.
#[derive(Debug, Clone, Copy, Default)]
pub struct OwnThreads {
    /// The thread that left.
    pub prev: bool,
    /// The thread that came.
    pub next: bool,
}

/// One dispatch of the window, as the accounting took it.
#[derive(Debug, Clone, Copy)]
pub struct DispatchEvent<'a> {
    /// Its CPU's slot (index in the accounting's CPUs).
    pub ci: usize,
    /// The dispatch.
    pub dispatch: &'a Dispatch,
    /// What it did (left its CPU idle, closed an idle interval, …).
    pub outcome: &'a DispatchOutcome,
    /// Which of its threads are idleflow's own.
    pub own: OwnThreads,
}

/// Which stack a sample carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StackKind {
    /// The kernel's stack.
    Kernel,
    /// The user stack.
    User,
}

/// An idle-causing dispatch as the pass charged it: the thread, how and
/// when it left, and what each source knew of it then.
#[derive(Debug, Clone, Copy)]
pub struct Charge {
    /// The thread that left.
    pub tid: u32,
    /// How it left.
    pub state: PrevState,
    /// When it left, ns on the recording's clock.
    pub time: u64,
    /// Its kernel and user stack ids, if stacks were taken.
    pub stacks: Option<(u64, u64)>,
    /// `stacks` are not its own but its thread's previous ones, carried to
    /// a switch-out to idle the recorder took no stacks at (stacks sampled
    /// under `RunInfo::idle_stack_budget`; [`crate::pass::previous_stacks`]).
    pub stacks_carried: bool,
    /// Its call-tree node (0: none).
    pub node: u64,
    /// The JVM wait it lies in.
    pub wait: Option<JavaWait>,
}

/// Idle credited to the dispatch that began it, once its idle interval
/// ended.
#[derive(Debug, Clone, Copy)]
pub struct Credit {
    /// The CPU's slot.
    pub ci: usize,
    /// The CPU's number.
    pub cpu: u32,
    /// The dispatch that began the idle.
    pub charge: Charge,
    /// The idle credited, ns.
    pub idle_ns: u64,
    /// 1, or 0 for idle that continued the charge's after one of
    /// idleflow's own threads ran on the idle CPU.
    pub dispatches: u64,
    /// The idle's instants, ns.
    pub span: (u64, u64),
    /// The charge's merged path.
    pub key: PathKey,
}

/// One accumulator of the pass: each method is an event kind, called in
/// the recording's time order; the defaults ignore it.
pub trait Handler {
    /// A dispatch inside the window.
    fn dispatch(&mut self, _e: &DispatchEvent<'_>, _ctx: &Context<'_>) {}

    /// A wake-up inside the window.
    fn wakeup(&mut self, _w: &Wakeup, _ctx: &Context<'_>) {}

    /// A stack taken at the switch-out just read on CPU slot `ci`.
    fn switch_stack(&mut self, _ci: usize, _s: &SwitchStack, _kind: StackKind, _ctx: &Context<'_>) {
    }

    /// A stack carried to the switch-out to idle just read on CPU slot
    /// `ci`, which had none of its own: its thread's previous one, as
    /// [`crate::pass::previous_stacks`] finds it (recordings whose stacks
    /// at the switch-outs to idle were sampled). Told where that
    /// switch-out's own stack would have come; by default taken as one.
    fn carried_stack(&mut self, ci: usize, s: &SwitchStack, kind: StackKind, ctx: &Context<'_>) {
        self.switch_stack(ci, s, kind, ctx);
    }

    /// A stack taken at the wake-up just read.
    fn wake_stack(&mut self, _s: &SwitchStack, _kind: StackKind, _ctx: &Context<'_>) {}

    /// The first argument of the system call a thread left in.
    fn switch_arg(&mut self, _a: &SwitchArg, _ctx: &Context<'_>) {}

    /// A record of the recording the pass does not take apart itself
    /// (interned stacks and their symbols, exits), whatever its time:
    /// offered to each handler in turn, a handler that keeps it returns
    /// `None`, one that only looks returns it for the next.
    fn other(&mut self, rec: Record, _ctx: &Context<'_>) -> Option<Record> {
        Some(rec)
    }

    /// Idle credited to the dispatch that began it.
    fn idle(&mut self, _c: &Credit, _ctx: &Context<'_>) {}

    /// The idle interval still open on CPU slot `ci` when the window
    /// ended (credited just before).
    fn open_at_end(&mut self, _ci: usize, _iv: &IdleInterval, _ctx: &Context<'_>) {}

    /// The pass is over: the window ended at `stop`.
    fn finish(&mut self, _stop: u64, _ctx: &Context<'_>) {}
}
