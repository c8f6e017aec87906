//! End-to-end tests of `record --java waits,stacks` (the default Java mode
//! where the eBPF programs do not record, and under --flight): a real
//! JDK 17 runs `examples/java/Waits.java`, whose idle-causing wait is known
//! for each mode, with its flight recorder turned on by idleflow; the report
//! must name the heaviest idle-causing Java path, its JVM reason and its
//! share, and its join check must hold.

mod common;

use std::path::Path;

use common::*;
use serde_json::Value;

/// Records `java -cp CLASSES Waits MODE 5` with `--java waits,stacks` and
/// every wait recorded; returns the JSON report and the program's output.
/// (idleflow starts a JVM's flight recorder through its attach mechanism,
/// which takes it about 2 s here: the program runs 5.)
fn record_waits(classes: &Path, mode: &str) -> (Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("w.idleflow");
    record_waits_into(&rec, classes, mode)
}

/// `record` with the flight recorder of every wait.
const RECORD_EVERY_WAIT: [&str; 6] = [
    "record",
    "-q",
    "--java",
    "waits,stacks",
    "--wait-threshold",
    "0",
];

/// The same, into `rec`.
fn record_waits_into(rec: &Path, classes: &Path, mode: &str) -> (Value, String) {
    let out = run(idleflow()
        .args(RECORD_EVERY_WAIT)
        .arg("-o")
        .arg(rec)
        .arg("--")
        .arg(Path::new(JDK17).join("bin/java"))
        .arg("-cp")
        .arg(classes)
        .args(["Waits", mode, "5"]));
    assert!(out.status.success(), "record: {}", stderr(&out));
    (report_json(rec), stdout(&out))
}

/// Records `sh -c SCRIPT` with `--java waits,stacks` with every wait
/// recorded into `rec`; returns the JSON report.
fn record_script(rec: &Path, script: &str) -> Value {
    let out = run(idleflow()
        .args(RECORD_EVERY_WAIT)
        .arg("-o")
        .arg(rec)
        .args(["--", "sh", "-c", script]));
    assert!(out.status.success(), "record: {}", stderr(&out));
    report_json(rec)
}

/// The section's heaviest path, after checking the section as a whole.
fn heaviest(r: &Value) -> &Value {
    let jw = &r["java_waits"];
    assert!(jw.is_object(), "no java_waits section: {r}");
    let jvm = &jw["jvms"][0];
    assert!(u(jvm, "waits") > 100, "{jvm}");
    assert!(f(jvm, "bytes_per_wait") > 0.0, "{jvm}");
    // The join check: blocking switch-outs of Java threads lie in a wait of
    // their own thread (the rest: start-up, JIT, GC, the main thread's joins).
    let inside = u(jw, "blocking_inside_wait") as f64 / u(jw, "blocking_switch_outs") as f64;
    assert!(inside > 0.8, "join check: {inside:.3} inside: {jw}");
    let java_idle = u(jw, "java_idle_ns");
    assert!(
        u(jw, "unjoined_idle_ns") * 10 < java_idle,
        "most of the Java threads' idle lies in waits: {jw}"
    );
    &jw["paths"][0]
}

/// No path names one JVM wait and shows the native frames of another: a
/// clerk of the convoy alternates between the monitor enter and its sleep
/// under the lock, and at the default stacks (sampled under a budget) most
/// of its dispatches carry its previous stacks, often of the other wait.
fn assert_native_frames_agree_with_the_waits(r: &Value) {
    const NATIVE: [(&str, &str); 5] = [
        ("ObjectMonitor::enter(", "monitor enter"),
        ("ObjectMonitor::EnterI(", "monitor enter"),
        ("ObjectMonitor::wait(", "monitor wait"),
        ("Unsafe_Park", "park"),
        ("JVM_Sleep", "sleep"),
    ];
    let paths = r["idle_paths"]["paths"].as_array().expect("idle paths");
    let mut judged = 0;
    for p in paths {
        let reason = p["reason"].as_str().unwrap();
        if !NATIVE.iter().any(|(_, r)| *r == reason) {
            continue;
        }
        judged += 1;
        let says = p["frames"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["kind"] == "native")
            .find_map(|f| {
                let name = f["name"].as_str().unwrap();
                NATIVE.iter().find(|(n, _)| name.starts_with(n))
            });
        assert!(
            says.is_none_or(|(_, r)| *r == reason),
            "a {reason} path with the native frames of a {}: {p}",
            says.unwrap().1
        );
    }
    assert!(judged >= 2, "{paths:?}");
}

/// The section's heaviest path of `reason`, after checking the section as
/// a whole.
fn heaviest_of<'a>(r: &'a Value, reason: &str) -> &'a Value {
    heaviest(r);
    let jw = &r["java_waits"];
    jw["paths"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["reason"] == reason)
        .unwrap_or_else(|| panic!("no {reason} path: {jw}"))
}

/// A lock held across a sleep (the convoy modes): the threads' idle is the
/// waits for the lock and the holder's sleeps inside `holder` (its CPU
/// goes idle unless the kernel put a woken waiter there: that share is
/// 5-20 % on one kernel build of these machines and about half on
/// another). Path `p`'s share of the rest, %.
fn share_besides_the_holders_sleep(r: &Value, p: &Value, holder: &str) -> f64 {
    let sleep: f64 = r["java_waits"]["paths"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["reason"] == "sleep" && frames(s).contains(&holder))
        .map(|s| f(s, "share_pct"))
        .sum();
    assert!(
        sleep < 70.0,
        "the holder's sleep {sleep} %: {}",
        r["java_waits"]
    );
    100.0 * f(p, "share_pct") / (100.0 - sleep)
}

fn frames(p: &Value) -> Vec<&str> {
    p["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect()
}

fn others(p: &Value) -> Vec<&str> {
    p["others"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["name"].as_str().unwrap())
        .collect()
}

#[test]
fn a_wait_notify_hand_off_is_a_monitor_wait_notified_by_the_producer() {
    let Some(_m) = machine() else { return };
    let classes = java_examples();
    let (r, out) = record_waits(classes.path(), "handoff");
    assert_eq!(out, "done handoff true\n", "the JVM's output is its own");
    let p = heaviest(&r);
    assert_eq!(p["reason"], "monitor wait", "{p}");
    assert_eq!(p["object"], "Waits$Mailbox", "{p}");
    let fr = frames(p);
    assert_eq!(fr[0], "java.lang.Object.wait", "{p}");
    assert!(fr.contains(&"Waits$Mailbox.take"), "{p}");
    assert_eq!(others(p)[0], "producer", "the notifier is named: {p}");
    assert!(f(p, "share_pct") > 80.0, "{p}");
    // Java thread names come from the JVM: the workers cause the idle.
    let causes: Vec<&str> = r["total"]["idle_causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["comm"].as_str().unwrap())
        .collect();
    assert!(causes[0].starts_with("worker-"), "{causes:?}");
}

#[test]
fn a_synchronized_convoy_is_a_monitor_enter_at_the_synchronized_method() {
    let Some(_m) = machine() else { return };
    let classes = java_examples();
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("c.idleflow");
    let (r, _) = record_waits_into(&rec, classes.path(), "convoy");
    assert_native_frames_agree_with_the_waits(&r);
    let p = heaviest_of(&r, "monitor enter");
    assert_eq!(p["object"], "Waits$Ledger", "{p}");
    assert_eq!(
        frames(p)[0],
        "Waits$Ledger.post",
        "the stack starts at the synchronized method itself: {p}"
    );
    let owners = others(p);
    assert!(
        !owners.is_empty() && owners.iter().all(|o| o.starts_with("clerk-")),
        "previous owners named: {p}"
    );
    let share = share_besides_the_holders_sleep(&r, p, "Waits$Ledger.post");
    assert!(share > 80.0, "{share} %: {p}");
    // The flame graph draws the same path: the synchronized method under
    // the reason, with its frame kind; --by-reason puts the reason first.
    let java = ["--view", "java"];
    let total: u64 = folded_with(&rec, "idle-ns", &java)
        .iter()
        .map(|(_, w)| w)
        .sum();
    let stacks = folded_with(&rec, "idle-ns", &java);
    let holders_sleep: u64 = stacks
        .iter()
        .filter(|(s, _)| s.ends_with(";[sleep]") && s.contains(";Waits$Ledger.post_["))
        .map(|(_, w)| w)
        .sum();
    let (top, w) = stacks
        .into_iter()
        .filter(|(s, _)| !s.ends_with(";[sleep]"))
        .max_by_key(|(_, w)| *w)
        .unwrap();
    assert!(top.starts_with("java "), "{top}");
    assert!(top.ends_with(";[monitor enter] Waits$Ledger"), "{top}");
    assert!(top.contains(";Waits$Ledger.post_["), "{top}");
    assert!(
        w * 10 > (total - holders_sleep) * 8,
        "{w} of {total} - {holders_sleep}"
    );
    let (top, _) = folded_with(&rec, "dispatches", &["--by-reason", "--view", "java"])
        .into_iter()
        .max_by_key(|(_, w)| *w)
        .unwrap();
    assert!(
        top.starts_with("[monitor enter] Waits$Ledger;java "),
        "{top}"
    );
    let svg = dir.path().join("c.svg");
    let out = run(idleflow().arg("flamegraph").arg(&rec).arg("-o").arg(&svg));
    assert!(out.status.success(), "{}", stderr(&out));
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(
        text.contains("Waits$Ledger.post"),
        "the SVG names the method"
    );
}

#[test]
fn a_reentrant_lock_convoy_is_a_park_on_the_locks_class() {
    let Some(_m) = machine() else { return };
    let classes = java_examples();
    let (r, _) = record_waits(classes.path(), "lock");
    let p = heaviest_of(&r, "park");
    assert_eq!(
        p["object"], "java.util.concurrent.locks.ReentrantLock$NonfairSync",
        "{p}"
    );
    let fr = frames(p);
    assert!(
        fr.contains(&"java.util.concurrent.locks.ReentrantLock.lock"),
        "{p}"
    );
    assert!(fr.contains(&"Waits.lockedPost"), "{p}");
    let share = share_besides_the_holders_sleep(&r, p, "Waits.lockedPost");
    assert!(share > 80.0, "{share} %: {p}");
}

#[test]
fn thread_sleep_is_a_sleep_in_the_method_that_sleeps() {
    let Some(_m) = machine() else { return };
    let classes = java_examples();
    let (r, _) = record_waits(classes.path(), "sleep");
    let p = heaviest(&r);
    assert_eq!(p["reason"], "sleep", "{p}");
    assert_eq!(
        frames(p)[..2],
        ["java.lang.Thread.sleep", "Waits.nap"],
        "{p}"
    );
    assert!(f(p, "share_pct") > 80.0, "{p}");
    // Every blocking wait at threshold 0 contains its switch-out.
    let jw = &r["java_waits"];
    let contained = u(jw, "waits_with_switch_out") as f64 / u(jw, "waits_in_window") as f64;
    assert!(contained > 0.95, "{jw}");
}

#[test]
fn a_blocking_loopback_read_is_a_socket_read_with_its_address() {
    let Some(_m) = machine() else { return };
    let classes = java_examples();
    let (r, _) = record_waits(classes.path(), "socket");
    let p = heaviest(&r);
    assert_eq!(p["reason"], "socket read", "{p}");
    assert!(
        p["object"].as_str().unwrap().contains("127.0.0.1"),
        "the peer's address: {p}"
    );
    assert!(frames(p).contains(&"Waits.ask"), "{p}");
    assert!(f(p, "share_pct") > 60.0, "{p}");
}

/// The causes' and threads' names of a report.
fn named_rows(r: &Value) -> Vec<String> {
    // The recorded processes' rows: another JVM on the machine runs its
    // own flight recorder threads, which are no concern of this recording.
    let recorded: Vec<u64> = r["target_pids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_u64().unwrap())
        .collect();
    let rows = r["total"]["idle_causes"].as_array().unwrap().iter();
    rows.chain(r["threads"].as_array().unwrap().iter())
        .filter(|c| recorded.is_empty() || recorded.contains(&c["pid"].as_u64().unwrap_or(0)))
        .map(|c| c["comm"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_running_jvm_recorded_with_pid_gives_the_same_path_through_the_attach_mechanism() {
    let Some(_m) = machine() else { return };
    let classes = java_examples();
    let mut jvm = running_convoy_jvm(classes.path(), "14");
    let dir = tempfile::tempdir().unwrap();
    // Recorded twice: the second time, the flight recorder's threads are
    // left from the first recording, and idleflow's again while it runs.
    for (i, seconds) in [(1, "5"), (2, "3")] {
        let rec = dir.path().join(format!("p{i}.idleflow"));
        let out = run(idleflow()
            .args(RECORD_EVERY_WAIT)
            .args(["-d", seconds, "--pid"])
            .arg(jvm.id().to_string())
            .arg("-o")
            .arg(&rec));
        assert!(out.status.success(), "record --pid ({i}): {}", stderr(&out));
        let r = report_json(&rec);
        let p = heaviest_of(&r, "monitor enter");
        assert_eq!(p["object"], "Waits$Ledger", "{i}: {p}");
        assert_eq!(frames(p)[0], "Waits$Ledger.post", "{i}: {p}");
        let share = share_besides_the_holders_sleep(&r, p, "Waits$Ledger.post");
        assert!(share > 80.0, "{i}: {share} %: {p}");
        // The flight recorder's threads and the attach listener are idleflow's.
        let rows = named_rows(&r);
        assert!(
            !rows
                .iter()
                .any(|c| c.starts_with("JFR ") || c == "Attach Listener"),
            "{i}: {rows:?}"
        );
        assert!(
            r["tool"]["tids"].as_array().unwrap().len() > 2,
            "recorder threads and JFR's ({i}): {}",
            r["tool"]
        );
    }
    let _ = jvm.kill();
    let _ = jvm.wait();
}

#[test]
fn a_jvm_still_running_when_the_recording_stops_gives_its_waits() {
    let Some(_m) = machine() else { return };
    let classes = java_examples();
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("d.idleflow");
    let out = run(idleflow()
        .args(RECORD_EVERY_WAIT)
        .args(["-d", "5", "-o"])
        .arg(&rec)
        .arg("--")
        .arg(Path::new(JDK17).join("bin/java"))
        .arg("-cp")
        .arg(classes.path())
        .args(["Waits", "sleep", "6"]));
    assert!(out.status.success(), "record: {}", stderr(&out));
    let r = report_json(&rec);
    let p = heaviest(&r);
    assert_eq!(p["reason"], "sleep", "{p}");
    assert_eq!(
        frames(p)[..2],
        ["java.lang.Thread.sleep", "Waits.nap"],
        "{p}"
    );
}

/// A JVM killed with SIGKILL never writes its flight recording; the chunks
/// its repository holds (JFR flushes them every second) still give its
/// waits, and the report says where they came from.
#[test]
fn a_jvm_killed_with_sigkill_gives_the_waits_its_repository_holds() {
    let Some(_m) = machine() else { return };
    let classes = java_examples();
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("k.idleflow");
    // Killed 3 s after its recorder opened a chunk: 2 flushes or more.
    let script = format!(
        "{} -cp {} Waits convoy 30 & p=$!; \
         until ls -l /proc/$p/fd 2>/dev/null | grep -q '[.]jfr$'; do sleep 0.1; done; \
         sleep 3; kill -9 $p; wait $p; exit 0",
        Path::new(JDK17).join("bin/java").display(),
        classes.path().display()
    );
    let r = record_script(&rec, &script);
    let p = heaviest_of(&r, "monitor enter");
    assert_eq!(p["object"], "Waits$Ledger", "{p}");
    assert_eq!(frames(p)[0], "Waits$Ledger.post", "{p}");
    let share = share_besides_the_holders_sleep(&r, p, "Waits$Ledger.post");
    assert!(share > 80.0, "{share} %: {p}");
    let notes: Vec<&str> = r["java_waits"]["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("ended without writing its flight recording")
                && n.contains("read from the 1 chunk")),
        "{notes:?}"
    );
}

/// A recording written here (no kernel, no JVM): three threads of JVM 7
/// each make CPU 0 idle once; only the first leaves inside a wait of its
/// own. The second leaves outside its wait; the third inside a wait of
/// another thread. Through the CLI, only the first is joined.
#[test]
fn only_a_switch_out_inside_a_wait_of_its_own_thread_is_joined() {
    use idleflow_format::{
        FrameKind, JavaFrame, JavaStack, JavaSymbol, JavaWait, JvmWaits, NodeTag, Record, RunInfo,
        RunSummary, ThreadInfo, WaitReason, Writer, IDLE_TID,
    };
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("s.idleflow");
    let mut info = RunInfo::minimal(vec![0], 0);
    info.java_waits = true;
    let mut w = Writer::new(std::fs::File::create(&rec).unwrap(), &info).unwrap();
    for tid in [10, 11, 12] {
        w.write(&Record::Thread(ThreadInfo {
            time: 0,
            tid,
            pid: 7,
            ppid: 1,
            comm: format!("t{tid}"),
        }))
        .unwrap();
    }
    const MS: u64 = 1_000_000;
    // Each thread runs 1 ms and leaves at 2, 12 and 22 ms; idle follows
    // until the next thread comes at 11 and 21 ms, and the end at 30.
    for (i, tid) in [10u32, 11, 12].into_iter().enumerate() {
        let t0 = i as u64 * 10 * MS + MS;
        w.write(&dispatch(t0, 0, IDLE_TID, tid, NodeTag::Untraced))
            .unwrap();
        w.write(&dispatch(t0 + MS, 0, tid, IDLE_TID, NodeTag::Untraced))
            .unwrap();
    }
    for (id, text) in [(1, "app.Ledger.post"), (2, "app.Ledger"), (3, "eleven")] {
        w.write(&Record::JavaSymbol(Box::new(JavaSymbol {
            pid: 7,
            id,
            text: text.into(),
        })))
        .unwrap();
    }
    w.write(&Record::JavaStack(Box::new(JavaStack {
        pid: 7,
        id: 1,
        truncated: false,
        frames: vec![JavaFrame {
            method: 1,
            line: 42,
            kind: FrameKind::Jit,
        }],
    })))
    .unwrap();
    let wait = |tid, start, duration| {
        Record::JavaWait(JavaWait {
            pid: 7,
            tid,
            start,
            duration,
            reason: WaitReason::MonitorEnter,
            stack: 1,
            object: 2,
            other_tid: 11,
            other: 3,
        })
    };
    // t10 leaves at 2 ms inside [1.5, 4]; t11 leaves at 12 ms, its wait
    // is [13, 14]; t12 leaves at 22 ms, inside t10's wait [21, 23].
    for r in [
        wait(10, 3 * MS / 2, 5 * MS / 2),
        wait(11, 13 * MS, MS),
        wait(10, 21 * MS, 2 * MS),
    ] {
        w.write(&r).unwrap();
    }
    w.write(&Record::JvmWaits(Box::new(JvmWaits {
        pid: 7,
        source: "jfr".into(),
        waits: 3,
        threads: vec![
            (10, "ten".into()),
            (11, "eleven".into()),
            (12, "twelve".into()),
        ],
        ..Default::default()
    })))
    .unwrap();
    w.finish(&RunSummary {
        stop_ns: 30 * MS,
        ..Default::default()
    })
    .unwrap();
    let r = report_json(&rec);
    let jw = &r["java_waits"];
    assert_eq!(u(jw, "java_idle_dispatches_to"), 3, "{jw}");
    assert_eq!(u(jw, "unjoined_idle_dispatches_to"), 2, "{jw}");
    assert_eq!(
        (u(jw, "blocking_switch_outs"), u(jw, "blocking_inside_wait")),
        (3, 1)
    );
    let paths = jw["paths"].as_array().unwrap();
    assert_eq!(paths.len(), 1, "{jw}");
    let p = &paths[0];
    assert_eq!(
        (u(p, "idle_dispatches_to"), u(p, "idle_ns")),
        (1, 9 * MS),
        "{p}"
    );
    assert_eq!(p["object"], "app.Ledger");
    // The frame as every path has it, with the ways it ran.
    assert_eq!(p["frames"][0]["name"], "app.Ledger.post");
    assert_eq!(p["frames"][0]["kind"], "jit");
    assert_eq!(p["frames"][0]["line"], 42);
    assert_eq!(p["frames"][0]["kinds"][0], "jit");
    assert_eq!(p["others"][0]["name"], "eleven", "{p}");
    assert_eq!(u(jw, "java_idle_ns"), 26 * MS, "{jw}");
    assert!((f(p, "share_pct") - 900.0 / 26.0).abs() < 0.01, "{p}");
    // The JVM's thread names win over the kernel's.
    let causes = named_rows(&r);
    assert!(causes.contains(&"ten".to_string()), "{causes:?}");
    // Waits in the window: 3; only t10's first contains a switch-out of t10.
    assert_eq!(
        (u(jw, "waits_in_window"), u(jw, "waits_with_switch_out")),
        (3, 1)
    );
    let text = stdout(&run(idleflow().arg("report").arg(&rec)));
    assert!(text.contains("monitor enter on app.Ledger"), "{text}");
    assert!(text.contains("held by eleven ×1"), "{text}");
    assert_fits_120_columns(&text);
}

/// A runtime without the `jdk.jfr` module (a `jlink` image, as containers
/// ship): the program runs as without idleflow, and the report says why
/// its JVM has no Java waits.
#[test]
fn a_jvm_without_a_flight_recorder_runs_unharmed_and_is_named() {
    let Some(_m) = machine() else { return };
    let classes = java_examples();
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("image");
    let out = run(
        std::process::Command::new(Path::new(JDK17).join("bin/jlink"))
            .args(["--add-modules", "java.base", "--output"])
            .arg(&image),
    );
    assert!(out.status.success(), "jlink: {}", stderr(&out));
    let rec = dir.path().join("n.idleflow");
    let out = run(idleflow()
        .args(["record", "-q", "--java", "waits,stacks", "-o"])
        .arg(&rec)
        .arg("--")
        .arg(image.join("bin/java"))
        .arg("-cp")
        .arg(classes.path())
        .args(["Waits", "sleep", "4"]));
    assert!(out.status.success(), "record: {}", stderr(&out));
    assert_eq!(stdout(&out), "done sleep true\n", "{}", stderr(&out));
    let r = report_json(&rec);
    let notes: Vec<&str> = r["java_waits"]["notes"]
        .as_array()
        .unwrap_or_else(|| panic!("a java_waits section with notes: {}", r["java_waits"]))
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("no Java waits") && n.contains("jdk.jfr")),
        "{notes:?}"
    );
    let text = stdout(&run(idleflow().arg("report").arg(&rec)));
    assert!(text.contains("jdk.jfr"), "the text says why: {text}");
}

/// A JVM that a shell starts a second into the recording is found from its
/// `exec` (the recorder's COMM record), not by scanning `/proc`: its waits
/// are there, and the watcher thread woke only while something was pending
/// (the shell for 2 s, the JVM until it took the attach request), not ten
/// times a second for the whole run.
#[test]
fn a_jvm_started_later_by_a_child_shell_is_found_from_its_exec() {
    let Some(_m) = machine() else { return };
    let classes = java_examples();
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("later.idleflow");
    let script = format!(
        "sleep 1; {} -cp {} Waits sleep 5; sleep 1; echo done",
        Path::new(JDK17).join("bin/java").display(),
        classes.path().display()
    );
    let r = record_script(&rec, &script);
    let p = heaviest(&r);
    assert_eq!(p["reason"], "sleep", "{p}");
    assert!(frames(p).contains(&"Waits.nap"), "{p}");
    let watcher = r["tool"]["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["comm"] == "idleflow-jvms")
        .unwrap_or_else(|| panic!("the watcher among idleflow's threads: {}", r["tool"]));
    let secs = u(&r, "duration_ns") as f64 / 1e9;
    assert!(secs > 7.0, "{secs} s");
    println!("watcher: {watcher} in {secs:.1} s");
    // Scanning every 100 ms would be about 10 a second, 70 or more here.
    assert!(
        u(watcher, "wakeups") < 45,
        "the watcher woke {} times in {secs:.1} s",
        watcher["wakeups"]
    );
}

/// `--java tree,waits`: the arcflow tree's node stays the key and the JVM's
/// reason is added to it. In a `synchronized` convoy the entry/exit agent
/// puts the wait in the caller's node (HotSpot posts MethodEntry for a
/// synchronized method once the monitor is taken); that node's idle gets
/// "monitor enter on Waits$Ledger" from the flight recorder.
#[test]
fn with_the_tree_agent_the_node_gets_the_jvm_reason() {
    let Some(_m) = machine() else { return };
    let classes = java_examples();
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("tw.idleflow");
    let out = run(idleflow()
        .args(["record", "-q", "--java", "tree,waits", "--agent"])
        .arg(agent_library())
        .args(["--wait-threshold", "0", "-o"])
        .arg(&rec)
        .arg("--")
        .arg(Path::new(JDK17).join("bin/java"))
        .arg("-cp")
        .arg(classes.path())
        .args(["Waits", "convoy", "8"]));
    assert!(out.status.success(), "record: {}", stderr(&out));
    let r = report_json(&rec);
    let rows = r["arcflow"]["rows"].as_array().expect("a call tree");
    // The node whose threads' leaving caused the most idle.
    let top = rows
        .iter()
        .filter(|x| x["level"].as_u64() > Some(0))
        .max_by_key(|x| u(x, "idle_ns"))
        .unwrap();
    assert_eq!(top["method"], "Waits.lambda$main$3", "{top}");
    let w = &top["waits"][0];
    assert_eq!(w["reason"], "monitor enter", "{top}");
    assert_eq!(w["object"], "Waits$Ledger", "{top}");
    // The rest of the node's idle came before the JVM's flight recording
    // started (seconds in an interpreted JVM, and how many depends on the
    // machine: 4.5 s of 8 here, more on a slower one). So the check is on
    // the flight recorder's window: of the node's idle, what has no JVM
    // reason is at most the idle the recorder did not cover, and the
    // node's reason holds most of the idle joined to a JVM wait.
    let jw = &r["java_waits"];
    let with_reason: u64 = top["waits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| u(w, "idle_ns"))
        .sum();
    assert!(with_reason <= u(top, "idle_ns"), "{top}");
    assert!(
        u(top, "idle_ns") - with_reason <= u(jw, "unrecorded_idle_ns") + u(jw, "unjoined_idle_ns"),
        "idle without a JVM reason inside the recorder's window: {top} {jw}"
    );
    // The holder's sleeps inside Ledger.post are its node's, not this one's.
    let holders_sleep: u64 = jw["paths"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["reason"] == "sleep" && frames(s).contains(&"Waits$Ledger.post"))
        .map(|s| u(s, "idle_ns"))
        .sum();
    assert!(
        u(w, "idle_ns") as f64 > 0.8 * (u(jw, "java_idle_ns") - holders_sleep) as f64,
        "{top} {jw}"
    );
    assert!(f(w, "share_pct") > 5.0, "{top}");
    // Beneath the node, the native stack its threads left with (the stacks
    // taken at the switch-outs): the JVM's monitor code over a futex wait.
    let native = &top["native"][0];
    let frames: Vec<&str> = native["frames"]
        .as_array()
        .unwrap_or_else(|| panic!("no native stack beneath the node: {top}"))
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert!(
        native["wait"].as_str().unwrap().contains("futex"),
        "{native}"
    );
    assert!(
        frames.iter().any(|f| f.starts_with("ObjectMonitor::")),
        "{frames:?}"
    );
    assert!(f(native, "share_pct") > 50.0, "{top}");
    // The merged paths: the tree node stays the key (its frames named by
    // the tree), the flight recorder's reason is the path's, and the
    // native frames of the JVM's monitor code lie inside it, the kernel's
    // futex wait innermost.
    let merged = r["idle_paths"]["paths"]
        .as_array()
        .unwrap()
        .iter()
        // (Dispatches before the flight recorder started get the reason
        // from the JVM's native frames, without the object.)
        .find(|p| p["reason"] == "monitor enter" && p.get("object").is_some())
        .unwrap_or_else(|| panic!("no merged monitor-enter path: {}", r["idle_paths"]));
    assert_eq!(merged["object"], "Waits$Ledger", "{merged}");
    let fr = merged["frames"].as_array().unwrap();
    let at = |name: &str| fr.iter().position(|f| f["name"] == name);
    let tree = at("Waits.lambda$main$3").unwrap_or_else(|| panic!("{merged}"));
    assert_eq!(fr[tree]["source"], "tree", "{merged}");
    let monitor = fr
        .iter()
        .position(|f| f["name"].as_str().unwrap().starts_with("ObjectMonitor::"))
        .unwrap_or_else(|| panic!("{merged}"));
    assert!(
        monitor < tree,
        "native frames inside the Java ones: {merged}"
    );
    assert_eq!(fr[0]["source"], "kernel", "{merged}");
    assert!(
        fr[0]["name"].as_str().unwrap().contains("futex"),
        "{merged}"
    );
    // The text report shows it under the method.
    let text = stdout(&run(idleflow()
        .arg("report")
        .arg(&rec)
        .args(["--view", "tree"])));
    assert!(
        text.contains("↳ JVM: monitor enter on Waits$Ledger"),
        "{text}"
    );
    assert!(text.contains("↳ native: "), "{text}");
    assert_fits_120_columns(&text);
    // The flame graph tops the node's path with the reason, and the flight
    // recorder's own threads (idleflow's) are never in it. The clerks'
    // threads are merged: their stacks carry the node's reason's idle.
    let stacks = folded_with(&rec, "idle-ns", &["--view", "tree"]);
    let in_reason: u64 = stacks
        .iter()
        .filter(|(s, _)| s.ends_with("Waits.lambda$main$3;[monitor enter] Waits$Ledger"))
        .map(|(_, w)| w)
        .sum();
    assert_eq!(in_reason, u(w, "idle_ns"), "{stacks:?}");
    assert!(
        !stacks.iter().any(|(s, _)| s.contains(";JFR ")),
        "{stacks:?}"
    );
}
