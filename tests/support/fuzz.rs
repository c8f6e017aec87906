//! Runs one cargo-fuzz target (nightly toolchain) for a bounded time from a
//! seed corpus and fails the test on a crash, with the crash's own lines.
//! Shared by the fuzz tests of `postproc` and `tracer/jfr` (included with
//! `#[path]`). `IDLEFLOW_FUZZ_SECONDS` sets the time (default 60).

use std::path::Path;
use std::process::Command;

/// Fuzzes `target` of `crate_dir/fuzz` from `corpus` with libFuzzer's
/// `limits` (e.g. `-max_len=…`), and asserts it found no crash and ran more
/// than `min_runs` inputs.
pub fn run_fuzz_target(
    crate_dir: &Path,
    target: &str,
    corpus: &Path,
    limits: &[String],
    min_runs: u64,
) {
    let have = Command::new("cargo")
        .args(["+nightly", "fuzz", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        let why = "cargo-fuzz on the nightly toolchain is needed (`cargo install cargo-fuzz`; .ci/run installs it)";
        if std::env::var_os("IDLEFLOW_ALLOW_SKIP").is_some() {
            eprintln!("SKIPPED: {why}");
            return;
        }
        panic!("{why}; or set IDLEFLOW_ALLOW_SKIP=1 to skip knowingly");
    }
    let artifacts = tempfile::tempdir().unwrap();
    let seconds = std::env::var("IDLEFLOW_FUZZ_SECONDS").unwrap_or_else(|_| "60".into());
    let out = Command::new("cargo")
        .current_dir(crate_dir)
        .args(["+nightly", "fuzz", "run", "--fuzz-dir"])
        .arg(crate_dir.join("fuzz"))
        // One target directory for every fuzz target of the workspace:
        // libFuzzer and the crates they share are built once.
        .arg("--target-dir")
        .arg(Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz"))
        .arg(target)
        .arg(corpus)
        .arg("--")
        .arg(format!("-max_total_time={seconds}"))
        .arg(format!("-artifact_prefix={}/", artifacts.path().display()))
        .args(limits)
        .output()
        .expect("run cargo fuzz");
    let err = String::from_utf8_lossy(&out.stderr);
    // libFuzzer's closing line: "#RUNS DONE cov: … exec/s: …".
    let done = err.lines().rev().find(|l| l.contains("DONE")).unwrap_or("");
    println!("fuzz {target} ({seconds} s): {done}");
    // The crash's own lines (the panic message, the sanitizer's summary)
    // and the end of the log.
    let cause: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("panicked") || l.contains("ERROR") || l.contains("SUMMARY"))
        .collect();
    assert!(
        out.status.success(),
        "the fuzz target {target} found a crash:\n{}\n…\n{}",
        cause.join("\n"),
        err.lines().rev().take(40).collect::<Vec<_>>().join("\n")
    );
    let runs: u64 = done
        .split_whitespace()
        .next()
        .and_then(|w| w.trim_start_matches('#').parse().ok())
        .unwrap_or(0);
    assert!(runs > min_runs, "the fuzzer ran only {runs} inputs: {done}");
}
