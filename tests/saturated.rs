//! A saturated machine (issue 18): 128 threads handing one byte back and
//! forth on this machine's CPUs, recorded at default settings, loses no
//! record: the rings are drained by a real-time thread that only copies
//! bytes, and the ordinary-priority processing catches up.

mod common;

use common::*;

#[test]
fn handing_off_among_128_threads_loses_no_record_at_defaults() {
    let Some(_m) = machine() else { return };
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("h.idleflow");
    let out = run(idleflow()
        .args(["record", "-q", "-o"])
        .arg(&rec)
        .arg("--")
        .arg(example("handoff"))
        .args(["--pairs", "64", "--seconds", "3"]));
    assert!(out.status.success(), "record: {}", stderr(&out));
    let handoffs: u64 = stdout(&out)
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("handoff prints its count");
    let r = report_json(&rec);
    let dispatches = u(&r, "dispatches");
    println!(
        "| 64 pairs, 3 s | {handoffs} hand-offs | {dispatches} dispatches | {} wake-ups | {} lost | drain {} | recorder {:.1} ms CPU |",
        u(&r, "wakeups"),
        u(&r, "lost_events"),
        r["tool"]["drain_priority"],
        u(&r["tool"], "runtime_ns") as f64 / 1e6
    );
    assert_eq!(r["tool"]["drain_priority"], "SCHED_FIFO 10");
    assert_eq!(u(&r, "lost_events"), 0, "records lost at default settings");
    // Every hand-off is a switch on each side: the dispatches were all kept.
    assert!(
        dispatches >= handoffs,
        "{dispatches} dispatches for {handoffs} hand-offs"
    );
    assert!(
        handoffs > 100_000,
        "the load was too light: {handoffs} hand-offs"
    );
}

/// Records the kernel dropped are never turned into idle or busy time: a
/// recording with an injected loss (written with the format's writer)
/// reports the span around it as unknown, and says what to do.
#[test]
fn lost_spans_are_reported_as_unknown() {
    use idleflow_format::{
        Dispatch, Lost, NodeTag, PrevState, Record, RunInfo, RunSummary, Writer, IDLE_TID,
    };
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("lost.idleflow");
    let info = RunInfo::minimal(vec![0, 1], 0);
    let mut w = Writer::new(std::fs::File::create(&rec).unwrap(), &info).unwrap();
    let d = |time, cpu, prev, next| {
        Record::Dispatch(Dispatch {
            time,
            cpu,
            prev_tid: prev,
            prev_state: if prev == IDLE_TID {
                PrevState::Unknown
            } else {
                PrevState::Sleeping
            },
            next_tid: next,
            prev_node: NodeTag::Untraced,
        })
    };
    for r in [
        d(1_000_000, 0, IDLE_TID, 7),
        d(2_000_000, 0, 7, IDLE_TID),
        d(1_000_000, 1, IDLE_TID, 8),
        // CPU 0 loses records from 2 ms on; the stream looks continuous after.
        Record::Lost(Lost {
            time: 5_000_000,
            cpu: 0,
            count: 1_000,
        }),
        d(6_000_000, 0, IDLE_TID, 7),
        d(7_000_000, 0, 7, IDLE_TID),
        d(9_000_000, 1, 8, IDLE_TID),
    ] {
        w.write(&r).unwrap();
    }
    w.finish(&RunSummary {
        stop_ns: 10_000_000,
        lost_per_cpu: vec![1_000, 0],
        ..Default::default()
    })
    .unwrap();
    let r = report_json(&rec);
    let cpu0 = &r["per_cpu"][0];
    assert_eq!(u(cpu0, "lost"), 1_000);
    assert_eq!(
        u(cpu0, "unknown_ns"),
        4_000_000,
        "2..6 ms is unknown: {cpu0}"
    );
    assert_eq!(
        u(cpu0, "idle_ns"),
        1_000_000 + 3_000_000,
        "0..1 and 7..10 ms idle, nothing of the lost span: {cpu0}"
    );
    let cpu1 = &r["per_cpu"][1];
    assert_eq!(u(cpu1, "unknown_ns"), 0);
    let text = stdout(&run(idleflow().arg("report").arg(&rec)));
    assert!(text.contains("WARNING: 1,000 records lost"), "{text}");
    assert!(text.contains("--ring-size"), "says what to do: {text}");
}
