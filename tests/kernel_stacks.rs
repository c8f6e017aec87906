//! End to end through the CLI: the kernel stacks taken at the switch-outs
//! that leave a CPU idle name each thread's kernel wait, and agree with
//! perf's own call chains of the same switches (`perf record -e
//! sched:sched_switch --filter 'next_pid == 0' -g`, run at the same time).

mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

/// `examples/c/pipewait.c` built with `-O2` into `dir`.
fn pipewait(dir: &Path) -> PathBuf {
    build_c_example(dir, "pipewait.c", "pipewait", &["-O2", "-pthread"])
}

/// The report's kernel paths waited in by thread `comm`: (wait, dispatches).
fn waits_of<'a>(kw: &'a Value, comm: &str) -> Vec<(&'a str, u64)> {
    let mut v: Vec<(&str, u64)> = kw["paths"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| {
            let n: u64 = p["threads"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|t| t[0] == comm)
                .map(|t| t[1].as_u64().unwrap())
                .sum();
            (n > 0).then(|| (p["wait"].as_str().unwrap(), n))
        })
        .collect();
    v.sort_by_key(|w| std::cmp::Reverse(w.1));
    v
}

/// perf's switch-to-idle samples of thread `comm`: how many, and how many
/// have a frame whose name contains `frame`.
fn perf_samples(script: &str, comm: &str, frame: &str) -> (u64, u64) {
    let (mut all, mut with) = (0, 0);
    for sample in script.split("\n\n") {
        let mut lines = sample.lines().filter(|l| !l.trim().is_empty());
        let Some(head) = lines.next() else { continue };
        if head.split_whitespace().next() != Some(comm) {
            continue;
        }
        all += 1;
        with += u64::from(lines.any(|l| l.contains(frame)));
    }
    (all, with)
}

#[test]
fn each_threads_kernel_wait_is_named_at_the_switch_out_that_left_a_cpu_idle() {
    let Some(_m) = machine() else { return };
    let dir = tempfile::tempdir().unwrap();
    let bin = pipewait(dir.path());
    let rec = dir.path().join("k.idleflow");
    let (out, script) = under_perf(
        &dir,
        &[
            "-e",
            "sched:sched_switch",
            "--filter",
            "next_pid == 0",
            "-g",
        ],
        &["-F", "comm,tid,ip,sym"],
        || {
            run(idleflow()
                .args(["record", "-q", "-o"])
                .arg(&rec)
                .arg("--")
                .arg(&bin)
                .arg("2000"))
        },
    );
    assert!(out.status.success(), "record: {}", stderr(&out));
    let r = report_json(&rec);
    let kw = &r["kernel_waits"];
    assert!(kw.is_object(), "no kernel_waits section: {r}");
    // Nearly every dispatch to idle has its stack.
    let with = u(kw, "idle_dispatches_with_stack");
    let all = u(kw, "idle_dispatches_to");
    assert!(with * 100 >= all * 95, "{with} of {all} with a stack");
    // Each thread's wait, by its own kernel stack.
    let reader = waits_of(kw, "reader");
    let sleeper = waits_of(kw, "sleeper");
    assert!(reader[0].0.contains("pipe_read"), "{reader:?}");
    assert!(sleeper[0].0.contains("nanosleep"), "{sleeper:?}");
    // Their frames are path frames, as in every section: kind `kernel`.
    let first = &kw["paths"][0];
    let frames = first["frames"].as_array().unwrap();
    assert!(
        !frames.is_empty() && frames.iter().all(|f| f["kind"] == "kernel"),
        "{first}"
    );
    assert!(frames.iter().any(|f| f["name"] == first["wait"]), "{first}");
    let ours_reader: u64 = reader.iter().map(|w| w.1).sum();
    assert!(
        reader[0].1 * 10 >= ours_reader * 9,
        "the reader waits in the pipe: {reader:?}"
    );
    // idleflow's own threads are never a cause.
    for p in kw["paths"].as_array().unwrap() {
        for t in p["threads"].as_array().unwrap() {
            assert!(!t[0].as_str().unwrap().starts_with("idleflow"), "{p}");
        }
    }
    // perf's call chains of the same switches say the same.
    let (perf_reader, perf_in_pipe) = perf_samples(&script, "reader", "pipe_read");
    assert!(perf_reader > 200, "perf saw {perf_reader} reader samples");
    assert!(
        perf_in_pipe * 10 >= perf_reader * 9,
        "{perf_in_pipe} of {perf_reader}"
    );
    let (ours, theirs) = (reader[0].1 as f64, perf_in_pipe as f64);
    assert!(
        (ours - theirs).abs() <= theirs * 0.05,
        "reader's switches to idle in pipe_read: idleflow {ours}, perf {theirs}"
    );
    println!(
        "reader's switches to idle in pipe_read: idleflow {ours}, perf {theirs}; \
         {with} of {all} dispatches to idle with a stack"
    );
    // The flame graph draws them: process, thread, kernel frames.
    let svg = dir.path().join("k.svg");
    let out = run(idleflow().arg("flamegraph").arg(&rec).arg("-o").arg(&svg));
    assert!(out.status.success(), "{}", stderr(&out));
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(drawn.contains("pipe_read (") && drawn.contains("do_nanosleep ("));
    // The text report names the waits.
    let text = stdout(&run(idleflow()
        .arg("report")
        .arg(&rec)
        .args(["--view", "kernel"])));
    assert!(text.contains("## Idle-causing kernel waits"), "{text}");
    assert_fits_120_columns(&text);
}

#[test]
fn no_stacks_records_no_kernel_stacks() {
    let Some(_m) = machine() else { return };
    let dir = tempfile::tempdir().unwrap();
    let bin = pipewait(dir.path());
    let rec = dir.path().join("n.idleflow");
    let out = run(idleflow()
        .args(["record", "-q", "--no-stacks", "-o"])
        .arg(&rec)
        .arg("--")
        .arg(&bin)
        .arg("300"));
    assert!(out.status.success(), "record: {}", stderr(&out));
    let r = report_json(&rec);
    assert!(r["kernel_waits"].is_null(), "{}", r["kernel_waits"]);
    assert!(u(&r, "dispatches") > 600);
}
