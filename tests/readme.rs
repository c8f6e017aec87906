//! The README as a newcomer reads it: within its first 40 lines what
//! idleflow is and the two commands (set up and run the main job; run all
//! tests), the test command being exactly what `.ci/run` runs; and its
//! example report is what `report` prints today on the recording it shows
//! (`examples/readme.sh` regenerates it).

mod common;

use std::path::Path;

use common::{idleflow, run, stderr, stdout};

fn readme() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap()
}

#[test]
fn the_two_commands_and_what_a_machine_needs_come_within_the_first_40_lines() {
    let text = readme();
    let first: Vec<&str> = text.lines().take(40).collect();
    let has = |prefix: &str| first.iter().any(|l| l.starts_with(prefix));
    assert!(has("bash examples/run.sh "), "{first:#?}");
    assert!(has("cargo test --workspace --profile tests "), "{first:#?}");
    assert!(
        first
            .iter()
            .any(|l| l.contains("root") && l.contains("OpenJDK 17")),
        "what a machine needs: {first:#?}"
    );
    // What idleflow is comes first, in at most 10 lines of prose.
    let before_commands = first
        .iter()
        .take_while(|l| !l.starts_with("## "))
        .filter(|l| !l.trim().is_empty())
        .count();
    assert!(
        before_commands <= 10,
        "{before_commands} lines before the commands"
    );
    // CI runs exactly the README's test command.
    let ci =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/run")).unwrap();
    assert!(
        ci.lines().any(|l| l
            .trim_start()
            .starts_with("cargo test --workspace --profile tests ")
            || l.trim() == "cargo test --workspace --profile tests"),
        ".ci/run does not run the README's test command"
    );
}

#[test]
fn the_readmes_example_report_is_what_report_prints_today() {
    let text = readme();
    let lines: Vec<&str> = text.lines().collect();
    let mut blocks = 0;
    for (i, line) in lines.iter().enumerate() {
        let Some(spec) = line
            .strip_prefix("<!-- examples/readme.sh: report ")
            .and_then(|s| s.strip_suffix(" -->"))
        else {
            continue;
        };
        let (rec, n) = spec.split_once(" | head -").expect("REC | head -N");
        let n: usize = n.parse().unwrap();
        let command = lines[i..]
            .iter()
            .position(|l| l.starts_with("$ ") && l.contains(" report "))
            .expect("the block's report command")
            + i;
        let shown: Vec<&str> = lines[command + 1..]
            .iter()
            .take_while(|l| **l != "```")
            .copied()
            .collect();
        // As the script runs it: from the repository, the path as written.
        let out = run(idleflow()
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args(["report", rec])
            .env("COLUMNS", "120"));
        assert!(out.status.success(), "{}", stderr(&out));
        let report = stdout(&out);
        let now: Vec<&str> = report.lines().take(n).collect();
        assert_eq!(
            shown, now,
            "the README's example drifted from the code: run `bash examples/readme.sh`"
        );
        // What the README says around it holds for the recording: it leads
        // with the program's own sleep under the lock, then the monitor
        // wait for that lock.
        assert!(
            now[1].contains("sleep") && now[1].contains("LockedIo.fetch"),
            "{}",
            now[1]
        );
        assert!(
            now[2].contains("monitor enter") && now[2].contains("LockedIo.process"),
            "{}",
            now[2]
        );
        blocks += 1;
    }
    assert!(blocks >= 1, "no generated example in the README");
}
