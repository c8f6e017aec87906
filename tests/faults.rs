//! End to end through the CLI: a recording survives what ends recorders
//! early. A recorder killed with SIGKILL, or one whose disk fills up, leaves
//! a file that `report` reads up to its last complete record, and errors say
//! their cause once.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

#[test]
fn a_recorder_killed_with_sigkill_leaves_a_readable_recording() {
    let Some(_m) = machine() else { return };
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.idleflow");
    // Something to record: one thread per CPU, 3 ms on, 3 ms off.
    let mut work = Command::new(example("dutycycle"))
        .args(["--seconds", "3"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut child = idleflow()
        .args(["record", "-q", "--duration", "30", "-o"])
        .arg(&rec)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    child.kill().unwrap(); // SIGKILL
    let _ = child.wait();
    let _ = work.wait();
    let partial = the_partial(dir.path(), "r.idleflow");
    let size = std::fs::metadata(&partial).map(|m| m.len()).unwrap_or(0);
    assert!(size > 1000, "the killed recorder left {size} bytes");

    // The final name is missing; the error points at the partial file.
    let out = run(idleflow().arg("report").arg(&rec));
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains(&format!("{} exists", partial.display())),
        "{}",
        stderr(&out)
    );

    let r = report_json(&partial);
    let window = u(&r, "duration_ns");
    println!(
        "| SIGKILL after 2.5 s | {size} bytes | {:.3} s reported | {} dispatches |",
        window as f64 / 1e9,
        u(&r, "dispatches")
    );
    assert!(r["cut_short"].is_object(), "{}", r["cut_short"]);
    // Flushed at least every second: at most ~1 s of the 2.5 s is lost.
    assert!(
        (1_000_000_000..2_600_000_000).contains(&window),
        "window {window} ns"
    );
    // dutycycle alone makes ≈ 330 dispatches a second on each CPU.
    assert!(u(&r, "dispatches") > 500, "{}", u(&r, "dispatches"));
    for c in r["per_cpu"].as_array().unwrap() {
        let idle = u(c, "idle_ns") + u(c, "unknown_ns");
        assert!(idle <= window, "CPU {}: idle {idle} in {window}", c["cpu"]);
    }
}

#[test]
fn a_full_disk_stops_the_recording_says_why_once_and_keeps_what_was_written() {
    let Some(_m) = machine() else { return };
    let dir = tempfile::tempdir().unwrap();
    let small = Tmpfs::mount(&dir.path().join("small"), "1m");
    let mnt = small.path().to_path_buf();
    let rec = mnt.join("r.idleflow");
    // ~280 k dispatches a second, each switch to idle with its user stack
    // copy (up to 8 KiB until the recording is resolved): 1 MiB fills within
    // a fraction of a second. The 200 k dispatches alone take 3.6 MB, so the
    // disk fills even on a run whose two ends shared one CPU (few switches
    // to idle, few copies): with 4 MiB one such run in a fresh clone's CI
    // finished its recording and met the full disk only when resolving.
    let out = run(idleflow()
        .args(["record", "-q", "-o"])
        .arg(&rec)
        .args(["--", "perf", "bench", "sched", "pipe", "-l", "100000"]));
    let err = stderr(&out);
    println!("{err}");
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(
        err.matches("No space left on device").count(),
        1,
        "the cause is stated once: {err}"
    );
    let partial = the_partial(&mnt, "r.idleflow");
    assert!(err.contains(&partial.display().to_string()), "{err}");
    let r = report_json(&partial);
    assert!(r["cut_short"].is_object());
    assert!(u(&r, "dispatches") > 1000, "{}", u(&r, "dispatches"));
}

/// The one temporary file (`NAME.RANDOM.partial`, private) a recorder of
/// `NAME` left in `dir`.
fn the_partial(dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let found: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy().into_owned();
            n.starts_with(&format!("{name}.")) && n.ends_with(".partial")
        })
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    let mode = std::fs::metadata(&found[0]).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    found[0].clone()
}
