//! The flight recorder's dumps end to end (`record --flight`): a trigger
//! on the record stream dumps a window that holds every dispatch perf's
//! own switch records saw in it and says what fired; `idleflow trigger`
//! dumps for the users allowed and says "not allowed" to the others;
//! SIGUSR2 dumps; a dump is written over the recorder's spare file; a full
//! disk fails one dump, not the recording; the caps hold; a JVM's waits
//! join its dump; heartbeats keep normal windows in the history. Every dump
//! is private and readable by every command. The triggers' own conditions
//! are in `tests/flight_triggers.rs`.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::flight::*;
use common::perf_switches::*;
use common::*;
use serde_json::Value;

#[test]
fn a_wait_trigger_dumps_a_window_with_every_dispatch_and_says_what_fired() {
    let Some(_m) = machine() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("dumps");
    let work = format!(
        "{} --busy-ms 2 --sleep-ms 2 --seconds 2.5 >/dev/null & sleep 0.2; sleep 1; wait",
        example("dutycycle").display()
    );
    let (o, switches) = under_perf_switch_records(&tmp, || {
        run(idleflow()
            .args(["record", "--flight", "30s", "--tail", "300ms"])
            .args(["--trigger", "wait>=400ms in sleep", "-o"])
            .arg(&out)
            .args(["--", "bash", "-c", &work]))
    });
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("'wait>=400ms in sleep' fired: sleep (tid"),
        "{err}"
    );
    let d = dumps(&out);
    assert_eq!(d.len(), 1, "{err}");
    let (r, text) = read_dump(&d[0]);
    // Its user stacks resolved in place, the dump is still compressed.
    let file = std::io::BufReader::new(std::fs::File::open(&d[0]).unwrap());
    let mut rd = idleflow_format::Reader::new(file).unwrap();
    while rd.next_record().unwrap().is_some() {}
    assert!(rd.blocks_opened() > 0, "{err}");
    assert!(err.contains("stacks resolved in"), "{err}");
    let svg = tmp.path().join("dump.svg");
    let fg = run(idleflow().arg("flamegraph").arg(&d[0]).arg("-o").arg(&svg));
    assert!(fg.status.success(), "flamegraph: {}", stderr(&fg));
    // It leads with what fired, and the JSON says it too.
    let first = text.lines().next().unwrap();
    assert!(
        first.starts_with("# flight recorder dump 1: 'wait>=400ms in sleep' fired at "),
        "{text}"
    );
    let fl = &r["flight"];
    assert_eq!(fl["trigger"], "wait>=400ms in sleep");
    assert_eq!(fl["number"], 1);
    // The recorder's own memory is in the dump, and its report says it.
    let (rss, ring) = (u(fl, "recorder_rss_bytes"), u(fl, "ring_bytes"));
    assert!(rss > 4 << 20 && rss < 2 << 30, "{fl}");
    assert!(ring > 0 && ring < rss, "{fl}");
    assert!(
        text.contains("#   the flight recorder's memory when it took the window: "),
        "{text}"
    );
    assert!(
        fl["policy"].as_str().unwrap().contains("tail 0.3 s"),
        "{fl}"
    );
    let (start, stop, fired) = (u(&r, "start_ns"), u(&r, "stop_ns"), u(fl, "fired_ns"));
    // The sleep began 0.2 s in and fired 0.4 s later; the tail followed.
    assert!(
        fired >= start + 550_000_000,
        "fired {} s in",
        (fired - start) as f64 / 1e9
    );
    assert!(
        stop >= fired + 250_000_000,
        "tail: {} s",
        (stop - fired) as f64 / 1e9
    );
    assert!(r["threads"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["comm"] == "sleep" || t["name"] == "sleep"));
    // Every dispatch of the window: the switch-ins from idle per CPU
    // against perf's own switch records over the same window.
    let perf = perf_switch_ins_from_idle(&switches, start, stop);
    let per_cpu = r["per_cpu"].as_array().unwrap();
    assert_eq!(perf.len(), per_cpu.len(), "perf saw CPUs {perf:?}");
    for (c, (cpu, perf_n)) in per_cpu.iter().zip(&perf) {
        assert_eq!(u(c, "cpu"), u64::from(*cpu));
        let ours = u(c, "idle_dispatches_from");
        println!("| CPU {cpu} | dump's dispatches from idle {ours} | perf's switch-ins from idle {perf_n} |");
        assert!(*perf_n > 100, "CPU {cpu}: {perf_n} switch-ins from idle");
        assert!(
            ours.abs_diff(*perf_n) <= 3 + perf_n / 100,
            "CPU {cpu}: the dump has {ours} dispatches from idle, perf {perf_n}"
        );
    }
    assert_eq!(u(&r, "lost_events"), 0);

    // A condition that never holds dumps nothing.
    let none = tmp.path().join("none");
    let o = run(idleflow()
        .args([
            "record",
            "--flight",
            "30s",
            "--trigger",
            "wait>=5s in sleep",
            "-o",
        ])
        .arg(&none)
        .args(["--", "bash", "-c", "sleep 0.2; sleep 1"]));
    no_dump(&o, &none);
}

#[test]
fn idleflow_trigger_dumps_for_the_allowed_and_not_for_others_and_sigusr2_dumps() {
    let Some(_m) = machine() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("dumps");
    // An hour's cooldown: explicit requests are held back by the caps only.
    let rec = fly_sleep(
        &[
            "--cooldown",
            "1h",
            "--tail",
            "200ms",
            "--trigger-group",
            "65534",
        ],
        &out,
    );
    let pid = rec.id();
    std::thread::sleep(Duration::from_millis(300));
    // Not root, not the recorder's user, not in its group: not allowed.
    let no = trigger_as(1, pid);
    assert_eq!(no.status.code(), Some(1), "{}", stderr(&no));
    assert!(stdout(&no).contains("not allowed"), "{}", stdout(&no));
    // In the group: allowed.
    let yes = trigger_as(65534, pid);
    assert_eq!(
        yes.status.code(),
        Some(0),
        "{}{}",
        stdout(&yes),
        stderr(&yes)
    );
    assert!(stdout(&yes).contains("dumping"), "{}", stdout(&yes));
    std::thread::sleep(Duration::from_millis(1200));
    // SIGUSR2.
    // SAFETY: kill has no memory effects; `pid` is our child.
    unsafe { libc::kill(pid as i32, libc::SIGUSR2) };
    let o = rec.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "{err}");
    let d = dumps(&out);
    assert_eq!(d.len(), 2, "{err}");
    let triggers: Vec<String> = d
        .iter()
        .map(|p| {
            let (r, _) = read_dump(p);
            let state = r["flight"]["state"].as_str().unwrap().to_string();
            format!("{} {state}", r["flight"]["trigger"].as_str().unwrap())
        })
        .collect();
    assert!(
        triggers[0].starts_with("request asked by uid 65534"),
        "{triggers:?}"
    );
    assert_eq!(triggers[1], "signal SIGUSR2");
    // Nobody is left listening.
    assert!(!Path::new(&format!("/run/idleflow/flight-{pid}.sock")).exists());
    let gone = run(idleflow().args(["trigger", "--pid", &pid.to_string()]));
    assert_eq!(gone.status.code(), Some(1));
    assert!(
        stderr(&gone).contains("no flight recorder runs here"),
        "{}",
        stderr(&gone)
    );
}

#[test]
fn a_dump_that_fills_the_disk_is_said_leaves_no_file_and_the_recording_goes_on() {
    let Some(_m) = machine() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let small = Tmpfs::mount(&tmp.path().join("small"), "1m");
    let out = small.path().join("dumps");
    // Two seconds of the pipe bench are ≈ 400 k dispatches: more than
    // 1 MiB in a dump, compressed (≈ 11 bytes a dispatch).
    let rec = idleflow()
        .args(["record", "--flight", "10s", "--tail", "100ms", "-o"])
        .arg(&out)
        .args(["--", "perf", "bench", "sched", "pipe", "-l", "400000"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_socket(rec.id());
    std::thread::sleep(Duration::from_millis(2000));
    // SAFETY: kill has no memory effects.
    unsafe { libc::kill(rec.id() as i32, libc::SIGUSR2) };
    let o = rec.wait_with_output().unwrap();
    let err = stderr(&o);
    println!("{err}");
    assert!(o.status.success(), "the recording goes on: {err}");
    assert!(err.contains("failed"), "{err}");
    assert_eq!(
        err.matches("No space left on device").count(),
        1,
        "said once: {err}"
    );
    assert!(
        err.contains("0 dumps in") && err.contains(", 1 failed"),
        "{err}"
    );
    let left: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "no partial dump holds the disk: {left:?}");
}

#[test]
fn the_caps_per_hour_and_on_files_hold_dumps_back_and_remove_the_oldest() {
    let Some(_m) = machine() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("dumps");
    let rec = fly_sleep(
        &[
            "--cooldown",
            "50ms",
            "--tail",
            "100ms",
            "--max-per-hour",
            "3",
            "--keep-files",
            "2",
        ],
        &out,
    );
    let pid = rec.id();
    // Five signals, each after the last dump had time to be written.
    for _ in 0..5 {
        std::thread::sleep(Duration::from_millis(500));
        // SAFETY: kill has no memory effects; `pid` is our child.
        unsafe { libc::kill(pid as i32, libc::SIGUSR2) };
    }
    let o = rec.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "{err}");
    // Three dumps in the hour, the other two held back, said once.
    assert_eq!(err.matches("flight: 'signal' fired:").count(), 3, "{err}");
    assert_eq!(
        err.matches("--max-per-hour 3 is reached").count(),
        1,
        "{err}"
    );
    // Two kept: the newest; the first removed once the third was written.
    let d = dumps(&out);
    let names: Vec<String> = d
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}\n{err}");
    assert!(
        names[0].contains("-2-signal") && names[1].contains("-3-signal"),
        "{names:?}"
    );
    assert!(err.contains("removed the oldest dump"), "{err}");
    assert!(err.contains("-1-signal.idleflow (--keep-files 2)"), "{err}");
    assert!(
        err.contains("3 dumps in")
            && err.contains("2 trigger(s) held back")
            && err.contains("1 older removed"),
        "{err}"
    );
    for p in &d {
        read_dump(p);
    }
}

/// `jcmd PID JFR.check`'s answer.
fn jfr_check(pid: u32) -> String {
    let o =
        run(Command::new(Path::new(JDK17).join("bin/jcmd")).args([&pid.to_string(), "JFR.check"]));
    stdout(&o)
}

/// A flight recorder (`java`: its Java options) on a running JVM's convoy,
/// a dump asked for once `ready` says so and a whole window more has
/// passed: what it said, its dump's report, and what `jcmd JFR.check`
/// said of the JVM before it was killed.
fn dump_of_a_running_convoy(java: &[&str], ready: impl Fn(u32) -> bool) -> (String, Value, String) {
    let classes = java_examples();
    let mut jvm = running_convoy_jvm(classes.path(), "16");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("dumps");
    let rec = idleflow()
        .args([
            "record",
            "--flight",
            "3s",
            "--tail",
            "500ms",
            "--duration",
            "9",
        ])
        .args(java)
        .args(["--pid", &jvm.id().to_string(), "-o"])
        .arg(&out)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_socket(rec.id());
    let t = Instant::now();
    while !ready(jvm.id()) {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "{}",
            jfr_check(jvm.id())
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(3500));
    let asked = run(idleflow().args(["trigger", "--pid", &rec.id().to_string()]));
    assert!(asked.status.success(), "{}", stderr(&asked));
    let o = rec.wait_with_output().unwrap();
    // The JVM runs on.
    assert!(jvm.try_wait().unwrap().is_none(), "the JVM ended");
    let check = jfr_check(jvm.id());
    let _ = jvm.kill();
    let _ = jvm.wait();
    let (r, _) = the_one_dump(&o, &out);
    (stderr(&o), r, check)
}

/// The convoy of a dump of `Waits convoy`, named with its reason, its
/// monitor's class and the method with its line, by `source`.
fn assert_the_convoy_named(r: &Value, source: &str) {
    let program = program_paths(r);
    let top = first_past_the_holders_sleep(
        &program,
        "monitor enter",
        "Waits$Ledger.post",
        program_frame_name,
    );
    assert_eq!(top["object"], "Waits$Ledger", "{top}");
    let pf = &top["frames"][u(top, "program_frame") as usize];
    assert_eq!(pf["name"], "Waits$Ledger.post", "{top}");
    assert_eq!(pf["source"], source, "{top}");
    assert!(u(pf, "line") > 0, "{top}");
    let java = &r["idle_paths"]["java"];
    assert!(f(java, "named_pct") > 50.0, "{java}");
}

#[test]
fn a_dump_of_a_running_jvm_has_its_flight_recorders_waits_and_the_jvm_keeps_no_recording() {
    let Some(_m) = machine() else { return };
    // idleflow's recording runs in the JVM, then a whole window later a
    // dump is asked for: the window is all in the JVM's recording.
    let (err, r, check) = dump_of_a_running_convoy(&["--java", "waits,stacks"], |pid| {
        jfr_check(pid).contains("name=idleflow")
    });
    assert!(err.contains("Java waits of 1 JVM added"), "{err}");
    // idleflow's recording in the JVM is gone.
    assert!(!check.contains("idleflow"), "{check}");
    assert_the_convoy_named(&r, "jfr");
}

/// In the default mode a dump names the JVM's waits from its own
/// structures, and nothing runs in the JVM: the dump carries the walked
/// stacks its records name (from before its window too: the ring dropped
/// the segments they were first written in) and the waits of its window.
#[test]
fn a_dump_of_a_running_jvm_by_default_names_its_waits_from_its_structures() {
    let Some(_m) = machine() else { return };
    let started = Instant::now();
    let (err, r, check) =
        dump_of_a_running_convoy(&[], |_| started.elapsed() > Duration::from_secs(3));
    assert!(
        !err.contains("Java waits of"),
        "no flight recorder's waits: {err}"
    );
    assert!(
        !check.contains("idleflow"),
        "nothing started in the JVM: {check}"
    );
    assert_eq!(r["java_frames"], "vm", "{}", r["java_frames_why"]);
    let jvms = &r["java_waits"]["jvms"];
    assert_eq!(jvms[0]["source"], "vm", "{jvms}");
    // Its waits are the window's: none ended before it began.
    let from = u(&jvms[0], "recorded_from_ns");
    assert!(from >= u(&r, "start_ns"), "{jvms} {}", r["start_ns"]);
    assert_the_convoy_named(&r, "vm");
}

/// The heartbeat: windows of normal times go into the job's history; a
/// window in which a path's share rose beyond the job's band is not kept,
/// and fires the `history` trigger. The job's history holds three runs of
/// `stages`; the flight recorder watches 4 s of the same, then 6 s of it
/// with `pipewait` beside it: a path the history never had.
#[test]
fn a_heartbeat_keeps_normal_windows_in_the_history_and_a_rise_fires_the_history_trigger() {
    let Some(_m) = machine() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let bin = build_c_example(tmp.path(), "stages.c", "stages", &["-O2", "-pthread", "-g"]);
    let store = tmp.path().join("history.sqlite");
    for i in 0..3 {
        let rec = tmp.path().join(format!("base{i}.idleflow"));
        let o = run(idleflow()
            .args(["record", "-q", "-o"])
            .arg(&rec)
            .arg("--")
            .arg(&bin)
            .args(["2", "300"]));
        assert!(o.status.success(), "{}", stderr(&o));
        let o = run(idleflow()
            .args(["history", "add"])
            .arg(&rec)
            .args(["--job", "stages", "--history"])
            .arg(&store));
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let out = tmp.path().join("dumps");
    let pipewait = build_c_example(
        tmp.path(),
        "pipewait.c",
        "pipewait",
        &["-O2", "-pthread", "-g"],
    );
    let work = format!(
        "{0} 4 300; {0} 6 300 & {1} 10000; wait",
        bin.display(),
        pipewait.display()
    );
    let o = run(idleflow()
        .args(["record", "--flight", "2s", "--heartbeat", "2s"])
        .args(["--history-job", "stages", "--history"])
        .arg(&store)
        // 2-s windows of this load vary by a few points of share (the
        // heartbeats' own work runs on the same CPUs); the new path takes
        // about 20.
        .args(["--heartbeat-min-change", "5"])
        .args(["--trigger", "history", "--tail", "100ms", "-o"])
        .arg(&out)
        .args(["--", "sh", "-c", &work]));
    let err = stderr(&o);
    println!("{err}");
    let (r, state) = the_one_dump(&o, &out);
    assert_eq!(r["flight"]["trigger"], "history", "{err}");
    // pipewait's main thread is named `sleeper`; its reader waits in
    // `reader`.
    assert!(state.contains("path sleeper in"), "{state}");
    assert!(state.contains("rose to"), "{state}");
    // The first heartbeat was a normal time, kept; the one that fired came
    // after pipewait started (4 s in), and none after it was kept.
    let number = |l: &str| -> u32 {
        l.split("heartbeat ")
            .nth(1)
            .and_then(|w| w.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no heartbeat number in {l}"))
    };
    let kept: Vec<u32> = err
        .lines()
        .filter(|l| l.contains("flight: heartbeat") && l.contains("kept in the history"))
        .map(number)
        .collect();
    let fired = number(&state);
    assert!(fired >= 3, "{state}");
    assert!(kept.contains(&1), "{err}");
    assert!(kept.iter().all(|&n| n < fired), "{err}");
    // The history holds the three runs and the kept heartbeats as the
    // job's normal times, the dump apart; no heartbeat's file is left in
    // the dumps' directory (`dumps`).
    let runs_of = |job: &str| -> usize {
        let list = run(idleflow()
            .args([
                "history",
                "list",
                "--job",
                job,
                "--format",
                "json",
                "--history",
            ])
            .arg(&store));
        assert!(list.status.success(), "{}", stderr(&list));
        let runs: Value = serde_json::from_slice(&list.stdout).unwrap();
        runs.as_array().unwrap().len()
    };
    assert_eq!(runs_of("stages"), 3 + kept.len(), "{err}");
    assert_eq!(runs_of("stages-dumps"), 1, "{err}");
    // pipewait runs for three heartbeats: each after the one that fired
    // rose too (the dump is not among the normal times).
    let rose = err
        .lines()
        .filter(|l| l.contains("flight: heartbeat") && l.contains("not kept as a normal time"))
        .count();
    assert!(rose >= 2, "{err}");
}

#[test]
fn a_dump_is_written_over_the_recorders_spare_file_which_goes_when_it_ends() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let Some(_m) = machine() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("dumps");
    // No stacks: resolving them would rewrite the dump into a new file.
    let rec = idleflow()
        .args([
            "record",
            "--flight",
            "10s",
            "--tail",
            "100ms",
            "--no-stacks",
            "-o",
        ])
        .arg(&out)
        .arg("--")
        .arg(example("dutycycle"))
        .args(["--threads", "4", "--busy-ms", "0.05", "--sleep-ms", "0.05"])
        .args(["--seconds", "4"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_socket(rec.id());
    // The spare grows to the ring's length and a 4-MiB margin.
    // `.spare-PID.RANDOM`: its name unguessable by other users.
    let prefix = format!(".spare-{}.", rec.id());
    let spare = || {
        std::fs::read_dir(&out)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with(&prefix)
            })
    };
    let t = Instant::now();
    while spare().map_or(0, |s| std::fs::metadata(s).map_or(0, |m| m.len())) < 4 << 20 {
        assert!(t.elapsed() < Duration::from_secs(5), "no spare grew");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(1500));
    let meta = std::fs::metadata(spare().unwrap()).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    // SAFETY: kill has no memory effects.
    unsafe { libc::kill(rec.id() as i32, libc::SIGUSR2) };
    let o = rec.wait_with_output().unwrap();
    // One dump and nothing else: the spare went with the recorder.
    let (r, _) = the_one_dump(&o, &out);
    let dump = &dumps(&out)[0];
    let written = std::fs::metadata(dump).unwrap();
    assert_eq!(
        written.ino(),
        meta.ino(),
        "the dump is the spare written over: {}",
        stderr(&o)
    );
    // Cut to its own length (the spare was longer), read to its end.
    assert!(
        written.len() < meta.len(),
        "{} < {}",
        written.len(),
        meta.len()
    );
    assert!(u(&r, "dispatches") > 10_000, "{r}");
}
