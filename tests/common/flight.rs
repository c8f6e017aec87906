//! Helpers of the flight recorder's end-to-end tests (`tests/flight.rs`,
//! `tests/flight_triggers.rs`): the dumps a recorder left, read by every
//! command; its trigger socket; `idleflow trigger` as another user.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::*;

/// The dumps in `dir`, sorted; no `.partial` file may be left.
pub fn dumps(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    v.sort();
    assert!(
        v.iter()
            .all(|p| p.extension().is_some_and(|e| e == "idleflow")),
        "only complete dumps: {v:?}"
    );
    v
}

/// A dump is private (0600), and `report` (text and JSON) and `script`
/// read it; its JSON report.
pub fn read_dump(dump: &Path) -> (Value, String) {
    let mode = std::fs::metadata(dump).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{}", dump.display());
    let text = run(idleflow().arg("report").arg(dump));
    assert!(text.status.success(), "report: {}", stderr(&text));
    let script = run(idleflow().arg("script").arg(dump));
    assert!(script.status.success(), "script: {}", stderr(&script));
    assert!(
        stdout(&script).contains(" dispatch "),
        "script of {}",
        dump.display()
    );
    (report_json(dump), stdout(&text))
}

/// The recorder's run `o` succeeded, said it made no dump, and left none
/// in `dir`.
pub fn no_dump(o: &std::process::Output, dir: &Path) {
    let err = stderr(o);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("0 dumps in"), "{err}");
    assert!(dumps(dir).is_empty());
}

/// The recorder's run `o` succeeded and left exactly one dump in `dir`:
/// its JSON report and the state that fired it.
pub fn the_one_dump(o: &std::process::Output, dir: &Path) -> (Value, String) {
    let err = stderr(o);
    assert!(o.status.success(), "{err}");
    let d = dumps(dir);
    assert_eq!(d.len(), 1, "{err}");
    let (r, _) = read_dump(&d[0]);
    let state = r["flight"]["state"].as_str().unwrap().to_string();
    (r, state)
}

/// Waits until the flight recorder `pid` listens, up to 5 s.
pub fn wait_for_socket(pid: u32) {
    let sock = format!("/run/idleflow/flight-{pid}.sock");
    let t = Instant::now();
    while !Path::new(&sock).exists() {
        assert!(t.elapsed() < Duration::from_secs(5), "no {sock}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `idleflow trigger --pid PID` as uid 65534 with group `gid` and no others.
pub fn trigger_as(gid: u32, pid: u32) -> std::process::Output {
    run(Command::new("setpriv").args([
        "--reuid=65534",
        &format!("--regid={gid}"),
        "--clear-groups",
        env!("CARGO_BIN_EXE_idleflow"),
        "trigger",
        "--pid",
        &pid.to_string(),
    ]))
}

/// `record --flight 10s OPTIONS -o OUT -- sleep 4`, started, its standard
/// error piped, once its trigger socket listens.
pub fn fly_sleep(options: &[&str], out: &Path) -> std::process::Child {
    let rec = idleflow()
        .args(["record", "--flight", "10s"])
        .args(options)
        .arg("-o")
        .arg(out)
        .args(["--", "sleep", "4"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_socket(rec.id());
    rec
}
