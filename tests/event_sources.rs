//! The event sources of `record --events`: eBPF and perf give the same
//! answer on the same program, and without CAP_BPF `auto` falls back to
//! perf and says why, through the CLI on the real kernel.

mod common;

use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

/// The eBPF and the perf event sources on the same small program
/// (`examples/condvar.rs`: the worker on CPU 1, where perf's samples miss
/// the idle context on some kernels) give the same heaviest idle-causing
/// path and the same root cause, and the header says which recorded.
#[test]
fn ebpf_and_perf_sources_give_the_same_cause_and_root_cause() {
    let Some(_m) = machine() else { return };
    // On a quiet machine the worker's idle is rooted in main's path (98 %
    // on both sources, every run here). Once in a fresh-clone CI run the
    // eBPF recording's top root was "contention" (75.8 %: main woken and
    // not yet on a CPU while the CPUs sat idle: this VM's host delaying the
    // vCPU), and perf's, recorded next, the path. Such a pair measured the
    // host, not the sources: it is recorded again (at most 3 pairs), and
    // the pair compared is one in which neither was disturbed so.
    for attempt in 1..=3 {
        let answers = record_both_sources();
        let disturbed = answers.iter().any(|a| a.4 == "contention");
        if disturbed && attempt < 3 {
            println!("pair {attempt} disturbed (a top root of CPU contention): {answers:?}; again");
            continue;
        }
        check_same_answers(&answers);
        return;
    }
}

type Answer = (
    serde_json::Value,
    serde_json::Value,
    serde_json::Value,
    Vec<String>,
    serde_json::Value,
    serde_json::Value,
    String,
);

/// `examples/condvar` recorded with each source: its top path's process,
/// reason, thread and frames, its top root's kind and process, and where
/// the waiters were released.
fn record_both_sources() -> Vec<Answer> {
    let dir = tempfile::tempdir().unwrap();
    let bin = example("condvar");
    let mut answers = Vec::new();
    for (events, header) in [
        (
            "bpf",
            "# events: eBPF (--events bpf); idle ends at sched_switch, ≈ 0.5 µs before perf's switch-in",
        ),
        ("perf", "# events: perf (--events perf)"),
    ] {
        let rec = dir.path().join(format!("{events}.idleflow"));
        let out = run(idleflow()
            .args(["record", "-q", "--events", events, "-o"])
            .arg(&rec)
            .arg("--")
            .arg(&bin)
            .arg("2000"));
        assert!(
            out.status.success(),
            "record --events {events}: {}",
            stderr(&out)
        );
        let text = stdout(&run(idleflow().arg("report").arg(&rec)));
        assert!(text.lines().any(|l| l == header), "{text}");
        let r = report_json(&rec);
        assert_eq!(r["event_source"], events);
        let top = &r["idle_paths"]["paths"][0];
        let frames: Vec<&str> = top["frames"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["kind"] == "native")
            .filter_map(|f| f["name"].as_str())
            .collect();
        let root = &r["root_causes"]["roots"][0];
        let released = text
            .lines()
            .find(|l| l.contains("released the waiters in"))
            .and_then(|l| l.split("released the waiters in ").nth(1))
            .unwrap_or("")
            .to_string();
        println!(
            "{events}: top path {} {} by {} ({:.1} %), {frames:?}; root {} {} ({:.1} %), released in {released}; unseen wake-ups {}",
            top["process"],
            top["reason"],
            top["threads"][0]["name"],
            f(top, "share_pct"),
            root["kind"],
            root["process"],
            f(root, "share_pct"),
            u(&r["total"], "unseen_wakeups"),
        );
        answers.push((
            top["process"].clone(),
            top["reason"].clone(),
            top["threads"][0]["name"].clone(),
            frames
                .iter()
                .take(8)
                .map(|s| s.to_string())
                .collect::<Vec<_>>(),
            root["kind"].clone(),
            root["process"].clone(),
            released,
        ));
    }
    answers
}

fn check_same_answers(answers: &[Answer]) {
    assert_eq!(
        answers[0], answers[1],
        "eBPF (left) and perf (right) disagree"
    );
    assert!(
        answers[0].3.iter().any(|f| f == "condvar::take_job"),
        "{answers:?}"
    );
    // The waker's innermost program frame: `post_job`, or in an optimized
    // build its caller's line (`post_job` ends in a tail call to
    // `notify_one`, which leaves no frame of its own).
    let released = &answers[0].6;
    assert!(
        released.starts_with("condvar::post_job") || released.starts_with("condvar::main"),
        "{answers:?}"
    );
}

/// Without CAP_BPF (an unprivileged user with CAP_PERFMON only, and what
/// reading tracefs needs) `--events auto` records with perf and the header
/// says why in one line; `--events bpf` fails with the probe's reason.
#[test]
fn without_cap_bpf_auto_falls_back_to_perf_and_says_why() {
    let Some(_m) = machine() else { return };
    if Command::new("setpriv").arg("--version").output().is_err() {
        println!("no setpriv: skipped");
        return;
    }
    let (dir, bin) = open_dir_with_idleflow();
    let caps = "+perfmon,+dac_override,+dac_read_search,+ipc_lock,+sys_nice";
    let as_nobody = |events: &str, rec: &Path| {
        run(as_nobody(caps)
            .arg(&bin)
            .args(["record", "-q", "--events", events, "-o"])
            .arg(rec)
            .args(["--", "sleep", "0.2"]))
    };
    let rec = dir.path().join("auto.idleflow");
    let out = as_nobody("auto", &rec);
    assert!(out.status.success(), "record: {}", stderr(&out));
    let text = stdout(&run(idleflow().arg("report").arg(&rec)));
    let line = text.lines().find(|l| l.starts_with("# events:"));
    assert_eq!(
        line,
        Some("# events: perf (eBPF not usable: missing CAP_BPF; see the JSON report)"),
        "{text}"
    );
    let r = report_json(&rec);
    assert_eq!(r["event_source"], "perf");
    assert!(
        r["event_source_why"]
            .as_str()
            .unwrap()
            .contains("CAP_BPF and CAP_PERFMON"),
        "{r}"
    );
    let out = as_nobody("bpf", &dir.path().join("bpf.idleflow"));
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("eBPF recording (--events bpf) cannot be used here: missing CAP_BPF"),
        "{}",
        stderr(&out)
    );
}

/// With CAP_PERFMON and CAP_BPF alone (no root, no tracefs), a user
/// records with the eBPF source, and runs the flight recorder: a trigger
/// fires and its dump is written, private to that user; what the user may
/// not do (the drain's real-time priority, the trigger socket in
/// /run/idleflow, naming kernel addresses) is said, not fatal.
#[test]
fn with_cap_perfmon_and_cap_bpf_a_user_records_and_flies_with_ebpf() {
    let Some(_m) = machine() else { return };
    let (dir, bin) = open_dir_with_idleflow();
    let as_nobody = |args: &[&str]| run(as_nobody("+perfmon,+bpf").arg(&bin).args(args));
    let rec = dir.path().join("user.idleflow");
    let out = as_nobody(&["record", "-o", rec.to_str().unwrap(), "--", "sleep", "0.3"]);
    assert!(out.status.success(), "record: {}", stderr(&out));
    let meta = std::fs::metadata(&rec).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&meta), 65534);
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let r = report_json(&rec);
    assert_eq!(r["event_source"], "bpf", "{}", stderr(&out));
    // The sleep's 0.3 s, from its switch-out to its wake-up.
    let blocked: u64 = r["threads"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["comm"] == "sleep")
        .map(|t| t["blocked_ns"].as_u64().unwrap_or(0))
        .sum();
    assert!(
        (290_000_000..400_000_000).contains(&blocked),
        "the sleep blocked 0.3 s: {}",
        r["threads"]
    );
    let text = stdout(&run(idleflow().arg("report").arg(&rec)));
    assert!(
        text.contains("drained at ordinary") && text.contains("CAP_SYS_NICE"),
        "{text}"
    );
    let dumps = dir.path().join("dumps");
    let out = as_nobody(&[
        "record",
        "--flight",
        "10s",
        "--trigger",
        "wait>=300ms in sleep",
        "--tail",
        "100ms",
        "-o",
        dumps.to_str().unwrap(),
        "--",
        "sleep",
        "0.6",
    ]);
    let err = stderr(&out);
    assert!(out.status.success(), "flight: {err}");
    assert!(err.contains("no trigger socket"), "{err}");
    let written: Vec<_> = std::fs::read_dir(&dumps)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(written.len(), 1, "{err}");
    let d = report_json(&written[0]);
    assert!(
        d["flight"]["trigger"]
            .as_str()
            .unwrap()
            .starts_with("wait>=300ms"),
        "{d}"
    );
    assert_eq!(
        std::fs::metadata(&written[0]).unwrap().permissions().mode() & 0o777,
        0o600
    );
}

/// The eBPF source's stacks at the switches to idle under a budget
/// (`--stack-budget`): on `examples/condvar.rs`, whose worker leaves its
/// CPU idle about 2,000 times a second, a budget of 200 a second takes a
/// stack at a fraction of them; the others stand for the worker's previous
/// stacks, and the answer is the one every stack gives (`--stack-budget 0`):
/// the same top path and frames, its share within 3 points. The JSON and
/// the header say how much of the idle is estimated.
#[test]
fn sampled_stacks_under_a_budget_give_the_answer_of_every_stack() {
    let Some(_m) = machine() else { return };
    let dir = tempfile::tempdir().unwrap();
    let bin = example("condvar");
    let mut tops = Vec::new();
    for budget in ["0", "200"] {
        let rec = dir.path().join(format!("budget-{budget}.idleflow"));
        let out = run(idleflow()
            .args([
                "record",
                "-q",
                "--events",
                "bpf",
                "--stack-budget",
                budget,
                "-o",
            ])
            .arg(&rec)
            .arg("--")
            .arg(&bin)
            .arg("2000"));
        assert!(out.status.success(), "record: {}", stderr(&out));
        let r = report_json(&rec);
        let text = stdout(&run(idleflow().arg("report").arg(&rec)));
        let sampling = &r["idle_stack_sampling"];
        if budget == "0" {
            assert!(sampling.is_null(), "every stack taken: {sampling}");
            assert!(!text.contains("stacks sampled"), "{text}");
        } else {
            assert_eq!(u(sampling, "budget_per_s_per_cpu"), 200, "{sampling}");
            let (own, carried, none) = (
                u(&sampling["own"], "dispatches"),
                u(&sampling["carried"], "dispatches"),
                u(&sampling["none"], "dispatches"),
            );
            let all = own + carried + none;
            println!(
                "budget 200: {own} own, {carried} carried, {none} none of {all} dispatches to idle"
            );
            let secs = u(&r, "duration_ns") as f64 / 1e9;
            assert!(
                own > 0 && (own as f64) < 2.0 * 200.0 * 2.0 * secs + 20.0,
                "at most twice the budget on each of 2 CPUs: {own} in {secs:.2} s"
            );
            assert!(carried > own, "most carried: {own} own, {carried} carried");
            assert!(none * 20 < all, "few without: {none} of {all}");
            let line = text.lines().find(|l| l.starts_with("# stacks sampled"));
            assert!(line.is_some_and(|l| l.contains("200/s")), "{text}");
        }
        let top = &r["idle_paths"]["paths"][0];
        let frames: Vec<String> = top["frames"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|f| f["name"].as_str().map(str::to_string))
            .collect();
        println!(
            "budget {budget}: top path {} {} ({:.1} %) {:?}",
            top["process"],
            top["reason"],
            f(top, "share_pct"),
            &frames[..frames.len().min(8)]
        );
        tops.push((
            top["process"].clone(),
            top["reason"].clone(),
            frames,
            f(top, "share_pct"),
        ));
    }
    let (every, sampled) = (&tops[0], &tops[1]);
    assert_eq!(
        (&every.0, &every.1, &every.2),
        (&sampled.0, &sampled.1, &sampled.2),
        "every stack (left) and sampled (right)"
    );
    assert!(
        every.2.iter().any(|f| f == "condvar::take_job"),
        "{every:?}"
    );
    assert!(
        (every.3 - sampled.3).abs() < 3.0,
        "top share {:.1} % with every stack, {:.1} % sampled",
        every.3,
        sampled.3
    );
}

/// Every wake-up of a pipe ping-pong is seen, those too whose waking is
/// stamped before the wakee's own switch-out (raised on the other CPU
/// while the wakee was inside `__schedule`: before, 762 of 566,510 wake-ups
/// of `perf bench sched pipe -l 300000` counted as unseen, 0.13 %).
#[test]
fn a_ping_pong_has_no_unseen_wake_ups() {
    let Some(_m) = machine() else { return };
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("pipe.idleflow");
    let out = run(idleflow()
        .args(["record", "-q", "-o"])
        .arg(&rec)
        .args(["--", "perf", "bench", "sched", "pipe", "-l", "100000"]));
    assert!(out.status.success(), "record: {}", stderr(&out));
    let r = report_json(&rec);
    assert_eq!(r["event_source"], "bpf", "{}", r["event_source_why"]);
    let wakeups = u(&r, "wakeups");
    let unseen = u(&r["total"], "unseen_wakeups");
    assert!(wakeups > 150_000, "{wakeups} wake-ups");
    assert!(
        unseen * 10_000 <= wakeups,
        "{unseen} unseen of {wakeups} wake-ups"
    );
}
