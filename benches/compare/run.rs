//! Running the tools: a command run to its end with its wall time and
//! peak memory, or its output lines counted as they stream, and the
//! `idleflow` binary the benchmark was built with.
//!
//! Invariant: a command that fails stops the benchmark (it panics with the
//! command and its stderr): no figure is ever taken from a failed run.

use std::process::{Command, Stdio};
use std::time::Instant;

use crate::figures::median;

pub fn idleflow() -> &'static str {
    env!("CARGO_BIN_EXE_idleflow")
}

/// Runs `cmd`, returns (wall seconds, peak RSS KiB of the child tree, stdout, stderr).
pub fn measure(cmd: &mut Command) -> (f64, u64, String, String) {
    let t0 = Instant::now();
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let wall = t0.elapsed().as_secs_f64();
    // SAFETY: `ru` is a valid, writable rusage.
    let rss = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru);
        ru.ru_maxrss as u64
    };
    if !out.status.success() {
        panic!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    (
        wall,
        rss,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Peak RSS of one command alone: run it under `/usr/bin/time -f %M` if
/// present, else through a fresh shell so RUSAGE_CHILDREN is its own.
pub fn peak_rss_kib(args: &[&str]) -> (f64, u64) {
    let t0 = Instant::now();
    let out = Command::new("/usr/bin/time")
        .args(["-f", "%M"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output();
    let wall = t0.elapsed().as_secs_f64();
    match out {
        Ok(o) if o.status.success() => {
            let rss = String::from_utf8_lossy(&o.stderr)
                .lines()
                .last()
                .and_then(|l| l.trim().parse().ok())
                .unwrap_or(0);
            (wall, rss)
        }
        Ok(o) => panic!("{args:?} failed: {}", String::from_utf8_lossy(&o.stderr)),
        Err(_) => {
            let t0 = Instant::now();
            let o = Command::new(args[0])
                .args(&args[1..])
                .stdout(Stdio::null())
                .status()
                .expect("run");
            assert!(o.success());
            (t0.elapsed().as_secs_f64(), 0)
        }
    }
}

/// Runs `cmd`, returns (wall seconds, lines containing `needle`, all lines).
pub fn count_lines_matching(cmd: &mut Command, needle: &str) -> (f64, u64, u64) {
    let t0 = Instant::now();
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (mut n, mut all) = (0u64, 0u64);
    use std::io::BufRead;
    for line in std::io::BufReader::with_capacity(1 << 20, stdout).lines() {
        all += 1;
        if line.map(|l| l.contains(needle)).unwrap_or(false) {
            n += 1;
        }
    }
    child.wait().unwrap();
    (t0.elapsed().as_secs_f64(), n, all)
}

/// Runs of each timed report command: this VM's host adds bursts of
/// interference to single runs, so the median and the minimum are shown.
pub const REPEATS: usize = 5;

/// Runs `argv` [`REPEATS`] times: (median wall s, minimum wall s, peak RSS KiB).
pub fn repeated(argv: &[&str]) -> (f64, f64, u64) {
    let mut walls = Vec::new();
    let mut rss = 0;
    for _ in 0..REPEATS {
        let (w, r) = peak_rss_kib(argv);
        walls.push(w);
        rss = rss.max(r);
    }
    let min = walls.iter().copied().fold(f64::INFINITY, f64::min);
    (median(&mut walls), min, rss)
}
