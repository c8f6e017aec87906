//! `idleflow record`: start the recorder, launch or watch the target, stop,
//! finalize, print one summary line.

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use idleflow_tracer::{procfs, RecordOptions, Recorder};

use crate::cli::{JavaMode, RecordArgs};

/// The longest the loop sleeps while a live status line is shown or a
/// JVM policy watches rates ([`crate::jfr::RATE_PERIOD`]), ms.
const STATUS_MS: i32 = 250;

enum Target {
    Command(std::process::Child),
    Pid(u32),
    System,
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
fn kept_so_far(partial: Option<&std::path::Path>) -> String {
    partial.map_or(String::new(), |p| {
        format!(
            "; what was recorded up to here is in {p} (`idleflow report {p}` reads it up to its last complete record)",
            p = p.display()
        )
    })
}

pub fn run(args: RecordArgs) -> anyhow::Result<u8> {
    if let Some(d) = args.duration {
        if !(d.is_finite() && d > 0.0) {
            bail!("--duration must be a positive number of seconds, not {d}");
        }
    }
    if args.wait_sample > 1 && (args.stacks != crate::cli::StacksAt::Waits || args.no_stacks) {
        bail!("--wait-sample {} samples the stacks of `--stacks waits`; add --stacks waits, or leave --wait-sample out", args.wait_sample);
    }
    if let Some(pid) = args.pid {
        if !procfs::process_exists(pid) {
            bail!("--pid {pid}: no such process");
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .context("cannot install the Ctrl-C handler")?;
    }

    let mut recorder = Recorder::open(&RecordOptions {
        ring_bytes: args.ring_size,
        drain_priority: args.drain_priority,
        all_switch_samples: args.all_switch_samples,
        kernel_stacks: !args.no_stacks,
        user_stack_bytes: if args.no_stacks { 0 } else { args.stack_size },
        stacks_at_waits: args.stacks == crate::cli::StacksAt::Waits,
        wait_sample_period: args.wait_sample,
        waker_stacks: !args.no_waker_stacks,
        waker_sample_period: args.waker_sample,
        waker_stack_bytes: args.waker_stack_size,
    })?;
    recorder.enable()?;
    let started = Instant::now();
    // The JVM agent's work area and tree dumps live in a private directory
    // that disappears with this process.
    let java = |m| !args.no_agent && args.java.contains(&m);
    let jit_stacks = java(JavaMode::Stacks) && !args.no_stacks && args.stack_size > 0;
    let agent = if java(JavaMode::Tree) && !args.command.is_empty() {
        crate::agent::prepare(&args, jit_stacks)?
    } else {
        None
    };
    // Waits: the command's JVMs, or the JVMs of --pid (attached to).
    let waits = if java(JavaMode::Waits) && (!args.command.is_empty() || args.pid.is_some()) {
        Some(std::sync::Arc::new(crate::jfr::prepare(
            args.wait_threshold,
            args.monitor_threshold.unwrap_or(args.wait_threshold),
            args.all_waits_below,
            recorder.cpus().len(),
        )?))
    } else {
        None
    };
    recorder.set_java_waits(waits.is_some());
    let mut java_options: Vec<String> = agent.iter().map(|a| a.java_options.clone()).collect();
    if jit_stacks && !args.command.is_empty() {
        java_options.push(JIT_STACK_OPTIONS.to_string());
        if agent.is_none() {
            // The light agent writes the perf map as the JVM compiles;
            // without it, HotSpot writes its own at exit.
            java_options.push(match crate::agent::library(&args)? {
                Some(lib) => crate::agent::perf_map_options(&lib),
                None => HOTSPOT_PERF_MAP_OPTIONS.to_string(),
            });
        }
    }
    if let Some(a) = &agent {
        recorder.attach_work_area(a.work_area.clone(), a.tree_dir.clone());
    }
    let (target, target_pids) = if !args.command.is_empty() {
        let mut command = Command::new(&args.command[0]);
        command.args(&args.command[1..]);
        if !java_options.is_empty() {
            // After the user's own options, which the JVM reads first.
            let mut all = std::env::var("JAVA_TOOL_OPTIONS").unwrap_or_default();
            for o in &java_options {
                if !all.trim().is_empty() {
                    all.push(' ');
                }
                all.push_str(o);
            }
            command.env("JAVA_TOOL_OPTIONS", all);
        }
        let child = command
            .spawn()
            .with_context(|| format!("cannot run `{}`", args.command[0]))?;
        let pid = child.id();
        if let Some(a) = &agent {
            a.set_root(pid);
        }
        (Target::Command(child), vec![pid])
    } else if let Some(pid) = args.pid {
        (Target::Pid(pid), vec![pid])
    } else {
        if args.duration.is_none() && !args.quiet {
            eprintln!("idleflow: recording all CPUs until Ctrl-C (give --duration S or -- CMD to bound it)");
        }
        (Target::System, vec![])
    };
    let mut target = target;
    // Woken by the target's exit instead of checking for it.
    let exit_fd = match &target {
        Target::Command(c) => idleflow_tracer::sys::pidfd_open(c.id()).ok(),
        Target::Pid(pid) => idleflow_tracer::sys::pidfd_open(*pid).ok(),
        Target::System => None,
    };
    let begun = recorder
        .begin(&args.output, &args.command, &target_pids)
        .with_context(|| format!("cannot start the recording {}", args.output.display()));
    if let Err(e) = begun {
        if let Target::Command(child) = &mut target {
            // The command runs on unrecorded; wait so that it is not left behind.
            let _ = child.wait();
        }
        return Err(e);
    }

    // The JVMs of the target's process tree get their flight recorder
    // started through the attach mechanism as soon as they can take it.
    let watch = match (&waits, &target) {
        (Some(w), Target::Command(c)) => Some(crate::jfr::Watch::start(w.clone(), c.id())?),
        (Some(w), Target::Pid(pid)) => Some(crate::jfr::Watch::start(w.clone(), *pid)?),
        _ => None,
    };

    let deadline = args.duration.map(|d| started + Duration::from_secs_f64(d));
    // A live status line only when no command shares the terminal: redrawing
    // it would garble the command's own output.
    let show_status = !args.quiet && args.command.is_empty();
    let status = crate::progress::status_line();
    let mut last_status = Instant::now();
    let mut last_rate = Instant::now();
    let (reason, exit) = loop {
        if show_status && last_status.elapsed() >= Duration::from_millis(250) {
            last_status = Instant::now();
            let lost: u64 = recorder.lost_per_cpu().iter().sum();
            status.set_message(format!(
                "recording: {} dispatches, {} lost, {:.1} MiB",
                recorder.dispatches_written(),
                lost,
                recorder.bytes_written() as f64 / (1 << 20) as f64
            ));
            status.tick();
        }
        let mut max_wait = if show_status || watch.is_some() {
            STATUS_MS
        } else {
            i32::MAX
        };
        if let Some(d) = deadline {
            let left = d.saturating_duration_since(Instant::now()).as_millis();
            max_wait = max_wait.min(left.min(i32::MAX as u128) as i32);
        }
        use std::os::fd::AsFd;
        if let Err(e) = recorder.poll(exit_fd.as_ref().map(|f| f.as_fd()), max_wait) {
            let kept = kept_so_far(recorder.partial_path());
            drop(recorder);
            let e = anyhow::Error::from(e).context(format!("recording stopped{kept}"));
            if let Target::Command(child) = &mut target {
                eprintln!("idleflow: error: {e:#}");
                eprintln!("idleflow: the command runs on, unrecorded, until it exits");
                let _ = child.wait();
                return Err(anyhow::anyhow!("recording stopped early (see above)"));
            }
            return Err(e);
        }
        let renamed = recorder.take_renamed_processes();
        if let Some(w) = &watch {
            w.renamed(renamed);
            // The JVMs' policy: how often their threads block.
            if last_rate.elapsed() >= crate::jfr::RATE_PERIOD {
                last_rate = Instant::now();
                recorder.count_blocking_switch_outs(&w.counted());
                w.blocking(
                    idleflow_tracer::sys::monotonic_ns(),
                    recorder.blocking_switch_outs(),
                );
            }
        }
        if let Target::Command(child) = &mut target {
            if let Some(status) = child.try_wait().context("waiting for the command")? {
                break ("command exited", Some(exit_code(status)));
            }
        }
        if let Target::Pid(pid) = target {
            if !procfs::process_exists(pid) {
                break ("target exited", None);
            }
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break ("duration", None);
        }
        if stop.load(Ordering::Relaxed) {
            // A Ctrl-C from the terminal reached the command too; a signal sent
            // to idleflow alone is passed on, so the command ends with the recording.
            if let Target::Command(child) = &mut target {
                if child.try_wait().ok().flatten().is_none() {
                    // SAFETY: kill has no memory effects; the pid is our unreaped child.
                    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
                }
                let status = child.wait().context("waiting for the command")?;
                break ("interrupted", Some(exit_code(status)));
            }
            break ("interrupted", None);
        }
    };
    status.finish_and_clear();
    if let Some(a) = &agent {
        recorder.set_agent_notes(a.notes());
    }
    if let (Some(w), Some(watch)) = (&waits, watch) {
        let watched = watch.finish();
        // The window closes first: reading the JVMs' files is not recorded.
        let kept = kept_so_far(recorder.partial_path());
        recorder
            .stop()
            .with_context(|| format!("cannot stop the recording{kept}"))?;
        let mut notes = watched.notes.clone();
        // JVMs still running write their recording when it is stopped;
        // those that exited wrote it then.
        for &jvm in &watched.started {
            if crate::attach::is_jvm(jvm) {
                if let Err(e) = w.stop_in(jvm) {
                    notes.push(format!(
                        "JVM {jvm}: its flight recording could not be stopped: {e}"
                    ));
                }
            }
        }
        notes.extend(w.salvage(&watched));
        if watched.started.is_empty() && notes.is_empty() && !args.quiet {
            eprintln!("idleflow: note: no JVM ran in the recorded processes: no Java waits");
        }
        let offset = recorder.clock_offset_ns();
        notes.extend(w.collect(&mut recorder, &watched, offset, args.quiet)?);
        recorder.set_java_notes(notes);
    }
    let kept = kept_so_far(recorder.partial_path());
    let (path, summary) = recorder.finish(reason, exit).with_context(|| {
        format!(
            "cannot finish the recording {}{kept}",
            args.output.display()
        )
    })?;
    if jit_stacks {
        let root = target_pids.first().copied();
        for note in write_perf_maps(root, args.quiet) {
            eprintln!("idleflow: note: {note}");
        }
    }
    if !args.no_stacks && args.stack_size > 0 && !args.no_resolve {
        resolve_stacks(&path, args.quiet)?;
    }
    if !args.quiet {
        let bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        let lost: u64 = summary.lost_per_cpu.iter().sum();
        eprintln!(
            "idleflow: {} dispatches, {} wakeups in {:.2} s, {} lost{}; {:.1} KiB ({:.1} bytes/dispatch) written to {}",
            summary.dispatches,
            summary.wakeups,
            started.elapsed().as_secs_f64(),
            lost,
            if lost > 0 {
                format!(
                    " (per CPU: {:?}; try a larger --ring-size{})",
                    summary.lost_per_cpu,
                    if args.stacks == crate::cli::StacksAt::Waits && !args.no_stacks {
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
            bytes as f64 / summary.dispatches.max(1) as f64,
            path.display()
        );
    }
    Ok(exit.map_or(0, |c| c.clamp(0, 255) as u8))
}

/// Unwinds and names the recording's user-stack copies in place, now that
/// the program's window closed and while its binaries are still there.
pub fn resolve_stacks(path: &std::path::Path, quiet: bool) -> anyhow::Result<()> {
    let total = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let bar = crate::progress::bytes_bar(total, "resolving user stacks");
    let started = Instant::now();
    let r = idleflow_unwind::resolve(path, &mut |done, _| bar.set_position(done));
    bar.finish_and_clear();
    let r = r.with_context(|| {
        format!(
            "cannot resolve the user stacks of {} (the recording itself is complete; \
             its report leaves the user stacks out)",
            path.display()
        )
    })?;
    if !quiet {
        let c = &r.counts;
        eprintln!(
            "idleflow: {} user stacks unwound ({} distinct, {} truncated at the copy size, {} frames named) in {:.2} s",
            c.resolved,
            c.stacks,
            c.truncated,
            r.frames,
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// What `--java stacks` adds to the command's JVMs besides the light
/// agent: frame pointers kept in JIT-compiled code (so the unwinder walks
/// through it; HotSpot's own JIT code has no CFI).
const JIT_STACK_OPTIONS: &str = "-XX:+PreserveFramePointer";

/// The fallback when no agent library is found: HotSpot writes its perf
/// map at exit (the code of that moment only).
const HOTSPOT_PERF_MAP_OPTIONS: &str = "-XX:+UnlockDiagnosticVMOptions -XX:+DumpPerfMapAtExit";

/// Asks every JVM of `root`'s process tree that still runs without the
/// agent (`--pid`'s, or one started without our `JAVA_TOOL_OPTIONS`) to
/// write its perf map (`/tmp/perf-PID.map`, as `jcmd PID Compiler.perfmap`),
/// so the resolver names its JIT frames; the agent writes its JVM's map as
/// it compiles. Returns what failed, one note each.
fn write_perf_maps(root: Option<u32>, quiet: bool) -> Vec<String> {
    let Some(root) = root else {
        return Vec::new();
    };
    let mut notes = Vec::new();
    for pid in crate::attach::process_tree(root) {
        if !crate::attach::is_jvm(pid) || crate::agent::is_loaded_in(pid) {
            continue;
        }
        match crate::attach::jcmd(pid, "Compiler.perfmap", "") {
            Ok(_) => {
                if !quiet {
                    eprintln!("idleflow: JVM {pid} wrote its perf map (/tmp/perf-{pid}.map)");
                }
            }
            Err(e) => notes.push(format!(
                "JVM {pid}: its perf map could not be written, its JIT frames stay unnamed: {e}"
            )),
        }
    }
    notes
}
