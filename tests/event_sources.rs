//! The event sources of `record --events`: eBPF and perf give the same
//! answer on the same program, and without CAP_BPF `auto` falls back to
//! perf and says why, through the CLI on the real kernel.

mod common;

use common::*;
use std::path::Path;
use std::process::Command;

/// The eBPF and the perf event sources on the same small program
/// (`examples/condvar.rs`: the worker on CPU 1, where perf's samples miss
/// the idle context on some kernels) give the same heaviest idle-causing
/// path and the same root cause, and the header says which recorded.
#[test]
fn ebpf_and_perf_sources_give_the_same_cause_and_root_cause() {
    let Some(_m) = machine() else { return };
    let dir = tempfile::tempdir().unwrap();
    let bin = example("condvar");
    let mut answers = Vec::new();
    for (events, header) in [
        ("bpf", "# events: eBPF (--events bpf)"),
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
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let bin = dir.path().join("idleflow");
    std::fs::copy(env!("CARGO_BIN_EXE_idleflow"), &bin).unwrap();
    let caps = "+perfmon,+dac_override,+dac_read_search,+ipc_lock,+sys_nice";
    let as_nobody = |events: &str, rec: &Path| {
        run(Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(format!("--inh-caps={caps}"))
            .arg(format!("--ambient-caps={caps}"))
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
