//! The workloads of `perf bench sched` (pipe, messaging) recorded by
//! idleflow and by perf: the recording overhead (`overhead`) and the
//! throughput of unwinding and naming stacks (`unwind`).
//!
//! Invariant: both tools record the same workload with the same events in
//! one run of the benchmark, interleaved run by run, so that the machine's
//! drift hits both alike.

use std::process::Command;

use crate::figures::{lost_from_summary, median, perf_lost_chunks, total_time};
use crate::run::{idleflow, measure};

/// `only`: run the workloads whose name contains it (all when `None`).
pub fn overhead(reps: usize, only: Option<&str>) {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("b.idleflow");
    let pdata = dir.path().join("b.perf.data");
    let workloads: [(&str, Vec<&str>); 2] = [
        (
            "sched pipe -l 200000",
            vec!["bench", "sched", "pipe", "-l", "200000"],
        ),
        (
            "sched messaging -l 200",
            vec!["bench", "sched", "messaging", "-l", "200"],
        ),
    ];
    println!("| workload | measure | none (s) | idleflow record (s) | perf record (s) | idleflow slowdown | perf slowdown | idleflow --stack-size 0 (kernel stacks only) | idleflow --no-stacks | perf, dwarf stacks (8 KiB) of switches to idle only |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let mut extra = Vec::new();
    for (name, args) in workloads {
        if only.is_some_and(|o| !name.contains(o)) {
            continue;
        }
        // Modes: 0 none, 1 idleflow (default: kernel and user stacks at
        // switches to idle), 2 perf (the same events), 3 idleflow with
        // kernel stacks only (what the user stacks cost), 4 idleflow
        // without stacks (what all stacks cost), 5 perf taking only the
        // user and kernel stacks of the switches to idle (`--call-graph
        // dwarf,8192`: the same stacks in perf).
        // [mode][0 = benchmark's Total time, 1 = wall time of the whole command]
        let mut t: [[Vec<f64>; 2]; 6] = Default::default();
        let (mut our_lost, mut perf_lost, mut our_bytes, mut perf_bytes) = (0, 0u64, 0, 0);
        for _ in 0..reps {
            for (mode, times) in t.iter_mut().enumerate() {
                let mut cmd = match mode {
                    0 => Command::new("perf"),
                    1 | 3 | 4 => {
                        let mut c = Command::new(idleflow());
                        c.args(["record", "-o"]).arg(&rec);
                        if mode == 3 {
                            c.args(["--stack-size", "0"]);
                        }
                        if mode == 4 {
                            c.arg("--no-stacks");
                        }
                        c.args(["--", "perf"]);
                        c
                    }
                    2 => {
                        let mut c = Command::new("perf");
                        c.args([
                            "record",
                            "-e",
                            "sched:sched_switch,sched:sched_wakeup",
                            "--switch-events",
                            "-a",
                            "-o",
                        ])
                        .arg(&pdata)
                        .args(["--", "perf"]);
                        c
                    }
                    _ => {
                        let mut c = Command::new("perf");
                        c.args([
                            "record",
                            "-e",
                            "sched:sched_switch",
                            "--filter",
                            "next_pid == 0",
                            "--call-graph",
                            "dwarf,8192",
                            "-a",
                            "-o",
                        ])
                        .arg(&pdata)
                        .args(["--", "perf"]);
                        c
                    }
                };
                let (wall, _, out, err) = measure(cmd.args(&args));
                times[0].push(total_time(&out));
                times[1].push(wall);
                match mode {
                    1 => {
                        our_lost += lost_from_summary(&err);
                        our_bytes = std::fs::metadata(&rec).unwrap().len();
                    }
                    3 | 4 => our_lost += lost_from_summary(&err),
                    2 => {
                        perf_lost += perf_lost_chunks(&err);
                        perf_bytes = std::fs::metadata(&pdata).unwrap().len();
                    }
                    5 => perf_lost += perf_lost_chunks(&err),
                    _ => {}
                }
            }
        }
        for (m, measure_name) in ["benchmark's Total time", "wall time of the command"]
            .iter()
            .enumerate()
        {
            let med: Vec<f64> = t.iter_mut().map(|v| median(&mut v[m])).collect();
            let n = med[0];
            println!(
                "| {name} | {measure_name} | {n:.3} | {:.3} | {:.3} | {:.2}× | {:.2}× | {:.2}× | {:.2}× | {:.2}× |",
                med[1],
                med[2],
                med[1] / n,
                med[2] / n,
                med[3] / n,
                med[4] / n,
                med[5] / n
            );
        }
        extra.push(format!(
            "| {name} | {our_lost} | {perf_lost} | {our_bytes} | {perf_bytes} |"
        ));
    }
    println!("\n(medians of {reps} runs, interleaved)\n");
    println!("| workload | idleflow lost events (all runs) | perf lost chunks (all runs) | idleflow recording bytes | perf.data bytes |");
    println!("|---|---|---|---|---|");
    for e in extra {
        println!("{e}");
    }
}

/// Unwinding + symbolization throughput: idleflow's resolver (run by
/// `record` when the window closes) against `perf script` on perf's own
/// recording of the same kind (user + kernel stacks of the switches to
/// idle, `--call-graph dwarf,8192`), both of `perf bench sched pipe`
/// (its two threads' stacks in libc's read and write).
pub fn unwind(loops: u64) {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("u.idleflow");
    let pdata = dir.path().join("u.perf.data");
    let loops = loops.to_string();
    let workload = ["bench", "sched", "pipe", "-l", loops.as_str()];
    let (_, _, _, err) = measure(
        Command::new(idleflow())
            .args(["record", "-o"])
            .arg(&rec)
            .args(["--", "perf"])
            .args(workload),
    );
    // "idleflow: N user stacks unwound (D distinct, …) in S s"
    let line = err
        .lines()
        .find(|l| l.contains("user stacks unwound"))
        .unwrap_or_else(|| panic!("no resolver line in: {err}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let ours_n: f64 = words[1].parse().unwrap();
    let ours_s: f64 = words[words.len() - 2].parse().unwrap();
    measure(
        Command::new("perf")
            .args([
                "record",
                "-e",
                "sched:sched_switch",
                "--filter",
                "next_pid == 0",
                "--call-graph",
                "dwarf,8192",
                "-a",
                "-o",
            ])
            .arg(&pdata)
            .args(["--", "perf"])
            .args(workload),
    );
    let (perf_s, _, out, _) = measure(
        Command::new("perf")
            .args(["script", "-F", "comm,tid,ip,sym", "-i"])
            .arg(&pdata),
    );
    let perf_n = out.split("\n\n").filter(|s| !s.trim().is_empty()).count() as f64;
    println!("| tool | stacks | seconds | stacks/s |");
    println!("|---|---|---|---|");
    println!(
        "| idleflow record's resolver (unwind + name + rewrite) | {ours_n} | {ours_s:.3} | {:.0} |",
        ours_n / ours_s
    );
    println!(
        "| perf script (dwarf unwind + name) | {perf_n} | {perf_s:.3} | {:.0} |",
        perf_n / perf_s
    );
    println!(
        "\nidleflow / perf script: {:.1}× the stacks per second (`perf bench sched pipe -l {loops}`)",
        (ours_n / ours_s) / (perf_n / perf_s)
    );
}
