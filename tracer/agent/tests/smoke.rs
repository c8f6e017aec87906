//! End to end: load the real `libidleflow_agent.so` into a real JVM running a
//! tiny program, and check the call tree it dumps at VM death.
//!
//! This test builds nothing itself. `cargo test -p idleflow-agent` compiles
//! the library with both crate types before running it, but leaves the
//! cdylib in `target/debug/deps/`: only `cargo build` copies it up to
//! `target/debug/`. So we take the newer of the two (under
//! `$CARGO_TARGET_DIR` when that is set); relying on `target/debug/` alone
//! would test a stale library after an edit, or fail on a fresh clone.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use idleflow_format::{TreeDump, TreeNode};

const JDK17: &str = "/usr/lib/jvm/java-17-openjdk-amd64";
const JDK25: &str = "/usr/lib/jvm/temurin-25-jdk-amd64";

/// Calls `tick` exactly N times (N = first argument, default 1000), then
/// allocates 64 MiB in `churn` (1 KiB arrays) for the allocation samples.
const MAIN_JAVA: &str = r#"
public class Main {
    static long sum;
    static byte[] last;

    static void churn() {
        for (int i = 0; i < 65536; i++) {
            last = new byte[1024];
        }
    }

    static void tick(int i) {
        sum += i;
    }

    public static void main(String[] args) {
        int n = args.length > 0 ? Integer.parseInt(args[0]) : 1000;
        for (int i = 0; i < n; i++) {
            tick(i);
        }
        churn();
        System.out.println("sum=" + sum);
    }
}
"#;

/// The cdylib built with this test: `cargo test` leaves it in the profile's
/// `deps/` (beside this test binary), `cargo build` copies it one level up;
/// the newer of the two, whatever the profile (debug or release) or target dir.
fn agent_library() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let deps = exe.parent().expect("deps directory").to_path_buf();
    let candidates = [
        deps.join("libidleflow_agent.so"),
        deps.parent()
            .expect("profile directory")
            .join("libidleflow_agent.so"),
    ];
    candidates
        .iter()
        .filter_map(|path| {
            let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok()?;
            Some((modified, path.clone()))
        })
        .max_by_key(|(modified, _)| *modified)
        .map(|(_, p)| p)
        .unwrap_or_else(|| {
            panic!(
                "libidleflow_agent.so is missing (looked for {} and {}): \
                 build it with `cargo build -p idleflow-agent`",
                candidates[0].display(),
                candidates[1].display()
            )
        })
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

/// Runs `Main N` with the agent dumping its trees, returns the final dump.
fn dump_of_run(jdk_home: &Path, classes: &Path, n: u32) -> TreeDump {
    let trees = tempfile::tempdir().expect("a directory for the dump");
    let out = run_main(
        jdk_home,
        classes,
        &format!("trees={}", trees.path().display()),
        &[&n.to_string()],
    );
    let expected: u64 = (0..u64::from(n)).sum();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("sum={expected}")
    );
    let files: Vec<_> = std::fs::read_dir(trees.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(files.len(), 1, "one dump per JVM: {files:?}");
    let dump: TreeDump = idleflow_format::tree::decode_dump(&std::fs::read(&files[0]).unwrap())
        .expect("the dump decodes");
    assert!(dump.final_dump, "written at VM death");
    dump
}

/// The nodes of method `name` in all threads of `dump`.
fn nodes_of<'a>(dump: &'a TreeDump, name: &str) -> Vec<&'a TreeNode> {
    let Some(m) = dump.methods.iter().position(|n| n == name) else {
        return Vec::new();
    };
    dump.threads
        .iter()
        .flat_map(|t| &t.nodes)
        .filter(|n| n.method == m as u32)
        .collect()
}

/// Every call of `Main.tick` is counted once, on one node under `Main.main`.
fn assert_exact_calls(jdk: &Path, classes: &Path) {
    for n in [1000u32, 2000] {
        let dump = dump_of_run(jdk, classes, n);
        let tick = nodes_of(&dump, "Main.tick");
        assert_eq!(tick.len(), 1, "one call path to tick: {tick:?}");
        assert_eq!(tick[0].calls, u64::from(n));
        assert_eq!(tick[0].level, 2);
        let main = nodes_of(&dump, "Main.main");
        assert_eq!(main.len(), 1);
        assert_eq!(main[0].calls, 1);
        assert_eq!(tick[0].parent_id, main[0].id);
        assert!(main[0].callees >= u64::from(n));
        // Ids are unique across the dump.
        let mut ids: Vec<u64> = dump
            .threads
            .iter()
            .flat_map(|t| t.nodes.iter().map(|n| n.id))
            .collect();
        let all = ids.len();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), all, "node ids are unique");
        // 64 MiB allocated in churn, sampled about every 512 KiB.
        let churn = nodes_of(&dump, "Main.churn");
        assert_eq!(churn.len(), 1);
        assert!(
            (40..=400).contains(&churn[0].ao),
            "allocation samples in churn: {}",
            churn[0].ao
        );
        assert!(churn[0].ab >= churn[0].ao * 1024, "{:?}", churn[0]);
    }
}

#[test]
fn call_counts_are_exact_on_jdk17() {
    let classes = compile_main();
    assert_exact_calls(&require_jdk(JDK17), classes.path());
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

/// An agent that cannot get its work area tells the recorder's hand-off
/// socket why, so that the report can say why the JVM has no call tree.
#[test]
fn a_disabled_agent_tells_the_recorder_why() {
    let classes = compile_main();
    let jdk = require_jdk(JDK17);
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("handoff.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let server = std::thread::spawn(move || {
        let (s, _) = listener.accept().unwrap();
        idleflow_wire::handoff::read_request(&s).unwrap()
    });
    let options = format!(
        "twa={},handoff={}",
        dir.path().join("missing-twa").display(),
        sock.display()
    );
    let out = run_main(&jdk, classes.path(), &options, &[]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "sum=499500");
    match server.join().unwrap() {
        idleflow_wire::handoff::Request::Note(text) => {
            assert!(text.starts_with("agent disabled:"), "{text}");
            assert!(text.contains("missing-twa"), "{text}");
        }
        other => panic!("expected a note, got {other:?}"),
    }
}

#[test]
fn call_counts_are_exact_on_jdk25_when_installed() {
    if !Path::new(JDK25).join("bin/java").exists() {
        println!("skipped: {JDK25}/bin/java not installed (Temurin 25 run)");
        return;
    }
    let classes = compile_main();
    assert_exact_calls(Path::new(JDK25), classes.path());
}
