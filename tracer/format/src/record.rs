//! The record types of a recording, as Rust values.

use serde::{Deserialize, Serialize};

use crate::tree::{EncodedThread, ThreadTree, TreeHead};
use crate::waits::{JavaStack, JavaSymbol, JavaWait, JvmWaits};

/// The thread id of a CPU's idle task (`swapper/N`): the same on every CPU.
pub const IDLE_TID: u32 = 0;

/// Why the previous thread left the CPU at a dispatch: the kernel's
/// `prev_state` of `sched_switch`, normalized to one letter as `ps` prints it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum PrevState {
    /// Preempted while runnable (`R`, `R+`).
    Preempted,
    /// Interruptible sleep (`S`): waiting on a lock, a condition, a timer, the network.
    Sleeping,
    /// Uninterruptible sleep (`D`): usually disk I/O.
    DiskSleep,
    /// Stopped (`T`) or traced (`t`).
    Stopped,
    /// Exiting (`X`, `Z`).
    Dead,
    /// Parked kthread (`P`).
    Parked,
    /// Idle kthread wait (`I`, `TASK_IDLE`).
    IdleWait,
    /// Left the CPU not runnable, but the `sched_switch` sample that says why
    /// was not seen (only the switch record was).
    Blocked,
    /// Nothing is known of why it left (the previous task is the idle task, or
    /// only the switch-in record of the next task was seen).
    Unknown,
}

impl PrevState {
    /// All states, in code order.
    pub const ALL: [PrevState; 9] = [
        PrevState::Preempted,
        PrevState::Sleeping,
        PrevState::DiskSleep,
        PrevState::Stopped,
        PrevState::Dead,
        PrevState::Parked,
        PrevState::IdleWait,
        PrevState::Blocked,
        PrevState::Unknown,
    ];

    /// Decodes the kernel's `prev_state` value of the `sched_switch`
    /// tracepoint. `0` and the `TASK_REPORT_MAX` bit (set when the task was
    /// preempted) mean runnable; otherwise the lowest state bit wins.
    pub fn from_kernel(prev_state: u64) -> Self {
        let bits = prev_state & 0xff;
        if bits == 0 {
            return PrevState::Preempted;
        }
        match bits.trailing_zeros() {
            0 => PrevState::Sleeping,
            1 => PrevState::DiskSleep,
            2 | 3 => PrevState::Stopped,
            4 | 5 => PrevState::Dead,
            6 => PrevState::Parked,
            _ => PrevState::IdleWait,
        }
    }

    /// The one-byte code stored in a recording.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The state for a stored code, if the code is known.
    pub fn from_code(code: u8) -> Option<Self> {
        Self::ALL.get(code as usize).copied()
    }

    /// The letter `ps`/`perf` print for this state.
    pub fn letter(self) -> &'static str {
        match self {
            PrevState::Preempted => "R",
            PrevState::Sleeping => "S",
            PrevState::DiskSleep => "D",
            PrevState::Stopped => "T",
            PrevState::Dead => "X",
            PrevState::Parked => "P",
            PrevState::IdleWait => "I",
            PrevState::Blocked => "B",
            PrevState::Unknown => "?",
        }
    }

    /// Whether the thread was still runnable when it left the CPU.
    pub fn is_runnable(self) -> bool {
        self == PrevState::Preempted
    }
}

/// The call-tree node a thread was in at a dispatch, as the tracer read it
/// from the thread work area.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub enum NodeTag {
    /// The thread has no work-area slot (not a traced JVM thread).
    #[default]
    Untraced,
    /// The node current at the dispatch's time.
    Current(u64),
    /// A node from the slot's history ring.
    Ring(u64),
    /// Traced, but the node at that time is not known (never guessed).
    Unknown,
}

impl NodeTag {
    /// The node, if known.
    pub fn node(self) -> Option<u64> {
        match self {
            NodeTag::Current(n) | NodeTag::Ring(n) => Some(n),
            NodeTag::Untraced | NodeTag::Unknown => None,
        }
    }
}

/// One dispatch: on `cpu` at `time`, `prev_tid` left the CPU and `next_tid`
/// got it. Tid [`IDLE_TID`] is the CPU's idle task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dispatch {
    /// Nanoseconds on the recording's clock.
    pub time: u64,
    /// The CPU the dispatch happened on.
    pub cpu: u32,
    /// The thread that left the CPU.
    pub prev_tid: u32,
    /// Why it left.
    pub prev_state: PrevState,
    /// The thread that got the CPU.
    pub next_tid: u32,
    /// The call-tree node `prev_tid` was in when it left (JVM threads).
    pub prev_node: NodeTag,
}

/// A thread made runnable (`sched_wakeup` or `sched_wakeup_new`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Wakeup {
    /// Nanoseconds on the recording's clock.
    pub time: u64,
    /// The CPU the wakeup was raised on.
    pub cpu: u32,
    /// The thread running there when it was raised (0 = idle): the waker
    /// when `context` is [`WakeContext::Task`]; in an interrupt, only the
    /// thread the interrupt happened to hit, never the waker.
    pub waker_tid: u32,
    /// The thread made runnable.
    pub wakee_tid: u32,
    /// The CPU the wakee will run on (`sched_waking`: the CPU it last ran on).
    pub target_cpu: u32,
    /// `true` for a new thread's first wakeup (`sched_wakeup_new`).
    pub new_thread: bool,
    /// Where it was raised: a thread, or an interrupt (a device's).
    pub context: WakeContext,
}

/// Where a wake-up was raised: in a thread (its waker), or in interrupt
/// context — a device's (a timer, the network, a disk), whatever task the
/// interrupt hit. From the tracepoint's `common_flags`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum WakeContext {
    /// A thread's own code (an unlock, an unpark, a write).
    Task,
    /// A softirq (timers, network receive, block completion).
    SoftIrq,
    /// A hard interrupt handler.
    HardIrq,
    /// A non-maskable interrupt.
    Nmi,
    /// Not recorded (recordings of format 2.15 and older, whose waker came
    /// from `sched_wakeup` and may be the target CPU's).
    #[default]
    Unknown,
}

impl WakeContext {
    /// All contexts, in code order.
    pub const ALL: [WakeContext; 5] = [
        WakeContext::Task,
        WakeContext::SoftIrq,
        WakeContext::HardIrq,
        WakeContext::Nmi,
        WakeContext::Unknown,
    ];

    /// Its code in a recording.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The context of code `code`.
    pub fn from_code(code: u8) -> Option<Self> {
        Self::ALL.get(usize::from(code)).copied()
    }

    /// From a tracepoint's `common_flags` (the kernel's `TRACE_FLAG_*`:
    /// `HARDIRQ` 0x08, `SOFTIRQ` 0x10, `NMI` 0x40).
    pub fn from_trace_flags(flags: u8) -> Self {
        if flags & 0x40 != 0 {
            WakeContext::Nmi
        } else if flags & 0x08 != 0 {
            WakeContext::HardIrq
        } else if flags & 0x10 != 0 {
            WakeContext::SoftIrq
        } else {
            WakeContext::Task
        }
    }

    /// Whether a device raised it (an interrupt of any kind).
    pub fn is_interrupt(self) -> bool {
        matches!(
            self,
            WakeContext::SoftIrq | WakeContext::HardIrq | WakeContext::Nmi
        )
    }

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            WakeContext::Task => "task",
            WakeContext::SoftIrq => "softirq",
            WakeContext::HardIrq => "hardirq",
            WakeContext::Nmi => "nmi",
            WakeContext::Unknown => "unknown",
        }
    }
}

/// A thread's process and name, as known from `time` on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadInfo {
    /// Nanoseconds on the recording's clock (the start time for threads that existed then).
    pub time: u64,
    /// Thread id.
    pub tid: u32,
    /// Process id (thread group id).
    pub pid: u32,
    /// Parent process id, 0 where not known.
    pub ppid: u32,
    /// Thread name (`comm`).
    pub comm: String,
}

/// A thread exited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadExit {
    /// Nanoseconds on the recording's clock.
    pub time: u64,
    /// Thread id.
    pub tid: u32,
    /// Process id.
    pub pid: u32,
}

/// The kernel dropped `count` records of one CPU's ring (`PERF_RECORD_LOST`)
/// just before this point of the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lost {
    /// Nanoseconds on the recording's clock.
    pub time: u64,
    /// The CPU whose records were lost.
    pub cpu: u32,
    /// How many records.
    pub count: u64,
}

/// One CPU's idle counters in `/proc/stat`, in ticks of `RunInfo::user_hz`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcStatCpu {
    /// CPU number.
    pub cpu: u32,
    /// The `idle` field.
    pub idle: u64,
    /// The `iowait` field.
    pub iowait: u64,
}

/// What the recording is of; the first record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunInfo {
    /// The idleflow version that wrote it.
    pub tool_version: String,
    /// `uname -r` of the recording machine.
    pub kernel_release: String,
    /// Host name of the recording machine.
    pub hostname: String,
    /// The CPUs recorded (all online CPUs), ascending.
    pub cpus: Vec<u32>,
    /// The clock of every timestamp (`CLOCK_MONOTONIC`).
    pub clock: String,
    /// The command launched (`record -- CMD`), empty for system-wide or `--pid`.
    pub command: Vec<String>,
    /// Processes the report shows threads of: the launched command's pid or
    /// `--pid`; empty for a system-wide recording.
    pub target_pids: Vec<u32>,
    /// Start of the recording window (all events enabled), ns on `clock`.
    pub start_ns: u64,
    /// The same instant as wall-clock time, ns since the Unix epoch.
    pub start_unix_ns: u64,
    /// `/proc/stat` idle counters read at the start of the window.
    pub proc_stat_start: Vec<ProcStatCpu>,
    /// `/proc/stat` tick rate (`sysconf(_SC_CLK_TCK)`).
    pub user_hz: u64,
    /// Size of each CPU's ring buffer, bytes.
    pub ring_bytes: u64,
    /// The recorder's own process: its threads are idleflow, not the
    /// program measured (0 in recordings that do not say).
    #[serde(default)]
    pub tool_pid: u32,
    /// JVMs ran with their flight recorder on: the recording holds their
    /// waits after its dispatches ([`crate::waits`]).
    #[serde(default)]
    pub java_waits: bool,
    /// Where the recorder took stacks: `idle` (at the switch-outs that
    /// leave a CPU idle), `waits` (also at every other blocking
    /// switch-out), empty (none, or an older recorder).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stacks: String,
    /// With `stacks` `waits`: the stacks of one interruptible sleep
    /// (state S) in this many were taken, per CPU (`record --wait-sample`);
    /// 0 or 1: every one.
    #[serde(default, skip_serializing_if = "is_every_one")]
    pub wait_sample_period: u32,
    /// With `stacks`: the switch-outs that leave a CPU idle had their
    /// stacks taken at most about this many times a second on each CPU,
    /// each such switch-out with the same chance (`record --stack-budget`;
    /// the eBPF source). A switch-out to idle without stacks then stands
    /// for its thread's previous stacks (the report says how much idle
    /// that covers). 0: every one was taken.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub idle_stack_budget: u32,
    /// Wake-ups had the waker's stacks taken at one in this many, each at
    /// random (`record --waker-sample`; 0: none taken, or an older
    /// recorder).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub waker_sample_period: u32,
    /// And at most about this many a second on each CPU, each wake-up with
    /// the same chance when more came (`record --waker-stack-budget`; the
    /// eBPF source); 0: no budget.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub waker_stack_budget: u32,
    /// Which kernel events recorded the dispatches and wake-ups: `perf`
    /// (perf's switch records and tracepoint samples) or `bpf` (eBPF
    /// programs at the scheduler's tracepoints); empty in older recordings.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub event_source: String,
    /// Why that source: asked for, or what the eBPF probe said (`no
    /// CAP_BPF …`); empty in older recordings.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub event_source_why: String,
    /// What named the JVMs' Java frames and waits, as `record --java`'s
    /// modes: `vm` (their own structures, read from outside), `waits`
    /// (their flight recorders), `stacks`, `tree`, comma-separated; empty:
    /// nothing asked of them, or an older recorder.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub java_frames: String,
    /// Why those: asked for, or the default and what chose it (`default on
    /// the eBPF source`, …).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub java_frames_why: String,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_every_one(period: &u32) -> bool {
    *period <= 1
}

impl RunInfo {
    /// Run information with only the CPUs and the window start set (the
    /// rest empty): for recordings written by tests and tools.
    pub fn minimal(cpus: Vec<u32>, start_ns: u64) -> Self {
        RunInfo {
            tool_version: env!("CARGO_PKG_VERSION").into(),
            kernel_release: String::new(),
            hostname: String::new(),
            cpus,
            clock: "CLOCK_MONOTONIC".into(),
            command: Vec::new(),
            target_pids: Vec::new(),
            start_ns,
            start_unix_ns: 0,
            proc_stat_start: Vec::new(),
            user_hz: 100,
            ring_bytes: 0,
            tool_pid: 0,
            java_waits: false,
            stacks: String::new(),
            wait_sample_period: 0,
            idle_stack_budget: 0,
            waker_sample_period: 0,
            waker_stack_budget: 0,
            event_source: String::new(),
            event_source_why: String::new(),
            java_frames: String::new(),
            java_frames_why: String::new(),
        }
    }
}

/// How the recording ended; the last record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct RunSummary {
    /// End of the recording window, ns on the recording's clock.
    pub stop_ns: u64,
    /// Why it stopped: `command exited`, `duration`, `interrupted`, `target exited`.
    pub stop_reason: String,
    /// Exit code of the launched command, if any.
    pub exit_code: Option<i32>,
    /// Records the kernel dropped, per CPU, in `RunInfo::cpus` order.
    pub lost_per_cpu: Vec<u64>,
    /// Dispatches written.
    pub dispatches: u64,
    /// Wakeups written.
    pub wakeups: u64,
    /// Events that reached the merge after later events had been written (a
    /// time-order violation; should be 0).
    pub late_events: u64,
    /// Ring records that could not be decoded (should be 0).
    #[serde(default)]
    pub undecodable: u64,
    /// JVM call-tree dumps embedded as TREE records.
    pub tree_dumps: u64,
    /// Call-tree dump files that could not be read (a JVM died while writing).
    pub tree_dumps_unreadable: u64,
    /// `/proc/stat` idle counters read at the end of the window.
    pub proc_stat_stop: Vec<ProcStatCpu>,
    /// Dispatches tagged unknown because the node current then was replaced
    /// within Δ (a node too short to be kept in the history ring).
    pub unknown_short: u64,
    /// Dispatches tagged unknown because their history entry was
    /// overwritten before the tracer read it.
    pub unknown_overwritten: u64,
    /// Dispatches of a thread that has a work-area slot, from before the
    /// agent claimed it (left untagged, like threads without a slot).
    pub before_claim: u64,
    /// Dispatches of a thread with a work-area slot, from after the agent
    /// released it at the thread's end (left untagged).
    pub after_release: u64,
    /// Why JVMs ran without call trees, as their agents told the recorder
    /// (`JVM PID: agent disabled: WHY`).
    pub agent_notes: Vec<String>,
    /// What went wrong reading the JVMs' flight recordings, or why a JVM
    /// has no Java waits (`record --java waits`).
    #[serde(default)]
    pub java_notes: Vec<String>,
    /// What the walks of blocked Java threads found (`record --java vm`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub java_walks: Option<crate::JavaWalkCounts>,
    /// How the thread that drains the rings ran: `SCHED_FIFO 10`, or
    /// ordinary and why (empty in older files).
    #[serde(default)]
    pub drain_priority: String,
    /// With the eBPF source: perf stack samples that found no eBPF switch
    /// or waking to go with (their stacks are not written).
    #[serde(default)]
    pub unpaired_stacks: u64,
    /// With the eBPF source: what its programs cost, timed by the kernel
    /// over part of the window (None: not timed, or another source).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_cost: Option<KernelCost>,
    /// A flight recorder's dump: what fired and on what state (None: an
    /// ordinary recording).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flight: Option<FlightDump>,
    /// The merge deferred past the window (`IDLEFLOW_DEFER=1`): the
    /// recorder's CPU time reading the spooled rounds back once the window
    /// closed, and the bytes spooled (None: merged as the window ran).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deferred_merge: Option<DeferredMerge>,
}

/// What the merge deferred past the window cost (`RunSummary::deferred_merge`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeferredMerge {
    /// The recorder's CPU time reading the rounds back, ns.
    pub cpu_ns: u64,
    /// Bytes spooled inside the window.
    pub bytes: u64,
}

/// Why a flight recorder (`record --flight`) wrote this recording: the
/// trigger that fired, when, on what state, and the policy it belongs to.
/// The window is the recording's (`RunInfo::start_ns` to `stop_ns`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlightDump {
    /// The trigger as the user wrote it (`wait>=500ms in http-nio-*`,
    /// `signal`, `request`).
    pub trigger: String,
    /// When its condition held, ns on the recording's clock.
    pub fired_ns: u64,
    /// The state that made it hold, in words (`http-nio-8080-exec-3
    /// (pid 4242) waiting 512 ms`), or who asked.
    pub state: String,
    /// Every trigger of the recorder, its cooldown and caps, as given.
    pub policy: String,
    /// The ring's length, ns (`--flight`).
    pub keep_ns: u64,
    /// This dump's number in the recorder's life (from 1).
    pub number: u32,
    /// The recorder's resident memory when the window was taken, bytes
    /// (0: not known, a dump of format 1.17 or older).
    #[serde(default)]
    pub recorder_rss_bytes: u64,
    /// What its ring held then, bytes (compressed segments).
    #[serde(default)]
    pub ring_bytes: u64,
}

/// The eBPF programs' run time as the kernel timed it
/// (`BPF_STATS_RUN_TIME`), over the parts of the window it was on: timing
/// costs every run two clock reads, so the recorder times one second in
/// ten. The window's cost is estimated as `run_ns * window / timed_ns`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct KernelCost {
    /// ns the programs ran while timed, on all CPUs together.
    pub run_ns: u64,
    /// Their runs while timed.
    pub runs: u64,
    /// ns of the window during which they were timed.
    pub timed_ns: u64,
}

impl KernelCost {
    /// The programs' estimated CPU time over a window of `window_ns`.
    pub fn estimate_ns(&self, window_ns: u64) -> Option<u64> {
        (self.timed_ns > 0)
            .then(|| (self.run_ns as u128 * window_ns as u128 / self.timed_ns as u128) as u64)
    }

    /// ns a run, on average.
    pub fn ns_per_run(&self) -> Option<f64> {
        (self.runs > 0).then(|| self.run_ns as f64 / self.runs as f64)
    }
}

/// One record of a recording, in stream order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// See [`Dispatch`].
    Dispatch(Dispatch),
    /// See [`Wakeup`].
    Wakeup(Wakeup),
    /// See [`ThreadInfo`].
    Thread(ThreadInfo),
    /// See [`ThreadExit`].
    Exit(ThreadExit),
    /// See [`Lost`].
    Lost(Lost),
    /// The head of one JVM's call-tree dump; its threads follow.
    TreeHead(Box<TreeHead>),
    /// One thread's call tree, after its JVM's [`Record::TreeHead`].
    TreeThread(Box<ThreadTree>),
    /// The same with its nodes still encoded ([`crate::Reader::keep_trees_encoded`]).
    TreeThreadEncoded(Box<EncodedThread>),
    /// What was read of one JVM's waits, after its wait records.
    JvmWaits(Box<JvmWaits>),
    /// An interned text of one JVM.
    JavaSymbol(Box<JavaSymbol>),
    /// An interned Java stack of one JVM.
    JavaStack(Box<JavaStack>),
    /// One wait of one Java thread.
    JavaWait(JavaWait),
    /// See [`crate::SwitchStack`].
    SwitchStack(crate::SwitchStack),
    /// See [`crate::KernelStack`].
    KernelStack(Box<crate::KernelStack>),
    /// See [`crate::KernelSymbols`].
    KernelSymbols(Box<crate::KernelSymbols>),
    /// See [`crate::StackCopy`].
    StackCopy(Box<crate::StackCopy>),
    /// See [`crate::ModuleMap`].
    ModuleMap(Box<crate::ModuleMap>),
    /// The user stack of the thread that left at the dispatch just before
    /// (`stack` is a [`crate::UserStack`] id).
    SwitchUserStack(crate::SwitchStack),
    /// See [`crate::UserStack`].
    UserStack(Box<crate::UserStack>),
    /// See [`crate::UserSymbols`].
    UserSymbols(Box<crate::UserSymbols>),
    /// The kernel stack at the wake-up just before: the waker's, or the
    /// interrupt's (`stack` is a [`crate::KernelStack`] id, `tid` the
    /// wake-up's `waker_tid`).
    WakeStack(crate::SwitchStack),
    /// The waker's user stack at the wake-up just before (`stack` is a
    /// [`crate::UserStack`] id).
    WakeUserStack(crate::SwitchStack),
    /// See [`crate::SwitchArg`].
    SwitchArg(crate::SwitchArg),
    /// The Java frames of the thread that left at the dispatch just
    /// before, read from its JVM's structures (`stack` is a
    /// [`crate::WalkedStack`] id).
    SwitchJavaStack(crate::SwitchStack),
    /// The waker's Java frames at the wake-up just before, read from its
    /// JVM's structures (`stack` is a [`crate::WalkedStack`] id).
    WakeJavaStack(crate::SwitchStack),
    /// See [`crate::WalkedStack`].
    WalkedStack(Box<crate::WalkedStack>),
    /// See [`crate::SwitchJavaState`].
    SwitchJavaState(crate::SwitchJavaState),
}

impl Record {
    /// The record's time, ns on the recording's clock.
    pub fn time(&self) -> u64 {
        match self {
            Record::Dispatch(d) => d.time,
            Record::Wakeup(w) => w.time,
            Record::Thread(t) => t.time,
            Record::Exit(e) => e.time,
            Record::Lost(l) => l.time,
            Record::TreeHead(t) => t.time_ns,
            Record::JavaWait(w) => w.start,
            Record::SwitchStack(s)
            | Record::SwitchUserStack(s)
            | Record::WakeStack(s)
            | Record::WakeUserStack(s)
            | Record::SwitchJavaStack(s)
            | Record::WakeJavaStack(s) => s.time,
            Record::SwitchArg(s) => s.time,
            Record::SwitchJavaState(s) => s.time,
            Record::StackCopy(c) => c.time,
            Record::ModuleMap(m) => m.time,
            Record::KernelStack(_)
            | Record::KernelSymbols(_)
            | Record::UserStack(_)
            | Record::UserSymbols(_)
            | Record::WalkedStack(_) => 0,
            Record::TreeThread(_)
            | Record::TreeThreadEncoded(_)
            | Record::JvmWaits(_)
            | Record::JavaSymbol(_)
            | Record::JavaStack(_) => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_states_decode_like_perf() {
        assert_eq!(PrevState::from_kernel(0), PrevState::Preempted);
        assert_eq!(PrevState::from_kernel(0x100), PrevState::Preempted);
        assert_eq!(PrevState::from_kernel(0x1), PrevState::Sleeping);
        assert_eq!(PrevState::from_kernel(0x2), PrevState::DiskSleep);
        assert_eq!(PrevState::from_kernel(0x4), PrevState::Stopped);
        assert_eq!(PrevState::from_kernel(0x10), PrevState::Dead);
        assert_eq!(PrevState::from_kernel(0x40), PrevState::Parked);
        assert_eq!(PrevState::from_kernel(0x80), PrevState::IdleWait);
    }

    #[test]
    fn codes_round_trip() {
        for s in PrevState::ALL {
            assert_eq!(PrevState::from_code(s.code()), Some(s));
        }
        assert_eq!(PrevState::from_code(200), None);
        for c in WakeContext::ALL {
            assert_eq!(WakeContext::from_code(c.code()), Some(c));
        }
        assert_eq!(WakeContext::from_code(5), None);
    }

    #[test]
    fn wake_contexts_decode_the_kernels_trace_flags() {
        // What ftrace prints as `d.s3.` (irqs off, softirq), `d.h1.`, `...1.`.
        assert_eq!(WakeContext::from_trace_flags(0x11), WakeContext::SoftIrq);
        assert_eq!(WakeContext::from_trace_flags(0x09), WakeContext::HardIrq);
        // A hard interrupt that came while a softirq ran is the hard one's.
        assert_eq!(WakeContext::from_trace_flags(0x19), WakeContext::HardIrq);
        assert_eq!(WakeContext::from_trace_flags(0x48), WakeContext::Nmi);
        // Need-resched and bottom halves disabled (0x04, 0x80): a thread.
        assert_eq!(WakeContext::from_trace_flags(0x85), WakeContext::Task);
        assert!(!WakeContext::Task.is_interrupt() && WakeContext::SoftIrq.is_interrupt());
    }
}
