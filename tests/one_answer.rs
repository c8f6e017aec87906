//! End to end through the CLI: one merged path per idle-causing dispatch
//! (`report`'s `idle_paths`, the default flame graph), whatever sources
//! the recording has, and a report whose first lines are the answer.

mod common;

use std::path::Path;

use common::*;
use serde_json::Value;

/// The report's JSON as a user gets it: no `--view`.
fn default_json(rec: &Path) -> Value {
    let out = run(idleflow().arg("report").arg(rec).args(["--format", "json"]));
    assert!(out.status.success(), "report: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).expect("report JSON parses")
}

/// The first cause of the headline with a program frame.
fn first_program_cause(r: &Value) -> &Value {
    r["idle_paths"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["program"] == true)
        .unwrap_or_else(|| panic!("no cause in the program: {}", r["idle_paths"]["causes"]))
}

/// The merged paths, after checking that they and what they leave out add
/// up to the CPUs' idle, that the per-source sections stay behind their
/// views, and that idleflow's own threads are on no path.
fn paths(r: &Value) -> &Vec<Value> {
    let ip = &r["idle_paths"];
    let rest = &ip["not_in_paths"];
    let sum = u(ip, "explained_ns")
        + u(rest, "no_cause_ns")
        + u(rest, "idleflow_ns")
        + u(rest, "other_processes_ns");
    let idle = u(ip, "idle_ns");
    assert_eq!(idle, u(&r["total"], "idle_ns"), "{ip}");
    assert!(
        sum.abs_diff(idle) * 100 <= idle,
        "paths and the rest {sum} ns against {idle} ns idle: {rest}"
    );
    for view in ["java_waits", "call_paths", "kernel_waits", "arcflow"] {
        assert!(r.get(view).is_none(), "{view} without --view");
    }
    let paths = ip["paths"].as_array().expect("idle_paths.paths");
    for p in paths {
        for t in p["threads"].as_array().unwrap() {
            let name = t["name"].as_str().unwrap();
            assert!(
                !name.starts_with("JFR ")
                    && name != "Attach Listener"
                    && !name.starts_with("idleflow"),
                "idleflow's own thread on a path: {p}"
            );
        }
    }
    paths
}

fn frame_names(p: &Value) -> Vec<&str> {
    p["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect()
}

/// The program's own first frame of a path.
fn program(p: &Value) -> &Value {
    let i = p["program_frame"]
        .as_u64()
        .unwrap_or_else(|| panic!("no program frame: {p}"));
    &p["frames"][i as usize]
}

/// The text report's first `n` lines, after checking that the whole
/// default report is one screen.
fn head(rec: &Path, n: usize) -> String {
    let text = stdout(&run(idleflow().arg("report").arg(rec)));
    assert_one_screen(&text);
    text.lines().take(n).collect::<Vec<_>>().join("\n")
}

/// `examples/c/chain.c` built without frame pointers in `dir` and recorded
/// there for `ms` milliseconds: the recording and how `record` ended.
fn record_chain(dir: &Path, ms: &str) -> (std::path::PathBuf, std::process::Output) {
    let bin = build_c_example(
        dir,
        "chain.c",
        "chain",
        &["-O2", "-fomit-frame-pointer", "-pthread", "-g"],
    );
    let rec = dir.join("c.idleflow");
    let out = run(idleflow()
        .args(["record", "-q", "-o"])
        .arg(&rec)
        .arg("--")
        .arg(&bin)
        .arg(ms));
    (rec, out)
}

#[test]
fn a_native_program_without_frame_pointers_gets_one_merged_path_and_a_headline() {
    let Some(_m) = machine() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (rec, out) = record_chain(dir.path(), "2000");
    assert!(out.status.success(), "{}", stderr(&out));
    let r = default_json(&rec);
    let top = &paths(&r)[0];
    assert_eq!(top["reason"], "pipe read", "{top}");
    assert_eq!(top["threads"][0]["name"], "worker", "{top}");
    assert!(f(top, "share_pct") > 80.0, "{top}");
    let pf = program(top);
    assert_eq!(pf["name"], "fill_buffer", "{top}");
    assert_eq!(pf["source"], "stack", "{top}");
    assert!(u(pf, "line") > 0, "DWARF's line: {top}");
    let fr = frame_names(top);
    assert_eq!(top["frames"][0]["source"], "kernel", "{top}");
    assert!(fr[0].contains("pipe_read"), "{fr:?}");
    let at = |n: &str| fr.iter().position(|f| *f == n).unwrap();
    assert!(at("fill_buffer") < at("next_message") && at("next_message") < at("consume"));
    // The first lines say it.
    let text = head(&rec, 3);
    let first = text.lines().nth(1).unwrap();
    assert!(
        first.contains("pipe read — worker in fill_buffer:"),
        "{text}"
    );
    // The default flame graph draws the same path.
    let lines = folded(&rec, "dispatches");
    let (line, n) = lines.iter().max_by_key(|l| l.1).unwrap();
    assert!(
        line.starts_with("pacer;worker;")
            && line.contains("worker_main;consume;next_message;fill_buffer;")
            && line.ends_with("pipe_read_[k]"),
        "{line}"
    );
    assert!(*n >= u(top, "dispatches") * 9 / 10, "{n} {top}");
}

#[test]
fn a_java_convoy_is_one_path_with_the_jvms_frames_spliced_into_the_native_ones() {
    let Some(_m) = machine() else { return };
    // A stack at every switch to idle (no budget): the path's native frames
    // are its own dispatches' (under the budget, a dispatch without stacks
    // takes its thread's previous ones, which for a clerk are often the
    // holder's sleep: PERFORMANCE.md 5l).
    let (_dir, rec) = record_waits(
        "convoy",
        &["--wait-threshold", "0", "--stack-budget", "0"],
        "5",
    );
    let r = default_json(&rec);
    // The program's top path: a HotSpot thread (the VM Periodic Task
    // Thread, 27.6 % once) can be the last to run before idle while the
    // clerks wait, and the convoy split in several paths is then smaller.
    paths(&r);
    let ours = program_paths(&r);
    let top = first_past_the_holders_sleep(
        &ours,
        "monitor enter",
        "Waits$Ledger.post",
        program_frame_name,
    );
    assert_eq!(top["object"], "Waits$Ledger", "{top}");
    // Of all CPUs' idle, the JVM's start-up and its own threads included
    // (47 % measured on a 5 s run). The JVM's runtime frames (interpreted
    // or compiled monitor enter) can split the convoy into several paths.
    let convoy: f64 = paths(&r)
        .iter()
        .filter(|p| p["reason"] == "monitor enter" && p["object"] == "Waits$Ledger")
        .map(|p| f(p, "share_pct"))
        .sum();
    assert!(convoy > 30.0, "{convoy} % of idle");
    let t = &top["threads"][0];
    assert_eq!(
        (t["name"].as_str(), u(t, "count")),
        (Some("clerk-*"), 4),
        "{top}"
    );
    let pf = program(top);
    assert_eq!(pf["name"], "Waits$Ledger.post", "{top}");
    // Named by the JVM's own structures (the default mode): nothing ran in
    // the JVM.
    assert_eq!(pf["source"], "vm", "{top}");
    assert!(u(pf, "line") > 0, "{top}");
    assert!(
        top["held_by"][0]["name"]
            .as_str()
            .unwrap()
            .starts_with("clerk-"),
        "{top}"
    );
    // Kernel wait innermost, then the JVM's monitor code, then the Java
    // frames, then the thread's native entry.
    let fr = frame_names(top);
    assert!(fr[0].contains("futex"), "{fr:?}");
    let monitor = fr.iter().position(|f| f.starts_with("ObjectMonitor::"));
    let post = fr.iter().position(|f| *f == "Waits$Ledger.post").unwrap();
    assert!(monitor.is_some_and(|m| m < post), "{fr:?}");
    // Native frames outside the Java ones are the thread's entry (where the
    // unwinder got past the Java code: compiled frames without frame
    // pointers end the user stack inside it).
    let last_java = fr.iter().rposition(|f| *f == "java.lang.Thread.run");
    if let Some(entry) = last_java.and_then(|j| fr.get(j + 1)) {
        assert!(entry.starts_with("JavaCalls::"), "{fr:?}");
    }
    assert!(!fr[post..].contains(&"[unknown]"), "{fr:?}");
    // With every wait recorded, nearly all the Java threads' idle is named.
    let java = &r["idle_paths"]["java"];
    assert!(f(java, "named_pct") > 90.0, "{java}");
    // The headline names the culprit in the first lines.
    let text = head(&rec, 20);
    assert!(
        text.contains("monitor enter on Waits$Ledger — clerk-* ×4 in Waits$Ledger.post:"),
        "{text}"
    );
    // The default flame graph: the clerks' largest stack besides the
    // holder's sleep is the merged path with the reason on top.
    let (line, _) = folded(&rec, "idle-ns")
        .into_iter()
        .filter(|l| l.0.starts_with("java;clerk-*;") && !l.0.ends_with(";[sleep]"))
        .max_by_key(|l| l.1)
        .expect("the clerks' stacks");
    assert!(line.ends_with(";[monitor enter] Waits$Ledger"), "{line}");
    assert!(line.contains(";Waits$Ledger.post"), "{line}");
}

/// The top cause of `rec`'s default report (JSON `idle_paths.causes[0]`),
/// after checking that the Java threads' idle has Java frames.
fn top_cause(rec: &Path, named_at_least: f64) -> Value {
    let r = default_json(rec);
    paths(&r);
    let java = &r["idle_paths"]["java"];
    assert!(
        f(java, "named_pct") >= named_at_least,
        "Java frames on {} % of the Java threads' idle: {java}",
        f(java, "named_pct")
    );
    r["idle_paths"]["causes"][0].clone()
}

/// The first cause of `rec`'s default report with `reason` (see
/// [`first_past_the_holders_sleep`]), after the checks of [`top_cause`],
/// and its line of the headline (the first or the second).
fn cause_past_the_holders_sleep(
    rec: &Path,
    named_at_least: f64,
    reason: &str,
    holder: &str,
) -> (Value, usize) {
    top_cause(rec, named_at_least);
    let r = default_json(rec);
    let causes = r["idle_paths"]["causes"].as_array().unwrap();
    let c = first_past_the_holders_sleep(causes, reason, holder, |c| c["frame"]["name"].as_str());
    let at = causes.iter().position(|x| x == c).unwrap();
    (c.clone(), at + 1)
}

/// `java Waits MODE 5` recorded with no option at all.
fn record_default(mode: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    record_waits(mode, &[], "5")
}

/// `java Waits MODE SECONDS` recorded with `options`.
fn record_waits(
    mode: &str,
    options: &[&str],
    seconds: &str,
) -> (tempfile::TempDir, std::path::PathBuf) {
    let classes = java_examples();
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join(format!("{mode}.idleflow"));
    record_java_with(&rec, classes.path(), options, &["Waits", mode, seconds]);
    (dir, rec)
}

/// Waits shorter than the flight recorder's threshold (10 ms) get their Java
/// frames from the stacks at the switch-outs, by default, and read as the
/// recorded ones do: one cause, the JVM's reason, the program's method.
fn short_waits_are_named_by_default(mode: &str, reason: &str, frame: &str, pool: &str) {
    let Some(_m) = machine() else { return };
    let (_dir, rec) = record_default(mode);
    let (c, line) = cause_past_the_holders_sleep(&rec, 95.0, reason, frame);
    assert_eq!(c["reason"], reason, "{c}");
    assert_eq!(c["threads"]["name"], pool, "{c}");
    assert_eq!(u(&c["threads"], "count"), 4, "{c}");
    assert_eq!(c["program"], true, "{c}");
    let name = c["frame"]["name"].as_str().unwrap();
    assert!(name.starts_with(frame), "{frame}…: {c}");
    assert!(f(&c, "share_pct") > 30.0, "{c}");
    let text = head(&rec, 20);
    assert!(
        // Its headline line (a first line that wraps moves it down one).
        text.lines()
            .skip(line)
            .take(2)
            .any(|l| l.contains(reason) && l.contains(pool) && l.contains(name)),
        "{text}"
    );
}

#[test]
fn a_convoy_sleeping_inside_a_monitor_is_named_by_default() {
    // Waits$Ledger.post sleeps 1 ms holding the monitor: the others wait
    // about 3 ms, under the flight recorder's 10 ms.
    short_waits_are_named_by_default("convoy", "monitor enter", "Waits$Ledger.post", "clerk-*");
}

#[test]
fn a_convoy_with_waits_under_a_millisecond_is_named_by_default() {
    // Waits$Ledger.tally computes 150 µs holding the monitor. The JIT
    // inlines it into the lambda: the agent's perf map names the inlined
    // method at the call into the monitor's slow path.
    short_waits_are_named_by_default("busy", "monitor enter", "Waits$Ledger.tally", "teller-*");
}

#[test]
fn a_reentrant_lock_convoy_is_named_by_default() {
    short_waits_are_named_by_default("lock", "park", "Waits.lockedPost", "clerk-*");
}

/// A convoy JVM started without idleflow, recorded 5 s with `--pid` and
/// `options`.
fn record_running_convoy(options: &[&str]) -> (tempfile::TempDir, std::path::PathBuf) {
    let classes = java_examples();
    let mut jvm = running_convoy_jvm(classes.path(), "10");
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("p.idleflow");
    let out = run(idleflow()
        .args(["record", "-q", "-d", "5"])
        .args(options)
        .arg("--pid")
        .arg(jvm.id().to_string())
        .arg("-o")
        .arg(&rec));
    let _ = jvm.wait();
    assert!(out.status.success(), "record --pid: {}", stderr(&out));
    (dir, rec)
}

#[test]
fn a_running_jvm_recorded_with_pid_by_default_names_its_convoy() {
    let Some(_m) = machine() else { return };
    let (_dir, rec) = record_running_convoy(&[]);
    // Its JIT code has no frame pointers: the JVM's structures name the
    // frames, nothing asked of it.
    let (c, _) = cause_past_the_holders_sleep(&rec, 95.0, "monitor enter", "Waits$Ledger.post");
    assert_eq!(c["threads"]["name"], "clerk-*", "{c}");
    assert_eq!(c["frame"]["name"], "Waits$Ledger.post", "{c}");
    assert!(f(&c, "share_pct") > 30.0, "{c}");
    let r = report_json(&rec);
    assert_eq!(r["java_frames"], "vm", "{}", r["java_frames_why"]);
    assert_eq!(
        r["java_waits"]["jvms"][0]["source"], "vm",
        "{}",
        r["java_waits"]
    );
}

#[test]
fn with_its_flight_recorder_a_running_jvm_records_every_wait_while_they_are_rare() {
    let Some(_m) = machine() else { return };
    let (_dir, rec) = record_running_convoy(&["--java", "waits,stacks"]);
    // The convoy blocks about 2 k times a second: rare, so idleflow's
    // policy recorded every wait from the start; what the stacks at the
    // switch-outs cannot name (an attached JVM's JIT code has no frame
    // pointers) the flight recorder does.
    let (c, _) = cause_past_the_holders_sleep(&rec, 95.0, "monitor enter", "Waits$Ledger.post");
    assert_eq!(c["threads"]["name"], "clerk-*", "{c}");
    assert_eq!(c["frame"]["name"], "Waits$Ledger.post", "{c}");
    let jvm = &report_json(&rec)["java_waits"]["jvms"][0];
    let span = u(jvm, "recorded_to_ns") - u(jvm, "recorded_from_ns");
    assert!(u(jvm, "all_waits_ns") * 10 >= span * 9, "{jvm}");
    // Starting the flight recorder in a running JVM redefines classes and
    // throws their compiled code away: the stacks copied before it keep no
    // JIT frame (the perf map, written at the end, names later code there).
    let out = run(idleflow()
        .args(["report", "--format", "json", "--view", "user"])
        .arg(&rec));
    assert!(out.status.success(), "{}", stderr(&out));
    let user: Value = serde_json::from_slice(&out.stdout).unwrap();
    let counts = &user["call_paths"]["counts"];
    assert!(u(counts, "stale_jit") > 0, "{counts}");
    assert!(u(counts, "stale_jit") < u(counts, "resolved"), "{counts}");
}

/// A JVM whose waits turn frequent: the policy stops recording every
/// wait as soon as its threads block tens of thousands of times a second.
#[test]
fn every_wait_is_recorded_only_while_a_jvm_waits_rarely() {
    let Some(_m) = machine() else { return };
    let (_dir, rec) = record_waits("rush", &["--java", "waits,stacks"], "5");
    let jvm = &report_json(&rec)["java_waits"]["jvms"][0];
    let span = u(jvm, "recorded_to_ns") - u(jvm, "recorded_from_ns");
    // The storm starts 2.5 s into the JVM's 5 s, about 2 s into its flight
    // recording: every wait was recorded up to then, and not after.
    let all = u(jvm, "all_waits_ns");
    assert!(
        all * 5 >= span && all * 5 <= span * 4,
        "every wait for {all} ns of {span}: {jvm}"
    );
    let text = stdout(&run(idleflow()
        .args(["report", "--view", "java"])
        .arg(&rec)));
    assert!(text.contains(", all while rare: "), "{text}");
}

/// A pool started after the flight recorder, whose waits are all too short
/// for its thresholds (the policy off): its threads keep their Java names,
/// longer than the kernel's 15 characters (the recorder's thread-start
/// events name them).
#[test]
fn threads_started_while_recording_keep_their_java_names() {
    let Some(_m) = machine() else { return };
    let (_dir, rec) = record_waits("late", &["--all-waits-below", "0"], "8");
    // The first half is idle (only `main` sleeps, and the JVM's threads):
    // the tellers' cause is the program's first.
    top_cause(&rec, 90.0);
    let r = default_json(&rec);
    let c = first_program_cause(&r);
    assert_eq!(
        c["threads"]["name"], "late-teller-with-a-long-name-*",
        "{c}"
    );
    assert_eq!(u(&c["threads"], "count"), 4, "{c}");
    assert_eq!(c["frame"]["name"], "Waits$Ledger.tally", "{c}");
}

/// A pool that was running before `record --pid`, whose waits are all too
/// short for the thresholds (the policy off): its threads have their Java
/// names, longer than the kernel's 15 characters, from the thread dump the
/// flight recorder takes as its recording begins.
#[test]
fn threads_running_before_pid_keep_their_java_names() {
    let Some(_m) = machine() else { return };
    let classes = java_examples();
    // The tellers start halfway through the program's 8 s.
    let mut jvm = running_waits_jvm(classes.path(), "late", "8", 5000);
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("p.idleflow");
    let out = run(idleflow()
        // Thresholds of 1 s: no wait event of the window names a thread.
        .args(["record", "-q", "-d", "2", "--all-waits-below", "0"])
        .args(["--java", "waits,stacks"])
        .args([
            "--wait-threshold",
            "1000",
            "--monitor-threshold",
            "1000",
            "--pid",
        ])
        .arg(jvm.id().to_string())
        .arg("-o")
        .arg(&rec));
    let _ = jvm.wait();
    assert!(out.status.success(), "record --pid: {}", stderr(&out));
    let r = default_json(&rec);
    let c = first_program_cause(&r);
    assert_eq!(
        c["threads"]["name"], "late-teller-with-a-long-name-*",
        "{c}"
    );
    let java = &report_json(&rec)["java_waits"]["jvms"][0];
    assert_eq!(u(java, "waits"), 0, "{java}");
}

/// `--monitor-threshold 0` records every contended monitor enter of an
/// attached JVM: its short monitor waits get their Java frames from the
/// flight recorder where the stacks at the switch-outs end in the JVM's stub.
#[test]
fn with_monitor_threshold_0_a_running_jvms_convoy_is_named_whole() {
    let Some(_m) = machine() else { return };
    let (_dir, rec) = record_running_convoy(&[
        "--java",
        "waits,stacks",
        "--monitor-threshold",
        "0",
        "--all-waits-below",
        "0",
    ]);
    // The holder's 1 ms sleeps are under the flight recorder's 10 ms and
    // an attached JVM's compiled code has no frame pointers: they may stay
    // unnamed; the rest of the Java threads' idle is named.
    let r = default_json(&rec);
    let java = &r["idle_paths"]["java"];
    let sleeps: u64 = program_paths(&r)
        .iter()
        .filter(|p| p["reason"] == "sleep")
        .map(|p| u(p, "idle_ns"))
        .sum();
    assert!(
        (u(java, "named_ns") + sleeps) as f64 >= 0.95 * u(java, "java_idle_ns") as f64,
        "{sleeps} ns of sleeps: {java}"
    );
    let (c, _) = cause_past_the_holders_sleep(&rec, 0.0, "monitor enter", "Waits$Ledger.post");
    assert_eq!(c["frame"]["name"], "Waits$Ledger.post", "{c}");
    assert!(f(&c, "share_pct") > 30.0, "{c}");
    // The recording says what it kept: the other waits at 10 ms, every
    // contended monitor enter; and it kept more than 10 ms ones alone.
    let r = report_json(&rec);
    let jvm = &r["java_waits"]["jvms"][0];
    assert_eq!(u(jvm, "threshold_ns"), 10_000_000, "{jvm}");
    assert_eq!(u(jvm, "monitor_enter_threshold_ns"), 0, "{jvm}");
    assert_eq!(u(jvm, "all_waits_ns"), 0, "{jvm}");
    assert!(u(jvm, "waits") > 500, "{jvm}");
    let text = stdout(&run(idleflow()
        .args(["report", "--view", "java"])
        .arg(&rec)));
    assert!(text.contains("monitor enters all"), "{text}");
}

#[test]
fn idle_after_other_processes_names_them_and_their_reason() {
    let Some(_m) = machine() else { return };
    let dir = tempfile::tempdir().unwrap();
    // A process outside the recorded command that sleeps in a loop: the
    // idle after it is another process's, by its name and its reason.
    let sleeper = dir.path().join("bgsleeper");
    std::fs::copy("/bin/sleep", &sleeper).unwrap();
    let mut bg = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!("while :; do {} 0.002; done", sleeper.display()))
        .spawn()
        .expect("bash");
    let (rec, out) = record_chain(dir.path(), "1500");
    let _ = bg.kill();
    let _ = bg.wait();
    assert!(out.status.success(), "{}", stderr(&out));
    let r = default_json(&rec);
    paths(&r);
    let ip = &r["idle_paths"];
    let others = ip["other_processes"].as_array().expect("other_processes");
    let mine = others
        .iter()
        .find(|p| p["process"] == "bgsleeper")
        .unwrap_or_else(|| panic!("bgsleeper among {others:?}"));
    assert_eq!(mine["reason"], "sleep", "{mine}");
    assert!(f(mine, "share_pct") >= 1.0, "{mine}");
    let sum: u64 = others.iter().map(|p| u(p, "idle_ns")).sum();
    assert!(
        sum <= u(&ip["not_in_paths"], "other_processes_ns") * 101 / 100,
        "the named processes' idle {sum} is within the other processes' {}",
        ip["not_in_paths"]
    );
    // One headline line says it, after the program's own cause.
    let text = head(&rec, 12);
    let line = text
        .lines()
        .find(|l| l.contains("after other processes:"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        line.contains("bgsleeper") && line.contains("(sleep)"),
        "{text}"
    );
    let first = text.lines().nth(1).unwrap();
    assert!(
        first.contains("pipe read — worker in fill_buffer:"),
        "{text}"
    );
}
