//! The flight recorder's triggers end to end, each on a workload whose
//! moment is known, and each dumping nothing when its condition never
//! holds: a lock convoy that begins at a moment drawn at random (its
//! dump's paths name the lock), every Nth switch to idle, an idle machine
//! with waiters, a condition sustained, unclaimed idle, I/O pressure; bad
//! options refused before anything runs.

mod common;

use std::path::Path;

use common::flight::*;
use common::*;
use serde_json::Value;

#[test]
fn a_convoy_trigger_dumps_the_convoys_start_and_its_paths_name_the_lock() {
    let Some(_m) = machine() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let holders = build_c_example(
        tmp.path(),
        "holders.c",
        "holders",
        &["-O2", "-g", "-fomit-frame-pointer", "-pthread"],
    );
    let fly = |seconds: &str, out: &Path| {
        run(idleflow()
            .args(["record", "--flight", "1s", "--tail", "1s"])
            .args(["--trigger", "convoy>=4 in teller-*", "-o"])
            .arg(out)
            .arg("--")
            .arg(&holders)
            .args(["convoy", seconds]))
    };
    // Four tellers post alone until a moment drawn at random, then all
    // through one lock.
    let out = tmp.path().join("dumps");
    let o = fly("5", &out);
    let err = stderr(&o);
    let convoy_at: u64 = stdout(&o)
        .strip_prefix("convoy at ")
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("the convoy's start: {}", stdout(&o)));
    let (r, state) = the_one_dump(&o, &out);
    assert!(
        state.starts_with("a convoy of 4 threads of teller-* in turn, each woken from its wait by the one before: teller-"),
        "{state}"
    );
    let (start, fired) = (u(&r, "start_ns"), u(&r["flight"], "fired_ns"));
    println!(
        "convoy at {:.3} s of the dump, fired {:.1} ms later",
        (convoy_at as f64 - start as f64) / 1e9,
        (fired as f64 - convoy_at as f64) / 1e6
    );
    assert!(
        start <= convoy_at,
        "the dump holds the convoy's start: {err}"
    );
    assert!(
        fired - start >= 1_000_000_000,
        "the dump reaches --flight's 1 s back from its trigger, the tail kept aside: {} ms",
        (fired - start) / 1_000_000
    );
    assert!(
        fired >= convoy_at && fired - convoy_at < 500_000_000,
        "fired {} ms after the convoy began: {err}",
        (fired as i64 - convoy_at as i64) / 1_000_000
    );
    // The lock: the tellers' futex wait in post_entry().
    let paths = r["idle_paths"]["paths"].as_array().unwrap();
    assert!(
        paths.iter().any(|p| p["reason"] == "futex wait"
            && p["frames"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f["name"] == "post_entry")),
        "no futex wait in post_entry among {paths:?}"
    );

    // Before the convoy: the tellers each sleep on their own, woken by
    // timers. No dump.
    let none = tmp.path().join("none");
    let o = fly("1.2", &none);
    no_dump(&o, &none);
}

#[test]
fn cpu_idle_every_n_fires_at_the_nth_switch_to_idle_the_dump_holds() {
    let Some(_m) = machine() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let fly = |trigger: &str, out: &Path| {
        run(idleflow()
            .args([
                "record",
                "--flight",
                "10s",
                "--tail",
                "100ms",
                "--cooldown",
                "1m",
            ])
            .args(["--trigger", trigger, "-o"])
            .arg(out)
            .arg("--")
            .arg(example("dutycycle"))
            .args([
                "--threads",
                "1",
                "--busy-ms",
                "2",
                "--sleep-ms",
                "2",
                "--seconds",
                "2",
            ]))
    };
    let out = tmp.path().join("dumps");
    let o = fly("cpu-idle in duty-* every:200", &out);
    let (r, state) = the_one_dump(&o, &out);
    assert!(state.contains(" went idle as duty-0 (tid "), "{state}");
    let so_far: u64 = state
        .rsplit("; ")
        .next()
        .and_then(|s| s.strip_suffix(" switches to idle so far"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{state}"));
    assert!((200..220).contains(&so_far), "{state}");
    // The dump holds the run from its start: its switches of duty-0 to
    // idle up to the judgement are the ones the trigger counted.
    let (start, fired) = (u(&r, "start_ns"), u(&r["flight"], "fired_ns"));
    let duty = r["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["comm"] == "duty-0")
        .map(|t| u(t, "tid"))
        .expect("duty-0 in the dump");
    let script = stdout(&run(idleflow().arg("script").arg(&dumps(&out)[0])));
    // `SECONDS cpu N dispatch PREV [STATE] -> NEXT`
    let to_idle = script
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|w| w.len() == 8 && w[3] == "dispatch" && w[4] == duty.to_string() && w[7] == "0")
        .filter(|w| start + (w[0].parse::<f64>().unwrap() * 1e9) as u64 <= fired)
        .count() as u64;
    assert!(
        to_idle.abs_diff(so_far) <= 1,
        "the trigger counted {so_far}, the dump has {to_idle} up to its judgement"
    );

    let none = tmp.path().join("none");
    let o = fly("cpu-idle in nobody-*", &none);
    no_dump(&o, &none);
}

#[test]
fn an_idle_trigger_with_waiters_fires_on_an_idle_machine() {
    let Some(_m) = machine() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("dumps");
    let o = run(idleflow()
        .args(["record", "--flight", "10s", "--tail", "100ms"])
        .args([
            "--trigger",
            "idle>=80% for 500ms while waiting>=1 in sleep",
            "-o",
        ])
        .arg(&out)
        .args(["--", "sleep", "1.5"]));
    let (r, state) = the_one_dump(&o, &out);
    assert!(
        state.contains("% of 2 CPUs idle over the last 0.5 s, while 1 threads waiting: sleep"),
        "{state}"
    );
    let pct: f64 = state.split(' ').next().unwrap().parse().unwrap();
    assert!(pct >= 80.0, "{state}");
    let fired = u(&r["flight"], "fired_ns");
    assert!(
        fired >= u(&r, "start_ns") + 500_000_000,
        "a whole 0.5 s window first"
    );
}

#[test]
fn a_sustained_trigger_fires_only_once_its_condition_held_that_long() {
    let Some(_m) = machine() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let fly = |spec: &str, out: &Path| {
        run(idleflow()
            .args([
                "record",
                "--flight",
                "10s",
                "--tail",
                "100ms",
                "--trigger",
                spec,
                "-o",
            ])
            .arg(out)
            .args(["--", "sleep", "1.5"]))
    };
    let held = tmp.path().join("held");
    let o = fly("waiting>=1 for 700ms in sleep", &held);
    let (r, state) = the_one_dump(&o, &held);
    assert!(state.starts_with("1 threads waiting: sleep"), "{state}");
    let secs: f64 = state
        .rsplit("for ")
        .next()
        .and_then(|v| v.trim_end_matches(" s").parse().ok())
        .unwrap_or_else(|| panic!("how long it held: {state}"));
    assert!((0.7..1.5).contains(&secs), "{state}");
    assert!(
        u(&r["flight"], "fired_ns") >= u(&r, "start_ns") + 700_000_000,
        "held 0.7 s first"
    );
    // Longer than the sleep: it never held that long.
    let never = tmp.path().join("never");
    let o = fly("waiting>=1 for 3s in sleep", &never);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(dumps(&never).is_empty(), "{}", stderr(&o));
}

#[test]
fn bad_flight_options_are_refused_before_anything_runs() {
    for (args, says) in [
        (vec!["--flight", "soon"], "is not a duration"),
        (
            vec!["--flight", "10s", "--trigger", "cpu>=3"],
            "unknown condition 'cpu>=3'",
        ),
        (vec!["--trigger", "signal"], "--flight"),
        (
            vec!["--flight", "10s", "--trigger-group", "no-such-group-here"],
            "no such group",
        ),
        (
            vec!["--flight", "10s", "--trigger", "history"],
            "add --heartbeat DUR and --history-job JOB",
        ),
        (
            vec!["--flight", "10s", "--heartbeat", "1m"],
            "--history-job",
        ),
    ] {
        let o = run(idleflow().arg("record").args(&args).args(["--", "true"]));
        assert!(!o.status.success(), "{args:?}");
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn unclaimed_idle_fires_when_threads_pinned_to_one_cpu_queue_while_another_idles() {
    let Some(_m) = machine() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("dumps");
    let history = tmp.path().join("history.sqlite");
    // Two spinning shells on CPU 0: each is preempted and waits its turn
    // while CPU 1 has nothing to run. Every dump goes into the history.
    let spin = "taskset -c 0 timeout 1.5 sh -c 'while :; do :; done' & \
                taskset -c 0 timeout 1.5 sh -c 'while :; do :; done'; wait";
    let o = run(idleflow()
        .args(["record", "--flight", "10s", "--tail", "100ms"])
        .args([
            "--trigger",
            "unclaimed>=2ms in sh",
            "--history-job",
            "spin",
            "--history",
        ])
        .arg(&history)
        .arg("-o")
        .arg(&out)
        .args(["--", "bash", "-c", spin]));
    let err = stderr(&o);
    let (_, state) = the_one_dump(&o, &out);
    assert!(state.starts_with("CPU 1 idle "), "{state}");
    assert!(state.contains(" while sh (tid "), "{state}");
    assert!(err.contains("as run 1 of job spin"), "{err}");
    let list = run(idleflow()
        .args(["history", "list", "--format", "json", "--history"])
        .arg(&history));
    let runs: Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(runs.as_array().unwrap().len(), 1, "{runs}");
    assert_eq!(runs[0]["job"], "spin");
}

#[test]
fn an_io_pressure_trigger_fires_on_synchronous_writes_to_the_disk_and_not_on_a_sleep() {
    let Some(_m) = machine() else { return };
    let tmp = tempfile::tempdir().unwrap();
    // dd below stalls ≈ 50 % of the time here (measured with
    // /proc/pressure/io: 785 ms of 1.5 s).
    let trigger = "io-full>=20% for 500ms while idle>=30%";
    // Nothing stalls on I/O while a sleep runs.
    let none = tmp.path().join("none");
    let o = run(idleflow()
        .args(["record", "--flight", "5s", "--trigger", trigger, "-o"])
        .arg(&none)
        .args(["--", "sleep", "2"]));
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("0 dumps in"), "{err}");
    // Synchronous, direct writes to a file on the disk (not a tmpfs): the
    // writer stalls on I/O while the CPUs idle.
    let disk = tempfile::tempdir_in("/var/tmp").unwrap();
    let file = disk.path().join("psi.dat");
    let out = tmp.path().join("dumps");
    let o = run(idleflow()
        .args(["record", "--flight", "5s", "--trigger", trigger])
        .args(["--tail", "200ms", "-o"])
        .arg(&out)
        .args(["--", "bash", "-c"])
        .arg(format!(
            "timeout 2 dd if=/dev/zero of={} bs=16k count=1000000 oflag=sync,direct \
             status=none; true",
            file.display()
        )));
    let (r, state) = the_one_dump(&o, &out);
    assert!(state.starts_with("io full stall "), "{state}");
    assert!(state.contains(" CPUs idle"), "{state}");
    assert_eq!(r["flight"]["trigger"], trigger);
}
