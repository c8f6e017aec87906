//! End to end: the kernel's wait reasons as the report names them, on real
//! programs recorded through the CLI (the rules themselves:
//! `postproc/src/reasons.rs`).

mod common;

use std::process::Command;

use common::*;

/// A thread waiting for a signal that never comes (`sigtimedwait` with a
/// timeout, 40 times): its idle-causing path reads `signal wait`, not the
/// kernel function's name.
#[test]
fn a_wait_for_a_signal_reads_signal_wait() {
    let Some(_m) = machine() else { return };
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("sig.idleflow");
    let py = "import signal\nfor _ in range(40): signal.sigtimedwait([signal.SIGUSR1], 0.02)";
    // The probe also warms the page cache with what the recorded run
    // loads: a fresh clone's CI, its disk busy after the build, once spent
    // 0.7 s of python's 1.3 s idle reading python's start-up files
    // (folio_wait_bit_common), not in the waits this test is about.
    let warm = "import signal\nsignal.sigtimedwait([signal.SIGUSR1], 0.001)\nprint(1)";
    let probe = run(Command::new("python3").args(["-c", warm]));
    assert!(
        probe.status.success(),
        "python3 (Debian's python3; .ci/run installs it)"
    );
    let out = run(idleflow()
        .args(["record", "-q", "-o"])
        .arg(&rec)
        .args(["--", "python3", "-c", py]));
    assert!(out.status.success(), "{}", stderr(&out));
    let r = report_json(&rec);
    let paths = r["idle_paths"]["paths"].as_array().unwrap();
    let sig: u64 = paths
        .iter()
        .filter(|p| p["reason"] == "signal wait")
        .map(|p| u(p, "idle_ns"))
        .sum();
    let python: u64 = paths
        .iter()
        .filter(|p| {
            p["process"]
                .as_str()
                .is_some_and(|n| n.starts_with("python"))
        })
        .map(|p| u(p, "idle_ns"))
        .sum();
    // 40 waits of 20 ms: most of the program's idle is in them.
    assert!(
        sig > 0 && sig * 10 >= python * 8,
        "signal wait {sig} ns of python's {python} ns: {:#}",
        r["idle_paths"]["paths"]
    );
}
