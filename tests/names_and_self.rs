//! End to end through the CLI, what real servers need before anything else:
//! idleflow never reports itself as a cause of idle (its threads are shown
//! once, apart, with what they cost), and threads carry the names they
//! really have (after `exec`, from the JVM).

mod common;

use common::*;
use serde_json::Value;
use std::collections::BTreeSet;

/// Every tid that the report names as a cause of idle or lists in its
/// thread table.
fn reported_tids(r: &Value) -> BTreeSet<u64> {
    let mut tids = BTreeSet::new();
    for c in r["per_cpu"]
        .as_array()
        .unwrap()
        .iter()
        .chain(std::iter::once(&r["total"]))
    {
        for cause in c["idle_causes"].as_array().unwrap() {
            tids.insert(u(cause, "tid"));
        }
    }
    for t in r["threads"].as_array().unwrap() {
        tids.insert(u(t, "tid"));
    }
    tids
}

fn tool_tids(r: &Value) -> BTreeSet<u64> {
    r["tool"]["tids"]
        .as_array()
        .unwrap_or_else(|| panic!("the report has a tool section: {}", r["tool"]))
        .iter()
        .map(|t| t.as_u64().unwrap())
        .collect()
}

#[test]
fn the_recorder_is_never_a_cause_and_wakes_only_for_work() {
    let Some(_m) = machine() else { return };
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.idleflow");
    // System-wide (`--duration`): every thread is shown, the recorder's too
    // if it were not left out.
    let child = idleflow()
        .args(["record", "-q", "--duration", "2", "-o"])
        .arg(&rec)
        .spawn()
        .unwrap();
    let recorder_pid = u64::from(child.id());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let r = report_json(&rec);
    let tool = tool_tids(&r);
    assert!(
        tool.contains(&recorder_pid),
        "the recorder's thread {recorder_pid} is named as idleflow's: {tool:?}"
    );
    let shown = reported_tids(&r);
    assert!(
        shown.is_disjoint(&tool),
        "idleflow's own threads {tool:?} appear among causes or threads"
    );
    // A quiet machine: the recorder wakes a few times a second, not every
    // few ms (it used to poll every 5 ms whenever a command was given).
    let wakeups = u(&r["tool"], "wakeups");
    let cpu_ns = u(&r["tool"], "runtime_ns");
    println!(
        "| recorder, system-wide 2 s | {wakeups} wake-ups | {:.3} ms on CPU |",
        cpu_ns as f64 / 1e6
    );
    assert!(
        wakeups <= 30,
        "the recorder woke {wakeups} times in 2 s of a quiet machine"
    );
    // And the text says what it cost, once, within 120 columns.
    let text = run(idleflow().arg("report").arg(&rec));
    let text = stdout(&text);
    assert_fits_120_columns(&text);
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("# idleflow itself"))
            .count(),
        1,
        "{text}"
    );
}

#[test]
fn names_follow_exec_through_runuser() {
    let Some(_m) = machine() else { return };
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.idleflow");
    // runuser forks a child that execs dash; dash forks subshells that do
    // not exec. Each subshell must be called `dash`, never `runuser`, which
    // is what a fork read before the exec of its parent used to copy.
    let script = "for i in 1 2 3 4 5 6 7 8 9 10 11 12; do (sleep 0.01; :); done";
    let out = run(idleflow()
        .args(["record", "-q", "-o"])
        .arg(&rec)
        .args(["--", "runuser", "-u", "nobody", "--", "dash", "-c", script]));
    assert!(out.status.success(), "record: {}", stderr(&out));
    let r = report_json(&rec);
    let target = r["target_pids"][0].as_u64().unwrap();
    let threads = r["threads"].as_array().unwrap();
    let named = |name: &str| {
        threads
            .iter()
            .filter(|t| t["comm"] == name)
            .map(|t| u(t, "pid"))
            .collect::<Vec<_>>()
    };
    let runuser = named("runuser");
    let dash = named("dash");
    let sleep = named("sleep");
    println!("runuser {runuser:?}, dash {dash:?}, sleep {sleep:?}");
    assert_eq!(
        runuser,
        vec![target],
        "only runuser itself is called runuser"
    );
    assert!(
        dash.len() >= 12,
        "dash and its 12 subshells are called dash: {dash:?}"
    );
    assert!(sleep.len() >= 12, "each sleep is called sleep: {sleep:?}");
    for t in threads {
        let comm = t["comm"].as_str().unwrap();
        assert!(
            !comm.is_empty() && !comm.starts_with('['),
            "every thread of the run is named: {t}"
        );
    }
}

#[test]
fn java_threads_have_their_jvm_names_and_the_agent_is_not_a_cause() {
    let Some(_m) = machine() else { return };
    let classes = java_examples();
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.idleflow");
    // Long enough for the agent's dump thread to write a snapshot.
    record_java(&rec, classes.path(), &["OneBlocker", "2", "1.5"]);
    let r = report_json(&rec);
    let threads = r["threads"].as_array().unwrap();
    let comms: Vec<&str> = threads.iter().filter_map(|t| t["comm"].as_str()).collect();
    // The kernel calls the JVM's main thread `java`; the JVM calls it `main`.
    assert!(comms.contains(&"main"), "{comms:?}");
    assert!(
        comms.contains(&"blk-0") && comms.contains(&"blk-1"),
        "{comms:?}"
    );
    let tool = tool_tids(&r);
    let dump_threads: Vec<&Value> = threads
        .iter()
        .filter(|t| t["comm"] == "idleflow-dump")
        .collect();
    assert!(
        dump_threads.is_empty(),
        "the agent's dump thread is idleflow's: {dump_threads:?}"
    );
    assert!(
        tool.len() >= 2,
        "the recorder and the agent's dump thread: {tool:?}"
    );
    assert!(reported_tids(&r).is_disjoint(&tool));
}

#[test]
fn a_thread_without_a_name_says_so() {
    // Pure: a recording whose dispatch names a thread that no THREAD record
    // introduces (it existed for an instant between /proc and the events).
    use idleflow_format::{Dispatch, PrevState, Record, RunInfo, RunSummary, Writer, IDLE_TID};
    let info = RunInfo::minimal(vec![0], 1_000);
    let mut w = Writer::new(Vec::new(), &info).unwrap();
    for (t, prev, next) in [(2_000, IDLE_TID, 4242), (3_000, 4242, IDLE_TID)] {
        w.write(&Record::Dispatch(Dispatch {
            time: t,
            cpu: 0,
            prev_tid: prev,
            prev_state: PrevState::Sleeping,
            next_tid: next,
            prev_node: Default::default(),
        }))
        .unwrap();
    }
    let bytes = w
        .finish(&RunSummary {
            stop_ns: 10_000,
            ..Default::default()
        })
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.idleflow");
    std::fs::write(&rec, bytes).unwrap();
    let r = report_json(&rec);
    let row = &r["threads"][0];
    assert_eq!(u(row, "tid"), 4242);
    assert_eq!(row["comm"], "[unknown thread]");
}
