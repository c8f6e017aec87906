//! Helpers of the end-to-end tests: run the real `idleflow` binary and the
//! bundled example workloads, read the JSON report.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};

use serde_json::Value;

/// Recording tests watch every CPU: run them one at a time.
static MACHINE: Mutex<()> = Mutex::new(());

/// Takes the machine for one recording test. Recording needs root: on a
/// machine without it the test fails with the reason, unless
/// `IDLEFLOW_ALLOW_SKIP=1` asks to skip (then it says why and returns `None`).
pub fn machine() -> Option<MutexGuard<'static, ()>> {
    // SAFETY: geteuid has no memory effects.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        let why = "recording tests need root (system-wide scheduler tracepoints)";
        if std::env::var_os("IDLEFLOW_ALLOW_SKIP").is_some() {
            eprintln!("SKIPPED: {why}");
            return None;
        }
        panic!("{why}; run as root, or set IDLEFLOW_ALLOW_SKIP=1 to skip knowingly");
    }
    Some(MACHINE.lock().unwrap_or_else(|e| e.into_inner()))
}

pub fn idleflow() -> Command {
    Command::new(env!("CARGO_BIN_EXE_idleflow"))
}

/// A bundled example program (built by `cargo test` beside the binary).
pub fn example(name: &str) -> PathBuf {
    let bin = Path::new(env!("CARGO_BIN_EXE_idleflow"));
    let p = bin.parent().unwrap().join("examples").join(name);
    assert!(
        p.exists(),
        "example {} is not built; run the tests with `cargo test --workspace`",
        p.display()
    );
    p
}

pub fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("run a command")
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `idleflow report --format json` of `rec`.
pub fn report_json(rec: &Path) -> Value {
    let out = run(idleflow().arg("report").arg(rec).args(["--format", "json"]));
    assert!(out.status.success(), "report failed: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).expect("report JSON parses")
}

pub fn u(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("field {key} missing or not a number in {v}"))
}

pub fn f(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("field {key} missing or not a number in {v}"))
}

/// The `cycles` each dutycycle thread printed, by CPU.
pub fn cycles_by_cpu(stdout: &str) -> Vec<(i64, u64)> {
    stdout
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w.first() == Some(&"thread")).then(|| (w[3].parse().unwrap(), w[5].parse().unwrap()))
        })
        .collect()
}
