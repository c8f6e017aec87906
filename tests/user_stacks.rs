//! End to end through the CLI: the user stacks taken at the switch-outs
//! that leave a CPU idle, unwound when `record` ends, give each program's
//! idle-causing call path by name, for code without frame pointers (CFI),
//! for Rust's `Condvar`, after the binary is gone, and for a stripped one.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

/// `examples/c/chain.c` built `-O2 -fomit-frame-pointer` (plus `extra`)
/// into `dir/name`.
fn chain(dir: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let mut flags = vec!["-O2", "-fomit-frame-pointer", "-pthread"];
    flags.extend_from_slice(extra);
    build_c_example(dir, "chain.c", name, &flags)
}

fn record(rec: &Path, cmd: &[&std::ffi::OsStr]) {
    let out = run(idleflow()
        .args(["record", "-q", "-o"])
        .arg(rec)
        .arg("--")
        .args(cmd));
    assert!(out.status.success(), "record: {}", stderr(&out));
}

/// The names of a call path's frames, innermost first.
fn names(path: &Value) -> Vec<&str> {
    path["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect()
}

/// Whether `want` appear in `frames` in this order (others may lie between).
fn in_order(frames: &[&str], want: &[&str]) -> bool {
    let mut it = frames.iter();
    want.iter().all(|w| it.any(|f| f == w))
}

/// The dispatches to idle thread `comm` caused, from the report's
/// per-thread table (counted from the dispatch stream, not the stacks).
fn to_idle_of(r: &Value, comm: &str) -> u64 {
    r["total"]["idle_causes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["comm"] == comm)
        .map(|t| u(t, "idle_dispatches_to"))
        .sum()
}

#[test]
fn a_c_program_without_frame_pointers_is_unwound_by_cfi_to_its_blocking_chain() {
    let Some(_m) = machine() else { return };
    let dir = tempfile::tempdir().unwrap();
    let bin = chain(dir.path(), "chain", &["-g"]);
    let rec = dir.path().join("c.idleflow");
    record(&rec, &[bin.as_os_str(), "2000".as_ref()]);
    let r = report_json(&rec);
    let cp = &r["call_paths"];
    assert!(cp.is_object(), "no call_paths section: {r}");
    let top = &cp["paths"][0];
    let frames = names(top);
    // The whole chain, through libc's read (no frame pointers there or
    // here: only CFI finds the callers), out to the thread's start.
    assert!(
        in_order(
            &frames,
            &[
                "fill_buffer",
                "next_message",
                "consume",
                "worker_main",
                "start_thread"
            ]
        ),
        "{frames:?}"
    );
    assert!(
        frames[0].contains("read"),
        "innermost: libc's read: {frames:?}"
    );
    assert!(top["wait"].as_str().unwrap().contains("pipe_read"), "{top}");
    assert_eq!(top["threads"][0][0], "worker", "{top}");
    let share = f(top, "share_pct");
    assert!(
        share >= 90.0,
        "the worker's read is the heaviest path: {share} %"
    );
    // Every dispatch to idle the worker caused has its path: the stacks
    // agree with the dispatch stream's own count.
    let worker = to_idle_of(&r, "worker");
    let on_path = u(top, "idle_dispatches_to");
    assert!(worker > 1000, "the worker left its CPU idle {worker} times");
    assert!(
        on_path * 100 >= worker * 95,
        "{on_path} of {worker} on the path"
    );
    // Nearly all copies reached the stack's bottom.
    let c = &cp["counts"];
    assert!(
        u(c, "truncated") + u(c, "stopped") <= u(c, "copies") / 10,
        "{c}"
    );
    // The file and line of the innermost frame of our own code.
    let text = stdout(&run(idleflow()
        .arg("report")
        .arg(&rec)
        .args(["--view", "user"])));
    assert!(text.contains("## Idle-causing call paths"), "{text}");
    assert!(
        text.contains("fill_buffer ← next_message ← consume"),
        "{text}"
    );
    assert_fits_120_columns(&text);
    // The flame graph: process, thread, user frames outermost first, the
    // kernel's on top; --user-only leaves the kernel's out.
    let lines = folded_with(&rec, "dispatches", &[]);
    let (line, n) = lines.iter().max_by_key(|l| l.1).unwrap();
    assert!(
        line.contains("worker;")
            && line.contains("worker_main;consume;next_message;fill_buffer;")
            && line.contains("pipe_read_[k]"),
        "{line}"
    );
    assert!(*n * 100 >= worker * 95, "{n} of {worker}");
    let user = folded_with(&rec, "dispatches", &["--user-only"]);
    assert!(user.iter().all(|(l, _)| !l.contains("_[k]")), "{user:?}");
    println!("heaviest path {share:.1} %, {on_path} of {worker} dispatches to idle: {frames:?}");
}

#[test]
fn a_rust_program_waiting_on_a_condvar_shows_the_wait_by_its_callers() {
    let Some(_m) = machine() else { return };
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.idleflow");
    let bin = example("condvar");
    record(&rec, &[bin.as_os_str(), "2000".as_ref()]);
    let r = report_json(&rec);
    let top = &r["call_paths"]["paths"][0];
    let frames = names(top);
    assert!(
        in_order(
            &frames,
            &[
                "std::sync::poison::condvar::Condvar::wait",
                "condvar::take_job",
                "condvar::worker_loop"
            ]
        ),
        "{frames:?}"
    );
    assert!(top["wait"].as_str().unwrap().contains("futex"), "{top}");
    assert_eq!(top["threads"][0][0], "worker", "{top}");
    let share = f(top, "share_pct");
    assert!(
        share >= 90.0,
        "the condvar wait is the heaviest path: {share} %"
    );
    let worker = to_idle_of(&r, "worker");
    assert!(u(top, "idle_dispatches_to") * 100 >= worker * 95, "{top}");
}

#[test]
fn a_recording_reports_the_same_after_its_binary_is_deleted_and_a_stripped_one_gives_offsets() {
    let Some(_m) = machine() else { return };
    let dir = tempfile::tempdir().unwrap();
    let bin = chain(dir.path(), "chain-gone", &["-g"]);
    let rec = dir.path().join("d.idleflow");
    record(&rec, &[bin.as_os_str(), "500".as_ref()]);
    let before = stdout(&run(idleflow().arg("report").arg(&rec)));
    let json_before = report_json(&rec)["call_paths"].clone();
    std::fs::remove_file(&bin).unwrap();
    let after = stdout(&run(idleflow().arg("report").arg(&rec)));
    assert_eq!(before, after, "the recording carries its symbols");
    assert_eq!(json_before, report_json(&rec)["call_paths"]);
    assert!(in_order(
        &names(&json_before["paths"][0]),
        &["fill_buffer", "consume"]
    ));

    // Stripped: no symbols of its own, so module + offset; libc still named.
    let bin = chain(dir.path(), "chain-stripped", &["-s"]);
    let rec = dir.path().join("s.idleflow");
    record(&rec, &[bin.as_os_str(), "500".as_ref()]);
    let r = report_json(&rec);
    let top = &r["call_paths"]["paths"][0];
    let frames = names(top);
    let ours = frames
        .iter()
        .filter(|f| f.starts_with("chain-stripped+0x"))
        .count();
    assert!(
        ours >= 4,
        "the chain's four functions by offset: {frames:?}"
    );
    assert!(frames.contains(&"start_thread"), "{frames:?}");
    assert!(frames[0].contains("read"), "{frames:?}");
}

#[test]
fn stack_size_zero_and_no_stacks_take_no_user_stacks() {
    let Some(_m) = machine() else { return };
    let dir = tempfile::tempdir().unwrap();
    let bin = chain(dir.path(), "chain", &[]);
    for (flags, kernel) in [
        (&["--stack-size", "0"][..], true),
        (&["--no-stacks"][..], false),
    ] {
        let rec = dir.path().join("z.idleflow");
        let out = run(idleflow()
            .args(["record", "-q"])
            .args(flags)
            .arg("-o")
            .arg(&rec)
            .arg("--")
            .arg(&bin)
            .arg("300"));
        assert!(out.status.success(), "record {flags:?}: {}", stderr(&out));
        let r = report_json(&rec);
        assert!(r["call_paths"].is_null(), "{flags:?}: {}", r["call_paths"]);
        assert_eq!(r["kernel_waits"].is_object(), kernel, "{flags:?}");
    }
    let out = run(idleflow().args(["record", "--stack-size", "100", "--", "true"]));
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("not a multiple of 8"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_jit_compiled_java_method_is_named_from_the_light_agents_perf_map() {
    let Some(_m) = machine() else { return };
    let classes = java_examples();
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("j.idleflow");
    let java = Path::new(JDK17).join("bin/java");
    let out = run(idleflow()
        .args(["record", "--java", "stacks", "--agent"])
        .arg(agent_library())
        .arg("-o")
        .arg(&rec)
        .arg("--")
        .arg(&java)
        .args([
            "-XX:CompileCommand=quiet",
            "-XX:CompileCommand=dontinline,JitWait::pause",
        ])
        .arg("-cp")
        .arg(classes.path())
        .args(["JitWait", "20000"]));
    let err = stderr(&out);
    assert!(out.status.success(), "record: {err}");
    // The agent's light mode only: no entry/exit events (`tree=0`), the
    // perf map written as the JVM compiles, not HotSpot's at exit.
    let picked = err
        .lines()
        .find(|l| l.starts_with("Picked up JAVA_TOOL_OPTIONS"))
        .unwrap_or_else(|| panic!("the JVM's options line in {err}"));
    assert!(picked.contains("-XX:+PreserveFramePointer"), "{picked}");
    assert!(
        picked.contains("libidleflow_agent.so=tree=0,perfmap=1"),
        "{picked}"
    );
    assert!(!picked.contains("DumpPerfMapAtExit"), "{picked}");
    let r = report_json(&rec);
    // No call tree: the JVM ran compiled, with no method events.
    assert!(r["arcflow"].is_null(), "{}", r["arcflow"]);
    let paths = r["call_paths"]["paths"].as_array().unwrap();
    let waiter: Vec<&Value> = paths
        .iter()
        .filter(|p| p["threads"][0][0] == "waiter")
        .collect();
    let top = waiter.first().expect("a path of the waiter thread");
    let frames = top["frames"].as_array().unwrap();
    let pause = frames
        .iter()
        .find(|f| f["name"].as_str().unwrap().contains("JitWait.pause"))
        .unwrap_or_else(|| panic!("JitWait.pause among {frames:?}"));
    assert_eq!(pause["kind"], "jit", "{pause}");
    // Named as the flight recorder names it: no return type, no parameters.
    assert_eq!(pause["name"], "JitWait.pause", "{pause}");
    // Under it libjvm's park, named by its symbols; above it the thread's
    // start, reached through the interpreter's and JIT frames by their
    // frame pointers.
    let names = names(top);
    assert!(in_order(&names, &["Unsafe_Park"]), "{names:?}");
    assert!(
        names.iter().any(|n| n.contains("thread_native_entry")),
        "{names:?}"
    );
    assert!(top["wait"].as_str().unwrap().contains("futex"), "{top}");
    // The waiter's parks are most of the JVM's idle, and nearly all of
    // them have this path.
    let waiter_idle = to_idle_of(&r, "waiter");
    assert!(waiter_idle > 5000, "{waiter_idle}");
    assert!(
        u(top, "idle_dispatches_to") * 10 >= waiter_idle * 8,
        "{} of {waiter_idle} dispatches to idle on the JIT path",
        u(top, "idle_dispatches_to")
    );
    // Without it (`--java waits`: the flight recorder's waits alone), JIT
    // frames are not named, and the report says how to name them.
    let rec = dir.path().join("w.idleflow");
    let out = run(idleflow()
        .args(["record", "-q", "--java", "waits", "-o"])
        .arg(&rec)
        .arg("--")
        .arg(&java)
        .arg("-cp")
        .arg(classes.path())
        .args(["JitWait", "5000"]));
    assert!(out.status.success(), "record: {}", stderr(&out));
    let cp = &report_json(&rec)["call_paths"];
    let notes = cp["notes"].to_string();
    assert!(notes.contains("--java waits,stacks"), "{notes}");
    assert!(
        !cp.to_string().contains("JitWait.pause"),
        "named without a perf map?"
    );
}

/// A thread that blocks where it blocked before has nearly the same stack
/// bytes: the recorder writes each copy as its difference from the
/// thread's last one, so the raw recording holds a small part of the
/// copies' bytes, and resolving it later (`__resolve`, the resolver's
/// benchmark path) rebuilds them exactly: the same chain by name.
#[test]
fn copies_are_written_as_deltas_and_resolve_later_to_the_same_chain() {
    let Some(_m) = machine() else { return };
    let dir = tempfile::tempdir().unwrap();
    let bin = chain(dir.path(), "chain-delta", &["-g"]);
    let rec = dir.path().join("raw.idleflow");
    // Every switch to idle with its copy (`--stack-budget 0`): what is
    // measured is how the copies are written, not how many are sampled.
    let out = run(idleflow()
        .args(["record", "-q", "--no-resolve", "--stack-budget", "0", "-o"])
        .arg(&rec)
        .arg("--")
        .arg(&bin)
        .arg("1000"));
    assert!(out.status.success(), "record: {}", stderr(&out));
    let raw_bytes = std::fs::metadata(&rec).unwrap().len();
    let out = run(idleflow().arg("__resolve").arg(&rec));
    assert!(out.status.success(), "resolve: {}", stderr(&out));
    let r = report_json(&rec);
    let c = &r["call_paths"]["counts"];
    let (copies, copy_bytes) = (u(c, "copies"), u(c, "copy_bytes"));
    assert!(copies > 500, "{c}");
    assert!(copy_bytes / copies >= 4096, "copies of KiBs: {c}");
    assert!(
        raw_bytes * 20 < copy_bytes,
        "the raw recording took {raw_bytes} bytes for {copy_bytes} bytes of copies"
    );
    let frames = names(&r["call_paths"]["paths"][0]);
    assert!(
        in_order(
            &frames,
            &["fill_buffer", "next_message", "consume", "worker_main"]
        ),
        "{frames:?}"
    );
    println!(
        "{copies} copies, {:.0} bytes each, in a raw recording of {raw_bytes} bytes",
        copy_bytes as f64 / copies as f64
    );
}

/// `--stacks waits`: stacks at every blocking switch-out, not only at
/// those that leave a CPU idle. The report's "Blocking call paths" give
/// the worker's read chain with the time it waited there, which agrees
/// with the dispatch stream's own count of the worker's blocking
/// switch-outs and blocked time (from the switch-out to its wake-up, plus
/// the wait to run); the off-CPU flame graph draws the same.
#[test]
fn stacks_at_every_wait_give_the_blocking_paths_by_blocked_time() {
    let Some(_m) = machine() else { return };
    let dir = tempfile::tempdir().unwrap();
    let bin = chain(dir.path(), "chain-waits", &["-g"]);
    let rec = dir.path().join("w.idleflow");
    let out = run(idleflow()
        .args(["record", "-q", "--stacks", "waits", "-o"])
        .arg(&rec)
        .arg("--")
        .arg(&bin)
        .arg("1000"));
    assert!(out.status.success(), "record: {}", stderr(&out));
    let r = report_json(&rec);
    let bp = &r["blocking_paths"];
    assert!(bp.is_object(), "no blocking_paths: {r}");
    let worker_paths: Vec<&Value> = bp["paths"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["threads"][0][0] == "worker")
        .collect();
    let top = worker_paths[0];
    let frames = names(top);
    assert!(
        in_order(
            &frames,
            &["fill_buffer", "next_message", "consume", "worker_main"]
        ),
        "{frames:?}"
    );
    assert!(top["wait"].as_str().unwrap().contains("pipe_read"), "{top}");
    // Against the thread table (from the dispatches alone).
    let t = r["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["comm"] == "worker")
        .expect("the worker in the thread table");
    let waits: u64 = worker_paths.iter().map(|p| u(p, "waits")).sum();
    let blocked: u64 = worker_paths.iter().map(|p| u(p, "blocked_ns")).sum();
    let (non_runnable, blocked_ns, runnable_ns) = (
        u(t, "non_runnable"),
        u(t, "blocked_ns"),
        u(t, "runnable_wait_ns"),
    );
    assert!(
        non_runnable > 500 && waits * 100 >= non_runnable * 95 && waits <= non_runnable,
        "{waits} waits on the paths, {non_runnable} blocking switch-outs"
    );
    assert!(
        blocked * 100 >= blocked_ns * 95 && blocked <= blocked_ns + runnable_ns,
        "{blocked} ns on the paths; blocked {blocked_ns} ns + runnable {runnable_ns} ns"
    );
    // Not idle-caused only: the worker's waits are more than its
    // dispatches to idle whenever its CPU had something else to run, and
    // never fewer.
    assert!(waits >= to_idle_of(&r, "worker") * 95 / 100, "{waits}");
    let text = stdout(&run(idleflow()
        .arg("report")
        .arg(&rec)
        .args(["--view", "blocking"])));
    assert!(text.contains("## Blocking call paths"), "{text}");
    assert_fits_120_columns(&text);
    let lines = folded_with(&rec, "idle-ns", &["--blocked"]);
    let (line, ns) = lines.iter().max_by_key(|l| l.1).unwrap();
    assert!(
        line.contains("worker;") && line.contains("consume;next_message;fill_buffer;"),
        "{line}"
    );
    assert!(*ns * 100 >= blocked * 95, "{ns} of {blocked}");
    // A recording without them says how to get them.
    let plain = dir.path().join("p.idleflow");
    record(&plain, &[bin.as_os_str(), "100".as_ref()]);
    assert!(report_json(&plain).get("blocking_paths").is_none());
    let out = run(idleflow()
        .args(["flamegraph", "--blocked", "--folded", "-o"])
        .arg(dir.path().join("b.folded"))
        .arg(&plain));
    assert!(!out.status.success());
    assert!(stderr(&out).contains("--stacks waits"), "{}", stderr(&out));
}
