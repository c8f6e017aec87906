//! Constructed event sequences with known answers.

use super::*;

const A: u32 = 100;
const B: u32 = 200;

fn d(time: u64, cpu: u32, prev_tid: u32, prev_state: PrevState, next_tid: u32) -> Dispatch {
    Dispatch {
        time,
        cpu,
        prev_tid,
        prev_state,
        next_tid,
        prev_node: Default::default(),
    }
}

fn run(cpus: &[u32], events: &[Dispatch], stop: u64) -> (Accounting, Vec<DispatchOutcome>) {
    let mut a = Accounting::new(cpus, 0);
    let outs = events.iter().map(|e| a.dispatch(e)).collect();
    a.finish(stop);
    (a, outs)
}

#[test]
fn duty_cycle_on_one_cpu() {
    use PrevState::*;
    let (a, outs) = run(
        &[0],
        &[
            d(10, 0, IDLE_TID, Unknown, A),
            d(20, 0, A, Sleeping, IDLE_TID),
            d(30, 0, IDLE_TID, Unknown, A),
            d(40, 0, A, Sleeping, IDLE_TID),
        ],
        50,
    );
    let c = &a.cpus()[0];
    assert_eq!(c.idle_dispatches_from, 2);
    assert_eq!(c.idle_dispatches_to, 2);
    assert_eq!(c.idle_ns, 10 + 10 + 10);
    assert_eq!(c.busy_ns, 20);
    assert_eq!(c.breaks, 0);
    assert_eq!(c.unknown_ns, 0);
    assert_eq!(a.total_idle(), 2);
    // The first interval starts at the window edge; the second is complete
    // and was caused by A sleeping.
    assert_eq!(outs[0].closed_idle.map(|i| i.complete), Some(false));
    let second = outs[2].closed_idle.unwrap();
    assert!(second.complete);
    assert_eq!((second.start, second.end), (20, 30));
    assert_eq!(second.caused_by, Some((A, Sleeping)));
    assert!(outs[1].to_idle && outs[3].to_idle && !outs[0].to_idle);
    let t = a.thread(A).unwrap();
    assert_eq!(t.runtime_ns, 20);
    assert_eq!(t.timeslices, 2);
    assert_eq!(t.max_timeslice_ns, 10);
    assert_eq!(t.non_runnable, 2);
    assert_eq!(t.preempted, 0);
    assert_eq!(t.blocked_ns, 10 + 10);
}

#[test]
fn saturated_cpu_is_never_idle_and_counts_preemptions() {
    use PrevState::*;
    // A was running at the start; A and B take turns by preemption.
    let (a, _) = run(
        &[0],
        &[
            d(5, 0, A, Preempted, B),
            d(15, 0, B, Preempted, A),
            d(25, 0, A, Preempted, B),
        ],
        30,
    );
    let c = &a.cpus()[0];
    assert_eq!(c.idle_ns, 0);
    assert_eq!(c.busy_ns, 30);
    assert_eq!(c.idle_dispatches_from + c.idle_dispatches_to, 0);
    let ta = a.thread(A).unwrap();
    assert_eq!(ta.runtime_ns, 5 + 10);
    assert_eq!(ta.preempted, 2);
    assert_eq!(ta.runnable_wait_ns, 10 + 5);
    assert_eq!(ta.max_timeslice_ns, 10);
    let tb = a.thread(B).unwrap();
    assert_eq!(tb.runtime_ns, 10 + 5);
    assert_eq!(tb.timeslices, 2);
    assert_eq!(tb.runnable_wait_ns, 10);
}

#[test]
fn work_area_deltas_follow_the_patent() {
    use PrevState::*;
    let mut a = Accounting::new(&[0, 1], 0);
    // A runs on CPU 0 and sleeps.
    a.dispatch(&d(1, 0, IDLE_TID, Unknown, A));
    a.dispatch(&d(2, 0, A, Sleeping, IDLE_TID));
    // CPU 0 leaves idle once for B, CPU 1 twice.
    a.dispatch(&d(3, 0, IDLE_TID, Unknown, B));
    a.dispatch(&d(4, 0, B, Sleeping, IDLE_TID));
    a.dispatch(&d(5, 1, IDLE_TID, Unknown, B));
    a.dispatch(&d(6, 1, B, Sleeping, IDLE_TID));
    a.dispatch(&d(7, 1, IDLE_TID, Unknown, B));
    a.dispatch(&d(8, 1, B, Sleeping, IDLE_TID));
    // A comes back on CPU 0: one idle dispatch on its CPU since, three in all.
    let out = a.dispatch(&d(9, 0, IDLE_TID, Unknown, A));
    let tr = out.trace.unwrap();
    assert_eq!((tr.tid, tr.cpu, tr.cpu_delta, tr.total_delta), (A, 0, 2, 4));
    // Counted: its own return from idle too (the one at t=9), as the patent
    // counts at the dispatch itself. B's work area: on CPU 1 last.
    let ta = a.thread(A).unwrap();
    assert_eq!((ta.dip, ta.idle), (2, 4));
    // A now moves to CPU 1: no cpu delta, since it last ran on CPU 0.
    a.dispatch(&d(10, 0, A, Preempted, IDLE_TID));
    let out = a.dispatch(&d(11, 1, IDLE_TID, Unknown, A));
    let tr = out.trace.unwrap();
    assert_eq!((tr.cpu_delta, tr.total_delta), (0, 1));
    assert_eq!(a.total_idle(), 6);
}

#[test]
fn a_break_is_counted_and_bounded_never_guessed() {
    use PrevState::*;
    let (a, outs) = run(
        &[0],
        &[
            d(10, 0, IDLE_TID, Unknown, A),
            // The switch A -> idle was lost: next we see idle -> B.
            d(30, 0, IDLE_TID, Unknown, B),
            d(40, 0, B, Sleeping, IDLE_TID),
        ],
        50,
    );
    let c = &a.cpus()[0];
    assert_eq!(c.breaks, 1);
    assert_eq!(outs[1].broke, Some((0, 20)));
    assert_eq!(outs[1].closed_idle, None);
    assert_eq!(
        outs[1].abandoned_cause, None,
        "A never made the CPU idle in view"
    );
    assert_eq!(c.unknown_ns, 20);
    assert_eq!(c.idle_ns, 10 + 10);
    assert_eq!(c.busy_ns, 10);
    assert_eq!(c.idle_ns + c.busy_ns + c.unknown_ns, 50);
    // A's slice has no known end: no runtime invented for it.
    assert_eq!(a.thread(A).unwrap().runtime_ns, 0);
    assert_eq!(a.thread(B).unwrap().runtime_ns, 10);
}

/// B wakes A at `time` from CPU 1 (a thread's wake-up, not an interrupt's).
fn b_wakes_a(time: u64) -> Wakeup {
    Wakeup {
        time,
        cpu: 1,
        waker_tid: B,
        wakee_tid: A,
        target_cpu: 0,
        new_thread: false,
        context: idleflow_format::WakeContext::Task,
    }
}

/// A waking stamped just before the wakee's own switch-out (the kernel
/// raises `sched_waking` on another CPU while the wakee is inside
/// `__schedule`) ends that wait: seen, runnable from the switch-out. A
/// waking too long before, or one followed by a switch-in first, does not.
#[test]
fn a_waking_just_before_the_wakees_switch_out_ends_that_wait() {
    use PrevState::*;
    let wake = b_wakes_a;
    let mut a = Accounting::new(&[0, 1], 0);
    a.dispatch(&d(0, 0, IDLE_TID, Unknown, A));
    a.wakeup(&wake(9));
    a.dispatch(&d(10, 0, A, Sleeping, IDLE_TID));
    a.dispatch(&d(13, 0, IDLE_TID, Unknown, A));
    assert_eq!(a.cpus()[0].unseen_wakeups, 0);
    let t = a.thread(A).unwrap();
    assert_eq!((t.blocked_ns, t.runnable_wait_ns), (0, 3));
    // Woken while running, then preempted and back: the waking is spent;
    // the next wait's wake-up is unseen.
    a.wakeup(&wake(14));
    a.dispatch(&d(15, 0, A, Preempted, IDLE_TID));
    a.dispatch(&d(16, 0, IDLE_TID, Unknown, A));
    a.dispatch(&d(20, 0, A, Sleeping, IDLE_TID));
    a.dispatch(&d(25, 0, IDLE_TID, Unknown, A));
    assert_eq!(a.cpus()[0].unseen_wakeups, 1);
    // A waking more than WAKE_BEFORE_BLOCK_NS before the switch-out is not
    // this wait's.
    let late = 26 + WAKE_BEFORE_BLOCK_NS + 1;
    a.wakeup(&wake(26));
    a.dispatch(&d(late, 0, A, Sleeping, IDLE_TID));
    a.dispatch(&d(late + 5, 0, IDLE_TID, Unknown, A));
    assert_eq!(a.cpus()[0].unseen_wakeups, 2);
}

#[test]
fn wakeups_split_off_cpu_time_into_blocked_and_runnable() {
    use PrevState::*;
    let mut a = Accounting::new(&[0, 1], 0);
    a.dispatch(&d(0, 0, IDLE_TID, Unknown, A));
    a.dispatch(&d(10, 0, A, Sleeping, IDLE_TID));
    a.wakeup(&b_wakes_a(25));
    a.dispatch(&d(27, 0, IDLE_TID, Unknown, A));
    assert_eq!(a.cpus()[0].unseen_wakeups, 0);
    // Asleep again, back without a wakeup record: counted as unseen.
    a.dispatch(&d(28, 0, A, Sleeping, IDLE_TID));
    a.dispatch(&d(29, 0, IDLE_TID, Unknown, A));
    assert_eq!(a.cpus()[0].unseen_wakeups, 1);
    a.finish(30);
    let t = a.thread(A).unwrap();
    assert_eq!(t.blocked_ns, 15 + 1);
    assert_eq!(t.runnable_wait_ns, 2);
    assert_eq!(t.runtime_ns, 10 + 1 + 1);
}

#[test]
fn a_cpu_without_dispatches_is_unknown_not_idle() {
    let mut a = Accounting::new(&[0, 1], 100);
    a.dispatch(&d(150, 0, IDLE_TID, PrevState::Unknown, A));
    a.finish(200);
    assert_eq!(a.cpus()[1].unknown_ns, 100);
    assert_eq!(a.cpus()[1].idle_ns, 0);
    assert_eq!(a.cpus()[0].idle_ns, 50);
    assert_eq!(a.cpus()[0].busy_ns, 50);
}

#[test]
fn losses_are_counted_per_cpu() {
    let mut a = Accounting::new(&[0, 1], 0);
    a.lost(1, 7);
    a.lost(1, 3);
    assert_eq!(a.cpus()[1].lost, 10);
    assert_eq!(a.cpus()[0].lost, 0);
}

/// Random streams, some with breaks: every nanosecond of every CPU is
/// accounted exactly once, and the idle counts agree with the stream.
#[test]
fn time_is_conserved_on_random_streams() {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut rnd = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for _ in 0..200 {
        let ncpu = 1 + rnd(4) as u32;
        let cpus: Vec<u32> = (0..ncpu).collect();
        let mut a = Accounting::new(&cpus, 1000);
        let mut current = vec![IDLE_TID; ncpu as usize];
        let mut t = 1000;
        let (mut from, mut to) = (0u64, 0u64);
        for _ in 0..rnd(300) {
            t += rnd(50);
            let cpu = rnd(ncpu as u64) as u32;
            let next = if rnd(3) == 0 {
                IDLE_TID
            } else {
                1 + rnd(6) as u32
            };
            // Occasionally a broken stream: the prev is not the current.
            let prev = if rnd(20) == 0 {
                1 + rnd(6) as u32
            } else {
                current[cpu as usize]
            };
            if prev == next {
                continue;
            }
            from += u64::from(prev == IDLE_TID);
            to += u64::from(next == IDLE_TID);
            let st = if rnd(2) == 0 {
                PrevState::Preempted
            } else {
                PrevState::Sleeping
            };
            a.dispatch(&d(t, cpu, prev, st, next));
            current[cpu as usize] = next;
        }
        let stop = t + rnd(100);
        a.finish(stop);
        let (mut got_from, mut got_to) = (0, 0);
        for c in a.cpus() {
            assert_eq!(c.idle_ns + c.busy_ns + c.unknown_ns, stop - 1000, "{c:?}");
            got_from += c.idle_dispatches_from;
            got_to += c.idle_dispatches_to;
        }
        assert_eq!((got_from, got_to), (from, to));
        assert_eq!(a.total_idle(), from);
    }
}

#[test]
fn a_break_hands_back_the_cause_of_an_idle_interval_it_hides() {
    use PrevState::*;
    let mut a = Accounting::new(&[0], 0);
    a.dispatch(&d(10, 0, A, Sleeping, IDLE_TID));
    // The switch idle -> B and B's leaving were lost: next we see B -> A.
    let out = a.dispatch(&d(30, 0, B, Preempted, A));
    assert_eq!(out.broke, Some((0, 20)));
    assert_eq!(out.abandoned_cause, Some((A, Sleeping)));
    assert_eq!(out.closed_idle, None);
    // A later idle interval is not blamed on A.
    a.dispatch(&d(40, 0, A, DiskSleep, IDLE_TID));
    let out = a.dispatch(&d(50, 0, IDLE_TID, Unknown, B));
    assert_eq!(out.closed_idle.unwrap().caused_by, Some((A, DiskSleep)));
}

/// Lost records turn the span around them into unknown time, even when the
/// next dispatch looks continuous: the loss is never idle or busy time.
#[test]
fn a_loss_makes_its_span_unknown_even_when_the_stream_looks_continuous() {
    use PrevState::*;
    let mut a = Accounting::new(&[0, 1], 0);
    a.dispatch(&d(10, 0, IDLE_TID, Unknown, A));
    a.dispatch(&d(20, 0, A, Sleeping, IDLE_TID));
    // Records of CPU 0 lost here: whatever ran between 20 and 50 is unknown,
    // although the next dispatch (idle → B) looks like it follows on.
    a.lost(0, 7);
    a.dispatch(&d(50, 0, IDLE_TID, Unknown, B));
    a.dispatch(&d(60, 0, B, Sleeping, IDLE_TID));
    // CPU 1 loses records after its last dispatch: the rest is unknown.
    a.dispatch(&d(5, 1, IDLE_TID, Unknown, A));
    a.lost(1, 3);
    a.finish(100);
    let c0 = &a.cpus()[0];
    assert_eq!(c0.lost, 7);
    assert_eq!(c0.unknown_ns, 30, "20..50 is unknown");
    assert_eq!(c0.idle_ns, 10 + 40, "0..10 and 60..100 idle; 20..50 is not");
    assert_eq!(c0.busy_ns, 10 + 10);
    assert_eq!(c0.breaks, 1);
    let c1 = &a.cpus()[1];
    assert_eq!(c1.unknown_ns, 95, "5..100 after the loss");
    assert_eq!(c1.busy_ns, 0);
}

/// A window that starts inside a stream break: before the edge the CPU went
/// idle, and its first dispatch inside names another thread leaving (its
/// switch from idle was never seen). The time from the edge is unknown, not
/// that thread's running; a window that starts after a continuous stream
/// keeps what the edge knew.
#[test]
fn a_window_edge_inside_a_break_leaves_the_time_from_the_edge_unknown() {
    use PrevState::*;
    let window = |before: &[Dispatch], lost_before: bool| {
        let mut a = Accounting::new(&[0], 100);
        for b in before {
            a.before_window(b);
        }
        if lost_before {
            a.lost_before_window(0);
        }
        let out = a.dispatch(&d(130, 0, B, Unknown, A));
        a.dispatch(&d(150, 0, A, Sleeping, IDLE_TID));
        a.finish(170);
        (a.cpus()[0].clone(), out)
    };
    // A went idle at 50; at 130 B leaves: the span 100..130 is unknown.
    let (c, out) = window(
        &[
            d(40, 0, IDLE_TID, Unknown, A),
            d(50, 0, A, Sleeping, IDLE_TID),
        ],
        false,
    );
    assert_eq!(
        (c.breaks, c.unknown_ns, c.busy_ns, c.idle_ns),
        (1, 30, 20, 20)
    );
    assert_eq!(out.broke, Some((0, 30)));
    // B got the CPU at 60: it ran from the edge, as before.
    let (c, out) = window(&[d(60, 0, IDLE_TID, Unknown, B)], false);
    assert_eq!(
        (c.breaks, c.unknown_ns, c.busy_ns, c.idle_ns),
        (0, 0, 50, 20)
    );
    assert_eq!(out.broke, None);
    // Records lost after B got it: unknown again.
    let (c, _) = window(&[d(60, 0, IDLE_TID, Unknown, B)], true);
    assert_eq!((c.breaks, c.unknown_ns, c.busy_ns), (1, 30, 20));
    // Nothing before the edge: the first dispatch tells, as before.
    let (c, _) = window(&[], false);
    assert_eq!((c.breaks, c.unknown_ns, c.busy_ns), (0, 0, 50));
}
