//! End to end: `idleflow history` on real recordings of
//! `examples/c/stages.c`, in the default SQLite store and in a real
//! PostgreSQL server the test starts (Debian's `postgresql`): runs kept,
//! listed and shown; `check` fails (exit 1) on a run whose `flush_log` was
//! made slower, naming that path, and passes (exit 0) on an unchanged run;
//! concurrent `add`s lose nothing.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use common::*;
use serde_json::Value;

/// The recordings every test here reads: three base runs, one with
/// flush_log sleeping 900 µs instead of 300, one unchanged.
struct Runs {
    base: Vec<PathBuf>,
    slower: PathBuf,
    same: PathBuf,
}

fn runs() -> &'static Runs {
    static RUNS: OnceLock<Runs> = OnceLock::new();
    RUNS.get_or_init(|| {
        let _m = machine().expect("recording tests need root");
        let dir = shared_dir("history");
        let bin = build_c_example(&dir, "stages.c", "stages", &["-O2", "-pthread", "-g"]);
        // The check compares shares of the idle between runs, so each run
        // must have had the machine to itself: a run during which other
        // programs held a CPU (a fresh CI machine's writeback after the
        // build, say) is recorded again, up to three times.
        let record = |name: &str, flush_us: u32| {
            let rec = dir.join(format!("{name}.idleflow"));
            let mut others = Vec::new();
            for _ in 0..3 {
                let out = run(idleflow()
                    .args(["record", "-q", "-o"])
                    .arg(&rec)
                    .arg("--")
                    .arg(&bin)
                    .args(["2", &flush_us.to_string()]));
                assert!(out.status.success(), "{}", stderr(&out));
                let busy = others_busy_pct(&report_json(&rec));
                if busy <= MAX_OTHERS_BUSY_PCT {
                    return rec;
                }
                eprintln!("{name}: other programs held {busy:.1} % of a CPU; recording it again");
                others.push(busy);
            }
            panic!(
                "{name}: the machine was never quiet for 2 s (other programs held {others:?} % \
                 of a CPU in three tries)"
            )
        };
        let base = (0..3).map(|i| record(&format!("base{i}"), 300)).collect();
        let slower = record("slower", 900);
        let same = record("same", 300);
        Runs { base, slower, same }
    })
}

/// The most the machine's other programs may hold (% of one CPU) while a
/// run is recorded.
const MAX_OTHERS_BUSY_PCT: f64 = 10.0;

/// What the recording's CPUs did besides idling, running `stages` and
/// running idleflow: % of one CPU over the recording.
fn others_busy_pct(r: &Value) -> f64 {
    let duration = u(r, "duration_ns") as f64;
    let all = duration * u(r, "cpus") as f64;
    let idle = u(&r["total"], "idle_ns") as f64;
    let target: u64 = r["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| u(t, "runtime_ns"))
        .sum();
    let tool = u(&r["tool"], "runtime_ns");
    (all - idle - (target + tool) as f64).max(0.0) * 100.0 / duration
}

fn history(store: &str, args: &[&str]) -> Output {
    run(idleflow()
        .arg("history")
        .args(args)
        .args(["--history", store]))
}

fn add(store: &str, rec: &Path, job: &str) {
    let out = history(store, &["add", rec.to_str().unwrap(), "--job", job]);
    assert!(out.status.success(), "history add: {}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("of job {job}")),
        "{}",
        stderr(&out)
    );
}

/// The whole flow against one store: add the base runs, list and show
/// them, check the slower run (fails on flush_log) and the unchanged one
/// (passes), then eight concurrent adds.
fn the_flow(store: &str) {
    let r = runs();
    for rec in &r.base {
        add(store, rec, "stages");
    }
    // list: three runs of the job, as JSON and text.
    let out = history(store, &["list", "--job", "stages", "--format", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 3, "{list:?}");
    let first_report = report_json(&r.base[0]);
    assert_eq!(list[0]["idle_ns"], first_report["total"]["idle_ns"]);
    assert_eq!(
        list[0]["cpus"].as_u64(),
        Some(first_report["cpus"].as_u64().unwrap())
    );
    let out = history(store, &["list"]);
    let text = stdout(&out);
    assert_fits_120_columns(&text);
    assert!(
        text.contains("stages") && text.contains("feeder in feed"),
        "{text}"
    );
    // show: the run's paths as the report has them.
    let id = list[0]["id"].as_i64().unwrap().to_string();
    let out = history(store, &["show", &id, "--format", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    let paths = shown["run"]["paths"].as_array().unwrap();
    let top = &first_report["idle_paths"]["paths"][0];
    assert_eq!(paths[0]["idle_ns"], top["idle_ns"]);
    assert_eq!(paths[0]["frames"], top["frames"]);
    let windows: u64 = paths[0]["windows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_u64().unwrap())
        .sum();
    assert_eq!(windows, top["idle_ns"].as_u64().unwrap(), "windows add up");
    let out = history(store, &["show", &id]);
    assert_fits_120_columns(&stdout(&out));
    assert!(stdout(&out).contains("flush_log"), "{}", stdout(&out));
    // check: the slower flush_log rose; exit 1, named first.
    let out = history(
        store,
        &[
            "check",
            r.slower.to_str().unwrap(),
            "--job",
            "stages",
            "--format",
            "json",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let c: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rose = c["rose"].as_array().unwrap();
    assert!(!rose.is_empty(), "{c}");
    let program = &rose[0]["frames"][rose[0]["program_frame"].as_u64().unwrap() as usize];
    assert_eq!(program["name"], "flush_log", "{}", rose[0]);
    assert!(f(&rose[0], "change_pts") >= 1.0, "{}", rose[0]);
    assert_eq!(c["baseline"]["run_ids"].as_array().unwrap().len(), 3);
    let out = history(
        store,
        &["check", r.slower.to_str().unwrap(), "--job", "stages"],
    );
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert_fits_120_columns(&text);
    assert!(
        text.starts_with("# FAIL: 1 path") || text.starts_with("# FAIL: 2 paths"),
        "{text}"
    );
    assert!(
        text.lines().take(6).any(|l| l.contains("flush_log")),
        "{text}"
    );
    // The unchanged run passes.
    let out = history(
        store,
        &["check", r.same.to_str().unwrap(), "--job", "stages"],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(stdout(&out).starts_with("# PASS"), "{}", stdout(&out));
    // A job without runs is a clear error, not a pass.
    let out = history(
        store,
        &["check", r.same.to_str().unwrap(), "--job", "nothing"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("has no runs"), "{}", stderr(&out));
    // Eight recorders adding at once lose nothing.
    let children: Vec<_> = (0..8)
        .map(|_| {
            idleflow()
                .args([
                    "history",
                    "add",
                    r.same.to_str().unwrap(),
                    "--job",
                    "together",
                ])
                .args(["--history", store])
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let out = history(store, &["list", "--job", "together", "--format", "json"]);
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 8);
}

#[test]
fn history_in_sqlite_fails_a_slower_method_and_passes_an_unchanged_run() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("deep/history.sqlite");
    the_flow(store.to_str().unwrap());
}

#[test]
fn the_default_history_is_one_sqlite_file_in_the_data_directory() {
    let r = runs();
    let home = tempfile::tempdir().unwrap();
    let out = run(idleflow()
        .args(["history", "add", r.same.to_str().unwrap(), "--job", "j"])
        .env_remove("IDLEFLOW_HISTORY")
        .env("XDG_DATA_HOME", home.path()));
    assert!(out.status.success(), "{}", stderr(&out));
    let file = home.path().join("idleflow/history.sqlite");
    assert!(file.exists(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(file.to_str().unwrap()),
        "{}",
        stderr(&out)
    );
    // A file that is not a database is a clear error.
    let bad = home.path().join("bad.sqlite");
    std::fs::write(&bad, b"not a database, just some text here").unwrap();
    let out = history(bad.to_str().unwrap(), &["list"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("cannot open the history"),
        "{}",
        stderr(&out)
    );
}

/// A PostgreSQL server of Debian's `postgresql` package, in a temporary
/// folder, on a free port of 127.0.0.1, stopped when dropped.
struct Postgres {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
}

impl Postgres {
    fn start() -> Postgres {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .expect("PostgreSQL (Debian's postgresql; .ci/run installs it)")
            .filter_map(|e| e.ok())
            .map(|e| e.path().join("bin"))
            .filter(|b| b.join("initdb").exists())
            .max()
            .expect("initdb of Debian's postgresql");
        let dir = tempfile::tempdir().unwrap();
        let as_postgres = |cmd: &Path| {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=postgres", "--regid=postgres", "--clear-groups"])
                .arg(cmd);
            c
        };
        std::os::unix::fs::chown(dir.path(), Some(uid("postgres")), None).unwrap();
        let data = dir.path().join("data");
        let out = run(as_postgres(&bin.join("initdb"))
            .args(["-A", "trust", "-U", "postgres", "--no-sync", "-D"])
            .arg(&data));
        assert!(out.status.success(), "initdb: {}", stderr(&out));
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let out = run(as_postgres(&bin.join("pg_ctl"))
            .arg("-D")
            .arg(&data)
            .arg("-l")
            .arg(dir.path().join("log"))
            .arg("-o")
            .arg(format!(
                "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
                dir.path().display()
            ))
            .args(["-w", "start"]));
        assert!(
            out.status.success(),
            "pg_ctl start: {} {}",
            stderr(&out),
            std::fs::read_to_string(dir.path().join("log")).unwrap_or_default()
        );
        Postgres { dir, bin, port }
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = Command::new("setpriv")
            .args(["--reuid=postgres", "--regid=postgres", "--clear-groups"])
            .arg(self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["-m", "immediate", "-w", "stop"])
            .output();
    }
}

fn uid(user: &str) -> u32 {
    let out = run(Command::new("id").args(["-u", user]));
    stdout(&out).trim().parse().expect("the postgres user")
}

#[test]
fn history_in_postgresql_has_the_same_flow_and_schema() {
    // The recordings first: the server's start would compete with them.
    runs();
    let pg = Postgres::start();
    the_flow(&pg.url());
    // The schema is the one SQLite has: the same tables, the runs kept.
    let out = run(Command::new(pg.bin.join("psql"))
        .args([
            "-h",
            "127.0.0.1",
            "-U",
            "postgres",
            "-p",
            &pg.port.to_string(),
        ])
        .args([
            "-At",
            "-c",
            "SELECT job, count(*) FROM idleflow_runs GROUP BY job ORDER BY job",
        ]));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "stages|3\ntogether|8");
    // A server that is not there is a clear error.
    let out = history("postgres://postgres@127.0.0.1:1/postgres", &["list"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("PostgreSQL history"),
        "{}",
        stderr(&out)
    );
}
