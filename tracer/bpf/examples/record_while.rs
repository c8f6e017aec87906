//! Records every switch and wake-up on every online CPU with the eBPF
//! recorder while a command runs, polling the rings every 100 ms as a
//! recorder would, then prints what it got: events per CPU and kind, what
//! was lost, and (with `--stats`) the programs' run counts and mean run
//! times. The measurements in `docs/PERFORMANCE.md` ("eBPF switch and
//! wake-up records") use it.
//!
//! ```text
//! cargo run --example record_while -p idleflow-bpf -- [--stats] -- perf bench sched pipe -l 200000
//! ```

use std::collections::BTreeMap;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use idleflow_bpf::{RunTimeStats, SchedEvent, SchedRecorder};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let stats = args.iter().any(|a| a == "--stats");
    let Some(dash) = args.iter().position(|a| a == "--") else {
        eprintln!("usage: record_while [--stats] -- COMMAND [ARGS...]");
        return ExitCode::from(2);
    };
    let command = &args[dash + 1..];
    if command.is_empty() {
        eprintln!("usage: record_while [--stats] -- COMMAND [ARGS...]");
        return ExitCode::from(2);
    }
    match run(command, stats) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("record_while: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(command: &[String], stats: bool) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let cpus = std::fs::read_to_string("/sys/devices/system/cpu/online")?;
    let cpus = parse_cpu_list(cpus.trim()).ok_or("cannot read the online CPUs")?;
    let _stats = stats.then(RunTimeStats::enable).transpose()?;
    let mut recorder = SchedRecorder::open(&cpus, 8 << 20, Default::default())?;
    let start = Instant::now();
    let mut child = Command::new(&command[0]).args(&command[1..]).spawn()?;
    let mut counts: BTreeMap<(u32, &str), u64> = BTreeMap::new();
    let mut take = |cpu: u32, e: SchedEvent| {
        let kind = match e {
            SchedEvent::Switch(_) => "switch",
            SchedEvent::Waking(_) => "waking",
            SchedEvent::WakeupNew(_) => "wakeup_new",
        };
        *counts.entry((cpu, kind)).or_default() += 1;
    };
    let status = loop {
        recorder.poll(Duration::from_millis(100), &mut take)?;
        if let Some(status) = child.try_wait()? {
            break status;
        }
    };
    let elapsed = start.elapsed();
    recorder.detach();
    recorder.poll(Duration::ZERO, &mut take)?;
    eprintln!("recorded {:.3} s: {counts:?}", elapsed.as_secs_f64());
    eprintln!("reader's own CPU: {:.3} s", own_cpu_seconds());
    eprintln!("lost: {:?}", recorder.lost()?);
    if stats {
        for p in recorder.program_stats()? {
            eprintln!(
                "{}: {} runs, {:.0} ns a run, {} skipped",
                p.name,
                p.run_count,
                p.ns_per_run().unwrap_or(0.0),
                p.skipped
            );
        }
    }
    Ok(ExitCode::from(status.code().unwrap_or(1) as u8))
}

/// This process's CPU time (user + system), its children's left out.
fn own_cpu_seconds() -> f64 {
    // SAFETY: a zeroed rusage is valid; getrusage writes only into it.
    let u = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(u.ru_utime) + secs(u.ru_stime)
}

/// `0-3,5` → [0, 1, 2, 3, 5].
fn parse_cpu_list(s: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for part in s.split(',') {
        match part.split_once('-') {
            Some((a, b)) => out.extend(a.parse::<u32>().ok()?..=b.parse().ok()?),
            None => out.push(part.parse().ok()?),
        }
    }
    Some(out)
}
