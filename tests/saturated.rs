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
