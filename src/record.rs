//! `idleflow record` (and its internal helpers `__jfr-convert` and
//! `__resolve`): map the arguments to the session library's options
//! ([`idleflow_session`]), print what the session says, and the summary line.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::Context;
use idleflow_session::flight::FlightOptions;
use idleflow_session::{ConvertJob, JavaOptions, Options, Progress, Status};
use idleflow_tracer::flight::policy::Trigger;
use idleflow_tracer::flight::FlightLimits;
use idleflow_tracer::{EventSource, RecordOptions};
use indicatif::ProgressBar;

use crate::cli::{
    Events, JavaMode, JfrConvertArgs, RecordArgs, ResolveArgs, StacksAt, TriggerArgs,
};

pub fn run(args: RecordArgs) -> anyhow::Result<u8> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .context("cannot install the Ctrl-C handler")?;
    }
    let opts = options(&args);
    if let Some(keep) = args.flight {
        return fly(&args, &opts, keep, &stop);
    }
    let recorded = idleflow_session::record(&opts, &stop, &mut Printer::default())?;
    give_to_sudo_user(&recorded.path)?;
    if !args.quiet {
        eprintln!("idleflow: {}", recorded.summary_line(&opts));
    }
    Ok(recorded.exit.map_or(0, |c| c.clamp(0, 255) as u8))
}

/// Under `sudo`, the recording goes to the user who ran it, still readable
/// by its owner only: `sudo idleflow record …`, then `idleflow report` as
/// that user, as the README shows (perf leaves `perf.data` to root). Only a
/// regular file root owns, with one name, is given, to `SUDO_UID`/`SUDO_GID`
/// when both are numbers; anything else is left as it is.
fn give_to_sudo_user(path: &std::path::Path) -> anyhow::Result<()> {
    let id = |name: &str| std::env::var(name).ok()?.parse::<u32>().ok();
    let (Some(uid), Some(gid)) = (id("SUDO_UID"), id("SUDO_GID")) else {
        return Ok(());
    };
    if uid == 0 {
        return Ok(());
    }
    // On the descriptor, never through a link (idleflow_format::files).
    idleflow_format::files::give_to(path, uid, gid)
        .map(|_| ())
        .with_context(|| {
            format!(
                "cannot give {} to the user who ran sudo (uid {uid})",
                path.display()
            )
        })
}

/// `record --flight`: the flight recorder until the target ends.
fn fly(
    args: &RecordArgs,
    opts: &Options,
    keep: std::time::Duration,
    stop: &AtomicBool,
) -> anyhow::Result<u8> {
    let triggers = args
        .triggers
        .iter()
        .map(|t| Trigger::parse(t))
        .collect::<Result<Vec<_>, _>>()?;
    let signal = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGUSR2, Arc::clone(&signal))
        .context("cannot install the SIGUSR2 handler")?;
    let trigger_group = match &args.trigger_group {
        Some(g) => Some(group_id(g)?),
        None => None,
    };
    let flight = FlightOptions {
        dir: opts.output.clone(),
        limits: FlightLimits {
            keep_ns: keep.as_nanos() as u64,
            tail_ns: args.tail.as_nanos() as u64,
            max_bytes: args.flight_bytes as u64,
        },
        triggers,
        cooldown: args.cooldown,
        max_dumps: args.max_dumps,
        max_per_hour: args.max_per_hour,
        keep_files: args.keep_files,
        keep_bytes: args.keep_bytes.map_or(0, |b| b as u64),
        tail: args.tail,
        trigger_group,
        signal,
        history: args
            .history_job
            .clone()
            .map(|job| (job, args.history.clone())),
        heartbeat: args
            .heartbeat
            .map(|every| idleflow_session::flight::HeartbeatOptions {
                every,
                min_change_pts: args.heartbeat_min_change,
            }),
    };
    let flown = idleflow_session::flight::fly(opts, &flight, stop, &mut Printer::default())?;
    if !args.quiet {
        // Those written: a failed dump left no file.
        let written = flown.dumps.len().saturating_sub(flown.failed as usize);
        eprintln!(
            "idleflow: flight recorder ended ({}): {} dump{} in {}{}{}{}",
            flown.reason,
            written,
            if written == 1 { "" } else { "s" },
            flight.dir.display(),
            if flown.held_back > 0 {
                format!(
                    ", {} trigger(s) held back by the cooldown or the caps",
                    flown.held_back
                )
            } else {
                String::new()
            },
            if flown.removed > 0 {
                format!(
                    ", {} older removed (--keep-files, --keep-bytes)",
                    flown.removed
                )
            } else {
                String::new()
            },
            if flown.failed > 0 {
                format!(", {} failed", flown.failed)
            } else {
                String::new()
            }
        );
    }
    Ok(flown.exit.map_or(0, |c| c.clamp(0, 255) as u8))
}

/// A group's id, from its name (`/etc/group`) or its number.
fn group_id(group: &str) -> anyhow::Result<u32> {
    if let Ok(gid) = group.parse() {
        return Ok(gid);
    }
    let groups = std::fs::read_to_string("/etc/group").context("cannot read /etc/group")?;
    groups
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() >= 3 && f[0] == group)
                .then(|| f[2].parse().ok())
                .flatten()
        })
        .with_context(|| format!("--trigger-group {group}: no such group in /etc/group"))
}

/// `idleflow trigger`: asks the flight recorders for a dump.
pub fn trigger(args: TriggerArgs) -> anyhow::Result<u8> {
    let answers = idleflow_session::flight::ask(args.pid)?;
    if answers.is_empty() {
        eprintln!(
            "idleflow: no flight recorder runs here{} (they listen in {})",
            args.pid
                .map(|p| format!(" with pid {p}"))
                .unwrap_or_default(),
            idleflow_session::flight::SOCKET_DIR
        );
        return Ok(1);
    }
    let mut dumping = false;
    for (pid, answer) in answers {
        println!("recorder {pid}: {answer}");
        dumping |= answer.starts_with("dumping");
    }
    Ok(if dumping { 0 } else { 1 })
}

/// `__jfr-convert`: the session's converter child.
pub fn convert_child(a: JfrConvertArgs) -> anyhow::Result<()> {
    let job = ConvertJob::from_args(&a.args)?;
    Ok(idleflow_session::convert_child(&job)?)
}

/// `__resolve`: resolves the stacks of a recording made with `--no-resolve`.
pub fn resolve(args: ResolveArgs) -> anyhow::Result<()> {
    Ok(idleflow_session::resolve_stacks(
        &args.input,
        false,
        &mut Printer::default(),
    )?)
}

fn options(args: &RecordArgs) -> Options {
    // The flight recorder keeps no call trees (the agent's trees are of
    // the whole life, not of a window).
    let java = |m| {
        !args.no_agent && args.java.contains(&m) && (args.flight.is_none() || m != JavaMode::Tree)
    };
    let default_output = if args.flight.is_some() {
        "idleflow-dumps"
    } else {
        "run.idleflow"
    };
    Options {
        output: args.output.clone().unwrap_or_else(|| default_output.into()),
        duration: args.duration,
        pid: args.pid,
        command: args.command.clone(),
        recorder: RecordOptions {
            ring_bytes: args.ring_size,
            drain_priority: args.drain_priority,
            all_switch_samples: args.all_switch_samples,
            kernel_stacks: !args.no_stacks,
            user_stack_bytes: if args.no_stacks { 0 } else { args.stack_size },
            stacks_at_waits: args.stacks == StacksAt::Waits,
            wait_sample_period: args.wait_sample,
            waker_stacks: !args.no_waker_stacks,
            waker_sample_period: args.waker_sample,
            waker_stack_budget: args.waker_stack_budget,
            waker_stack_bytes: args.waker_stack_size,
            events: match args.events {
                Events::Auto => EventSource::Auto,
                Events::Perf => EventSource::Perf,
                Events::Bpf => EventSource::Bpf,
            },
            stack_budget: args.stack_budget,
        },
        java: JavaOptions {
            waits: java(JavaMode::Waits),
            tree: java(JavaMode::Tree),
            stacks: java(JavaMode::Stacks),
            vm: java(JavaMode::Vm),
            auto: java(JavaMode::Auto),
            waits_where_vm_cannot: false,
            wait_threshold_ms: args.wait_threshold,
            monitor_threshold_ms: args.monitor_threshold.unwrap_or(args.wait_threshold),
            all_waits_below: args.all_waits_below,
            agent: args.agent.clone(),
            snapshot_interval_ms: args.snapshot_interval,
            delta_ns: args.delta,
            max_threads: args.max_threads,
        },
        resolve: !args.no_resolve,
        quiet: args.quiet,
    }
}

/// The session's account on stderr; its bars only on a terminal.
#[derive(Default)]
struct Printer {
    status: Option<ProgressBar>,
    bar: Option<ProgressBar>,
}

impl Progress for Printer {
    fn info(&mut self, line: &str) {
        eprintln!("idleflow: {line}");
    }
    fn note(&mut self, line: &str) {
        eprintln!("idleflow: note: {line}");
    }
    fn error(&mut self, line: &str) {
        eprintln!("idleflow: error: {line}");
    }
    fn begun(&mut self) {
        self.status = Some(crate::progress::status_line());
    }
    fn status(&mut self, s: &Status) {
        if let Some(bar) = &self.status {
            bar.set_message(format!(
                "recording: {} dispatches, {} lost, {:.1} MiB",
                s.dispatches,
                s.lost,
                s.bytes as f64 / (1 << 20) as f64
            ));
            bar.tick();
        }
    }
    fn ended(&mut self) {
        if let Some(bar) = self.status.take() {
            bar.finish_and_clear();
        }
    }
    fn bytes(&mut self, what: &str, done: u64, total: u64) {
        let bar = self
            .bar
            .get_or_insert_with(|| crate::progress::bytes_bar(total, what));
        bar.set_position(done);
    }
    fn bytes_done(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    #[test]
    fn the_converter_child_gets_the_arguments_the_session_gives_it() {
        let sent = ConvertJob {
            input: "/tmp/a b.jfr".into(),
            output: "/tmp/out.idleflow".into(),
            pid: 42,
            offset_ns: -17,
            threshold_ns: 10_000_000,
            monitor_threshold_ns: 0,
            all_waits: "1-2,30-40".into(),
            ports_from: 32768,
            ports_to: 60999,
            owner: Some(1000),
        };
        let mut argv = vec![
            "idleflow".into(),
            idleflow_session::CONVERT_SUBCOMMAND.into(),
        ];
        argv.extend(sent.args());
        let Command::JfrConvert(args) = Cli::try_parse_from(argv).unwrap().command else {
            panic!("not the converter");
        };
        let read = ConvertJob::from_args(&args.args).unwrap();
        assert_eq!(format!("{read:?}"), format!("{sent:?}"));
    }
}
