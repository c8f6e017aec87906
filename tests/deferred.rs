//! End to end through the CLI: the deferred merge (`IDLEFLOW_DEFER=1`,
//! `tracer/src/recorder/spool.rs`) spools the drained rounds inside the
//! window and merges them once it closed. What it records must be what the
//! live merge records: per-CPU idle that `/proc/stat` confirms, every
//! wake-up seen, nothing lost, the JVM policy fed live; the header says
//! what the merge cost after the window, and no spool is left behind.

mod common;

use std::path::Path;

use common::*;

/// `idleflow record -q OPTIONS -o REC -- ARGS…` with the merge deferred.
fn record_deferred(rec: &Path, options: &[&str], args: &[&std::ffi::OsStr]) {
    let out = run(idleflow()
        .env("IDLEFLOW_DEFER", "1")
        .args(["record", "-q"])
        .args(options)
        .arg("-o")
        .arg(rec)
        .arg("--")
        .args(args));
    assert!(out.status.success(), "record: {}", stderr(&out));
}

#[test]
fn a_deferred_merge_records_what_the_live_merge_does() {
    let Some(_m) = machine() else { return };
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("d.idleflow");
    // One thread per CPU, 3 ms on, 3 ms off: each CPU idles about half
    // the time, ≈ 330 dispatches a second on each.
    let work = example("dutycycle");
    record_deferred(
        &rec,
        &[],
        &[work.as_os_str(), "--seconds".as_ref(), "2".as_ref()],
    );
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "d.idleflow")
        .collect();
    assert!(left.is_empty(), "left beside the recording: {left:?}");

    let r = report_json(&rec);
    let d = &r["tool"]["deferred_merge"];
    assert!(u(d, "bytes") > 10_000, "{d}");
    assert!(u(d, "cpu_ns") > 0, "{d}");
    assert_eq!(u(&r, "lost_events"), 0);
    assert!(u(&r, "dispatches") > 1000, "{}", u(&r, "dispatches"));
    let window = u(&r, "duration_ns");
    let mut idle = 0;
    for c in r["per_cpu"].as_array().unwrap() {
        assert_eq!(c["kernel_differs"], false, "CPU {}: {c}", c["cpu"]);
        assert_eq!(u(c, "unseen_wakeups"), 0, "CPU {}: {c}", c["cpu"]);
        assert!(u(c, "idle_ns") <= window, "{c}");
        idle += u(c, "idle_ns");
    }
    // dutycycle sleeps half of its 2 s on each CPU.
    let cpus = u(&r, "cpus");
    assert!(
        idle * 5 >= window * cpus,
        "idle {idle} ns of {} CPU-ns",
        window * cpus
    );
    let text = stdout(&run(idleflow().arg("report").arg(&rec)));
    assert!(text.contains("merge deferred past the window: "), "{text}");
}

/// The every-wait policy reads the JVM's blocking switch-outs as the rounds
/// are spooled: as with the live merge, every wait is recorded until the
/// storm, not after (`tests/one_answer.rs` for the live merge).
#[test]
fn a_deferred_merge_feeds_the_jvm_policy_live() {
    let Some(_m) = machine() else { return };
    let classes = java_examples();
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("rush.idleflow");
    let java = Path::new(JDK17).join("bin/java");
    // The policy is the flight recorder's (not the default mode's).
    record_deferred(
        &rec,
        &["--java", "waits,stacks"],
        &[
            java.as_os_str(),
            "-cp".as_ref(),
            classes.path().as_os_str(),
            "Waits".as_ref(),
            "rush".as_ref(),
            "5".as_ref(),
        ],
    );
    let r = report_json(&rec);
    assert!(r["tool"]["deferred_merge"].is_object(), "{}", r["tool"]);
    let jvm = &r["java_waits"]["jvms"][0];
    let span = u(jvm, "recorded_to_ns") - u(jvm, "recorded_from_ns");
    let all = u(jvm, "all_waits_ns");
    assert!(
        all * 5 >= span && all * 5 <= span * 4,
        "every wait for {all} ns of {span}: {jvm}"
    );
}
