//! The policy's tests: the language, and each trigger on constructed
//! streams.

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
        "io-full>=20% for 2s while idle>=40%",
        "memory-some>=5%",
        "waiting>=4 for 2s in pool-*",
        "unclaimed>=5ms for 1s",
        "cpu-idle",
        "cpu-idle in teller-* every:1000",
        "convoy>=4",
        "convoy>=3 in http-nio-* every:2",
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
        ("idle>=5% while busy>=1", "needs waiting>=N"),
        ("io-full>=20", "share like 40%"),
        ("io-full>=20% while waiting>=1", "needs idle>=Q%"),
        ("disk-full>=20%", "unknown condition"),
        ("cpu>=3", "unknown condition"),
        ("convoy>=1", "at least 2 threads"),
        ("convoy>=x", "positive number"),
    ] {
        let e = Trigger::parse(bad).unwrap_err().to_string();
        assert!(e.contains(why), "{bad}: {e}");
    }
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

/// Recording the whole machine, the kernel's own threads (children of
/// kthreadd) are not threads of interest unless a pattern names them.
#[test]
fn the_kernels_threads_wait_unseen_unless_a_pattern_names_them() {
    let kthread = |tid: u32, ppid: u32, comm: &str| {
        Record::Thread(ThreadInfo {
            time: 0,
            tid,
            pid: tid,
            ppid,
            comm: comm.into(),
        })
    };
    for (spec, fires) in [("wait>=500ms", false), ("wait>=500ms in ksoftirqd*", true)] {
        let mut p = policy(&[spec]);
        p.observe(&kthread(2, 0, "kthreadd"));
        p.observe(&kthread(22, 2, "ksoftirqd/1"));
        p.observe(&switch(10 * MS, 0, 22, PrevState::Sleeping, 0));
        assert_eq!(p.evaluate(600 * MS).is_some(), fires, "{spec}");
    }
    // A process's thread still is (pid 100, ppid 1).
    let mut p = policy(&["wait>=500ms"]);
    p.observe(&kthread(2, 0, "kthreadd"));
    p.observe(&switch(10 * MS, 0, 9, PrevState::Sleeping, 0));
    let f = p.evaluate(600 * MS).expect("fired");
    assert!(f.state.starts_with("gc (tid 9, pid 100)"), "{}", f.state);
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

fn hand(time: u64, waker: u32, wakee: u32, context: WakeContext) -> Record {
    Record::Wakeup(Wakeup {
        time,
        cpu: 0,
        waker_tid: waker,
        wakee_tid: wakee,
        target_cpu: 0,
        new_thread: false,
        context,
    })
}

/// Thread `tid` leaves to wait at `time`.
fn sleeps(time: u64, tid: u32) -> Record {
    switch(time, 0, tid, PrevState::Sleeping, 0)
}

#[test]
fn a_convoy_fires_on_k_threads_of_one_pool_each_woken_by_the_one_before() {
    let mut p = policy(&["convoy>=3"]);
    p.observe(&thread(10, "http-nio-3"));
    p.observe(&thread(11, "other-1"));
    // 7, 8, 10 wait; 7 is woken by a timer (an interrupt): no hand-off.
    for (t, tid) in [(1, 7), (2, 8), (3, 10)] {
        p.observe(&sleeps(t * MS, tid));
    }
    p.observe(&hand(4 * MS, 9, 7, WakeContext::SoftIrq));
    // 7 hands to 8: two threads in turn.
    p.observe(&hand(5 * MS, 7, 8, WakeContext::Task));
    assert_eq!(p.evaluate(5 * MS), None);
    // A thread of another pool wakes 10: no hand-off.
    p.observe(&hand(6 * MS, 11, 10, WakeContext::Task));
    assert_eq!(p.evaluate(6 * MS), None);
    // 8 (woken by 7) hands to 10 (waiting again): 7 → 8 → 10.
    p.observe(&sleeps(7 * MS, 10));
    p.observe(&hand(8 * MS, 8, 10, WakeContext::Task));
    let f = p.evaluate(9 * MS).expect("a convoy of 3");
    assert!(
        f.state
            .starts_with("a convoy of 3 threads of http-nio-* in turn, each woken"),
        "{}",
        f.state
    );
    assert!(
        f.state
            .ends_with("http-nio-1 (tid 7, pid 100) → http-nio-2 (tid 8) → http-nio-3 (tid 10)"),
        "{}",
        f.state
    );
    assert_eq!(f.at_ns, 9 * MS);
    // Nothing new since: it stops holding. The convoy goes round: 10 hands
    // to 7 (7 met again: the chain goes on after its earlier place), a new
    // occurrence; 7 hands to 8 at the next judgement, the same occurrence.
    assert_eq!(p.evaluate(10 * MS), None);
    p.observe(&sleeps(11 * MS, 7));
    p.observe(&hand(12 * MS, 10, 7, WakeContext::Task));
    let f = p.evaluate(12 * MS).expect("8 → 10 → 7");
    assert!(
        f.state
            .ends_with("http-nio-2 (tid 8, pid 100) → http-nio-3 (tid 10) → http-nio-1 (tid 7)"),
        "{}",
        f.state
    );
    p.observe(&sleeps(13 * MS, 8));
    p.observe(&hand(14 * MS, 7, 8, WakeContext::Task));
    assert_eq!(p.evaluate(14 * MS), None, "still the same occurrence");
    assert_eq!(p.evaluate(15 * MS), None);
}

#[test]
fn a_holder_woken_by_a_timer_stays_in_its_convoy_and_an_old_chain_is_not_extended() {
    let mut p = policy(&["convoy>=3"]);
    p.observe(&thread(10, "http-nio-3"));
    // 7 hands to 8; 8 sleeps holding the lock (its timer wakes it), then
    // hands to 10: 7 → 8 → 10.
    p.observe(&sleeps(MS, 8));
    p.observe(&hand(2 * MS, 7, 8, WakeContext::Task));
    p.observe(&sleeps(3 * MS, 8));
    p.observe(&hand(5 * MS, 0, 8, WakeContext::SoftIrq));
    p.observe(&sleeps(5 * MS, 10));
    p.observe(&hand(6 * MS, 8, 10, WakeContext::Task));
    assert!(p.evaluate(6 * MS).is_some());
    assert_eq!(p.evaluate(7 * MS), None);
    // 10 hands to 7 half a second later: the chain of 10 is too old.
    p.observe(&sleeps(100 * MS, 7));
    p.observe(&hand(606 * MS, 10, 7, WakeContext::Task));
    assert_eq!(p.evaluate(606 * MS), None);
}

#[test]
fn a_ping_pong_of_two_threads_and_interrupts_make_no_convoy_of_three() {
    let mut p = policy(&["convoy>=3", "convoy>=2 in gc"]);
    for i in 0..20u64 {
        let (a, b) = if i % 2 == 0 { (7, 8) } else { (8, 7) };
        p.observe(&sleeps(i * 2 * MS, b));
        p.observe(&hand((i * 2 + 1) * MS, a, b, WakeContext::Task));
        // An interrupt that hits 8 while it wakes 9 is no hand-off.
        p.observe(&sleeps((i * 2 + 1) * MS, 9));
        p.observe(&hand((i * 2 + 1) * MS, 8, 9, WakeContext::HardIrq));
        assert_eq!(p.evaluate((i * 2 + 1) * MS), None, "round {i}");
    }
}

#[test]
fn cpu_idle_counts_every_switch_to_idle_of_a_thread_of_interest_and_every_n_fires() {
    let mut p = policy(&["cpu-idle every:3", "cpu-idle in gc once-after:2"]);
    // Two switches to idle by 7 in the first batch, one by 8 (and one of
    // 9 to another thread: no idle) in the second, two by 7 in the third.
    p.observe(&sleeps(MS, 7));
    p.observe(&switch(2 * MS, 1, 7, PrevState::Sleeping, 0));
    assert_eq!(p.evaluate(3 * MS), None);
    p.observe(&switch(4 * MS, 0, 8, PrevState::Sleeping, 0));
    p.observe(&switch(4 * MS, 1, 9, PrevState::Sleeping, 7));
    let f = p.evaluate(5 * MS).expect("the third switch to idle");
    assert_eq!(f.trigger, "cpu-idle every:3");
    assert_eq!(
        f.state,
        "CPU 0 went idle as http-nio-2 (tid 8, pid 100) left it; 3 switches to idle so far"
    );
    p.observe(&sleeps(6 * MS, 7));
    p.observe(&sleeps(7 * MS, 7));
    assert_eq!(p.evaluate(8 * MS), None, "5 so far");
    p.observe(&sleeps(9 * MS, 7));
    assert!(p.evaluate(10 * MS).is_some(), "the sixth");
    // gc never left a CPU idle; then twice.
    let mut p = policy(&["cpu-idle in gc once-after:2"]);
    p.observe(&sleeps(MS, 7));
    assert_eq!(p.evaluate(MS), None);
    p.observe(&sleeps(2 * MS, 9));
    assert_eq!(p.evaluate(2 * MS), None);
    p.observe(&sleeps(3 * MS, 9));
    assert!(p.evaluate(3 * MS).is_some());
    p.observe(&sleeps(4 * MS, 9));
    assert_eq!(p.evaluate(4 * MS), None, "once");
}
