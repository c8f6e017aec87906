//! The stores' own tests: SQLite on a temporary file (runs kept whole,
//! per job, oldest first), a store from before modes were kept.

use super::*;

fn summary(start: u64, frames: usize) -> RunSummary {
    let path = |i: usize| PathSummary {
        process: "p".into(),
        reason: "sleep".into(),
        threads: vec![format!("t{i}")],
        frames: vec![],
        program_frame: i.is_multiple_of(2).then_some(0),
        idle_ns: 100 * i as u64,
        share_pct: 12.5,
        dispatches: i as u64,
        windows: vec![i as u64, 0, 3],
    };
    RunSummary {
        file: "r.idleflow".into(),
        host: "h".into(),
        kernel: "6.18".into(),
        cpus: 2,
        command: vec!["./x".into(), "a b".into()],
        start_unix_ns: start,
        duration_ns: 2_000_000_000,
        idle_ns: 1_500_000_000,
        window_ns: 50_000_000,
        idle_windows: vec![1, 2, 3],
        paths: (0..frames).map(path).collect(),
        mode: RecordingMode {
            java_sources: vec!["flight recorder".into()],
            stacks: "switch-outs to idle".into(),
        },
    }
}

/// A store made before runs kept their mode: its runs load with the
/// mode unknown, and it takes new runs with theirs.
#[test]
fn a_store_from_before_modes_gets_the_column_and_keeps_its_runs() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("old.sqlite");
    let old_schema = SCHEMA
        .replace(",\n    mode TEXT NOT NULL DEFAULT ''", "")
        .replace("{ID}", "INTEGER");
    assert!(!old_schema.contains("mode TEXT"));
    {
        let db = rusqlite::Connection::open(&file).unwrap();
        db.execute_batch(&old_schema).unwrap();
        db.execute(
            "INSERT INTO idleflow_runs (job, added_unix_ns, file, host, kernel, cpus, command, \
             start_unix_ns, duration_ns, idle_ns, window_ns, idle_windows) \
             VALUES ('j', 1, 'old.idleflow', 'h', 'k', 2, '[]', 5, 10, 3, 5, '[1,2]')",
            [],
        )
        .unwrap();
    }
    let mut s = Store::open(file.to_str().unwrap()).unwrap();
    let old = s.runs(Some("j"), 10).unwrap();
    assert_eq!(old.len(), 1);
    assert_eq!(old[0].summary.mode, RecordingMode::default());
    let id = s.add("j", &summary(30, 1)).unwrap();
    assert_eq!(s.load(id).unwrap().summary, summary(30, 1));
    // Opening it again leaves the column as it is.
    drop(s);
    Store::open(file.to_str().unwrap()).unwrap();
}

#[test]
fn sqlite_keeps_runs_whole_per_job_newest_kept_oldest_first() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sub/history.sqlite");
    let mut s = Store::open(file.to_str().unwrap()).unwrap();
    let a = s.add("checkout", &summary(30, 3)).unwrap();
    let b = s.add("checkout", &summary(10, 0)).unwrap();
    s.add("search", &summary(20, 1)).unwrap();
    let back = s.load(a).unwrap();
    assert_eq!(back.summary, summary(30, 3));
    assert_eq!(back.job, "checkout");
    let ids: Vec<i64> = s
        .runs(Some("checkout"), 10)
        .unwrap()
        .iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(ids, vec![b, a], "oldest start first");
    assert_eq!(
        s.runs(Some("checkout"), 1).unwrap()[0].id,
        a,
        "the newest kept"
    );
    assert_eq!(s.runs(None, 10).unwrap().len(), 3);
    assert!(matches!(s.load(999), Err(HistoryError::NoRun(999))));
    // Reopening finds them.
    drop(s);
    let mut s = Store::open(file.to_str().unwrap()).unwrap();
    assert_eq!(s.runs(Some("search"), 10).unwrap().len(), 1);
}

#[test]
fn passwords_are_not_shown() {
    assert_eq!(
        redacted("postgres://me:secret@db:5432/x"),
        "postgres://me:***@db:5432/x"
    );
    assert_eq!(redacted("postgres://me@db/x"), "postgres://me@db/x");
    assert!(is_postgres("postgresql://h/x") && !is_postgres("/tmp/h.sqlite"));
}
