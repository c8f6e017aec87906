//! End to end: `idleflow export` read back by the real consumers — pprof
//! profiles by `go tool pprof` (Debian's `golang-go`) — which must show the
//! same top paths and shares as `idleflow report`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::*;
use serde_json::Value;

/// One recording of the native chain example (DWARF lines, no frame
/// pointers) shared by the tests, with its default JSON report.
fn chain_recording() -> &'static (PathBuf, Value) {
    static REC: OnceLock<(PathBuf, Value)> = OnceLock::new();
    REC.get_or_init(|| {
        let _m = machine().expect("recording needs root");
        let dir = tempfile::tempdir().unwrap().keep();
        let bin = build_c_example(
            &dir,
            "chain.c",
            "chain",
            &["-O2", "-fomit-frame-pointer", "-pthread", "-g"],
        );
        let rec = dir.join("chain.idleflow");
        let out = run(idleflow()
            .args(["record", "-q", "-o"])
            .arg(&rec)
            .arg("--")
            .arg(&bin)
            .arg("1500"));
        assert!(out.status.success(), "{}", stderr(&out));
        let out = run(idleflow()
            .arg("report")
            .arg(&rec)
            .args(["--format", "json"]));
        assert!(out.status.success(), "{}", stderr(&out));
        (rec, serde_json::from_slice(&out.stdout).unwrap())
    })
}

/// `go tool pprof ARGS PROFILE`, its standard output.
fn pprof(args: &[&str], profile: &Path) -> String {
    let out = Command::new("go")
        .args(["tool", "pprof"])
        .args(args)
        .arg(profile)
        .env("HOME", std::env::temp_dir())
        .output()
        .expect("go (Debian's golang-go; .ci/run installs it)");
    assert!(
        out.status.success(),
        "go tool pprof {args:?}: {}",
        stderr(&out)
    );
    stdout(&out)
}

/// The frame names of a report path, innermost first, as pprof names them.
fn pprof_names(path: &Value) -> Vec<String> {
    path["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let name = f["name"].as_str().unwrap();
            if f["kind"] == "kernel" {
                format!("{name} [kernel]")
            } else {
                name.to_string()
            }
        })
        .collect()
}

/// `go tool pprof -traces -unit=ns` as (value ns, labels, frames innermost
/// first), largest first. A sample reads:
/// ```text
///     reason:  pipe read
/// 767699396ns   anon_pipe_read [kernel]
///              vfs_read [kernel]
/// ```
fn traces(text: &str) -> Vec<(u64, Vec<String>, Vec<String>)> {
    let mut out = Vec::new();
    for block in text.split("-----------+-").skip(1) {
        let mut value = None;
        let (mut labels, mut frames) = (Vec::new(), Vec::new());
        for line in block.lines().map(str::trim).filter(|l| !l.is_empty()) {
            if line.starts_with('-') {
                continue;
            }
            let (first, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
            match first.strip_suffix("ns").map(str::parse::<u64>) {
                Some(Ok(ns)) if value.is_none() => {
                    value = Some(ns);
                    frames.push(rest.trim().to_string());
                }
                _ if value.is_some() => frames.push(line.to_string()),
                _ => labels.push(format!("{first} {}", rest.trim())),
            }
        }
        if let Some(v) = value {
            out.push((v, labels, frames));
        }
    }
    out.sort_by_key(|s| std::cmp::Reverse(s.0));
    out
}

#[test]
fn pprof_export_reads_in_go_tool_pprof_with_the_reports_top_paths_and_shares() {
    let (rec, report) = chain_recording();
    let dir = tempfile::tempdir().unwrap();
    let pb = dir.path().join("idle.pb.gz");
    let out = run(idleflow()
        .args(["export", "--format", "pprof", "-o"])
        .arg(&pb)
        .arg(rec));
    assert!(out.status.success(), "{}", stderr(&out));
    // pprof leaves out samples of no idle (a thread that left a CPU idle
    // for less than the clock's resolution, or at the recording's end).
    let paths: Vec<&Value> = report["idle_paths"]["paths"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| u(p, "idle_ns") > 0)
        .collect();
    let explained = u(&report["idle_paths"], "explained_ns");
    // -traces: one sample per path, the largest the report's top path,
    // frame for frame, with its idle and labels.
    let text = pprof(&["-traces", "-unit=ns"], &pb);
    let samples = traces(&text);
    assert_eq!(samples.len(), paths.len(), "{text}");
    let (ns, labels, frames) = &samples[0];
    let top = paths[0];
    assert_eq!(*ns, u(top, "idle_ns"), "{text}");
    assert_eq!(*frames, pprof_names(top), "{text}");
    let has = |l: &str| labels.iter().any(|x| x == l);
    assert!(has("reason: pipe read"), "{labels:?}");
    assert!(has("thread: worker"), "{labels:?}");
    let total: u64 = samples.iter().map(|s| s.0).sum();
    assert_eq!(total, explained, "the samples add up to the paths' idle");
    // -top: the program's frame of the top path carries (at least) its share
    // of the paths' idle, as pprof computes it.
    let program = top["frames"][top["program_frame"].as_u64().unwrap() as usize]["name"]
        .as_str()
        .unwrap();
    assert_eq!(program, "fill_buffer", "{top}");
    let text = pprof(&["-top", "-cum", "-nodecount=50"], &pb);
    let row = text
        .lines()
        .find(|l| l.split_whitespace().last() == Some(program))
        .unwrap_or_else(|| panic!("{program} in -top:\n{text}"));
    let cum_pct: f64 = row
        .split_whitespace()
        .nth(4)
        .unwrap()
        .trim_end_matches('%')
        .parse()
        .unwrap();
    let share_of_paths = 100.0 * u(top, "idle_ns") as f64 / explained as f64;
    assert!(
        cum_pct + 0.5 >= share_of_paths && share_of_paths > 80.0,
        "{program}: {cum_pct} % cumulative in pprof, {share_of_paths:.1} % of the paths' idle in the report\n{text}"
    );
    // The file and line of the program's frame (DWARF) reach pprof.
    let list = pprof(&["-list", "^fill_buffer$"], &pb);
    assert!(list.contains("chain.c"), "{list}");
}
