//! Why a thread left its CPU: the scheduler's raw task state, as a BPF
//! program at `sched_switch` receives it, turned into the [`PrevState`] the
//! perf path gives for the same switch.
//!
//! The perf path reads the `sched_switch` tracepoint's `prev_state` field,
//! which the kernel computes from the raw state
//! (`__trace_sched_switch_state` in `include/trace/events/sched.h`): a
//! preemption is `TASK_REPORT_MAX`; otherwise the task's state bits and
//! exit state are masked to the reported ones, `TASK_IDLE` becomes
//! `TASK_REPORT_IDLE`, an rtlock wait or frozen task reports as
//! uninterruptible, and the highest reported bit is kept. [`report_state`]
//! is that function; [`PrevState::from_kernel`] then reads its value as the
//! perf path does, so the two paths cannot differ for the same switch.
//!
//! Invariant: the bit values are those of `include/linux/sched.h` since
//! Linux 6.1 (`TASK_FROZEN` 0x8000), unchanged through 6.18.

use idleflow_format::PrevState;

const TASK_UNINTERRUPTIBLE: u32 = 0x2;
/// `TASK_RUNNING | TASK_INTERRUPTIBLE | TASK_UNINTERRUPTIBLE |
/// __TASK_STOPPED | __TASK_TRACED | EXIT_DEAD | EXIT_ZOMBIE | TASK_PARKED`.
const TASK_REPORT: u32 = 0x7f;
const TASK_NOLOAD: u32 = 0x400;
const TASK_IDLE: u32 = TASK_UNINTERRUPTIBLE | TASK_NOLOAD;
const TASK_REPORT_IDLE: u32 = TASK_REPORT + 1;
/// What the tracepoint reports for a preempted task.
const TASK_REPORT_MAX: u32 = TASK_REPORT_IDLE << 1;
const TASK_RTLOCK_WAIT: u32 = 0x1000;
const TASK_FROZEN: u32 = 0x8000;

/// The `sched_switch` tracepoint's `prev_state` for a switch whose
/// scheduler call was a preemption (`preempt`), of a task in raw state
/// `state` (`__state` as `__schedule` read it) with exit state
/// `exit_state`.
pub fn report_state(preempt: bool, state: u32, exit_state: u32) -> u32 {
    if preempt {
        return TASK_REPORT_MAX;
    }
    let mut reported = (state | exit_state) & TASK_REPORT;
    if state & TASK_IDLE == TASK_IDLE {
        reported = TASK_REPORT_IDLE;
    }
    if state & (TASK_RTLOCK_WAIT | TASK_FROZEN) != 0 {
        reported = TASK_UNINTERRUPTIBLE;
    }
    // fls(reported), then the bit it names.
    match 32 - reported.leading_zeros() {
        0 => 0,
        index => 1 << (index - 1),
    }
}

/// The perf path's [`PrevState`] for the same switch.
pub fn prev_state(preempt: bool, state: u32, exit_state: u32) -> PrevState {
    PrevState::from_kernel(u64::from(report_state(preempt, state, exit_state)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TASK_INTERRUPTIBLE: u32 = 0x1;

    #[test]
    fn the_states_read_as_the_tracepoint_reports_them() {
        // (preempt, __state, exit_state) → tracepoint value, state.
        let cases = [
            ((true, TASK_INTERRUPTIBLE, 0), 0x100, PrevState::Preempted),
            ((false, 0, 0), 0, PrevState::Preempted), // yield: still runnable
            ((false, TASK_INTERRUPTIBLE, 0), 0x1, PrevState::Sleeping),
            ((false, TASK_UNINTERRUPTIBLE, 0), 0x2, PrevState::DiskSleep),
            // TASK_KILLABLE (WAKEKILL | UNINTERRUPTIBLE): D.
            ((false, 0x102, 0), 0x2, PrevState::DiskSleep),
            // TASK_STOPPED (WAKEKILL | __TASK_STOPPED), TASK_TRACED.
            ((false, 0x104, 0), 0x4, PrevState::Stopped),
            ((false, 0x8, 0), 0x8, PrevState::Stopped),
            // An exiting task: TASK_DEAD, exit state zombie or dead.
            ((false, 0x80, 0x20), 0x20, PrevState::Dead),
            ((false, 0x80, 0x10), 0x10, PrevState::Dead),
            ((false, 0x40, 0), 0x40, PrevState::Parked),
            // TASK_IDLE: a kthread's idle wait, not a disk wait.
            ((false, TASK_IDLE, 0), 0x80, PrevState::IdleWait),
            // A freezable sleep reports its sleep; frozen and rtlock
            // waits report as uninterruptible.
            ((false, 0x2001, 0), 0x1, PrevState::Sleeping),
            ((false, TASK_FROZEN, 0), 0x2, PrevState::DiskSleep),
            ((false, TASK_RTLOCK_WAIT, 0), 0x2, PrevState::DiskSleep),
        ];
        for ((preempt, state, exit), value, expected) in cases {
            assert_eq!(
                report_state(preempt, state, exit),
                value,
                "{state:#x}/{exit:#x}"
            );
            assert_eq!(prev_state(preempt, state, exit), expected, "{state:#x}");
        }
    }
}
