//! Every output, byte for byte: the post-processor's outputs of a fixed set
//! of recordings (`tests/golden/recordings/`, made once by
//! `tests/golden/record.sh`) must stay what they were when they were blessed
//! (`tests/golden/expected/`). Restructuring the post-processor must not
//! change anything a user sees; a change that means to (a bug fixed, a new
//! column) re-blesses and says so in its commit:
//!
//! ```text
//! IDLEFLOW_BLESS=1 cargo test --release --test golden
//! ```
//!
//! Each output is made twice and must be the same both times (determinism),
//! then compared with the blessed file. The recordings are self-contained
//! (stacks resolved when they were made), so no test here records or needs
//! root. Each command runs in a fresh temporary folder where `rec` links to
//! the recordings, and names files relative to it, so that no output
//! depends on where the repository is (a path's length changes where the
//! text wraps); the time a run was kept in a history is written as `{now}`.
//!
//! `IDLEFLOW_GOLDEN_BIN=PATH` runs another build instead of this one (to
//! bless with the build from before a change, or to see what an older one
//! made).

mod common;

use std::path::{Path, PathBuf};

use common::{assert_one_screen, idleflow, run, stderr, stdout};

/// One output: its file name under `expected/`, and the command that makes
/// it, run in a fresh temporary folder: `{rec}` is the recordings' folder
/// (`rec`, a link), `{out}` a file (`out`): when a command names `{out}`,
/// that file is the output, else standard output is.
const CASES: &[(&str, &str)] = &[
    // Native user stacks unwound by CFI, the kernel's wait under them.
    ("chain.report.txt", "report {rec}/chain.idleflow"),
    ("chain.report-all.txt", "report {rec}/chain.idleflow --view all --per-cpu --threads 20 --paths 10"),
    ("chain.report.json", "report {rec}/chain.idleflow -f json --view all"),
    ("chain.svg", "flamegraph {rec}/chain.idleflow -o {out}"),
    ("chain.folded", "flamegraph {rec}/chain.idleflow --folded -o {out}"),
    ("chain.user.folded", "flamegraph {rec}/chain.idleflow --folded --view user -o {out}"),
    ("chain.user-only.folded", "flamegraph {rec}/chain.idleflow --folded --stacks --user-only --weight dispatches -o {out}"),
    ("chain.kernel.folded", "flamegraph {rec}/chain.idleflow --folded --view kernel -o {out}"),
    ("chain.script.txt", "script {rec}/chain.idleflow"),
    ("chain.pb.gz", "export {rec}/chain.idleflow -f pprof -o {out}"),
    // Blame chains: the root causes, the blame flame graph.
    ("holders.report.txt", "report {rec}/holders.idleflow"),
    ("holders.report-all.txt", "report {rec}/holders.idleflow --view all --per-cpu --threads --causes 10"),
    ("holders.report.json", "report {rec}/holders.idleflow -f json --view all"),
    ("holders.window.txt", "report {rec}/holders.idleflow --from 0.5 --to 1.5"),
    ("holders.window.json", "report {rec}/holders.idleflow -f json --from 0.5 --to 1.5"),
    ("holders.html", "report {rec}/holders.idleflow -f html -o {out}"),
    ("holders.svg", "flamegraph {rec}/holders.idleflow -o {out}"),
    ("holders.blame.svg", "flamegraph {rec}/holders.idleflow --blame -o {out}"),
    ("holders.blame.folded", "flamegraph {rec}/holders.idleflow --blame --folded -o {out}"),
    ("holders.per-thread.folded", "flamegraph {rec}/holders.idleflow --folded --per-thread -o {out}"),
    ("holders.by-reason.folded", "flamegraph {rec}/holders.idleflow --folded --by-reason -o {out}"),
    ("holders.pb.gz", "export {rec}/holders.idleflow -f pprof -o {out}"),
    ("holders.pftrace", "export {rec}/holders.idleflow -f perfetto -o {out}"),
    ("holders.roots.csv", "export {rec}/holders.idleflow -f csv -o {out}"),
    // Every blocking switch-out's stack: the blocking view.
    ("holders-waits.report.txt", "report {rec}/holders-waits.idleflow --view blocking"),
    ("holders-waits.report.json", "report {rec}/holders-waits.idleflow -f json --view all"),
    ("holders-waits.blocked.folded", "flamegraph {rec}/holders-waits.idleflow --blocked --folded -o {out}"),
    ("holders-waits.blocked-n.folded", "flamegraph {rec}/holders-waits.idleflow --blocked --folded --weight dispatches -o {out}"),
    ("holders-waits.blame.folded", "flamegraph {rec}/holders-waits.idleflow --blame --folded -o {out}"),
    // Java, the default mode: flight-recorder waits and switch-out stacks.
    ("waits.report.txt", "report {rec}/waits.idleflow"),
    ("waits.report-all.txt", "report {rec}/waits.idleflow --view all --per-cpu --threads 20"),
    ("waits.report.json", "report {rec}/waits.idleflow -f json --view all"),
    ("waits.startup.txt", "report {rec}/waits.idleflow --skip-startup"),
    ("waits.html", "report {rec}/waits.idleflow -f html -o {out}"),
    ("waits.svg", "flamegraph {rec}/waits.idleflow -o {out}"),
    ("waits.folded", "flamegraph {rec}/waits.idleflow --folded -o {out}"),
    ("waits.java.folded", "flamegraph {rec}/waits.idleflow --folded --view java -o {out}"),
    ("waits.java-by-reason.folded", "flamegraph {rec}/waits.idleflow --folded --view java --by-reason -o {out}"),
    ("waits.by-reason.folded", "flamegraph {rec}/waits.idleflow --folded --by-reason --weight dispatches -o {out}"),
    ("waits.blame.folded", "flamegraph {rec}/waits.idleflow --blame --folded -o {out}"),
    ("waits.pb.gz", "export {rec}/waits.idleflow -f pprof -o {out}"),
    ("waits.pftrace", "export {rec}/waits.idleflow -f perfetto -o {out}"),
    // Java, the entry/exit agent's arcflow tree.
    ("tree.report.txt", "report {rec}/tree.idleflow --view tree"),
    ("tree.report-per-thread.txt", "report {rec}/tree.idleflow --view tree --per-thread --sort calls --min-share 0.5"),
    ("tree.report-base.txt", "report {rec}/tree.idleflow --view tree --sort base"),
    ("tree.report.json", "report {rec}/tree.idleflow -f json --view all"),
    ("tree.svg", "flamegraph {rec}/tree.idleflow -o {out}"),
    ("tree.tree.folded", "flamegraph {rec}/tree.idleflow --folded --view tree -o {out}"),
    ("tree.tree-n.folded", "flamegraph {rec}/tree.idleflow --folded --view tree --weight dispatches -o {out}"),
    ("tree.html", "report {rec}/tree.idleflow -f html --view tree -o {out}"),
    // Two runs compared.
    ("stages.report.txt", "report {rec}/stages-slower.idleflow"),
    ("stages.diff.txt", "diff {rec}/stages-base.idleflow {rec}/stages-slower.idleflow"),
    ("stages.diff.json", "diff {rec}/stages-base.idleflow {rec}/stages-slower.idleflow -f json"),
    ("stages.diff.svg", "diff {rec}/stages-base.idleflow {rec}/stages-slower.idleflow --svg -o {out}"),
    // The history: two runs kept, a third checked against them.
    (
        "stages.history.txt",
        "history add {rec}/stages-base.idleflow --job golden --history h.sqlite \
         && history add {rec}/stages-base.idleflow --job golden --history h.sqlite \
         && history list --history h.sqlite \
         && history show 1 --history h.sqlite \
         && history list -f json --history h.sqlite \
         && history show 2 -f json --history h.sqlite \
         && history check {rec}/stages-slower.idleflow --job golden --history h.sqlite \
         && history check {rec}/stages-slower.idleflow --job golden -f json --history h.sqlite",
    ),
];

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// The JSON field of the wall-clock time a run was added to a history.
const ADDED: &str = "\"added_unix_ns\": ";

/// Runs one case's commands (`&&`-separated) and returns what it made:
/// the `{out}` file, or standard output with each command's exit status.
fn make(args: &str) -> Vec<u8> {
    let tmp = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(golden_dir().join("recordings"), tmp.path().join("rec")).unwrap();
    let mut made = Vec::new();
    for command in args.split(" && ") {
        let words: Vec<String> = command
            .split_whitespace()
            .map(|w| w.replace("{rec}", "rec").replace("{out}", "out"))
            .collect();
        let mut cmd = match std::env::var_os("IDLEFLOW_GOLDEN_BIN") {
            Some(bin) => std::process::Command::new(bin),
            None => idleflow(),
        };
        let o = run(cmd
            .args(&words)
            .current_dir(tmp.path())
            .env_remove("IDLEFLOW_HISTORY"));
        let code = o.status.code().unwrap_or(-1);
        // `history check` exits 1 when a path rose: part of the output.
        assert!(
            code == 0 || (code == 1 && words[0] == "history"),
            "idleflow {command}: exit {code}: {}",
            stderr(&o)
        );
        if command.contains("{out}") {
            made = std::fs::read(tmp.path().join("out")).unwrap();
        } else {
            made.extend_from_slice(format!("$ idleflow {command} (exit {code})\n").as_bytes());
            made.extend_from_slice(&o.stdout);
        }
    }
    // The time a run was kept in the history differs between runs.
    // (Binary outputs are compared as they are.)
    let Ok(text) = std::str::from_utf8(&made) else {
        return made;
    };
    if text.contains(ADDED) {
        made = text
            .split_inclusive('\n')
            .map(|l| match l.find(ADDED) {
                Some(i) => {
                    let rest =
                        l[i + ADDED.len()..].trim_start_matches(|c: char| c.is_ascii_digit());
                    format!("{}{ADDED}{{now}}{rest}", &l[..i])
                }
                None => l.to_string(),
            })
            .collect::<String>()
            .into_bytes();
    }
    made
}

/// The first line where two outputs part, for the failure message.
fn first_difference(a: &[u8], b: &[u8]) -> String {
    let (a, b) = (String::from_utf8_lossy(a), String::from_utf8_lossy(b));
    match a
        .lines()
        .zip(b.lines())
        .enumerate()
        .find(|(_, (x, y))| x != y)
    {
        Some((i, (x, y))) => format!("line {}:\n  blessed: {x:.300}\n  now:     {y:.300}", i + 1),
        None => format!(
            "lengths differ: {} vs {} lines",
            a.lines().count(),
            b.lines().count()
        ),
    }
}

#[test]
fn every_output_is_what_was_blessed() {
    let bless = std::env::var_os("IDLEFLOW_BLESS").is_some();
    let expected_dir = golden_dir().join("expected");
    let mut failed = Vec::new();
    for (name, args) in CASES {
        let first = make(args);
        let second = make(args);
        assert!(
            first == second,
            "{name}: two runs of `idleflow {args}` differ ({})",
            first_difference(&first, &second)
        );
        let path = expected_dir.join(name);
        if bless {
            std::fs::create_dir_all(&expected_dir).unwrap();
            std::fs::write(&path, &first).unwrap();
            continue;
        }
        let blessed = std::fs::read(&path)
            .unwrap_or_else(|e| panic!("{}: {e}; bless with IDLEFLOW_BLESS=1", path.display()));
        if blessed != first {
            failed.push(format!(
                "{name} (`idleflow {args}`): {}",
                first_difference(&blessed, &first)
            ));
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} outputs changed (re-bless with IDLEFLOW_BLESS=1 only when the change is meant):\n{}",
        failed.len(),
        CASES.len(),
        failed.join("\n")
    );
    // Every blessed file is made by a case (none left over from a removed case).
    if !bless {
        for entry in std::fs::read_dir(&expected_dir).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            assert!(
                CASES.iter().any(|(n, _)| *n == name),
                "tests/golden/expected/{name} is made by no case"
            );
        }
    }
}

#[test]
fn every_recordings_default_report_is_one_screen() {
    let dir = golden_dir().join("recordings");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "idleflow") {
            continue;
        }
        let out = run(idleflow().arg("report").arg(&path));
        assert!(out.status.success(), "{}: {}", path.display(), stderr(&out));
        let text = stdout(&out);
        println!("{}: {} lines", path.display(), text.lines().count());
        assert_one_screen(&text);
        n += 1;
    }
    assert!(n >= 7, "{n} recordings");
}
