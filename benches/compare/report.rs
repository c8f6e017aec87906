//! `idleflow report`'s throughput and memory against perf's readers
//! (`report`: a real recording made by both tools at once) and against the
//! recording's length (`synthetic`: recordings written through the
//! library).
//!
//! Invariant: every timed reader runs [`REPEATS`] times and the table
//! shows the median and the minimum, with the peak memory of any run.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use idleflow_format::{Dispatch, PrevState, Record, RunInfo, RunSummary, ThreadInfo, Writer};

use crate::run::{count_lines_matching, idleflow, measure, peak_rss_kib, repeated, REPEATS};

pub fn report(loops: u64) {
    let dir = std::env::var_os("BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("idleflow-bench"));
    std::fs::create_dir_all(&dir).unwrap();
    let rec = dir.join("big.idleflow");
    let pdata = dir.join("big.perf.data");
    // One run of the workload, recorded by both tools at once.
    let mut perf = Command::new("perf")
        .args([
            "record",
            "-q",
            "-e",
            "sched:sched_switch,sched:sched_wakeup",
            "--switch-events",
            "-a",
            "-o",
        ])
        .arg(&pdata)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_secs(1));
    let (_, _, _, err) = measure(
        Command::new(idleflow())
            .args(["record", "-o"])
            .arg(&rec)
            .args(["--", "perf", "bench", "sched", "pipe", "-l"])
            .arg(loops.to_string()),
    );
    // SAFETY: kill has no memory effects.
    unsafe { libc::kill(perf.id() as i32, libc::SIGINT) };
    perf.wait().unwrap();
    eprintln!("{}", err.trim());
    report_table(&rec, Some(&pdata));
}

pub fn report_table(rec: &Path, pdata: Option<&Path>) {
    let json = Command::new(idleflow())
        .args(["report", "--format", "json"])
        .arg(rec)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let dispatches = v["dispatches"].as_u64().unwrap();
    let bytes = std::fs::metadata(rec).unwrap().len();
    let (w, w_min, rss) = repeated(&[
        idleflow(),
        "report",
        "--format",
        "json",
        rec.to_str().unwrap(),
    ]);
    println!("| tool | events | wall (s), median (min) of {REPEATS} | events/s at the median (min) | peak RSS (MiB) | bytes/event |");
    println!("|---|---|---|---|---|---|");
    println!(
        "| idleflow report | {dispatches} dispatches | {w:.2} ({w_min:.2}) | {:.2} M ({:.2} M) | {:.1} | {:.1} |",
        dispatches as f64 / w / 1e6,
        dispatches as f64 / w_min / 1e6,
        rss as f64 / 1024.0,
        bytes as f64 / dispatches as f64
    );
    if let Some(pdata) = pdata {
        let pbytes = std::fs::metadata(pdata).unwrap().len();
        let (w, n, all) = count_lines_matching(
            Command::new("perf").args(["script", "-i"]).arg(pdata),
            "sched:sched_switch",
        );
        let (_, rss) = peak_rss_kib(&["perf", "script", "-i", pdata.to_str().unwrap()]);
        let row = |tool: &str, w: f64, w_min: f64, rss: u64| {
            println!(
                "| {tool} | {n} sched_switch ({all} samples) | {w:.2} ({w_min:.2}) | {:.2} M ({:.2} M); all samples {:.2} M ({:.2} M) | {:.1} | {:.1} |",
                n as f64 / w / 1e6,
                n as f64 / w_min / 1e6,
                all as f64 / w / 1e6,
                all as f64 / w_min / 1e6,
                rss as f64 / 1024.0,
                pbytes as f64 / n.max(1) as f64
            )
        };
        row("perf script", w, w, rss);
        let (w, w_min, rss) = repeated(&[
            "perf",
            "sched",
            "timehist",
            "-I",
            "-s",
            "-i",
            pdata.to_str().unwrap(),
        ]);
        row("perf sched timehist -I -s", w, w_min, rss);
        println!("\n(perf script ran once; perf rows: sched_switch samples per second, then all samples; bytes/event: perf.data bytes per sched_switch)");
    }
}

/// Writes a recording of `n` dispatches through the library: 64 threads on
/// 2 CPUs with a 50% duty cycle, ~10 µs apart.
pub fn synthesize(path: &Path, n: u64) {
    let cpus = vec![0, 1];
    let info = RunInfo {
        tool_version: "synthetic".into(),
        kernel_release: "synthetic".into(),
        hostname: "synthetic".into(),
        ..RunInfo::minimal(cpus.clone(), 1_000_000_000)
    };
    let file = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path).unwrap());
    let mut w = Writer::new(file, &info).unwrap();
    for t in 0..64u32 {
        w.write(&Record::Thread(ThreadInfo {
            time: info.start_ns,
            tid: 1000 + t,
            pid: 1000,
            ppid: 1,
            comm: format!("worker-{t}"),
        }))
        .unwrap();
    }
    let mut current = [0u32; 2];
    let mut time = info.start_ns;
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..n {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        time += 3_000 + seed % 14_000;
        let cpu = (i % 2) as usize;
        let prev = current[cpu];
        let next = if prev == 0 {
            1000 + (seed >> 20) as u32 % 64
        } else {
            0
        };
        let state = if prev == 0 {
            PrevState::Unknown
        } else if seed.is_multiple_of(5) {
            PrevState::Preempted
        } else {
            PrevState::Sleeping
        };
        // A thread runs on one CPU at a time.
        let next = if next != 0 && current[1 - cpu] == next {
            0
        } else {
            next
        };
        if next == prev {
            continue;
        }
        w.write(&Record::Dispatch(Dispatch {
            time,
            cpu: cpu as u32,
            prev_tid: prev,
            prev_state: state,
            next_tid: next,
            prev_node: Default::default(),
        }))
        .unwrap();
        current[cpu] = next;
    }
    w.finish(&RunSummary {
        stop_ns: time + 1000,
        stop_reason: "synthetic".into(),
        lost_per_cpu: vec![0, 0],
        dispatches: n,
        ..Default::default()
    })
    .unwrap();
}

pub fn synthetic(millions: &[u64]) {
    // BENCH_DIR=DIR keeps the recordings there for profiling.
    let keep = std::env::var_os("BENCH_DIR").map(PathBuf::from);
    let tmp = tempfile::tempdir().unwrap();
    let dir = keep.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    std::fs::create_dir_all(&dir).unwrap();
    for &m in millions {
        let path = dir.join(format!("syn{m}.idleflow"));
        synthesize(&path, m * 1_000_000);
        report_table(&path, None);
        if keep.is_none() {
            std::fs::remove_file(&path).unwrap();
        }
        println!();
    }
}
