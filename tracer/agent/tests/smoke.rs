//! End to end: load the real `libidleflow_agent.so` into a real JVM running a
//! tiny program, and check what the smoke hooks report at VM death.
//!
//! This test builds nothing itself. `cargo test -p idleflow-agent` compiles
//! the library with both crate types before running it, but leaves the
//! cdylib in `target/debug/deps/`: only `cargo build` copies it up to
//! `target/debug/`. So we take the newer of the two (under
//! `$CARGO_TARGET_DIR` when that is set); relying on `target/debug/` alone
//! would test a stale library after an edit, or fail on a fresh clone.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const JDK17: &str = "/usr/lib/jvm/java-17-openjdk-amd64";
const JDK25: &str = "/usr/lib/jvm/temurin-25-jdk-amd64";

/// Calls `tick` exactly N times (N = first argument, default 1000).
const MAIN_JAVA: &str = r#"
public class Main {
    static long sum;

    static void tick(int i) {
        sum += i;
    }

    public static void main(String[] args) {
        int n = args.length > 0 ? Integer.parseInt(args[0]) : 1000;
        for (int i = 0; i < n; i++) {
            tick(i);
        }
        System.out.println("sum=" + sum);
    }
}
"#;

fn agent_library() -> PathBuf {
    let target = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"),
    };
    let candidates = [
        target.join("debug/deps/libidleflow_agent.so"),
        target.join("debug/libidleflow_agent.so"),
    ];
    let newest = candidates
        .iter()
        .filter_map(|path| {
            let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok()?;
            Some((modified, path))
        })
        .max_by_key(|(modified, _)| *modified);
    match newest {
        Some((_, path)) => path.clone(),
        None => panic!(
            "libidleflow_agent.so is missing (looked for {} and {}): \
             build it with `cargo build -p idleflow-agent` \
             (`cargo test -p idleflow-agent` builds it too)",
            candidates[1].display(),
            candidates[0].display()
        ),
    }
}

fn require_jdk(home: &str) -> PathBuf {
    let home = PathBuf::from(home);
    assert!(
        home.join("bin/java").exists() && home.join("bin/javac").exists(),
        "{} has no bin/java and bin/javac: install openjdk-17-jdk-headless",
        home.display()
    );
    home
}

/// Compiles `Main.java` with JDK 17's javac into a fresh directory.
fn compile_main() -> tempfile::TempDir {
    let jdk = require_jdk(JDK17);
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let source = dir.path().join("Main.java");
    std::fs::write(&source, MAIN_JAVA).expect("writing Main.java");
    let out = Command::new(jdk.join("bin/javac"))
        .arg("-d")
        .arg(dir.path())
        .arg(&source)
        .output()
        .expect("running javac");
    assert!(
        out.status.success(),
        "javac failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir
}

/// Runs `Main` under `jdk_home`'s java with the agent and `agent_options`.
fn run_main(jdk_home: &Path, classes: &Path, agent_options: &str, args: &[&str]) -> Output {
    let mut agentpath = format!("-agentpath:{}", agent_library().display());
    if !agent_options.is_empty() {
        agentpath.push('=');
        agentpath.push_str(agent_options);
    }
    let out = Command::new(jdk_home.join("bin/java"))
        .arg(agentpath)
        .arg("-cp")
        .arg(classes)
        .arg("Main")
        .args(args)
        .output()
        .expect("running java");
    assert!(
        out.status.success(),
        "java exited with {}:\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `(entries, exits)` from the line `idleflow-agent: N method entries, M exits`,
/// which must appear exactly once.
fn counts(stderr: &[u8]) -> (u64, u64) {
    let stderr = String::from_utf8_lossy(stderr);
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("idleflow-agent:"))
        .collect();
    let [line] = lines[..] else {
        panic!("expected one idleflow-agent line on stderr, got:\n{stderr}");
    };
    let parse = || -> Option<(u64, u64)> {
        let rest = line.strip_prefix("idleflow-agent: ")?;
        let (entries, rest) = rest.split_once(" method entries, ")?;
        let exits = rest.strip_suffix(" exits")?;
        Some((entries.parse().ok()?, exits.parse().ok()?))
    };
    parse().unwrap_or_else(|| panic!("unexpected agent line: {line:?}"))
}

/// Entries and exits cannot match exactly, and need not: the counters cover
/// every thread, and at VM death some JDK threads (Reference Handler,
/// Finalizer, Common-Cleaner, the Signal Dispatcher, …) are still blocked
/// inside methods they entered after events were enabled, so those entries
/// never get their exit. Conversely a frame entered before the live phase
/// (when no events are posted) may exit after it. Each such frame is one
/// unmatched event; a handful of threads with a few frames each stay well
/// under this bound (we see 5 on JDK 17 and 8 on JDK 25), while a real
/// imbalance (a lost exit per call) would be off by hundreds.
const MAX_UNMATCHED: u64 = 64;

fn assert_balanced(jdk: &str, entries: u64, exits: u64) {
    assert!(
        entries >= 1000,
        "{jdk}: {entries} method entries, expected at least the 1000 calls of Main.tick"
    );
    assert!(
        entries.abs_diff(exits) <= MAX_UNMATCHED,
        "{jdk}: {entries} entries vs {exits} exits: more than {MAX_UNMATCHED} unmatched"
    );
}

#[test]
fn agent_counts_entries_and_exits_on_jdk17() {
    let classes = compile_main();
    let jdk = require_jdk(JDK17);

    // Both runs pass the count explicitly, so they run the same JDK code
    // (`Integer.parseInt`) apart from the loop.
    let out = run_main(&jdk, classes.path(), "", &["1000"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "sum=499500");
    let (entries, exits) = counts(&out.stderr);
    assert_balanced("JDK 17", entries, exits);

    // The 1000 extra calls of a 2000-iteration run show up as ~1000 extra
    // entries: every call of `tick` is seen once. The small excess comes from
    // the JDK's own code (e.g. formatting a longer number).
    let out = run_main(&jdk, classes.path(), "", &["2000"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "sum=1999000");
    let (entries_2000, exits_2000) = counts(&out.stderr);
    assert_balanced("JDK 17", entries_2000, exits_2000);
    let extra = entries_2000.saturating_sub(entries);
    assert!(
        (1000..=1100).contains(&extra),
        "2000 calls gave {entries_2000} entries, 1000 calls {entries}: \
         {extra} more, expected 1000 (+ at most 100 from the JDK)"
    );
}

#[test]
fn bad_options_disable_the_agent_but_not_the_jvm() {
    let classes = compile_main();
    let jdk = require_jdk(JDK17);
    let out = run_main(&jdk, classes.path(), "no-such-option", &[]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "sum=499500");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let agent_lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("idleflow-agent:"))
        .collect();
    assert_eq!(
        agent_lines.len(),
        1,
        "expected exactly one error line and no counts, got:\n{stderr}"
    );
    assert!(
        agent_lines[0].contains("no-such-option"),
        "the error should name the option: {:?}",
        agent_lines[0]
    );
}

#[test]
fn agent_counts_entries_and_exits_on_jdk25_when_installed() {
    if !Path::new(JDK25).join("bin/java").exists() {
        println!("skipped: {JDK25}/bin/java not installed (Temurin 25 run)");
        return;
    }
    let classes = compile_main();
    let out = run_main(Path::new(JDK25), classes.path(), "", &[]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "sum=499500");
    let (entries, exits) = counts(&out.stderr);
    assert_balanced("JDK 25", entries, exits);
}
