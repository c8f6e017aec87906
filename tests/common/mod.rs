//! Helpers of the end-to-end tests: run the real `idleflow` binary and the
//! bundled example workloads, read the JSON report.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use serde_json::Value;

pub mod flight;
pub mod perf_switches;

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

/// Waits until `idleflow record` (pid `recorder`) started its command: it
/// opened its events and attached its programs before.
pub fn wait_until_command_runs(recorder: u32) {
    let children = format!("/proc/{recorder}/task/{recorder}/children");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::fs::read_to_string(&children).map_or(true, |c| c.trim().is_empty()) {
        assert!(
            std::time::Instant::now() < deadline,
            "idleflow never started its command"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
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

/// `examples/c/SOURCE` compiled with `cc FLAGS` into `dir/name`.
/// A temporary directory anyone may write into, sticky as `/tmp` is (for
/// a test that records as another user: idleflow writes no file in a
/// directory others can write that is not sticky), with a copy of the
/// binary there (the user may not be able to reach the build directory).
pub fn open_dir_with_idleflow() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o1777),
    )
    .unwrap();
    let bin = dir.path().join("idleflow");
    std::fs::copy(env!("CARGO_BIN_EXE_idleflow"), &bin).unwrap();
    (dir, bin)
}

/// `setpriv` running a command as `nobody`, with `caps` (`+perfmon,+bpf`;
/// empty: none) inherited and ambient.
pub fn as_nobody(caps: &str) -> Command {
    let mut c = Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups"]);
    if caps.is_empty() {
        c.arg("--inh-caps=-all");
    } else {
        c.arg(format!("--inh-caps={caps}"))
            .arg(format!("--ambient-caps={caps}"));
    }
    c
}

/// A directory for the recordings a test binary's tests share (held in a
/// static, which is never dropped: a temporary directory would stay in
/// /tmp after every run): `NAME` under cargo's directory for integration
/// tests, emptied when it is first asked for.
pub fn shared_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub fn build_c_example(dir: &Path, source: &str, name: &str, flags: &[&str]) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/c")
        .join(source);
    let bin = dir.join(name);
    let out = run(Command::new("cc").args(flags).arg("-o").arg(&bin).arg(&src));
    assert!(
        out.status.success(),
        "cc (Debian's gcc; .ci/run installs it): {}",
        stderr(&out)
    );
    bin
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

/// Every line of a text report fits 120 columns (characters, not bytes).
pub fn assert_fits_120_columns(text: &str) {
    for l in text.lines() {
        assert!(
            l.chars().count() <= 120,
            "{} columns: {l}",
            l.chars().count()
        );
    }
}

/// The default text report is one screen: at most 60 lines of at most 120
/// columns, and the program's own causes lead its headline (a line of the
/// causes with no program frame, the other processes' line and what the
/// paths leave out come after them).
pub fn assert_one_screen(text: &str) {
    assert_fits_120_columns(text);
    let lines = text.lines().count();
    assert!(lines <= 60, "{lines} lines:\n{text}");
    let headline: Vec<&str> = text
        .lines()
        .skip(1)
        .take_while(|l| *l != "#" && !l.is_empty())
        .collect();
    let cause = |l: &str| {
        let share: String = l.chars().skip(1).take(8).collect();
        share.trim_end().ends_with('%')
    };
    let grouped =
        |l: &str| l.contains("%  no program frame:") || l.contains("%  after other processes");
    if let Some(g) = headline.iter().position(|l| cause(l) && grouped(l)) {
        assert!(
            !headline[g..].iter().any(|l| cause(l) && !grouped(l)),
            "a program's cause after the grouped lines:\n{text}"
        );
    }
}

/// `idleflow report --format json` of `rec`.
/// A small file system of its own (a tmpfs of `size`, `1m`) mounted at a
/// new directory, unmounted on drop: a disk that fills.
pub struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mounts it at `dir` (created).
    pub fn mount(dir: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .unwrap();
        assert!(
            status.success(),
            "mount a {size} tmpfs at {}",
            dir.display()
        );
        Tmpfs(dir.to_path_buf())
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

pub fn report_json(rec: &Path) -> Value {
    // Every source's own section too (`--view all`), beside the merged paths.
    let out = run(idleflow()
        .arg("report")
        .arg(rec)
        .args(["--format", "json", "--view", "all"]));
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

/// `dutycycle ARGS…` recorded into `dir/run.idleflow`: its report, and the
/// cycles it printed per CPU ([`cycles_by_cpu`]).
pub fn record_dutycycle(dir: &tempfile::TempDir, args: &[&str]) -> (Value, Vec<(i64, u64)>) {
    let rec = dir.path().join("run.idleflow");
    let out = run(idleflow()
        .arg("record")
        .arg("-o")
        .arg(&rec)
        .arg("--")
        .arg(example("dutycycle"))
        .args(args));
    assert!(out.status.success(), "record failed: {}", stderr(&out));
    let summary = stderr(&out);
    assert!(summary.contains("dispatches"), "no summary line: {summary}");
    (report_json(&rec), cycles_by_cpu(&stdout(&out)))
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

/// The JVM agent built with this test run (beside the binary, or in `deps/`
/// where `cargo test` leaves a cdylib): the newer of the two.
pub fn agent_library() -> PathBuf {
    let bin = Path::new(env!("CARGO_BIN_EXE_idleflow"));
    let dir = bin.parent().unwrap();
    [
        dir.join("libidleflow_agent.so"),
        dir.join("deps/libidleflow_agent.so"),
    ]
    .into_iter()
    .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
    .max()
    .map(|(_, p)| p)
    .expect("libidleflow_agent.so is built (cargo test --workspace builds it)")
}

pub const JDK17: &str = "/usr/lib/jvm/java-17-openjdk-amd64";

/// The Java examples compiled with JDK 17's javac into a fresh directory.
pub fn java_examples() -> tempfile::TempDir {
    let javac = Path::new(JDK17).join("bin/javac");
    assert!(
        javac.exists(),
        "JDK 17 is needed: {} is missing",
        javac.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/java");
    let sources: Vec<PathBuf> = std::fs::read_dir(&src)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "java"))
        .collect();
    let out = run(Command::new(javac).arg("-d").arg(dir.path()).args(&sources));
    assert!(out.status.success(), "javac: {}", stderr(&out));
    dir
}

/// Records `sleep 0.2` (no JVM) into `rec`.
pub fn record_sleep(rec: &Path) {
    let out = run(idleflow()
        .args(["record", "-q", "-o"])
        .arg(rec)
        .args(["--", "sleep", "0.2"]));
    assert!(out.status.success(), "record: {}", stderr(&out));
}

/// Temurin 25, where the machine has it (not a Debian package).
pub const JDK25: &str = "/usr/lib/jvm/temurin-25-jdk-amd64";

/// Records `java -cp CLASSES ARGS...` (JDK 17) with the tree agent into `rec`.
pub fn record_java(rec: &Path, classes: &Path, args: &[&str]) -> Output {
    record_java_on(JDK17, rec, classes, args)
}

/// Records `java -cp CLASSES ARGS...` (JDK 17) with `options` (none: the
/// default mode) into `rec`.
pub fn record_java_with(rec: &Path, classes: &Path, options: &[&str], args: &[&str]) -> Output {
    let out = run(idleflow()
        .args(["record", "-q"])
        .args(options)
        .arg("-o")
        .arg(rec)
        .arg("--")
        .arg(Path::new(JDK17).join("bin/java"))
        .arg("-cp")
        .arg(classes)
        .args(args));
    assert!(out.status.success(), "record {options:?}: {}", stderr(&out));
    out
}

/// Records `JDK/bin/java -cp CLASSES ARGS...` with the agent into `rec`.
pub fn record_java_on(jdk: &str, rec: &Path, classes: &Path, args: &[&str]) -> Output {
    let out = run(idleflow()
        .args(["record", "-q", "--java", "tree", "--agent"])
        .arg(agent_library())
        .arg("-o")
        .arg(rec)
        .arg("--")
        .arg(Path::new(jdk).join("bin/java"))
        .arg("-cp")
        .arg(classes)
        .args(args));
    assert!(out.status.success(), "record: {}", stderr(&out));
    out
}

/// `idleflow flamegraph --folded` of `rec` as (stack, weight) pairs.
pub fn folded(rec: &Path, weight: &str) -> Vec<(String, u64)> {
    folded_with(rec, weight, &[])
}

/// The same with more `flamegraph` options.
pub fn folded_with(rec: &Path, weight: &str, options: &[&str]) -> Vec<(String, u64)> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.folded");
    let out = run(idleflow()
        .arg("flamegraph")
        .arg(rec)
        .args(["--folded", "--weight", weight])
        .args(options)
        .arg("-o")
        .arg(&path));
    assert!(out.status.success(), "flamegraph: {}", stderr(&out));
    std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(|l| {
            let (stack, w) = l.rsplit_once(' ').unwrap();
            (stack.to_string(), w.parse().unwrap())
        })
        .collect()
}

/// A dispatch record for synthetic recordings: a thread that leaves is
/// sleeping, the idle task's state is unknown.
pub fn dispatch(
    time: u64,
    cpu: u32,
    prev: u32,
    next: u32,
    tag: idleflow_format::NodeTag,
) -> idleflow_format::Record {
    use idleflow_format::{Dispatch, PrevState, Record, IDLE_TID};
    Record::Dispatch(Dispatch {
        time,
        cpu,
        prev_tid: prev,
        prev_state: if prev == IDLE_TID {
            PrevState::Unknown
        } else {
            PrevState::Sleeping
        },
        next_tid: next,
        prev_node: tag,
    })
}

/// Runs `perf record -a EVENTS` (on our clock) around `work`; returns what
/// `work` returned and `perf script ARGS` of what perf recorded.
pub fn under_perf<T>(
    dir: &tempfile::TempDir,
    events: &[&str],
    script_args: &[&str],
    work: impl FnOnce() -> T,
) -> (T, String) {
    let pdata = dir.path().join("perf.data");
    let mut perf = Command::new("perf")
        .args(["record", "-q", "-k", "CLOCK_MONOTONIC", "-a"])
        .args(events)
        .arg("-o")
        .arg(&pdata)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("perf is installed (Debian's linux-perf)");
    std::thread::sleep(Duration::from_millis(700));
    let result = work();
    // SAFETY: kill has no memory effects.
    unsafe { libc::kill(perf.id() as i32, libc::SIGINT) };
    let status = perf.wait().unwrap();
    assert!(status.success() || status.code() == Some(130) || status.code().is_none());
    let script = run(Command::new("perf")
        .args(["script", "--ns"])
        .args(script_args)
        .arg("-i")
        .arg(&pdata));
    assert!(script.status.success(), "perf script: {}", stderr(&script));
    (result, stdout(&script))
}

/// `java Waits convoy SECONDS` started without idleflow (for `--pid`), given
/// 1.5 s to start.
pub fn running_convoy_jvm(classes: &Path, seconds: &str) -> std::process::Child {
    running_waits_jvm(classes, "convoy", seconds, 1500)
}

/// `java Waits MODE SECONDS` (JDK 17), started `after_ms` ago.
pub fn running_waits_jvm(
    classes: &Path,
    mode: &str,
    seconds: &str,
    after_ms: u64,
) -> std::process::Child {
    let jvm = std::process::Command::new(Path::new(JDK17).join("bin/java"))
        .arg("-cp")
        .arg(classes)
        .args(["Waits", mode, seconds])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(after_ms));
    jvm
}

/// The top path of a JSON report's `idle_paths` whose threads are the
/// program's (not only HotSpot's own: a VM thread can be the last to run
/// before idle while the program's threads wait).
/// The first of `items` (paths or causes, heaviest first) whose reason is
/// `reason`, after checking that each one before it is a sleep in `holder`
/// (`frame` names an item's program frame): a lock held across a sleep,
/// whose holder's CPU goes idle when it sleeps unless the kernel put a
/// woken waiter there — 5-20 % of the idle on kernel build fc-v595, about
/// half on fc-v657, where the holder's sleep and the waits for the lock
/// weigh about the same and either can come first.
pub fn first_past_the_holders_sleep<'a>(
    items: &'a [Value],
    reason: &str,
    holder: &str,
    frame: impl Fn(&Value) -> Option<&str>,
) -> &'a Value {
    let at = items
        .iter()
        .position(|p| p["reason"] == reason)
        .unwrap_or_else(|| panic!("no {reason}: {items:?}"));
    for p in &items[..at] {
        assert!(
            p["reason"] == "sleep" && frame(p).is_some_and(|f| f.starts_with(holder)),
            "before the {reason}, only the holder's sleep in {holder}: {p}"
        );
    }
    assert!(at <= 1, "{reason} comes {at}th: {items:?}");
    &items[at]
}

/// A path's program frame's name.
pub fn program_frame_name(p: &Value) -> Option<&str> {
    let i = p["program_frame"].as_u64()?;
    p["frames"][i as usize]["name"].as_str()
}

/// The program's paths (not the JVM's own threads'), heaviest first.
pub fn program_paths(r: &Value) -> Vec<Value> {
    r["idle_paths"]["paths"]
        .as_array()
        .expect("idle_paths.paths")
        .iter()
        .filter(|p| p["jvm_internal"] == false)
        .cloned()
        .collect()
}

pub fn program_top_path(r: &Value) -> Value {
    r["idle_paths"]["paths"]
        .as_array()
        .expect("idle_paths.paths")
        .iter()
        .find(|p| p["jvm_internal"] == false)
        .expect("a path of the program's threads")
        .clone()
}
