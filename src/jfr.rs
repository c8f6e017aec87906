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
//! JVM exits, into a private directory, one file per JVM. Not
//! `-XX:StartFlightRecording` in `JAVA_TOOL_OPTIONS`: a runtime without the
//! `jdk.jfr` module (a `jlink` image) would refuse to start with it; through
//! the attach mechanism such a JVM just says so, and the report names it.
//! The directory is writable by the JVMs of any user (a service that drops
//! privileges still writes its file) but not listable, and sticky, so no
//! user can touch another's file.

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use idleflow_format::Record;
use idleflow_tracer::{procfs, Recorder};

/// JFR's recording name for idleflow's recording.
const RECORDING_NAME: &str = "idleflow";

/// The flight recorder's part of a recording in progress.
pub struct Waits {
    dir: tempfile::TempDir,
    thresholds: idleflow_jfr::Thresholds,
}

/// Milliseconds from an option, as ns.
fn threshold_ns(option: &str, ms: f64) -> anyhow::Result<u64> {
    if !(ms.is_finite() && ms >= 0.0) {
        anyhow::bail!("{option} must be 0 or more ms, not {ms}");
    }
    Ok((ms * 1e6).round() as u64)
}

/// Prepares the directory and the options for JVM waits `wait_ms` or
/// longer, and contended monitor enters `monitor_ms` or longer.
pub fn prepare(wait_ms: f64, monitor_ms: f64) -> anyhow::Result<Waits> {
    let thresholds = idleflow_jfr::Thresholds {
        wait_ns: threshold_ns("--wait-threshold", wait_ms)?,
        monitor_enter_ns: threshold_ns("--monitor-threshold", monitor_ms)?,
    };
    let dir = tempfile::Builder::new()
        .prefix("idleflow-jfr-")
        .tempdir()
        .context("cannot create a directory for the JVMs' flight recordings")?;
    crate::agent::check_plain(dir.path(), "the temporary directory")?;
    let jfc = dir.path().join("idleflow.jfc");
    std::fs::write(&jfc, idleflow_jfr::settings(&thresholds))
        .with_context(|| format!("cannot write {}", jfc.display()))?;
    std::fs::set_permissions(&jfc, std::fs::Permissions::from_mode(0o644))
        .with_context(|| format!("cannot set the permissions of {}", jfc.display()))?;
    let out = dir.path().join("out");
    std::fs::create_dir(&out).with_context(|| format!("cannot create {}", out.display()))?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711))
        .with_context(|| format!("cannot set the permissions of {}", dir.path().display()))?;
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o1733))
        .with_context(|| format!("cannot set the permissions of {}", out.display()))?;
    Ok(Waits { dir, thresholds })
}

/// This machine's ephemeral port range (Linux's default if unreadable).
fn ephemeral_ports() -> (u16, u16) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let mut it = s.split_whitespace().map(|p| p.parse::<u16>().ok());
            Some((it.next()??, it.next()??))
        })
        .unwrap_or((32768, 60999))
}

/// Finds the JVMs of a process tree as they start and starts idleflow's
/// flight recording in each ([`Waits::start_in`]). It looks only where there
/// is something to see: at the tree as it is at the start, then at each
/// process of the tree that the recorder saw `exec` ([`Watch::renamed`]).
/// A process is looked at every [`WATCH_PERIOD`] while it may still load a
/// JVM ([`LOADS_JVM_WITHIN`] of its `exec`: the `java` launcher loads
/// `libjvm.so` in its first milliseconds) and, once it has, until the JVM is
/// ready for the attach request. With nothing pending the watcher sleeps
/// without waking: no periodic `/proc` scans, which cost a busy JVM's
/// recording 18 % of idleflow's own CPU. A program that embeds a JVM later
/// than that after its `exec` is not found.
pub struct Watch {
    renamed: mpsc::Sender<Vec<u32>>,
    thread: std::thread::JoinHandle<Watched>,
}

/// What a [`Watch`] did.
#[derive(Debug, Default)]
pub struct Watched {
    /// JVMs whose flight recording idleflow started.
    pub started: Vec<u32>,
    /// JVMs it could not start one in, and why.
    pub notes: Vec<String>,
    /// Each started JVM's flight-recorder repository (see
    /// [`repository_of`]) and when idleflow's recording started in it.
    pub repositories: HashMap<u32, (PathBuf, SystemTime)>,
}

/// Whether `JFR.start` failed only because the JVM is still starting: its
/// attach listener runs, but the flight recorder's diagnostic commands are
/// not registered yet (measured on Tomcat 10 with `--java waits,stacks`:
/// `java.lang.IllegalArgumentException: Unknown diagnostic command`).
fn is_too_early(e: &crate::attach::AttachError) -> bool {
    e.to_string().contains("Unknown diagnostic command")
}

/// How long after its first attach a JVM may still be too early for
/// `JFR.start` ([`is_too_early`]); a JVM without the flight recorder's
/// commands at all answers the same, and gets its note after this.
const REGISTERED_WITHIN: Duration = Duration::from_secs(5);

/// How often a pending process is looked at again.
const WATCH_PERIOD: Duration = Duration::from_millis(100);

/// How long after its `exec` a process may still load a JVM.
const LOADS_JVM_WITHIN: Duration = Duration::from_secs(2);

/// How long a JVM may take to be ready for the attach request (an
/// interpreted JVM under the tree agent takes seconds).
const READY_WITHIN: Duration = Duration::from_secs(60);

/// A process the watcher looks at.
struct Pending {
    since: Instant,
    /// It has `libjvm.so` mapped.
    jvm: bool,
    /// When it first took an attach but was too early for `JFR.start`.
    too_early_since: Option<Instant>,
}

impl Watch {
    /// Watches `root` and its descendants.
    pub fn start(waits: Arc<Waits>, root: u32) -> anyhow::Result<Watch> {
        let (tx, rx) = mpsc::channel::<Vec<u32>>();
        let thread = std::thread::Builder::new()
            .name("idleflow-jvms".into())
            .spawn(move || {
                let mut done = Watched::default();
                let mut seen = HashSet::new();
                let now = Instant::now();
                let mut pending: HashMap<u32, Pending> = crate::attach::process_tree(root)
                    .into_iter()
                    .map(|pid| {
                        (
                            pid,
                            Pending {
                                since: now,
                                jvm: false,
                                too_early_since: None,
                            },
                        )
                    })
                    .collect();
                loop {
                    pending.retain(|&pid, p| {
                        if !procfs::process_exists(pid) {
                            return false;
                        }
                        p.jvm = p.jvm || crate::attach::is_jvm(pid);
                        if !p.jvm {
                            return p.since.elapsed() < LOADS_JVM_WITHIN;
                        }
                        if !crate::attach::is_ready(pid) {
                            return p.since.elapsed() < READY_WITHIN;
                        }
                        let at = SystemTime::now();
                        match waits.start_in(pid) {
                            Ok(()) => {
                                done.started.push(pid);
                                if let Some(dir) = repository_of(pid, &waits.out_dir()) {
                                    done.repositories.insert(pid, (dir, at));
                                }
                            }
                            // The attach listener answers before the JVM
                            // registered the flight recorder's commands:
                            // ask again at the next look.
                            Err(e)
                                if is_too_early(&e)
                                    && p.too_early_since
                                        .get_or_insert_with(Instant::now)
                                        .elapsed()
                                        < REGISTERED_WITHIN =>
                            {
                                return true;
                            }
                            Err(e) => done.notes.push(format!("JVM {pid}: no Java waits: {e}")),
                        }
                        seen.insert(pid);
                        false
                    });
                    let renamed = if pending.is_empty() {
                        rx.recv().ok()
                    } else {
                        match rx.recv_timeout(WATCH_PERIOD) {
                            Ok(pids) => Some(pids),
                            Err(mpsc::RecvTimeoutError::Timeout) => Some(Vec::new()),
                            Err(mpsc::RecvTimeoutError::Disconnected) => None,
                        }
                    };
                    let Some(renamed) = renamed else { break };
                    for pid in renamed {
                        if !seen.contains(&pid) && (pid == root || procfs::descends_from(pid, root))
                        {
                            // An exec starts the clock again.
                            pending.insert(
                                pid,
                                Pending {
                                    since: Instant::now(),
                                    jvm: false,
                                    too_early_since: None,
                                },
                            );
                        }
                    }
                }
                done
            })
            .context("cannot start the thread that finds the JVMs")?;
        Ok(Watch {
            renamed: tx,
            thread,
        })
    }

    /// Hands over the processes the recorder saw `exec` (any process:
    /// those outside the tree are left alone).
    pub fn renamed(&self, pids: Vec<u32>) {
        if !pids.is_empty() {
            let _ = self.renamed.send(pids);
        }
    }

    /// Stops watching; what was done.
    pub fn finish(self) -> Watched {
        drop(self.renamed);
        self.thread.join().unwrap_or_default()
    }
}

/// The directory of JVM `pid`'s flight-recorder repository, where JFR
/// keeps the chunks of all its recordings until it writes them out (by
/// default `<java.io.tmpdir>/<start time>_<pid>`): that of a `.jfr` file
/// the JVM has open outside idleflow's own directory `ours`.
fn repository_of(pid: u32, ours: &Path) -> Option<PathBuf> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()?
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .find(|p| p.extension().is_some_and(|x| x == "jfr") && !p.starts_with(ours))
        .and_then(|p| p.parent().map(Path::to_path_buf))
}

/// The pid in a JFR file name `hotspot-pid-PID-id-N-TIME.jfr`.
fn pid_of(name: &str) -> Option<u32> {
    name.strip_prefix("hotspot-pid-")?
        .split('-')
        .next()?
        .parse()
        .ok()
}

/// How long a converter child may take: a minute, and a second per MiB.
fn convert_timeout(bytes: u64) -> Duration {
    Duration::from_secs(60 + bytes / (1 << 20))
}

/// `idleflow __jfr-convert`: converts one `.jfr` into a recording of its
/// wait records alone (written by [`Waits::collect`]'s parent process).
pub fn convert_child(args: crate::cli::JfrConvertArgs) -> anyhow::Result<()> {
    use idleflow_format::{RunInfo, RunSummary, Writer};
    let file = std::fs::File::create(&args.output)
        .with_context(|| format!("cannot create {}", args.output.display()))?;
    let mut w = Writer::new(
        std::io::BufWriter::new(file),
        &RunInfo::minimal(Vec::new(), 0),
    )?;
    let opts = idleflow_jfr::Options {
        pid: args.pid,
        offset_ns: args.offset_ns,
        thresholds: idleflow_jfr::Thresholds {
            wait_ns: args.threshold_ns,
            monitor_enter_ns: args.monitor_threshold_ns,
        },
        ephemeral_ports: (args.ports_from, args.ports_to),
    };
    let head = idleflow_jfr::convert(&args.input, &opts, |r| w.write(&r))?;
    w.write(&Record::JvmWaits(Box::new(head)))?;
    w.finish(&RunSummary::default())?;
    Ok(())
}

impl Waits {
    /// Converts JVM `pid`'s file in a child process (`__jfr-convert`: a
    /// damaged file may make the parser fail, loop or abort; the child is
    /// killed after [`convert_timeout`]) and copies its records into the
    /// recording. Returns what was read, or `None` if the child failed
    /// (the records it completed are copied all the same).
    fn convert_isolated(
        &self,
        pid: u32,
        path: &std::path::Path,
        offset_ns: i64,
        recorder: &mut Recorder,
    ) -> anyhow::Result<Option<idleflow_format::JvmWaits>> {
        let out = self.dir.path().join(format!("waits-{pid}.idleflow"));
        let (lo, hi) = ephemeral_ports();
        let exe = std::env::current_exe().context("cannot find the idleflow executable")?;
        let mut child = std::process::Command::new(exe)
            .arg("__jfr-convert")
            .arg(path)
            .arg(&out)
            .args([
                pid.to_string(),
                offset_ns.to_string(),
                self.thresholds.wait_ns.to_string(),
                self.thresholds.monitor_enter_ns.to_string(),
                lo.to_string(),
                hi.to_string(),
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .context("cannot start the flight-recording converter")?;
        let bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        let deadline = std::time::Instant::now() + convert_timeout(bytes);
        let ok = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status.success(),
                Ok(None) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break false;
                }
            }
        };
        let mut head = None;
        if let Ok(file) = std::fs::File::open(&out) {
            if let Ok(mut reader) = idleflow_format::Reader::new(std::io::BufReader::new(file)) {
                while let Ok(Some(rec)) = reader.next_complete_record() {
                    match rec {
                        Record::JvmWaits(h) => head = Some(*h),
                        r => recorder.write_after(&r)?,
                    }
                }
            }
        }
        let _ = std::fs::remove_file(&out);
        Ok(if ok { head } else { None })
    }

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
    pub fn start_in(&self, pid: u32) -> Result<(), crate::attach::AttachError> {
        crate::attach::jcmd(
            pid,
            &format!(
                "JFR.start name={RECORDING_NAME} settings={} filename={} dumponexit=true",
                self.dir.path().join("idleflow.jfc").display(),
                self.attach_file(pid).display()
            ),
            "Started recording",
        )
        .map(drop)
    }

    /// Stops idleflow's flight recording in JVM `pid` (started by
    /// [`Waits::start_in`] or by `JAVA_TOOL_OPTIONS`), which writes it.
    pub fn stop_in(&self, pid: u32) -> Result<(), crate::attach::AttachError> {
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
            match self.join_chunks(pid, dir, *since) {
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
    /// `pid`'s file; returns how many.
    fn join_chunks(&self, pid: u32, dir: &Path, since: SystemTime) -> std::io::Result<usize> {
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
        let mut out = std::fs::File::create(
            self.out_dir()
                .join(format!("hotspot-pid-{pid}-id-0-repository.jfr")),
        )?;
        for c in &chunks {
            std::io::copy(&mut std::fs::File::open(c)?, &mut out)?;
        }
        Ok(chunks.len())
    }

    /// Reads every JVM's file into the recording (after
    /// [`Recorder::stop`]); returns a line for each JVM that left none or
    /// whose file could not be read whole, for the report.
    pub fn collect(
        &self,
        recorder: &mut Recorder,
        offset_ns: i64,
        quiet: bool,
    ) -> anyhow::Result<Vec<String>> {
        let mut notes = Vec::new();
        let mut files: Vec<(u32, PathBuf)> = std::fs::read_dir(self.out_dir())
            .with_context(|| format!("cannot read {}", self.out_dir().display()))?
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                Some((pid_of(&name)?, e.path()))
            })
            .filter(|(_, p)| p.extension().is_some_and(|x| x == "jfr"))
            .collect();
        files.sort();
        for (pid, path) in files {
            let started = std::time::Instant::now();
            let head = match self.convert_isolated(pid, &path, offset_ns, recorder) {
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
                        ..Default::default()
                    }
                }
                Err(e) => return Err(e),
            };
            if !quiet {
                eprintln!(
                    "idleflow: JVM {pid}: {} waits of {} events read from its flight recording ({:.1} MiB) in {:.2} s",
                    head.waits,
                    head.events,
                    head.file_bytes as f64 / (1 << 20) as f64,
                    started.elapsed().as_secs_f64()
                );
            }
            for n in &head.notes {
                notes.push(format!("JVM {pid}: flight recording: {n}"));
            }
            recorder.write_after(&Record::JvmWaits(Box::new(head)))?;
        }
        Ok(notes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jfr_file_names_give_the_pid() {
        assert_eq!(
            pid_of("hotspot-pid-20915-id-1-2026_11_23_03_32_14.jfr"),
            Some(20915)
        );
        assert_eq!(pid_of("other.jfr"), None);
    }
}
