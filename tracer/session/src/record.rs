//! The life cycle of one recording session, step by step: check the
//! options, open the recorder, prepare the JVMs' part, start the target,
//! open the window, poll until the target ends (or the duration passes, or
//! the stop flag is raised), stop the JVMs' flight recordings and read them
//! in, finish the recording, then ask the JVMs for their perf maps and
//! resolve the user stacks.
//!
//! Invariant: an error while the window is open leaves the recorded command
//! running unrecorded and waits for it (it is never left behind by a failed
//! `idleflow`); once the window closed the command has exited, or, after
//! `--duration`, runs on as `--pid`'s process would. The recorder's own
//! failures after the window opened (poll, stop, finish) name the
//! `.partial` file that keeps what was recorded up to there.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use idleflow_format::RunSummary;
use idleflow_tracer::{procfs, Recorder, RecorderError};

use crate::agent::{self, Agent};
use crate::jfr::{self, Waits, Watch};
use crate::{attach, resolve, Options, Progress, SessionError, Status};

/// The longest the loop sleeps while a live status line is shown or a
/// JVM policy watches rates ([`crate::jfr::RATE_PERIOD`]), ms.
const STATUS_MS: i32 = 250;

/// What `--java stacks` adds to the command's JVMs besides the light
/// agent: frame pointers kept in JIT-compiled code (so the unwinder walks
/// through it; HotSpot's own JIT code has no CFI).
const JIT_STACK_OPTIONS: &str = "-XX:+PreserveFramePointer";

/// The fallback when no agent library is found: HotSpot writes its perf
/// map at exit (the code of that moment only).
const HOTSPOT_PERF_MAP_OPTIONS: &str = "-XX:+UnlockDiagnosticVMOptions -XX:+DumpPerfMapAtExit";

/// What a session recorded.
#[derive(Debug)]
pub struct Recorded {
    /// The recording.
    pub path: PathBuf,
    /// Its end record.
    pub summary: RunSummary,
    /// When the recorder's events were enabled.
    pub started: Instant,
    /// The recorded command's exit status, as a shell reports it.
    pub exit: Option<i32>,
}

impl Recorded {
    /// The line that ends `record` (`idleflow: LINE`): what was recorded,
    /// in how long, what was lost and what might avoid it (with the
    /// session's `opts`), and how big the file is.
    pub fn summary_line(&self, opts: &Options) -> String {
        let s = &self.summary;
        let bytes = std::fs::metadata(&self.path).map(|m| m.len()).unwrap_or(0);
        let lost: u64 = s.lost_per_cpu.iter().sum();
        let r = &opts.recorder;
        format!(
            "{} dispatches, {} wakeups in {:.2} s, {} lost{}; {:.1} KiB ({:.1} bytes/dispatch) written to {}",
            s.dispatches,
            s.wakeups,
            self.started.elapsed().as_secs_f64(),
            lost,
            if lost > 0 {
                format!(
                    " (per CPU: {:?}; try a larger --ring-size{})",
                    s.lost_per_cpu,
                    if r.stacks_at_waits && r.kernel_stacks {
                        ", or --wait-sample N (the stacks of one wait in N) or a smaller \
                         --stack-size: --stacks waits copies a stack at every wait, which a \
                         saturated machine makes hundreds of thousands a second"
                    } else {
                        ""
                    }
                )
            } else {
                String::new()
            },
            bytes as f64 / 1024.0,
            bytes as f64 / s.dispatches.max(1) as f64,
            self.path.display()
        )
    }
}

/// What the recording follows.
pub(crate) enum Target {
    /// The command idleflow started.
    Command(Child),
    /// A running process (`--pid`).
    Pid(u32),
    /// The whole machine.
    System,
}

impl Target {
    /// Its pids for the recording (empty: all).
    pub(crate) fn pids(&self) -> Vec<u32> {
        match self {
            Target::Command(c) => vec![c.id()],
            Target::Pid(pid) => vec![*pid],
            Target::System => vec![],
        }
    }

    /// A handle that wakes the poll when the target exits.
    pub(crate) fn exit_fd(&self) -> Option<OwnedFd> {
        match self {
            Target::Command(c) => idleflow_tracer::sys::pidfd_open(c.id()).ok(),
            Target::Pid(pid) => idleflow_tracer::sys::pidfd_open(*pid).ok(),
            Target::System => None,
        }
    }

    /// Waits for the command, which runs on unrecorded, so that it is not
    /// left behind.
    pub(crate) fn wait_command(&mut self) {
        if let Target::Command(child) = self {
            let _ = child.wait();
        }
    }
}

/// The JVMs' part of a session.
pub(crate) struct Java {
    /// The entry/exit agent (`--java tree`).
    agent: Option<Agent>,
    /// The flight recorders (`--java waits`).
    pub(crate) waits: Option<Arc<Waits>>,
    /// `--java stacks` with user stacks to name.
    pub(crate) jit_stacks: bool,
    /// What the command's `JAVA_TOOL_OPTIONS` gets.
    tool_options: Vec<String>,
}

/// Why the poll loop ended.
pub(crate) enum End {
    /// The target ended, the duration passed, or the stop flag was raised:
    /// the reason for the recording, and the command's exit status.
    Done(&'static str, Option<i32>),
    /// The recorder failed.
    Failed(RecorderError),
}

/// When the poll loop ends besides the target's exit.
pub(crate) struct Until<'a> {
    pub(crate) deadline: Option<Instant>,
    pub(crate) stop: &'a AtomicBool,
    pub(crate) show_status: bool,
}

/// Records as `opts` says until the target ends, `opts.duration` passes or
/// `stop` is raised (the caller's Ctrl-C handler); says what happens
/// through `progress`.
pub fn record(
    opts: &Options,
    stop: &AtomicBool,
    progress: &mut dyn Progress,
) -> Result<Recorded, SessionError> {
    check(opts)?;
    let mut recorder = Recorder::open(&opts.recorder)?;
    let opts = &choose_java(opts, &mut recorder);
    recorder.enable()?;
    let started = Instant::now();
    let java = prepare_java(opts, &mut recorder, None, progress)?;
    let mut target = launch(opts, &java, progress)?;
    let target_pids = target.pids();
    let exit_fd = target.exit_fd();
    if let Err(e) = recorder.begin(&opts.output, &opts.command, &target_pids) {
        target.wait_command();
        let what = format!("cannot start the recording {}", opts.output.display());
        return Err(SessionError::RecorderAt { what, source: e });
    }
    let watch = match start_watch(&java, &target) {
        Ok(watch) => watch,
        Err(e) => {
            target.wait_command();
            return Err(e);
        }
    };
    let until = Until {
        deadline: opts.duration.map(|d| started + Duration::from_secs_f64(d)),
        stop,
        // A live status line only when no command shares the terminal:
        // redrawing it would garble the command's own output.
        show_status: !opts.quiet && opts.command.is_empty(),
    };
    progress.begun();
    let end = poll_until_end(
        &mut recorder,
        &mut target,
        exit_fd,
        watch.as_ref(),
        &until,
        progress,
    );
    progress.ended();
    let (reason, exit) = match end? {
        End::Done(reason, exit) => (reason, exit),
        End::Failed(e) => return Err(stopped(recorder, target, e, progress)),
    };
    if let Some(a) = &java.agent {
        recorder.set_agent_notes(a.notes());
    }
    // JVMs that ran before the window (`--pid`'s) and redefined classes
    // when idleflow's flight recording started in them: their compiled
    // code of before is gone, and the perf map written when the window
    // closes would name other code at its addresses.
    let mut stale_jit = idleflow_unwind::StaleJitBefore::default();
    if let (Some(w), Some(watch)) = (&java.waits, watch) {
        let jfr_started = read_waits(opts, w, watch, &mut recorder, progress)?;
        if opts.command.is_empty() {
            stale_jit.extend(jfr_started);
        }
    }
    let kept = kept_so_far(recorder.partial_path().as_deref());
    let (path, summary) = recorder
        .finish(reason, exit)
        .map_err(SessionError::at(format!(
            "cannot finish the recording {}{kept}",
            opts.output.display()
        )))?;
    if java.jit_stacks {
        resolve::write_perf_maps(target_pids.first().copied(), opts.quiet, progress);
    }
    if opts.recorder.user_stack_bytes > 0 && opts.resolve {
        resolve::resolve_stacks_with(&path, &stale_jit, opts.quiet, progress)?;
    }
    Ok(Recorded {
        path,
        summary,
        started,
        exit,
    })
}

/// `opts` with the Java modes chosen for `recorder`, said in its header;
/// walks set up for `vm`.
pub(crate) fn choose_java(opts: &Options, recorder: &mut Recorder) -> Options {
    let stacks_at_waits = opts.recorder.stacks_at_waits;
    let (java, modes, why) = opts.java.chosen(recorder.is_bpf(), stacks_at_waits);
    if java.vm {
        recorder.walk_java_frames();
    }
    recorder.set_java_frames(modes, why);
    Options {
        java,
        ..opts.clone()
    }
}

/// The JVMs of the target's process tree get their flight recorder
/// started through the attach mechanism as soon as they can take it.
pub(crate) fn start_watch(java: &Java, target: &Target) -> Result<Option<Watch>, SessionError> {
    match (&java.waits, target) {
        (Some(w), Target::Command(c)) => Some(Watch::start(w.clone(), c.id())),
        (Some(w), Target::Pid(pid)) => Some(Watch::start(w.clone(), *pid)),
        _ => None,
    }
    .transpose()
}

/// Hands the JVM watcher its news after a poll of the recorder: the
/// processes that ran `exec`, and every [`jfr::RATE_PERIOD`] (since
/// `last_rate`) how often the JVMs' threads block.
pub(crate) fn tend_watch(recorder: &mut Recorder, w: &Watch, last_rate: &mut Instant) {
    w.renamed(recorder.take_renamed_processes());
    if last_rate.elapsed() >= jfr::RATE_PERIOD {
        *last_rate = Instant::now();
        recorder.count_blocking_switch_outs(&w.counted());
        w.blocking(
            idleflow_tracer::sys::monotonic_ns(),
            &recorder.blocking_switch_outs(),
        );
    }
}

/// The options a session cannot run with.
pub(crate) fn check(opts: &Options) -> Result<(), SessionError> {
    if let Some(d) = opts.duration {
        if !(d.is_finite() && d > 0.0) {
            return Err(SessionError::Duration { seconds: d });
        }
    }
    let r = &opts.recorder;
    if r.wait_sample_period > 1 && !(r.stacks_at_waits && r.kernel_stacks) {
        return Err(SessionError::WaitSample {
            period: r.wait_sample_period,
        });
    }
    if let Some(pid) = opts.pid {
        if !procfs::process_exists(pid) {
            return Err(SessionError::NoSuchProcess { pid });
        }
    }
    Ok(())
}

/// Prepares the agent's work area (`--java tree`, commands only), the
/// flight recorders' settings (`--java waits`, a command's or `--pid`'s
/// JVMs) and the command's `JAVA_TOOL_OPTIONS`.
pub(crate) fn prepare_java(
    opts: &Options,
    recorder: &mut Recorder,
    flight_keep: Option<Duration>,
    progress: &mut dyn Progress,
) -> Result<Java, SessionError> {
    let j = &opts.java;
    let has_command = !opts.command.is_empty();
    let jit_stacks = j.stacks && opts.recorder.user_stack_bytes > 0;
    // The JVM agent's work area and tree dumps live in a private directory
    // that disappears with this process.
    let agent = if j.tree && has_command {
        agent::prepare(opts, jit_stacks, progress)?
    } else {
        None
    };
    // Waits: the command's JVMs, or the JVMs of --pid (attached to).
    let waits = if j.waits && (has_command || opts.pid.is_some()) {
        Some(Arc::new(jfr::prepare(
            j.wait_threshold_ms,
            j.monitor_threshold_ms,
            j.all_waits_below,
            recorder.cpus().len(),
            flight_keep,
            j.waits_where_vm_cannot,
        )?))
    } else {
        None
    };
    recorder.set_java_waits(waits.is_some() || opts.java.vm);
    let mut tool_options: Vec<String> = agent.iter().map(|a| a.java_options.clone()).collect();
    if jit_stacks && has_command {
        tool_options.push(JIT_STACK_OPTIONS.to_string());
        if agent.is_none() {
            // The light agent writes the perf map as the JVM compiles;
            // without it, HotSpot writes its own at exit.
            tool_options.push(match agent::library(j.agent.as_deref(), progress)? {
                Some(lib) => agent::perf_map_options(&lib),
                None => HOTSPOT_PERF_MAP_OPTIONS.to_string(),
            });
        }
    }
    if let Some(a) = &agent {
        recorder.attach_work_area(a.work_area.clone(), a.tree_dir.clone());
    }
    Ok(Java {
        agent,
        waits,
        jit_stacks,
        tool_options,
    })
}

/// Starts the command (with the JVM options after the user's own
/// `JAVA_TOOL_OPTIONS`, which the JVM reads first), or names `--pid`'s
/// process, or the whole machine.
pub(crate) fn launch(
    opts: &Options,
    java: &Java,
    progress: &mut dyn Progress,
) -> Result<Target, SessionError> {
    let Some(program) = opts.command.first() else {
        if let Some(pid) = opts.pid {
            return Ok(Target::Pid(pid));
        }
        if opts.duration.is_none() && !opts.quiet {
            progress
                .info("recording all CPUs until Ctrl-C (give --duration S or -- CMD to bound it)");
        }
        return Ok(Target::System);
    };
    let mut command = Command::new(program);
    command.args(&opts.command[1..]);
    if !java.tool_options.is_empty() {
        let mut all = std::env::var("JAVA_TOOL_OPTIONS").unwrap_or_default();
        for o in &java.tool_options {
            if !all.trim().is_empty() {
                all.push(' ');
            }
            all.push_str(o);
        }
        command.env("JAVA_TOOL_OPTIONS", all);
    }
    let child = command
        .spawn()
        .map_err(SessionError::io(format!("cannot run `{program}`")))?;
    if let Some(a) = &java.agent {
        a.set_root(child.id());
    }
    Ok(Target::Command(child))
}

/// Polls the recorder (woken by the target's exit through `exit_fd`) and
/// hands the JVM watcher its news, until the recording ends.
fn poll_until_end(
    recorder: &mut Recorder,
    target: &mut Target,
    exit_fd: Option<OwnedFd>,
    watch: Option<&Watch>,
    until: &Until<'_>,
    progress: &mut dyn Progress,
) -> Result<End, SessionError> {
    let mut last_status = Instant::now();
    let mut last_rate = Instant::now();
    loop {
        if until.show_status && last_status.elapsed() >= Duration::from_millis(250) {
            last_status = Instant::now();
            progress.status(&Status {
                dispatches: recorder.dispatches_written(),
                lost: recorder.lost_so_far(),
                bytes: recorder.bytes_written(),
            });
        }
        let mut max_wait = if until.show_status || watch.is_some() {
            STATUS_MS
        } else {
            i32::MAX
        };
        if let Some(d) = until.deadline {
            let left = d.saturating_duration_since(Instant::now()).as_millis();
            max_wait = max_wait.min(left.min(i32::MAX as u128) as i32);
        }
        if let Err(e) = recorder.poll(exit_fd.as_ref().map(|f| f.as_fd()), max_wait) {
            return Ok(End::Failed(e));
        }
        match watch {
            Some(w) => tend_watch(recorder, w, &mut last_rate),
            None => drop(recorder.take_renamed_processes()),
        }
        if let Some((reason, exit)) = ended(target, until)? {
            return Ok(End::Done(reason, exit));
        }
    }
}

/// Whether the recording ends now: why, and the command's exit status.
pub(crate) fn ended(
    target: &mut Target,
    until: &Until<'_>,
) -> Result<Option<(&'static str, Option<i32>)>, SessionError> {
    let waiting = || SessionError::io("waiting for the command");
    if let Target::Command(child) = target {
        if let Some(status) = child.try_wait().map_err(waiting())? {
            return Ok(Some(("command exited", Some(exit_code(status)))));
        }
    }
    if let Target::Pid(pid) = *target {
        if !procfs::process_exists(pid) {
            return Ok(Some(("target exited", None)));
        }
    }
    if until.deadline.is_some_and(|d| Instant::now() >= d) {
        return Ok(Some(("duration", None)));
    }
    if !until.stop.load(Ordering::Relaxed) {
        return Ok(None);
    }
    // A Ctrl-C from the terminal reached the command too; a signal sent to
    // idleflow alone is passed on, so the command ends with the recording.
    if let Target::Command(child) = target {
        if child.try_wait().ok().flatten().is_none() {
            // SAFETY: kill has no memory effects; the pid is our unreaped child.
            unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        }
        let status = child.wait().map_err(waiting())?;
        return Ok(Some(("interrupted", Some(exit_code(status)))));
    }
    Ok(Some(("interrupted", None)))
}

/// The error of a recording the recorder stopped: with a command, said
/// at once (the command runs on, and is waited for), else returned.
fn stopped(
    recorder: Recorder,
    mut target: Target,
    e: RecorderError,
    progress: &mut dyn Progress,
) -> SessionError {
    let what = format!(
        "recording stopped{}",
        kept_so_far(recorder.partial_path().as_deref())
    );
    drop(recorder);
    let e = SessionError::RecorderAt { what, source: e };
    if let Target::Command(_) = target {
        progress.error(&crate::one_line(&e));
        progress.info("the command runs on, unrecorded, until it exits");
        target.wait_command();
        return SessionError::StoppedEarly;
    }
    e
}

/// Closes the window, stops the flight recordings of the JVMs that still
/// run (those that exited wrote theirs then), joins what killed JVMs left,
/// and reads every JVM's file into the recording. Returns when idleflow's
/// flight recording had started in each JVM (ns, the recording's clock).
fn read_waits(
    opts: &Options,
    w: &Waits,
    watch: Watch,
    recorder: &mut Recorder,
    progress: &mut dyn Progress,
) -> Result<std::collections::HashMap<u32, u64>, SessionError> {
    let watched = watch.finish();
    // The window closes first: reading the JVMs' files is not recorded.
    let kept = kept_so_far(recorder.partial_path().as_deref());
    recorder
        .stop()
        .map_err(SessionError::at(format!("cannot stop the recording{kept}")))?;
    let mut notes = watched.notes.clone();
    for &jvm in &watched.started {
        if attach::is_jvm(jvm) {
            if let Err(e) = w.stop_in(jvm) {
                notes.push(format!(
                    "JVM {jvm}: its flight recording could not be stopped: {e}"
                ));
            }
        }
    }
    notes.extend(w.salvage(&watched));
    if watched.started.is_empty() && watched.read.is_empty() && notes.is_empty() && !opts.quiet {
        progress.note("no JVM ran in the recorded processes: no Java waits");
    }
    let offset = recorder.clock_offset_ns();
    notes.extend(w.collect(recorder, &watched, offset, opts.quiet, progress)?);
    recorder.set_java_notes(notes);
    Ok(watched.jfr_started)
}

/// Exit status of a finished child as a shell would report it.
fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1)
}

/// Where what was recorded before an error is kept, as a clause of the
/// error message.
fn kept_so_far(partial: Option<&Path>) -> String {
    partial.map_or(String::new(), |p| {
        format!(
            "; what was recorded up to here is in {p} (`idleflow report {p}` reads it up to its last complete record)",
            p = p.display()
        )
    })
}
