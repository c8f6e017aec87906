//! End to end through the CLI: `record --java vm` names the Java frames of
//! a JVM's idle-causing switch-outs from the JVM's own structures, with
//! nothing from the JVM — here one started with
//! `-XX:+DisableAttachMechanism`, where no flight recorder can start and no
//! agent can load — on OpenJDK 17 and Temurin 25, launched and `--pid`.
//! `examples/java/LockedIo.java`'s workers sleep in `fetch` under a lock
//! and wait for it in `process`: every idle-causing wait of theirs has
//! `LockedIo.process` and `Thread.run` on its stack, and a wait for the
//! lock names it (`java.lang.Object`) and the worker that held it.

mod common;

use std::path::Path;

use common::*;
use serde_json::Value;

/// A path's frame names, innermost first, without parameter lists.
fn names(p: &Value) -> Vec<String> {
    p["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let n = f["name"].as_str().unwrap();
            n.split_once('(').map_or(n, |(m, _)| m).to_string()
        })
        .collect()
}

/// Whether `want` appear in `frames` in this order (others may lie between).
fn in_order(frames: &[String], want: &[&str]) -> bool {
    let mut it = frames.iter();
    want.iter().all(|w| it.any(|f| f == w))
}

/// Of the program's paths in report `r`: the idle of those (with
/// `reason`, if given) whose frames hold `want` in order, the program's
/// idle, and its first rows (reason, share, frames) to show.
#[allow(clippy::type_complexity)]
fn named_idle(
    r: &Value,
    reason: Option<&str>,
    want: &[&str],
) -> (u64, u64, Vec<(String, f64, Vec<String>)>) {
    let paths = program_paths(r);
    let total: u64 = paths.iter().map(|p| u(p, "idle_ns")).sum();
    let named: u64 = paths
        .iter()
        .filter(|p| reason.is_none_or(|r| p["reason"] == r) && in_order(&names(p), want))
        .map(|p| u(p, "idle_ns"))
        .sum();
    let rows = paths
        .iter()
        .take(6)
        .map(|p| (p["reason"].to_string(), f(p, "share_pct"), names(p)))
        .collect();
    (named, total, rows)
}

/// The walks the report's note counts: (JVM pid, walked, switch-outs).
fn walks(r: &Value) -> (u32, u64, u64) {
    let text = r.to_string();
    let at = text
        .find("Java frames from the JVMs' own structures (")
        .unwrap_or_else(|| panic!("no note of the walks in {text:.2000}"));
    let note = &text[at..];
    let pid: u32 = note["Java frames from the JVMs' own structures (".len()..]
        .split(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("the JVM's pid in the note");
    let counts = note.split("): ").nth(1).expect("counts");
    let mut words = counts.split_whitespace();
    let walked = words.next().and_then(|n| n.parse().ok()).expect("walked");
    let copies = words.nth(1).and_then(|n| n.parse().ok()).expect("copies");
    (pid, walked, copies)
}

/// Checks a recording of LockedIo's workers: the walks, the Java frames of
/// the program's paths, and that nothing was asked of the JVM.
fn assert_named_from_the_structures(rec: &Path, jdk: &str) {
    let r = report_json(rec);
    let (pid, walked, copies) = walks(&r);
    assert!(
        copies > 100 && walked as f64 >= 0.8 * copies as f64,
        "{jdk}: {walked} of {copies} switch-outs walked"
    );
    let paths = program_paths(&r);
    let (named, total, rows) = named_idle(&r, None, &["LockedIo.process", "java.lang.Thread.run"]);
    assert!(
        named as f64 >= 0.8 * total as f64,
        "{jdk}: {named} of the program's {total} idle ns have LockedIo.process < Thread.run: {rows:#?}"
    );
    // The sleep under the lock, by its Java frames.
    let sleep: u64 = paths
        .iter()
        .filter(|p| {
            p["reason"] == "sleep"
                && in_order(
                    &names(p),
                    &[
                        "java.lang.Thread.sleep",
                        "LockedIo.fetch",
                        "LockedIo.process",
                    ],
                )
        })
        .map(|p| u(p, "idle_ns"))
        .sum();
    assert!(
        sleep as f64 >= 0.2 * total as f64,
        "{jdk}: the sleep in fetch has {sleep} of {total} ns: {rows:#?}"
    );
    // The monitor waited on, and who held it, from the JVM's structures
    // (what the flight recorder's monitor events say, without it).
    // Of the monitor enters walked (those whose Java frames were read: the
    // walks' share is checked above), as the flight recorder's events
    // would name them.
    let enter: Vec<&Value> = paths
        .iter()
        .filter(|p| p["reason"] == "monitor enter")
        .filter(|p| in_order(&names(p), &["LockedIo.process", "java.lang.Thread.run"]))
        .collect();
    let enter_ns: u64 = enter.iter().map(|p| u(p, "idle_ns")).sum();
    let on_lock: u64 = enter
        .iter()
        .filter(|p| p["object"] == "java.lang.Object")
        .filter(|p| {
            p["held_by"]
                .as_array()
                .is_some_and(|h| h.iter().any(|o| o["name"] == "worker-*"))
        })
        .map(|p| u(p, "idle_ns"))
        .sum();
    assert!(
        enter_ns as f64 >= 0.2 * total as f64 && on_lock as f64 >= 0.9 * enter_ns as f64,
        "{jdk}: of {total} ns, {enter_ns} in monitor enters, {on_lock} of them on \
         java.lang.Object held by a worker: {rows:#?}"
    );
    let jvms = &r["java_waits"]["jvms"];
    assert_eq!(jvms[0]["source"], "vm", "{jdk}: {jvms}");
    assert!(u(&jvms[0], "waits") > 100, "{jdk}: {jvms}");
    // No agent wrote a perf map for it.
    let map = format!("/tmp/perf-{pid}.map");
    assert!(!Path::new(&map).exists(), "{jdk}: {map} exists");
}

#[test]
fn a_jvm_with_attach_disabled_is_named_from_its_own_structures_on_jdk_17_and_25() {
    let Some(_m) = machine() else { return };
    let classes = java_examples();
    let dir = tempfile::tempdir().unwrap();
    for jdk in [JDK17, JDK25] {
        let java = Path::new(jdk).join("bin/java");
        assert!(java.exists(), "{} is missing", java.display());
        let rec = dir.path().join("vm.idleflow");
        let out = run(idleflow()
            .args(["record", "-q", "--java", "vm", "-o"])
            .arg(&rec)
            .arg("--")
            .arg(&java)
            .arg("-XX:+DisableAttachMechanism")
            .arg("-cp")
            .arg(classes.path())
            .args(["LockedIo", "4", "3"]));
        assert!(out.status.success(), "record: {}", stderr(&out));
        assert_named_from_the_structures(&rec, jdk);
    }
}

#[test]
fn a_running_jvm_with_attach_disabled_recorded_by_pid_is_named_from_its_structures() {
    let Some(_m) = machine() else { return };
    let classes = java_examples();
    let dir = tempfile::tempdir().unwrap();
    let mut jvm = std::process::Command::new(Path::new(JDK17).join("bin/java"))
        .arg("-XX:+DisableAttachMechanism")
        .arg("-cp")
        .arg(classes.path())
        .args(["LockedIo", "4", "8"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Its workers have run for a while (and some of their code is compiled).
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let rec = dir.path().join("pid.idleflow");
    let out = run(idleflow()
        .args(["record", "-q", "--java", "vm", "-d", "3", "-o"])
        .arg(&rec)
        .args(["--pid", &jvm.id().to_string()]));
    let _ = jvm.kill();
    let _ = jvm.wait();
    assert!(out.status.success(), "record: {}", stderr(&out));
    assert_named_from_the_structures(&rec, JDK17);
}

/// `examples/java/Waits.java`'s waits, from the JVM's structures alone
/// (attach disabled), on both JDKs: each wait's reason and object as the
/// flight recorder's events name them, and the Java frames that waited.
/// - `lock`: clerks take a `ReentrantLock` and sleep holding it; the others
///   park on it, and the one that unlocks wakes the next (its stack at the
///   wake-up walked too): the park names the lock's class (`Thread.parkBlocker`,
///   read in the kernel at the switch-out, found through
///   `java.lang.Thread`'s own field table: JDK 17's slots, JDK 25's
///   compressed stream);
/// - `handoff`: a consumer waits in `Mailbox.take` (`Object.wait`) for a
///   producer: a monitor wait on the mailbox's class;
/// - `socket`: a client blocks reading a loopback socket: a socket read
///   on its peer's address (the descriptor from the system call's argument
///   at the switch-out).
#[test]
fn waits_are_named_with_their_objects_from_the_jvms_structures_on_jdk_17_and_25() {
    let Some(_m) = machine() else { return };
    let classes = java_examples();
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, &str, &str, &str); 3] = [
        (
            "lock",
            "park",
            "java.util.concurrent.locks.ReentrantLock$NonfairSync",
            "Waits.lockedPost",
        ),
        (
            "handoff",
            "monitor wait",
            "Waits$Mailbox",
            "Waits$Mailbox.take",
        ),
        ("socket", "socket read", "127.0.0.1:", "Waits.ask"),
    ];
    for jdk in [JDK17, JDK25] {
        for (mode, reason, object, frame) in cases {
            let rec = dir.path().join(format!("{mode}.idleflow"));
            let out = run(idleflow()
                .args(["record", "-q", "--java", "vm", "-o"])
                .arg(&rec)
                .arg("--")
                .arg(Path::new(jdk).join("bin/java"))
                .arg("-XX:+DisableAttachMechanism")
                .arg("-cp")
                .arg(classes.path())
                .args(["Waits", mode, "4"]));
            assert!(out.status.success(), "record: {}", stderr(&out));
            let r = report_json(&rec);
            let paths = program_paths(&r);
            // Of the waits walked (their Java frames read: a JVM's first
            // switch-outs come before its tables can be read).
            let of_reason: Vec<&Value> = paths
                .iter()
                .filter(|p| p["reason"] == reason)
                .filter(|p| names(p).iter().any(|f| f == "java.lang.Thread.run"))
                .collect();
            let reason_ns: u64 = of_reason.iter().map(|p| u(p, "idle_ns")).sum();
            let named: u64 = of_reason
                .iter()
                .filter(|p| p["object"].as_str().is_some_and(|o| o.starts_with(object)))
                .filter(|p| names(p).iter().any(|f| f == frame))
                .map(|p| u(p, "idle_ns"))
                .sum();
            let total: u64 = paths.iter().map(|p| u(p, "idle_ns")).sum();
            let rows: Vec<(String, String, f64)> = paths
                .iter()
                .take(6)
                .map(|p| {
                    (
                        p["reason"].to_string(),
                        p["object"].to_string(),
                        f(p, "share_pct"),
                    )
                })
                .collect();
            if mode == "lock" {
                // The clerk that unlocks wakes the next (`LockSupport.unpark`,
                // a native call: its frame anchor is set at the wake-up).
                let text = r.to_string();
                let wakers: u64 = text
                    .split(" wakers' stacks walked")
                    .next()
                    .and_then(|t| t.rsplit(' ').next())
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                assert!(wakers > 20, "{jdk}: {wakers} wakers' stacks walked");
            }
            assert!(
                reason_ns as f64 >= 0.2 * total as f64 && named as f64 >= 0.9 * reason_ns as f64,
                "{jdk} {mode}: of {total} ns, {reason_ns} in {reason}, {named} of them on \
                 {object}… in {frame}: {rows:#?}"
            );
        }
    }
}

/// `record -- java …` with no `--java` (and `env` set for idleflow): the
/// JSON report, and what `record` said.
fn record_by_default(
    dir: &Path,
    name: &str,
    env: Option<(&str, &str)>,
    args: &[&str],
) -> (Value, String) {
    let classes = java_examples();
    let rec = dir.join(format!("{name}.idleflow"));
    let mut c = idleflow();
    if let Some((k, v)) = env {
        c.env(k, v);
    }
    let out = run(c
        .args(["record", "-o"])
        .arg(&rec)
        .arg("--")
        .arg(Path::new(JDK17).join("bin/java"))
        .arg("-cp")
        .arg(classes.path())
        .args(args));
    assert!(out.status.success(), "record: {}", stderr(&out));
    (report_json(&rec), stderr(&out))
}

/// The default mode names the JVM's frames and waits from its structures,
/// with nothing started in it (its first screen as the flight recorder's:
/// the sleep under the lock is the root cause); a JVM whose structures are
/// not read gets its flight recorder instead, and the report says so.
#[test]
fn by_default_the_structures_name_the_frames_and_a_jvm_they_cannot_gets_its_flight_recorder() {
    let Some(_m) = machine() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (r, said) = record_by_default(dir.path(), "locked", None, &["LockedIo", "4", "3"]);
    assert_eq!(r["java_frames"], "vm", "{}", r["java_frames_why"]);
    // A JVM its structures named is one that ran.
    assert!(!said.contains("no JVM ran"), "{said}");
    assert_eq!(r["java_frames_why"], "the default on eBPF");
    assert_eq!(
        r["java_waits"]["jvms"][0]["source"], "vm",
        "{}",
        r["java_waits"]
    );
    let tool: Vec<&str> = r["tool"]["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["comm"].as_str().unwrap())
        .collect();
    assert!(
        !tool
            .iter()
            .any(|c| c.starts_with("JFR") || c.starts_with("Attach")),
        "nothing of idleflow's runs in the JVM: {tool:?}"
    );
    // The holder's sleep under the lock roots the idle, as one row: a
    // switch-out without stacks of its own takes its thread's stacks of the
    // same state (a sleep's, not the monitor enter's before it).
    let top = &r["root_causes"]["roots"][0];
    assert_eq!(top["reason"], "sleep", "{top}");
    let at = top["program_frame"].as_u64().expect("a program frame") as usize;
    assert_eq!(top["frames"][at]["name"], "LockedIo.fetch", "{top}");
    assert!(f(top, "share_pct") >= 75.0, "{top}");
    assert_eq!(top["chain"][0]["reason"], "monitor enter", "{top}");

    let (r, _) = record_by_default(
        dir.path(),
        "refused",
        Some(("IDLEFLOW_HOTSPOT_REFUSE", "1")),
        &["Waits", "sleep", "3"],
    );
    assert_eq!(r["java_frames"], "vm", "{}", r["java_frames_why"]);
    let java = &r["java_waits"];
    assert_eq!(java["jvms"][0]["source"], "jfr", "{java}");
    let text = r.to_string();
    assert!(
        text.contains("its structures could not be read")
            && text.contains("its flight recorder names its waits"),
        "the report says why: {java}"
    );
    let p = &program_paths(&r)[0];
    assert_eq!(p["reason"], "sleep", "{p}");
    assert!(names(p).iter().any(|n| n == "Waits.nap"), "{p}");
}

/// `examples/java/Recompile.java` deoptimizes and recompiles its hot
/// `step` every 100 ms while its threads park in it: every walk names the
/// code as it was when the thread left (the walker checks each compiled
/// method's compile id, and reads a deoptimized frame's own pc), on both
/// JDKs, in the default mode.
#[test]
fn a_jvm_that_recompiles_under_recording_is_named_as_its_code_was_on_jdk_17_and_25() {
    let Some(_m) = machine() else { return };
    let classes = java_examples();
    let dir = tempfile::tempdir().unwrap();
    for jdk in [JDK17, JDK25] {
        let rec = dir.path().join("recompile.idleflow");
        let out = run(idleflow()
            .args(["record", "-q", "-o"])
            .arg(&rec)
            .arg("--")
            .arg(Path::new(jdk).join("bin/java"))
            .arg("-cp")
            .arg(classes.path())
            .args(["Recompile", "4", "100"]));
        assert!(out.status.success(), "record: {}", stderr(&out));
        let phases: u32 = stdout(&out)
            .trim()
            .strip_prefix("done recompile ")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{jdk}: {}", stdout(&out)));
        assert!(phases >= 20, "{jdk}: {phases} recompilations asked");
        let r = report_json(&rec);
        let (_, walked, copies) = walks(&r);
        assert!(
            copies > 500 && walked as f64 >= 0.8 * copies as f64,
            "{jdk}: {walked} of {copies} switch-outs walked"
        );
        let (named, total, rows) = named_idle(
            &r,
            Some("park"),
            &[
                "java.util.concurrent.locks.LockSupport.parkNanos",
                "Recompile.step",
                "java.lang.Thread.run",
            ],
        );
        assert!(
            named as f64 >= 0.9 * total as f64,
            "{jdk}: {named} of {total} ns park in Recompile.step: {rows:#?}"
        );
    }
}

/// The ground truth: one run recorded both ways (`--java vm,waits
/// --wait-threshold 0`: the structures and the flight recorder of every
/// wait), the structures' waits paired with the flight recorder's that hold
/// their switch-outs agree on their innermost five Java frames for ≥ 95 %
/// of the paired weight (`tracer/hotspot/examples/agreement.rs`, the
/// table in docs/PERFORMANCE.md), on both JDKs.
#[test]
fn the_structures_frames_agree_with_the_flight_recorders_on_jdk_17_and_25() {
    let Some(_m) = machine() else { return };
    let classes = java_examples();
    let dir = tempfile::tempdir().unwrap();
    for jdk in [JDK17, JDK25] {
        for (name, args) in [
            ("locked", &["LockedIo", "4", "3"][..]),
            ("handoff", &["Waits", "handoff", "5"][..]),
        ] {
            let rec = dir.path().join(format!("{name}.idleflow"));
            let out = run(idleflow()
                .args([
                    "record",
                    "-q",
                    "--java",
                    "vm,waits",
                    "--wait-threshold",
                    "0",
                    "-o",
                ])
                .arg(&rec)
                .arg("--")
                .arg(Path::new(jdk).join("bin/java"))
                .arg("-cp")
                .arg(classes.path())
                .args(args));
            assert!(out.status.success(), "record: {}", stderr(&out));
            let out = run(std::process::Command::new(example("agreement"))
                .arg(&rec)
                .arg("--json"));
            assert!(out.status.success(), "agreement: {}", stderr(&out));
            let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
            let a = &rows[0];
            let (vm, paired, methods) = (u(a, "vm_ns"), u(a, "paired_ns"), u(a, "methods_ns"));
            assert!(vm > 200_000_000, "{jdk} {name}: {a}");
            assert!(paired as f64 >= 0.9 * vm as f64, "{jdk} {name}: {a}");
            assert!(methods as f64 >= 0.95 * paired as f64, "{jdk} {name}: {a}");
        }
    }
}
