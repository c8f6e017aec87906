//! `--help` as a newcomer reads it: every command's examples come one
//! command a line, as written, at 80 and at 120 columns, no help line is
//! wider than the terminal, and the examples that need no root run as
//! shown on real recordings (`tests/golden/recordings/`).

mod common;

use std::path::Path;

use common::{idleflow, run, stderr, stdout};

/// The commands whose help has examples (`""`: idleflow's own).
const COMMANDS: &[&str] = &[
    "",
    "record",
    "report",
    "script",
    "flamegraph",
    "export",
    "diff",
    "history",
    "trigger",
];

/// `idleflow CMD --help` at `columns`.
fn help(cmd: &str, columns: usize) -> String {
    let mut c = idleflow();
    if !cmd.is_empty() {
        c.arg(cmd);
    }
    let out = run(c.arg("--help").env("COLUMNS", columns.to_string()));
    assert!(out.status.success(), "{cmd} --help: {}", stderr(&out));
    stdout(&out)
}

/// The lines after `Examples:`, each a whole command, without the indent.
fn examples(text: &str) -> Vec<String> {
    let Some((_, after)) = text.split_once("\nExamples:\n") else {
        return Vec::new();
    };
    after
        .lines()
        .take_while(|l| l.starts_with("  "))
        .map(|l| l.trim().to_string())
        .collect()
}

#[test]
fn every_commands_examples_are_one_command_a_line_at_80_and_120_columns() {
    for &cmd in COMMANDS {
        let wide = help(cmd, 120);
        let want = examples(&wide);
        assert!(want.len() >= 2, "`{cmd} --help` has examples: {wide}");
        for columns in [80, 120] {
            let text = help(cmd, columns);
            assert_eq!(examples(&text), want, "{cmd} at {columns} columns:\n{text}");
            for line in text.lines() {
                assert!(
                    line.chars().count() <= columns,
                    "`{cmd} --help` at {columns} columns: {line:?}"
                );
            }
        }
        for e in &want {
            let first = e.split_whitespace().next().unwrap_or("");
            assert!(
                ["idleflow", "sudo", "go"].contains(&first),
                "`{cmd} --help`: an example line that is not a command: {e:?}"
            );
        }
    }
}

#[test]
fn the_examples_that_need_no_root_run_as_shown() {
    let rec = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/recordings");
    let dir = tempfile::tempdir().unwrap();
    for (name, file) in [
        ("run.idleflow", "chain.idleflow"),
        ("new.idleflow", "stages-slower.idleflow"),
        ("base.idleflow", "stages-base.idleflow"),
    ] {
        std::os::unix::fs::symlink(rec.join(file), dir.path().join(name)).unwrap();
    }
    let history = dir.path().join("history.sqlite");
    let mut ran = 0;
    for &cmd in COMMANDS {
        for e in examples(&help(cmd, 120)) {
            // The idleflow part of a pipe: what follows `|` is the shell's.
            let command = e.split("  #").next().unwrap().split(" | ").next().unwrap();
            let words: Vec<&str> = command.split_whitespace().collect();
            // Recording needs root; `show 7` needs seven runs; go is pprof's
            // own test; `trigger` needs a flight recorder running (tests/flight.rs).
            if words[0] != "idleflow" || words.contains(&"show") || words[1] == "trigger" {
                continue;
            }
            let out = run(idleflow()
                .args(&words[1..])
                .current_dir(dir.path())
                .env("IDLEFLOW_HISTORY", &history));
            // `history check` exits 1 when a path rose: an answer, not an error.
            let ok =
                out.status.success() || (words.contains(&"check") && out.status.code() == Some(1));
            assert!(ok, "`{e}` failed: {}", stderr(&out));
            ran += 1;
        }
    }
    assert!(ran >= 10, "ran {ran} examples");
}
