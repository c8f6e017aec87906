//! The history of runs (`idleflow history`): each run's summary
//! ([`RunSummary`]: the recording's facts, its idle per time window, each
//! merged idle-causing path with its idle and share per window) kept under
//! a job's name, in SQLite (one file, embedded: the default) or PostgreSQL
//! (a server a team or a fleet shares). Comparing a run with its job's
//! history is the post-processor's ([`idleflow_postproc::compare::history_check`]); this
//! crate stores and loads, and hands that check a job's newest runs
//! ([`Store::check`]).
//!
//! Both stores have one schema ([`SCHEMA`]): `idleflow_runs` (a row per
//! run) and `idleflow_paths` (a row per path of a run, its frames and
//! windows as JSON text). Each `add` is one transaction, so concurrent
//! recorders adding to one store lose nothing: SQLite takes the write lock
//! at the transaction's start and waits for it (WAL journal, a busy
//! timeout), PostgreSQL serializes only the schema's creation (an advisory
//! lock).
//!
//! Invariants: a run is stored whole or not at all; what is loaded is what
//! was added (numbers above `i64::MAX` saturate).

use std::path::{Path, PathBuf};
use std::time::Duration;

use idleflow_postproc::compare::history_check::{self, Check, MAX_BASELINE};
use idleflow_postproc::compare::history_text::Kept;
use idleflow_postproc::compare::summary::{PathSummary, RecordingMode, RunSummary};
use idleflow_postproc::reasons::Reason;

/// The schema, in the SQL both stores read; `{ID}` is the store's
/// auto-numbered key type.
pub const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS idleflow_runs (
    id {ID} PRIMARY KEY,
    job TEXT NOT NULL,
    added_unix_ns BIGINT NOT NULL,
    file TEXT NOT NULL,
    host TEXT NOT NULL,
    kernel TEXT NOT NULL,
    cpus BIGINT NOT NULL,
    command TEXT NOT NULL,
    start_unix_ns BIGINT NOT NULL,
    duration_ns BIGINT NOT NULL,
    idle_ns BIGINT NOT NULL,
    window_ns BIGINT NOT NULL,
    idle_windows TEXT NOT NULL,
    mode TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS idleflow_runs_job ON idleflow_runs (job, start_unix_ns);
CREATE TABLE IF NOT EXISTS idleflow_paths (
    run_id BIGINT NOT NULL REFERENCES idleflow_runs (id) ON DELETE CASCADE,
    path_rank BIGINT NOT NULL,
    path_key TEXT NOT NULL,
    process TEXT NOT NULL,
    reason TEXT NOT NULL,
    threads TEXT NOT NULL,
    frames TEXT NOT NULL,
    program_frame BIGINT,
    idle_ns BIGINT NOT NULL,
    share_pct DOUBLE PRECISION NOT NULL,
    dispatches BIGINT NOT NULL,
    windows TEXT NOT NULL,
    PRIMARY KEY (run_id, path_rank)
);
CREATE INDEX IF NOT EXISTS idleflow_paths_key ON idleflow_paths (path_key);
";

/// What a store made before runs kept their mode lacks.
const ADD_MODE: &str = "ALTER TABLE idleflow_runs ADD COLUMN mode TEXT NOT NULL DEFAULT ''";

/// The run columns after `id`, in [`SCHEMA`]'s order.
const RUN_COLUMNS: &str = "job, added_unix_ns, file, host, kernel, cpus, command, start_unix_ns, \
                           duration_ns, idle_ns, window_ns, idle_windows, mode";
/// The path columns, in [`SCHEMA`]'s order.
const PATH_COLUMNS: &str = "run_id, path_rank, path_key, process, reason, threads, frames, \
                            program_frame, idle_ns, share_pct, dispatches, windows";

/// What went wrong with a history store.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// The SQLite store.
    #[error("SQLite history {path}: {source}")]
    Sqlite {
        /// Its file.
        path: String,
        /// What SQLite said.
        source: rusqlite::Error,
    },
    /// The PostgreSQL store.
    #[error("PostgreSQL history {url}: {source}")]
    Postgres {
        /// Its URL, without a password.
        url: String,
        /// What the server or the client said.
        source: postgres::Error,
    },
    /// A folder for the SQLite file could not be made, or is not safe.
    #[error("cannot use the folder {path}: {source}")]
    Folder {
        /// The folder.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// No run has this id.
    #[error("no run {0} in the history (idleflow history list shows the ids)")]
    NoRun(i64),
    /// A stored row does not read as this version writes it.
    #[error("run {run}: a stored {what} does not read: {source}")]
    Corrupt {
        /// The run.
        run: i64,
        /// Which column.
        what: &'static str,
        /// Why.
        source: serde_json::Error,
    },
}

/// One stored run: its id, job and when it was added, and its summary.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredRun {
    /// Its id in the store.
    pub id: i64,
    /// The job it was added under.
    pub job: String,
    /// When it was added, ns since the epoch.
    pub added_unix_ns: u64,
    /// What was stored of it.
    pub summary: RunSummary,
}

impl StoredRun {
    /// It as `history list` and `history show` print it.
    pub fn kept(&self) -> Kept<'_> {
        Kept {
            id: self.id,
            job: &self.job,
            run: &self.summary,
        }
    }

    /// Its line of `history list --format json`: its facts, without the paths'.
    pub fn list_json(&self) -> serde_json::Value {
        let r = self;
        serde_json::json!({
            "id": r.id, "job": r.job, "added_unix_ns": r.added_unix_ns,
            "file": r.summary.file, "host": r.summary.host,
            "kernel": r.summary.kernel, "cpus": r.summary.cpus,
            "command": r.summary.command,
            "start_unix_ns": r.summary.start_unix_ns,
            "duration_ns": r.summary.duration_ns,
            "idle_ns": r.summary.idle_ns,
            "idle_pct": r.summary.idle_pct(),
            "paths": r.summary.paths.len(),
        })
    }

    /// `history show --format json`: its id, job, when it was added, and the whole run.
    pub fn show_json(&self) -> serde_json::Value {
        serde_json::json!({
            "id": self.id, "job": self.job, "added_unix_ns": self.added_unix_ns,
            "run": self.summary,
        })
    }
}

/// A history store (see the crate documentation).
pub enum Store {
    /// SQLite: one file.
    Sqlite {
        /// The open database.
        db: rusqlite::Connection,
        /// Its file.
        path: PathBuf,
    },
    /// PostgreSQL: a server.
    Postgres {
        /// The client.
        db: Box<postgres::Client>,
        /// The URL, without a password.
        url: String,
    },
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Store({})", self.location())
    }
}

/// Where the SQLite history lives by default: `history.sqlite` in
/// idleflow's folder of the user's data directory
/// (`$XDG_DATA_HOME/idleflow`, else `~/.local/share/idleflow`).
pub fn default_path() -> PathBuf {
    dirs::data_dir()
        .unwrap_or_else(|| PathBuf::from("."))
        .join("idleflow")
        .join("history.sqlite")
}

/// Whether `spec` names a PostgreSQL server rather than a file.
pub fn is_postgres(spec: &str) -> bool {
    spec.starts_with("postgres://") || spec.starts_with("postgresql://")
}

/// `url` without its password, to show.
fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let Some((auth, host)) = rest.split_once('@') else {
        return url.to_string();
    };
    match auth.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_string(),
    }
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn to_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn now_unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// A path's row values, as text and numbers both stores bind.
struct PathRow {
    key: String,
    threads: String,
    frames: String,
    windows: String,
}

impl PathRow {
    fn new(p: &PathSummary) -> Self {
        PathRow {
            key: p.key(),
            threads: json(&p.threads),
            frames: json(&p.frames),
            windows: json(&p.windows),
        }
    }
}

fn json<T: serde::Serialize + ?Sized>(v: &T) -> String {
    serde_json::to_string(v).expect("plain data serializes")
}

/// The columns of a run row as read back, before its paths.
struct RunRow {
    id: i64,
    job: String,
    added: i64,
    file: String,
    host: String,
    kernel: String,
    cpus: i64,
    command: String,
    start: i64,
    duration: i64,
    idle: i64,
    window: i64,
    idle_windows: String,
    /// The run's [`RecordingMode`] as JSON ('' in a run kept before it was).
    mode: String,
}

/// The columns of a path row as read back.
struct PathRead {
    process: String,
    reason: String,
    threads: String,
    frames: String,
    program_frame: Option<i64>,
    idle: i64,
    share: f64,
    dispatches: i64,
    windows: String,
}

fn parse<T: serde::de::DeserializeOwned>(
    run: i64,
    what: &'static str,
    text: &str,
) -> Result<T, HistoryError> {
    serde_json::from_str(text).map_err(|source| HistoryError::Corrupt { run, what, source })
}

fn assemble(r: RunRow, paths: Vec<PathRead>) -> Result<StoredRun, HistoryError> {
    let id = r.id;
    let paths = paths
        .into_iter()
        .map(|p| {
            Ok(PathSummary {
                process: p.process,
                reason: Reason::parse(&p.reason),
                threads: parse(id, "thread list", &p.threads)?,
                frames: parse(id, "frame list", &p.frames)?,
                program_frame: p.program_frame.and_then(|i| usize::try_from(i).ok()),
                idle_ns: to_u64(p.idle),
                share_pct: p.share,
                dispatches: to_u64(p.dispatches),
                windows: parse(id, "path's windows", &p.windows)?,
            })
        })
        .collect::<Result<Vec<_>, HistoryError>>()?;
    Ok(StoredRun {
        id,
        job: r.job,
        added_unix_ns: to_u64(r.added),
        summary: RunSummary {
            file: r.file,
            host: r.host,
            kernel: r.kernel,
            cpus: usize::try_from(r.cpus).unwrap_or(0),
            command: parse(id, "command", &r.command)?,
            start_unix_ns: to_u64(r.start),
            duration_ns: to_u64(r.duration),
            idle_ns: to_u64(r.idle),
            window_ns: to_u64(r.window),
            idle_windows: parse(id, "run's windows", &r.idle_windows)?,
            paths,
            mode: if r.mode.is_empty() {
                RecordingMode::default()
            } else {
                parse(id, "recording mode", &r.mode)?
            },
        },
    })
}

impl Store {
    /// Opens the store `spec` names — a `postgres://` or `postgresql://`
    /// URL, else an SQLite file (made, with its folder, if missing) — and
    /// makes its schema if it has none.
    pub fn open(spec: &str) -> Result<Store, HistoryError> {
        if is_postgres(spec) {
            Self::open_postgres(spec)
        } else {
            Self::open_sqlite(Path::new(spec))
        }
    }

    /// [`Store::open`] of `spec`, else of the SQLite file at [`default_path`].
    pub fn open_or_default(spec: Option<&str>) -> Result<Store, HistoryError> {
        match spec {
            Some(spec) => Self::open(spec),
            None => Self::open(&default_path().display().to_string()),
        }
    }

    fn open_sqlite(path: &Path) -> Result<Store, HistoryError> {
        let err = |source| HistoryError::Sqlite {
            path: path.display().to_string(),
            source,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            use std::os::unix::fs::DirBuilderExt;
            let folder = |source| HistoryError::Folder {
                path: dir.display().to_string(),
                source,
            };
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(folder)?;
            // Nobody else may swap the store's files (the database, its
            // journal) for links: idleflow_format::files' rule.
            let opened = idleflow_format::files::Dir::open(dir).map_err(|e| folder(e.into()))?;
            if opened.shared() {
                return Err(folder(std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    "it is writable by other users (sticky): the store's files have \
                     names anyone can plant a link at; use a folder only you can write",
                )));
            }
        }
        let flags = rusqlite::OpenFlags::default() | rusqlite::OpenFlags::SQLITE_OPEN_NOFOLLOW;
        let mut db = rusqlite::Connection::open_with_flags(path, flags).map_err(err)?;
        db.busy_timeout(Duration::from_secs(60)).map_err(err)?;
        db.pragma_update(None, "journal_mode", "WAL").map_err(err)?;
        db.pragma_update(None, "foreign_keys", "ON").map_err(err)?;
        let tx = db
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(err)?;
        tx.execute_batch(&SCHEMA.replace("{ID}", "INTEGER"))
            .map_err(err)?;
        // A store made before runs kept their mode gets the column (SQLite
        // has no ADD COLUMN IF NOT EXISTS).
        let has_mode: i64 = tx
            .query_row(
                "SELECT COUNT(*) FROM pragma_table_info('idleflow_runs') WHERE name = 'mode'",
                [],
                |r| r.get(0),
            )
            .map_err(err)?;
        if has_mode == 0 {
            tx.execute_batch(ADD_MODE).map_err(err)?;
        }
        tx.commit().map_err(err)?;
        Ok(Store::Sqlite {
            db,
            path: path.to_path_buf(),
        })
    }

    fn open_postgres(url: &str) -> Result<Store, HistoryError> {
        let shown = redacted(url);
        let err = |source| HistoryError::Postgres {
            url: shown.clone(),
            source,
        };
        let mut db = postgres::Client::connect(url, postgres::NoTls).map_err(err)?;
        let mut tx = db.transaction().map_err(err)?;
        // Concurrent `CREATE TABLE IF NOT EXISTS` can collide in
        // PostgreSQL's catalog: one opener at a time makes the schema.
        tx.execute("SELECT pg_advisory_xact_lock(7297146614)", &[])
            .map_err(err)?;
        tx.batch_execute(&SCHEMA.replace("{ID}", "BIGSERIAL"))
            .map_err(err)?;
        tx.batch_execute(&ADD_MODE.replace("ADD COLUMN", "ADD COLUMN IF NOT EXISTS"))
            .map_err(err)?;
        tx.commit().map_err(err)?;
        Ok(Store::Postgres {
            db: Box::new(db),
            url: shown,
        })
    }

    /// Where the store is (a file, or a URL without its password).
    pub fn location(&self) -> String {
        match self {
            Store::Sqlite { path, .. } => path.display().to_string(),
            Store::Postgres { url, .. } => url.clone(),
        }
    }

    /// Keeps `run` under `job`, in one transaction: its id.
    pub fn add(&mut self, job: &str, run: &RunSummary) -> Result<i64, HistoryError> {
        let added = to_i64(now_unix_ns());
        let command = json(&run.command);
        let idle_windows = json(&run.idle_windows);
        let mode = json(&run.mode);
        let rows: Vec<PathRow> = run.paths.iter().map(PathRow::new).collect();
        let insert_run = format!(
            "INSERT INTO idleflow_runs ({RUN_COLUMNS}) VALUES \
             ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)"
        );
        let insert_path = format!(
            "INSERT INTO idleflow_paths ({PATH_COLUMNS}) VALUES \
             ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)"
        );
        let (cpus, start, duration, idle, window) = (
            run.cpus as i64,
            to_i64(run.start_unix_ns),
            to_i64(run.duration_ns),
            to_i64(run.idle_ns),
            to_i64(run.window_ns),
        );
        match self {
            Store::Sqlite { db, path } => {
                let err = |source| HistoryError::Sqlite {
                    path: path.display().to_string(),
                    source,
                };
                let tx = db
                    .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                    .map_err(err)?;
                tx.execute(
                    &insert_run.replace('$', "?"),
                    rusqlite::params![
                        job,
                        added,
                        run.file,
                        run.host,
                        run.kernel,
                        cpus,
                        command,
                        start,
                        duration,
                        idle,
                        window,
                        idle_windows,
                        mode
                    ],
                )
                .map_err(err)?;
                let id = tx.last_insert_rowid();
                {
                    let mut stmt = tx.prepare(&insert_path.replace('$', "?")).map_err(err)?;
                    for (rank, (p, row)) in run.paths.iter().zip(&rows).enumerate() {
                        stmt.execute(rusqlite::params![
                            id,
                            rank as i64,
                            row.key,
                            p.process,
                            p.reason.words(),
                            row.threads,
                            row.frames,
                            p.program_frame.map(|i| i as i64),
                            to_i64(p.idle_ns),
                            p.share_pct,
                            to_i64(p.dispatches),
                            row.windows
                        ])
                        .map_err(err)?;
                    }
                }
                tx.commit().map_err(err)?;
                Ok(id)
            }
            Store::Postgres { db, url } => {
                let err = |source| HistoryError::Postgres {
                    url: url.clone(),
                    source,
                };
                let mut tx = db.transaction().map_err(err)?;
                let row = tx
                    .query_one(
                        &format!("{insert_run} RETURNING id"),
                        &[
                            &job,
                            &added,
                            &run.file,
                            &run.host,
                            &run.kernel,
                            &cpus,
                            &command,
                            &start,
                            &duration,
                            &idle,
                            &window,
                            &idle_windows,
                            &mode,
                        ],
                    )
                    .map_err(err)?;
                let id: i64 = row.get(0);
                let stmt = tx.prepare(&insert_path).map_err(err)?;
                for (rank, (p, row)) in run.paths.iter().zip(&rows).enumerate() {
                    tx.execute(
                        &stmt,
                        &[
                            &id,
                            &(rank as i64),
                            &row.key,
                            &p.process,
                            &p.reason.words(),
                            &row.threads,
                            &row.frames,
                            &p.program_frame.map(|i| i as i64),
                            &to_i64(p.idle_ns),
                            &p.share_pct,
                            &to_i64(p.dispatches),
                            &row.windows,
                        ],
                    )
                    .map_err(err)?;
                }
                tx.commit().map_err(err)?;
                Ok(id)
            }
        }
    }

    /// The runs of `job` (of every job with `None`), oldest start first,
    /// at most the newest `limit`.
    pub fn runs(
        &mut self,
        job: Option<&str>,
        limit: usize,
    ) -> Result<Vec<StoredRun>, HistoryError> {
        let ids = self.ids(job, limit)?;
        ids.into_iter().map(|id| self.load(id)).collect()
    }

    /// `new` checked against the history of `job`
    /// ([`history_check::check`]): among the job's newest runs, enough to
    /// find the similar ones in (10 × [`MAX_BASELINE`]). `None` when the
    /// job has no run to compare with.
    pub fn check(
        &mut self,
        job: &str,
        new: &RunSummary,
        min_change_pts: Option<f64>,
    ) -> Result<Option<Check>, HistoryError> {
        let runs = self.runs(Some(job), 10 * MAX_BASELINE)?;
        let history: Vec<_> = runs.into_iter().map(|r| (r.id, r.summary)).collect();
        Ok(history_check::check(job, &history, new, min_change_pts))
    }

    /// The ids of `job`'s runs (every job's with `None`), oldest start
    /// first, at most the newest `limit`.
    fn ids(&mut self, job: Option<&str>, limit: usize) -> Result<Vec<i64>, HistoryError> {
        let limit = limit.min(i64::MAX as usize) as i64;
        let sql = "SELECT id FROM (SELECT id, start_unix_ns FROM idleflow_runs \
                   WHERE ($1 = '' OR job = $1) ORDER BY start_unix_ns DESC, id DESC LIMIT $2) AS newest \
                   ORDER BY start_unix_ns, id";
        let job = job.unwrap_or("");
        match self {
            Store::Sqlite { db, path } => {
                let err = |source| HistoryError::Sqlite {
                    path: path.display().to_string(),
                    source,
                };
                let mut stmt = db.prepare(&sql.replace('$', "?")).map_err(err)?;
                let ids = stmt
                    .query_map(rusqlite::params![job, limit], |r| r.get(0))
                    .map_err(err)?
                    .collect::<Result<Vec<i64>, _>>()
                    .map_err(err)?;
                Ok(ids)
            }
            Store::Postgres { db, url } => {
                let rows =
                    db.query(sql, &[&job, &limit])
                        .map_err(|source| HistoryError::Postgres {
                            url: url.clone(),
                            source,
                        })?;
                Ok(rows.iter().map(|r| r.get(0)).collect())
            }
        }
    }

    /// The run `id`.
    pub fn load(&mut self, id: i64) -> Result<StoredRun, HistoryError> {
        let run_sql = format!("SELECT id, {RUN_COLUMNS} FROM idleflow_runs WHERE id = $1");
        let path_sql = "SELECT process, reason, threads, frames, program_frame, idle_ns, \
                        share_pct, dispatches, windows FROM idleflow_paths WHERE run_id = $1 \
                        ORDER BY path_rank";
        match self {
            Store::Sqlite { db, path } => {
                let err = |source| HistoryError::Sqlite {
                    path: path.display().to_string(),
                    source,
                };
                let mut stmt = db.prepare(&run_sql.replace('$', "?")).map_err(err)?;
                let mut rows = stmt
                    .query_map([id], |r| {
                        Ok(RunRow {
                            id: r.get(0)?,
                            job: r.get(1)?,
                            added: r.get(2)?,
                            file: r.get(3)?,
                            host: r.get(4)?,
                            kernel: r.get(5)?,
                            cpus: r.get(6)?,
                            command: r.get(7)?,
                            start: r.get(8)?,
                            duration: r.get(9)?,
                            idle: r.get(10)?,
                            window: r.get(11)?,
                            idle_windows: r.get(12)?,
                            mode: r.get(13)?,
                        })
                    })
                    .map_err(err)?;
                let run = rows.next().ok_or(HistoryError::NoRun(id))?.map_err(err)?;
                let mut stmt = db.prepare(&path_sql.replace('$', "?")).map_err(err)?;
                let paths = stmt
                    .query_map([id], |r| {
                        Ok(PathRead {
                            process: r.get(0)?,
                            reason: r.get(1)?,
                            threads: r.get(2)?,
                            frames: r.get(3)?,
                            program_frame: r.get(4)?,
                            idle: r.get(5)?,
                            share: r.get(6)?,
                            dispatches: r.get(7)?,
                            windows: r.get(8)?,
                        })
                    })
                    .map_err(err)?
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(err)?;
                assemble(run, paths)
            }
            Store::Postgres { db, url } => {
                let err = |source| HistoryError::Postgres {
                    url: url.clone(),
                    source,
                };
                let rows = db.query(&run_sql, &[&id]).map_err(err)?;
                let r = rows.first().ok_or(HistoryError::NoRun(id))?;
                let run = RunRow {
                    id: r.get(0),
                    job: r.get(1),
                    added: r.get(2),
                    file: r.get(3),
                    host: r.get(4),
                    kernel: r.get(5),
                    cpus: r.get(6),
                    command: r.get(7),
                    start: r.get(8),
                    duration: r.get(9),
                    idle: r.get(10),
                    window: r.get(11),
                    idle_windows: r.get(12),
                    mode: r.get(13),
                };
                let paths = db
                    .query(path_sql, &[&id])
                    .map_err(err)?
                    .iter()
                    .map(|r| PathRead {
                        process: r.get(0),
                        reason: r.get(1),
                        threads: r.get(2),
                        frames: r.get(3),
                        program_frame: r.get(4),
                        idle: r.get(5),
                        share: r.get(6),
                        dispatches: r.get(7),
                        windows: r.get(8),
                    })
                    .collect();
                assemble(run, paths)
            }
        }
    }
}

#[cfg(test)]
mod tests;
