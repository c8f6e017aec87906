//! A saturated machine (issue 18): 128 threads handing one byte back and
//! forth on this machine's CPUs, recorded at default settings, loses no
//! record: the rings are drained by a real-time thread that only copies
//! bytes, and the ordinary-priority processing catches up.

mod common;

use common::*;

#[test]
fn handing_off_among_128_threads_loses_no_record_at_defaults() {
    handing_off_among_128_threads_loses_no_record("perf");
}

/// The same with the eBPF source: its rings are emptied by the same
/// real-time drain (a reader on the recorder's ordinary thread, starved
/// among 128 threads, lost half the records, and waking it at every record
/// over the threshold slowed the hand-off to a quarter: PERFORMANCE.md §5).
#[test]
fn handing_off_among_128_threads_loses_no_record_with_the_ebpf_source() {
    handing_off_among_128_threads_loses_no_record("bpf");
}

fn handing_off_among_128_threads_loses_no_record(events: &str) {
    let Some(_m) = machine() else { return };
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("h.idleflow");
    let out = run(idleflow()
        .args(["record", "-q", "--events", events, "-o"])
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
    assert_eq!(r["event_source"], events);
    let dispatches = u(&r, "dispatches");
    println!(
        "| {events} | 64 pairs, 3 s | {handoffs} hand-offs | {dispatches} dispatches | {} wake-ups | {} lost | drain {} | recorder {:.1} ms CPU |",
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

/// `--stacks waits` on the same saturated machine: every switch is a wait,
/// and an 8 KiB copy at each overflows the rings (measured: most records
/// lost). With `--wait-sample 64` the sleeps' stacks are sampled, one in
/// 64 per CPU: no record is lost, and the blocking paths, each sampled wait
/// counted 64 times, estimate the waits the dispatches show.
#[test]
fn sampled_wait_stacks_keep_up_with_a_saturated_machine() {
    let Some(_m) = machine() else { return };
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("w.idleflow");
    let out = run(idleflow()
        .args([
            "record",
            "-q",
            "--stacks",
            "waits",
            "--wait-sample",
            "64",
            "-o",
        ])
        .arg(&rec)
        .arg("--")
        .arg(example("handoff"))
        .args(["--pairs", "64", "--seconds", "3"]));
    assert!(out.status.success(), "record: {}", stderr(&out));
    let r = report_json(&rec);
    assert_eq!(u(&r, "lost_events"), 0, "records lost with sampled waits");
    let bp = &r["blocking_paths"];
    assert_eq!(u(bp, "sample_period"), 64, "{bp}");
    let waits = u(bp, "waits");
    let non_runnable: u64 = r["threads"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["comm"] == "handoff")
        .map(|t| u(t, "non_runnable"))
        .sum();
    println!(
        "| --wait-sample 64 | {waits} waits estimated | {non_runnable} blocking switch-outs |"
    );
    assert!(
        non_runnable > 100_000,
        "the load was too light: {non_runnable}"
    );
    assert!(
        waits * 10 >= non_runnable * 9 && waits * 10 <= non_runnable * 11,
        "{waits} waits estimated from the samples, {non_runnable} in the dispatches"
    );
    // The hand-off's wait: a receive on its socket, named.
    let top = &bp["paths"][0];
    let frames = top["frames"].to_string();
    assert!(frames.contains("recv"), "{top}");
    let text = stdout(&run(idleflow()
        .arg("report")
        .arg(&rec)
        .args(["--view", "blocking"])));
    assert!(text.contains("sampled (--wait-sample 64)"), "{text}");
    // Only with --stacks waits.
    let out = run(idleflow()
        .args(["record", "--wait-sample", "4", "-o"])
        .arg(dir.path().join("x.idleflow"))
        .args(["--", "true"]));
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("add --stacks waits"),
        "{}",
        stderr(&out)
    );
}

/// Records the kernel dropped are never turned into idle or busy time: a
/// recording with an injected loss (written with the format's writer)
/// reports the span around it as unknown, and says what to do.
#[test]
fn lost_spans_are_reported_as_unknown() {
    use idleflow_format::{Lost, NodeTag, Record, RunInfo, RunSummary, Writer, IDLE_TID};
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("lost.idleflow");
    let info = RunInfo::minimal(vec![0, 1], 0);
    let mut w = Writer::new(std::fs::File::create(&rec).unwrap(), &info).unwrap();
    let d = |time, cpu, prev, next| dispatch(time, cpu, prev, next, NodeTag::Untraced);
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

/// A 128-CPU recording (synthetic: this machine has 2 CPUs) reads well:
/// the per-CPU table shows the 5 most and 5 least idle CPUs, a histogram
/// and the total; idle causes are merged across CPUs; everything fits 120
/// columns; `--per-cpu` and JSON have every CPU.
#[test]
fn a_128_cpu_report_stays_readable() {
    use idleflow_format::{NodeTag, Record, RunInfo, RunSummary, ThreadInfo, Writer, IDLE_TID};
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("big.idleflow");
    let cpus: Vec<u32> = (0..128).collect();
    let info = RunInfo::minimal(cpus.clone(), 0);
    let mut w = Writer::new(std::fs::File::create(&rec).unwrap(), &info).unwrap();
    for &cpu in &cpus {
        w.write(&Record::Thread(ThreadInfo {
            time: 0,
            tid: 1000 + cpu,
            pid: 1000,
            ppid: 1,
            comm: format!("worker-{cpu}"),
        }))
        .unwrap();
    }
    // CPU c runs its worker for c % 10 + 1 ms of every 10 ms.
    for step in 0..100u64 {
        for &cpu in &cpus {
            let t0 = step * 10_000_000;
            let busy = (u64::from(cpu) % 10 + 1) * 1_000_000;
            let tid = 1000 + cpu;
            for (time, prev, next) in [(t0 + 1, IDLE_TID, tid), (t0 + 1 + busy, tid, IDLE_TID)] {
                w.write(&dispatch(time, cpu, prev, next, NodeTag::Untraced))
                    .unwrap();
            }
        }
    }
    w.finish(&RunSummary {
        stop_ns: 1_000_000_000,
        ..Default::default()
    })
    .unwrap();
    // The default report is one screen, without the per-CPU table.
    let default = stdout(&run(idleflow().arg("report").arg(&rec)));
    assert_one_screen(&default);
    assert!(!default.contains("## Per-CPU idle"), "{default}");
    assert!(!default.contains("\nCPU 5:"), "{default}");
    // --per-cpu: the most and the least idle CPUs, how many lie between, a
    // histogram, and the causes of the CPUs shown.
    let text = stdout(&run(idleflow().arg("report").arg(&rec).arg("--per-cpu")));
    assert_fits_120_columns(&text);
    let table: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("## Per-CPU idle"))
        .take_while(|l| !l.starts_with("## Threads"))
        .collect();
    let rows = table
        .iter()
        .filter(|l| {
            l.trim_start()
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_digit())
        })
        .count();
    assert_eq!(
        rows,
        10,
        "5 most and 5 least idle CPUs:\n{}",
        table.join("\n")
    );
    assert!(text.contains("118 CPUs between"), "{text}");
    assert!(
        text.contains("CPUs by idle% (from: how many): 0:12 10:12 20:13"),
        "{text}"
    );
    // CPU 0 is among the most idle (90 %), CPU 119 among the least (0 %);
    // CPU 5 (40 %) lies between.
    assert!(
        text.contains("\nCPU 0:") && text.contains("\nCPU 119:"),
        "{text}"
    );
    assert!(!text.contains("\nCPU 5:"), "{text}");
    assert!(!text.contains("4294967295"));
    // --threads: the threads whose leaving made a CPU idle, all CPUs together.
    let threads = stdout(&run(idleflow().arg("report").arg(&rec).arg("--threads")));
    assert_fits_120_columns(&threads);
    assert!(
        threads.contains("All CPUs (--per-cpu for each CPU):"),
        "{threads}"
    );
    assert!(!threads.contains("## Per-CPU idle"), "{threads}");
    let r = report_json(&rec);
    let per_cpu = r["per_cpu"].as_array().unwrap();
    assert_eq!(per_cpu.len(), 128);
    // CPU 0 is busy 1 ms of 10: 90 % idle; CPU 9 busy 10 ms: 0 %.
    assert!((f(&per_cpu[0], "idle_pct") - 90.0).abs() < 0.5);
    assert!(f(&per_cpu[9], "idle_pct") < 0.5);
}

/// `--drain-priority 0` drains at ordinary priority, and the report says
/// what that risks; out-of-range priorities are refused.
#[test]
fn the_drain_priority_can_be_chosen_and_the_report_says_which() {
    let Some(_m) = machine() else { return };
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("p.idleflow");
    let out = run(idleflow()
        .args(["record", "-q", "--drain-priority", "0", "-o"])
        .arg(&rec)
        .args(["--", "sleep", "0.1"]));
    assert!(out.status.success(), "record: {}", stderr(&out));
    let r = report_json(&rec);
    assert_eq!(r["tool"]["drain_priority"], "ordinary (--drain-priority 0)");
    let text = stdout(&run(idleflow().arg("report").arg(&rec)));
    assert!(text.contains("a saturated machine can starve it"), "{text}");
    let bad = run(idleflow().args(["record", "--drain-priority", "100", "--", "true"]));
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr(&bad).contains("not in 0..=99"), "{}", stderr(&bad));
}
