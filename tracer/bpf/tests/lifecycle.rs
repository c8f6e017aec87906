//! The recorder's life on the real kernel: what `probe` says here, a CPU
//! that does not exist refused, events on a CPU without a ring counted as
//! lost (never silent), nothing written after `detach` and everything
//! before it still readable, and the programs' run counts and times.

mod support;

use std::time::Duration;

use idleflow_bpf::{BpfError, RunTimeStats, SchedEvent, SchedRecorder, WakeContextSource};
use support::{may_run, online_cpus, sleep_pinned};

#[test]
fn probe_open_lose_detach_and_count() {
    if !may_run("probe_open_lose_detach_and_count") {
        return;
    }
    let probe = idleflow_bpf::probe().expect("probe");
    assert_eq!(
        probe.wake_context,
        WakeContextSource::PreemptCount,
        "{probe:?}"
    );

    let err = SchedRecorder::open(&[100_000], 1 << 16, Default::default()).unwrap_err();
    assert!(
        matches!(err, BpfError::NoSuchCpu { cpu: 100_000, .. }),
        "{err}"
    );

    let cpus = online_cpus();
    if cpus.len() < 2 {
        eprintln!("SKIPPED the part with a CPU left out: one CPU online");
        return;
    }
    let (kept, left) = (cpus[0], cpus[1]);
    let stats = RunTimeStats::enable().expect("run-time statistics");
    let mut rec = SchedRecorder::open(&[kept], 1 << 20, Default::default()).expect("open");
    assert_eq!(rec.cpus(), [kept]);
    sleep_on(left, 20);
    // Switches on the kept CPU too, whatever else the machine runs (a CPU
    // busy with one thread may not switch at all in these few ms).
    sleep_on(kept, 5);
    let mut seen = 0;
    rec.poll(Duration::from_millis(10), |cpu, _| {
        assert_eq!(cpu, kept, "only the kept CPU has a ring");
        seen += 1;
    })
    .unwrap();
    assert!(seen > 0, "no event on CPU {kept}");
    let lost = rec.lost().unwrap();
    let on_left = lost
        .per_cpu
        .iter()
        .find(|c| c.cpu == left)
        .expect("the left-out CPU");
    assert!(on_left.no_ring >= 40, "{lost:?}");
    assert_eq!(on_left.ring_full, 0, "{lost:?}");

    let programs = rec.program_stats().unwrap();
    eprintln!("{programs:?}");
    let switch = programs.iter().find(|p| p.name == "on_switch").unwrap();
    assert!(
        switch.run_count >= 40 && switch.ns_per_run().unwrap() > 0.0,
        "{switch:?}"
    );
    drop(stats);

    // Detached: what was written stays readable, nothing more is written.
    std::thread::sleep(Duration::from_millis(5));
    rec.detach();
    rec.poll(Duration::ZERO, |_, _| {}).unwrap();
    sleep_on(kept, 10);
    let mut after = Vec::new();
    rec.poll(Duration::from_millis(10), |_, e| after.push(e))
        .unwrap();
    assert!(after.is_empty(), "written after detach: {after:?}");

    // Attached again, it records again.
    rec.attach().unwrap();
    sleep_on(kept, 5);
    let mut switches = 0;
    rec.poll(Duration::ZERO, |_, e| {
        switches += u32::from(matches!(e, SchedEvent::Switch(_)))
    })
    .unwrap();
    assert!(switches > 0, "nothing after attaching again");
}

/// A thread pinned to `cpu` sleeping 1 ms `times` times, joined.
fn sleep_on(cpu: u32, times: usize) {
    sleep_pinned(cpu, times, Duration::from_millis(1));
}
