//! `record --java waits`: turn on the flight recorder (JFR) of every JVM of
//! the recorded command's process tree (or of `--pid`'s), with idleflow's
//! own settings and recording name, and, once the window has closed, read
//! what each JVM wrote into the recording ([`idleflow_jfr`]).
//!
//! A watcher thread finds the JVMs of the tree as they start and, as soon
//! as one can take an attach ([`crate::attach::is_ready`]), starts a
//! recording named `idleflow` in it (so it never collides with one the user
//! started) with a settings file that enables only the wait events, with
//! stacks, above the threshold, written when idleflow stops it or when the
//! JVM exits, into a private directory, one file per JVM. Under a flight
//! recorder (`record --flight`) the recording keeps the window on the
//! JVM's disk (`maxage`) and writes nothing of its own: each dump asks for
//! its span ([`Waits::window_waits`]), and the recording is discarded at
//! the end. Not
//! `-XX:StartFlightRecording` in `JAVA_TOOL_OPTIONS`: a runtime without the
//! `jdk.jfr` module (a `jlink` image) would refuse to start with it; through
//! the attach mechanism such a JVM just says so, and the report names it.
//! The directory is writable by the JVMs of any user (a service that drops
//! privileges still writes its file) but not listable, and sticky, so no
//! user can touch another's file.
//!
//! Submodules: [`watch`] (the watcher thread), [`policy`] (when a JVM
//! records every wait), [`convert`] (reading each JVM's file in a child
//! process, and that child's work).
//!
//! Invariant: idleflow only ever starts and stops its own recordings (named
//! [`RECORDING_NAME`] and [`ALL_WAITS_NAME`]) in a JVM, never one the user
//! started, and only through the attach mechanism's rules
//! ([`crate::attach`]); every JVM it started one in is either stopped,
//! salvaged from its repository, or named in a note.

pub(crate) mod convert;
mod policy;
mod watch;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use idleflow_format::Record;
use idleflow_tracer::Recorder;

use crate::agent::set_mode;
use crate::attach::AttachError;
use crate::{Progress, SessionError};
pub use watch::{Watch, WatchAsker, Watched, RATE_PERIOD};

/// JFR's recording name for idleflow's recording.
const RECORDING_NAME: &str = "idleflow";

/// The flight recorder's part of a recording in progress.
#[derive(Debug)]
pub struct Waits {
    dir: tempfile::TempDir,
    thresholds: idleflow_jfr::Thresholds,
    /// Blocking switch-outs per second (the machine's) under which a JVM
    /// records every wait ([`policy::Rarity`]); 0: never.
    all_waits_below: f64,
    /// Under a flight recorder (`record --flight`): how much the JVMs'
    /// recordings keep (JFR's `maxage`), written by no one unless a dump
    /// asks for its window ([`Waits::window_waits`]).
    flight_keep: Option<Duration>,
    /// Only in JVMs whose structures idleflow cannot read (`--java`'s
    /// default: the others' waits are read from their structures).
    pub(crate) only_unreadable: bool,
}

/// Numbers the converter's output files, which dumps written side by side
/// must not share.
static CONVERSIONS: AtomicU64 = AtomicU64::new(0);

/// JFR's recording name for the recording of every wait that idleflow's
/// policy runs beside [`RECORDING_NAME`]'s while a JVM waits rarely: JFR
/// records an event at the lowest threshold of the recordings that run, so
/// idleflow's file gets every wait then. It writes no file of its own.
const ALL_WAITS_NAME: &str = "idleflow-all";

/// Milliseconds from an option, as ns.
fn threshold_ns(option: &'static str, ms: f64) -> Result<u64, SessionError> {
    if !(ms.is_finite() && ms >= 0.0) {
        return Err(SessionError::Threshold { option, ms });
    }
    Ok((ms * 1e6).round() as u64)
}

/// Prepares the directory and the options for JVM waits `wait_ms` or
/// longer, and contended monitor enters `monitor_ms` or longer; every wait
/// while a JVM's threads block fewer than `all_below` times a second per
/// CPU, of `cpus`. Under a flight recorder, `flight_keep` is how much of
/// their recordings the JVMs keep. `only_unreadable`: only in the JVMs
/// whose structures cannot be read.
pub fn prepare(
    wait_ms: f64,
    monitor_ms: f64,
    all_below: f64,
    cpus: usize,
    flight_keep: Option<Duration>,
    only_unreadable: bool,
) -> Result<Waits, SessionError> {
    let thresholds = idleflow_jfr::Thresholds {
        wait_ns: threshold_ns("--wait-threshold", wait_ms)?,
        monitor_enter_ns: threshold_ns("--monitor-threshold", monitor_ms)?,
    };
    if !(all_below.is_finite() && all_below >= 0.0) {
        return Err(SessionError::AllWaitsBelow { rate: all_below });
    }
    // With every threshold at 0 there is nothing more to record.
    let all_waits_below = if thresholds == idleflow_jfr::Thresholds::all(0) {
        0.0
    } else {
        all_below * cpus.max(1) as f64
    };
    let dir = idleflow_format::files::private_tempdir("idleflow-jfr-").map_err(|e| {
        SessionError::io("cannot create a directory for the JVMs' flight recordings")(e.into())
    })?;
    crate::agent::check_plain(dir.path(), "the temporary directory")?;
    let settings = [
        ("idleflow.jfc", thresholds),
        ("idleflow-all.jfc", idleflow_jfr::Thresholds::all(0)),
    ];
    for (name, t) in settings {
        let jfc = dir.path().join(name);
        std::fs::write(&jfc, idleflow_jfr::settings(&t))
            .map_err(SessionError::io(format!("cannot write {}", jfc.display())))?;
        set_mode(&jfc, 0o644)?;
    }
    let out = dir.path().join("out");
    std::fs::create_dir(&out)
        .map_err(SessionError::io(format!("cannot create {}", out.display())))?;
    set_mode(dir.path(), 0o711)?;
    set_mode(&out, 0o1733)?;
    Ok(Waits {
        dir,
        thresholds,
        all_waits_below,
        flight_keep,
        only_unreadable,
    })
}

impl Waits {
    /// Where the JVMs write their files.
    fn out_dir(&self) -> PathBuf {
        self.dir.path().join("out")
    }

    /// The file JVM `pid` writes when idleflow stops its recording.
    fn attach_file(&self, pid: u32) -> PathBuf {
        self.out_dir()
            .join(format!("hotspot-pid-{pid}-id-0-attach.jfr"))
    }

    /// Starts idleflow's flight recording in the running JVM `pid`, through
    /// its attach mechanism; it is written to this directory when
    /// [`Waits::stop_in`] stops it or the JVM exits.
    /// Under a flight recorder it keeps [`Waits::flight_keep`] on the
    /// JVM's disk and writes nothing of its own.
    pub fn start_in(&self, pid: u32) -> Result<(), AttachError> {
        let settings = self.dir.path().join("idleflow.jfc");
        let command = match self.flight_keep {
            Some(keep) => format!(
                "JFR.start name={RECORDING_NAME} settings={} maxage={}s",
                settings.display(),
                keep.as_secs().max(1)
            ),
            None => format!(
                "JFR.start name={RECORDING_NAME} settings={} filename={} dumponexit=true",
                settings.display(),
                self.attach_file(pid).display()
            ),
        };
        crate::attach::jcmd(pid, &command, "Started recording").map(drop)
    }

    /// Writes the last `last` of idleflow's recording in JVM `pid` (at
    /// JFR's chunk granularity: perhaps more) into a file of its own, and
    /// returns it.
    fn dump_in(&self, pid: u32, last: Duration) -> Result<PathBuf, AttachError> {
        let n = CONVERSIONS.fetch_add(1, Ordering::Relaxed);
        let file = self.dir.path().join(format!("window-{pid}-{n}.jfr"));
        crate::attach::jcmd(
            pid,
            &format!(
                "JFR.dump name={RECORDING_NAME} filename={} begin=-{}s",
                file.display(),
                last.as_secs() + 1
            ),
            "Dumped recording",
        )?;
        Ok(file)
    }

    /// Stops idleflow's recording in JVM `pid` and discards it (a flight
    /// recorder's: its dumps took what they needed).
    pub fn discard_in(&self, pid: u32) -> Result<(), AttachError> {
        crate::attach::jcmd(
            pid,
            &format!("JFR.stop name={RECORDING_NAME}"),
            "Stopped recording",
        )
        .map(drop)
    }

    /// The waits of the last `last` of every JVM `watched` started
    /// idleflow's recording in and that still runs, as records for a
    /// flight recorder's dump (a [`Record::JvmWaits`] after each JVM's
    /// waits), and a line for the report for each JVM that gave none.
    pub fn window_waits(
        &self,
        watched: &Watched,
        last: Duration,
        offset_ns: i64,
    ) -> (Vec<Record>, Vec<String>) {
        let mut records = Vec::new();
        let mut notes = watched.notes.clone();
        for &pid in &watched.started {
            if !crate::attach::is_jvm(pid) {
                continue;
            }
            let file = match self.dump_in(pid, last) {
                Ok(f) => f,
                Err(e) => {
                    notes.push(format!("JVM {pid}: its waits could not be dumped: {e}"));
                    continue;
                }
            };
            let all_waits = watched.all_waits.get(&pid).map_or(&[][..], Vec::as_slice);
            let mut sink = |r: &Record| {
                records.push(r.clone());
                Ok(())
            };
            let owner = idleflow_format::files::process_uid(pid);
            let head = self.convert_isolated(pid, owner, &file, offset_ns, all_waits, &mut sink);
            let _ = std::fs::remove_file(&file);
            match head {
                Ok(Some(mut head)) => {
                    head.own_tids = watched.own_tids.get(&pid).cloned().unwrap_or_default();
                    head.attached_ns = watched.attached.get(&pid).copied().unwrap_or(0);
                    for n in &head.notes {
                        notes.push(format!("JVM {pid}: flight recording: {n}"));
                    }
                    records.push(Record::JvmWaits(Box::new(head)));
                }
                Ok(None) => notes.push(format!(
                    "JVM {pid}: the waits it dumped could not be read whole (the converter \
                     failed or timed out)"
                )),
                Err(e) => notes.push(format!("JVM {pid}: {}", crate::one_line(&e))),
            }
        }
        (records, notes)
    }

    /// Starts the recording of every wait in JVM `pid` ([`ALL_WAITS_NAME`]).
    fn start_all_in(&self, pid: u32) -> Result<(), AttachError> {
        crate::attach::jcmd(
            pid,
            &format!(
                "JFR.start name={ALL_WAITS_NAME} settings={}",
                self.dir.path().join("idleflow-all.jfc").display()
            ),
            "Started recording",
        )
        .map(drop)
    }

    /// Stops (and discards) the recording of every wait in JVM `pid`.
    fn stop_all_in(&self, pid: u32) -> Result<(), AttachError> {
        crate::attach::jcmd(
            pid,
            &format!("JFR.stop name={ALL_WAITS_NAME}"),
            "Stopped recording",
        )
        .map(drop)
    }

    /// Stops idleflow's flight recording in JVM `pid` (started by
    /// [`Waits::start_in`] or by `JAVA_TOOL_OPTIONS`), which writes it.
    pub fn stop_in(&self, pid: u32) -> Result<(), AttachError> {
        crate::attach::jcmd(
            pid,
            &format!(
                "JFR.stop name={RECORDING_NAME} filename={}",
                self.attach_file(pid).display()
            ),
            "Stopped recording",
        )
        .map(drop)
    }

    /// For each JVM in `watched` that ended without writing its recording
    /// (killed with SIGKILL, crashed), joins the chunks its repository
    /// still holds from the time idleflow's recording started in it into
    /// the file [`Waits::collect`] reads: JFR flushes its chunk every
    /// second, so they hold the waits up to about a second before the
    /// end. Call after stopping the JVMs that still run. Returns a line
    /// for the report for each such JVM.
    pub fn salvage(&self, watched: &Watched) -> Vec<String> {
        let mut notes = Vec::new();
        for &pid in &watched.started {
            // JFR creates the file empty when the recording starts, and
            // fills it when the recording is stopped or the JVM exits.
            let file = self.attach_file(pid);
            if std::fs::metadata(&file).is_ok_and(|m| m.len() > 0) {
                continue;
            }
            let _ = std::fs::remove_file(&file);
            let Some((dir, since)) = watched.repositories.get(&pid) else {
                notes.push(format!(
                    "JVM {pid}: ended without writing its flight recording (killed?), \
                     and its repository was not found: no Java waits"
                ));
                continue;
            };
            let owner = watched.owners.get(&pid).copied();
            match self.join_chunks(pid, owner, dir, *since) {
                Ok(0) => notes.push(format!(
                    "JVM {pid}: ended without writing its flight recording (killed?), \
                     and left no chunks in its repository {}: no Java waits",
                    dir.display()
                )),
                Ok(n) => notes.push(format!(
                    "JVM {pid}: ended without writing its flight recording (killed?): \
                     its waits were read from the {n} chunk{} it left in its repository {}, \
                     up to its last flush (about a second before it ended)",
                    if n == 1 { "" } else { "s" },
                    dir.display()
                )),
                Err(e) => notes.push(format!(
                    "JVM {pid}: ended without writing its flight recording (killed?), \
                     and its repository {} could not be read: {e}",
                    dir.display()
                )),
            }
        }
        notes
    }

    /// Concatenates the chunk files of `dir` written since `since` (a
    /// `.jfr` file is a sequence of chunks), in time order, into JVM
    /// `pid`'s file; returns how many. The chunks are the JVM's (its user
    /// `owner`'s): read under `files::open_untrusted`; the file is made new
    /// in the JVMs' shared directory, never through a link planted there.
    fn join_chunks(
        &self,
        pid: u32,
        owner: Option<u32>,
        dir: &Path,
        since: SystemTime,
    ) -> std::io::Result<usize> {
        let mut chunks: Vec<PathBuf> = std::fs::read_dir(dir)?
            .flatten()
            .filter(|e| {
                e.metadata()
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| t >= since)
            })
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "jfr"))
            .collect();
        // Chunk files are named by their start time.
        chunks.sort();
        if chunks.is_empty() {
            return Ok(0);
        }
        let owners: Vec<u32> = owner.into_iter().collect();
        let out_dir = idleflow_format::files::Dir::open(&self.out_dir())?;
        let name = format!("hotspot-pid-{pid}-id-0-repository.jfr");
        let mut out = out_dir.create_new(std::ffi::OsStr::new(&name))?;
        let mut left = convert::JFR_LIMIT;
        for c in &chunks {
            let (chunk, _) = idleflow_format::files::open_untrusted(c, &owners, left)
                .map_err(std::io::Error::other)?;
            left = left.saturating_sub(std::io::copy(
                &mut std::io::Read::take(chunk, left),
                &mut out,
            )?);
        }
        Ok(chunks.len())
    }

    /// Reads every JVM's file into the recording (after
    /// [`Recorder::stop`]), with what `watched` knows of it (when it
    /// recorded every wait, its threads that worked for idleflow); returns
    /// a line for each JVM that left none or whose file could not be read
    /// whole, for the report.
    pub fn collect(
        &self,
        recorder: &mut Recorder,
        watched: &Watched,
        offset_ns: i64,
        quiet: bool,
        progress: &mut dyn Progress,
    ) -> Result<Vec<String>, SessionError> {
        let mut notes = Vec::new();
        let mut files: Vec<(u32, PathBuf)> = std::fs::read_dir(self.out_dir())
            .map_err(SessionError::io(format!(
                "cannot read {}",
                self.out_dir().display()
            )))?
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                Some((convert::pid_of(&name)?, e.path()))
            })
            .filter(|(_, p)| p.extension().is_some_and(|x| x == "jfr"))
            .collect();
        files.sort();
        for (pid, path) in files {
            let started = std::time::Instant::now();
            let all_waits = watched.all_waits.get(&pid).map_or(&[][..], Vec::as_slice);
            let mut sink = |r: &Record| {
                recorder
                    .write_after(r)
                    .map_err(SessionError::at("cannot write the JVMs' waits"))
            };
            let owner = watched
                .owners
                .get(&pid)
                .copied()
                .or_else(|| idleflow_format::files::process_uid(pid));
            let head =
                match self.convert_isolated(pid, owner, &path, offset_ns, all_waits, &mut sink) {
                    Ok(Some(head)) => head,
                    Ok(None) => {
                        let note = format!(
                        "its flight recording {} could not be read whole (the converter failed or \
                         timed out; the waits read before are kept)",
                        path.display()
                    );
                        notes.push(format!("JVM {pid}: {note}"));
                        idleflow_format::JvmWaits {
                            pid,
                            source: "jfr".into(),
                            file: path.display().to_string(),
                            threshold_ns: self.thresholds.wait_ns,
                            monitor_enter_threshold_ns: Some(self.thresholds.monitor_enter_ns),
                            clock_offset_ns: offset_ns,
                            all_waits: all_waits.to_vec(),
                            ..Default::default()
                        }
                    }
                    Err(e) => return Err(e),
                };
            let mut head = head;
            head.own_tids = watched.own_tids.get(&pid).cloned().unwrap_or_default();
            head.attached_ns = watched.attached.get(&pid).copied().unwrap_or(0);
            if !quiet {
                progress.info(&format!(
                    "JVM {pid}: {} waits of {} events read from its flight recording ({:.1} MiB) in {:.2} s",
                    head.waits,
                    head.events,
                    head.file_bytes as f64 / (1 << 20) as f64,
                    started.elapsed().as_secs_f64()
                ));
            }
            for n in &head.notes {
                notes.push(format!("JVM {pid}: flight recording: {n}"));
            }
            recorder.write_after(&Record::JvmWaits(Box::new(head)))?;
        }
        Ok(notes)
    }
}
