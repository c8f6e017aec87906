//! End to end: `idleflow diff` of real recordings of one program, once with
//! one method made slower: the diff names that path first, beyond noise;
//! two runs of the unchanged program show no such change; the differential
//! flame graph draws the grown path red.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

/// `examples/c/stages.c` recorded for 2 s with flush_log sleeping `flush_us`.
fn record_stages(dir: &Path, bin: &Path, name: &str, flush_us: u32) -> PathBuf {
    let rec = dir.join(format!("{name}.idleflow"));
    let out = run(idleflow()
        .args(["record", "-q", "-o"])
        .arg(&rec)
        .arg("--")
        .arg(bin)
        .args(["2", &flush_us.to_string()]));
    assert!(out.status.success(), "{}", stderr(&out));
    rec
}

fn diff_json(base: &Path, new: &Path, extra: &[&str]) -> Value {
    let out = run(idleflow()
        .arg("diff")
        .arg(base)
        .arg(new)
        .args(["--format", "json"])
        .args(extra));
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn program_frame(c: &Value) -> &str {
    c["frames"][c["program_frame"].as_u64().unwrap() as usize]["name"]
        .as_str()
        .unwrap()
}

#[test]
fn a_slower_method_is_the_first_change_and_an_unchanged_run_shows_none() {
    let Some(_m) = machine() else { return };
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c_example(dir.path(), "stages.c", "stages", &["-O2", "-pthread", "-g"]);
    let base = record_stages(dir.path(), &bin, "base", 300);
    let slower = record_stages(dir.path(), &bin, "slower", 900);
    let same = record_stages(dir.path(), &bin, "same", 300);

    let d = diff_json(&base, &slower, &[]);
    let changes = d["changes"].as_array().unwrap();
    assert!(!changes.is_empty(), "{d}");
    let first = &changes[0];
    assert_eq!(program_frame(first), "flush_log", "{first}");
    assert_eq!(first["threads"][0], "flusher", "{first}");
    let change = f(first, "change_pts");
    let (lo, hi) = (
        first["interval_pts"][0].as_f64().unwrap(),
        first["interval_pts"][1].as_f64().unwrap(),
    );
    assert!(
        change >= 1.0 && lo > 0.0 && lo <= change && change <= hi,
        "{first}"
    );
    assert!(
        u(&first["new"], "idle_per_s_ns") > u(&first["base"], "idle_per_s_ns") * 11 / 10,
        "flush_log's idle per second grew: {first}"
    );
    assert!(f(first, "confidence_pct") > 99.0, "{first}");
    // Every path of either run is listed once.
    let listed = changes.len() + d["within_noise"].as_array().unwrap().len();
    assert!(listed >= 2, "{d}");

    // The unchanged program: nothing moved by 2 points beyond noise.
    let d = diff_json(&base, &same, &["--min-change", "2"]);
    assert_eq!(d["changes"].as_array().unwrap().len(), 0, "{d}");

    // The text leads with the change.
    let out = run(idleflow().arg("diff").arg(&base).arg(&slower));
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert_fits_120_columns(&text);
    let first_change = text
        .lines()
        .find(|l| l.starts_with(" +") || l.starts_with(" -"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(first_change.starts_with(" +"), "{text}");
    assert!(text.contains("flusher in flush_log:"), "{text}");

    // The differential flame graph: flush_log's wait is red (it grew).
    let svg = dir.path().join("diff.svg");
    let out = run(idleflow()
        .arg("diff")
        .arg(&base)
        .arg(&slower)
        .arg("--svg")
        .arg("-o")
        .arg(&svg));
    assert!(out.status.success(), "{}", stderr(&out));
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.contains("<title>flush_log ("), "flush_log drawn");
    let grown = svg
        .split("<g>")
        .filter(|g| g.contains("do_nanosleep ("))
        .find(|g| g.contains("; +"))
        .unwrap_or_else(|| panic!("a grown do_nanosleep leaf"));
    assert!(grown.contains("fill=\"rgb(255,"), "red: {grown}");
}

#[test]
fn diff_refuses_bad_input_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let bogus = dir.path().join("bogus.idleflow");
    std::fs::write(&bogus, b"not a recording").unwrap();
    let out = run(idleflow().arg("diff").arg(&bogus).arg(&bogus));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("bogus.idleflow: not an idleflow recording"),
        "{}",
        stderr(&out)
    );
    let out = run(idleflow()
        .arg("diff")
        .arg(&bogus)
        .arg(&bogus)
        .args(["--min-change", "-3"]));
    assert_ne!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = run(idleflow().arg("diff").arg(&bogus));
    assert_eq!(
        out.status.code(),
        Some(2),
        "a missing argument is a usage error"
    );
}

/// A Java program recorded without its Java frames (`--no-agent`) and in
/// the default mode: `diff` says before any change that the runs were
/// recorded in different modes (text and JSON), and says nothing of modes
/// for two runs recorded alike.
#[test]
fn runs_recorded_in_different_modes_are_said_to_be_so() {
    let Some(_m) = machine() else { return };
    let classes = java_examples();
    let dir = tempfile::tempdir().unwrap();
    let record = |name: &str, options: &[&str]| {
        let rec = dir.path().join(format!("{name}.idleflow"));
        record_java_with(&rec, classes.path(), options, &["LockedIo", "4", "1"]);
        rec
    };
    let bare = record("bare", &["--no-agent"]);
    let default = record("default", &[]);
    let d = diff_json(&bare, &default, &[]);
    let modes = &d["modes_differ"];
    assert!(
        modes["base"]
            .as_str()
            .unwrap()
            .starts_with("no Java frames"),
        "{modes}"
    );
    assert!(
        modes["new"]
            .as_str()
            .unwrap()
            .starts_with("Java frames from the JVMs' own structures"),
        "{modes}"
    );
    let out = run(idleflow().arg("diff").arg(&bare).arg(&default));
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let note = text
        .lines()
        .position(|l| l.starts_with("# NOTE: the runs were recorded in different modes"))
        .expect(&text);
    assert!(note <= 2, "the note comes before the changes:\n{text}");
    // Two runs recorded alike: no word of modes.
    let again = diff_json(&default, &default, &[]);
    assert!(again.get("modes_differ").is_none(), "{again}");
}
