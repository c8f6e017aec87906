//! How to record ([`RecordOptions`]) and the defaults the CLI shows: the
//! ring size, which stacks are taken and how many a second.
//!
//! Invariant: `RecordOptions::default()` is what `idleflow record` records
//! with when given no option.

use super::EventSource;

/// Default ring size per CPU.
pub const DEFAULT_RING_BYTES: usize = 4 << 20;

/// How to record.
#[derive(Debug, Clone)]
pub struct RecordOptions {
    /// Bytes of ring buffer per CPU (a power-of-two number of pages).
    pub ring_bytes: usize,
    /// `SCHED_FIFO` priority of the drain thread; 0 for ordinary priority.
    pub drain_priority: i32,
    /// Have the kernel write a `sched_switch` sample for every switch, not
    /// only for the states a switch-out record cannot tell
    /// ([`crate::join::SWITCH_SAMPLE_FILTER`]).
    pub all_switch_samples: bool,
    /// Take the kernel's call chain at each switch that leaves a CPU idle
    /// (and at each uninterruptible wait).
    pub kernel_stacks: bool,
    /// At the same switches, copy this many bytes of the leaving thread's
    /// user stack with its registers, and record executable mappings, for
    /// unwinding once the window closed (0: no user stacks).
    pub user_stack_bytes: u32,
    /// Take the stacks at every blocking switch-out too (a sleep, not a
    /// preemption), not only at those that leave a CPU idle: where the
    /// threads wait, by blocked time (`record --stacks waits`).
    pub stacks_at_waits: bool,
    /// With `stacks_at_waits`: the stacks of one interruptible sleep in
    /// this many (per CPU); the others are counted, not copied. 0 and 1:
    /// every one.
    pub wait_sample_period: u32,
    /// Stacks at wake-ups, with the stack kinds asked for above, at one
    /// wake-up in `waker_sample_period` per CPU of each context: an
    /// interrupt's kernel call chain (which device), a thread's kernel and
    /// user stacks (its release site).
    pub waker_stacks: bool,
    /// One thread-context wake-up in this many (per CPU) carries the
    /// waker's stacks; 0 and 1: every one.
    pub waker_sample_period: u32,
    /// With the eBPF source: about this many of those a second per CPU at
    /// most, each wake-up with the same chance when they come faster; 0:
    /// no budget.
    pub waker_stack_budget: u32,
    /// Bytes of the waker's user stack to copy (0: kernel stacks only; at
    /// most `user_stack_bytes`): the release site is the innermost frames.
    pub waker_stack_bytes: u32,
    /// Which kernel events record the dispatches and wake-ups.
    pub events: EventSource,
    /// With the eBPF source and stacks at the switches to idle only: about
    /// this many of those switches a second per CPU get their stacks, each
    /// with the same chance (the others stand for their thread's previous
    /// stacks in the report); 0: every one.
    pub stack_budget: u32,
}

/// Default [`RecordOptions::stack_budget`]: a stack at a switch to idle
/// costs the programs about 10 µs (a kernel call chain and an 8 KiB user
/// copy), so 250 a second is ≤ 0.25 % of each CPU (1,000 took 0.9 % on
/// `perf bench sched pipe`: PERFORMANCE.md §5e).
pub const DEFAULT_STACK_BUDGET: u32 = 250;

/// Default [`RecordOptions::waker_stack_bytes`].
pub const DEFAULT_WAKER_STACK_BYTES: u32 = 2048;

/// Default [`RecordOptions::waker_sample_period`].
pub const DEFAULT_WAKER_SAMPLE_PERIOD: u32 = 16;

/// Default [`RecordOptions::waker_stack_budget`]: a loopback server's
/// 80 k wakings a second at one in 16 took 2.2 % of a CPU in the kernel
/// (PERFORMANCE.md §5e).
pub const DEFAULT_WAKER_STACK_BUDGET: u32 = 200;

/// Default user stack copy, bytes: held the wait and park stacks of a JVM
/// (19–22 frames) and the native examples' blocking chains here.
pub const DEFAULT_USER_STACK_BYTES: u32 = 8192;

impl Default for RecordOptions {
    fn default() -> Self {
        RecordOptions {
            ring_bytes: DEFAULT_RING_BYTES,
            drain_priority: crate::drain::DRAIN_PRIORITY,
            all_switch_samples: false,
            kernel_stacks: true,
            user_stack_bytes: DEFAULT_USER_STACK_BYTES,
            stacks_at_waits: false,
            wait_sample_period: 1,
            waker_stacks: true,
            waker_sample_period: DEFAULT_WAKER_SAMPLE_PERIOD,
            waker_stack_budget: DEFAULT_WAKER_STACK_BUDGET,
            waker_stack_bytes: DEFAULT_WAKER_STACK_BYTES,
            events: EventSource::Perf,
            stack_budget: DEFAULT_STACK_BUDGET,
        }
    }
}
