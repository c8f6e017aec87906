//! idleflow against perf, on the same workloads in one run. Not a timed
//! test: it measures and prints Markdown tables for `docs/PERFORMANCE.md`.
//!
//! ```text
//! cargo bench --bench compare -- overhead [--reps N] [--only pipe|messaging]  # recording overhead
//! cargo bench --bench compare -- report [--loops N]       # report throughput and memory
//! cargo bench --bench compare -- synthetic [--millions M] # report memory vs. recording length
//! cargo bench --bench compare -- agent [--reps N]         # JVM agent against an empty agent
//! cargo bench --bench compare -- waits [--reps N]         # JFR waits (record --java waits) against plain
//! ```
//! Needs root and `perf` (Debian's linux-perf).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use idleflow_format::{Dispatch, PrevState, Record, RunInfo, RunSummary, ThreadInfo, Writer};

fn idleflow() -> &'static str {
    env!("CARGO_BIN_EXE_idleflow")
}

/// Runs `cmd`, returns (wall seconds, peak RSS KiB of the child tree, stdout, stderr).
fn measure(cmd: &mut Command) -> (f64, u64, String, String) {
    let t0 = Instant::now();
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let wall = t0.elapsed().as_secs_f64();
    // SAFETY: `ru` is a valid, writable rusage.
    let rss = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru);
        ru.ru_maxrss as u64
    };
    if !out.status.success() {
        panic!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    (
        wall,
        rss,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Peak RSS of one command alone: run it under `/usr/bin/time -f %M` if
/// present, else through a fresh shell so RUSAGE_CHILDREN is its own.
fn peak_rss_kib(args: &[&str]) -> (f64, u64) {
    let t0 = Instant::now();
    let out = Command::new("/usr/bin/time")
        .args(["-f", "%M"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output();
    let wall = t0.elapsed().as_secs_f64();
    match out {
        Ok(o) if o.status.success() => {
            let rss = String::from_utf8_lossy(&o.stderr)
                .lines()
                .last()
                .and_then(|l| l.trim().parse().ok())
                .unwrap_or(0);
            (wall, rss)
        }
        Ok(o) => panic!("{args:?} failed: {}", String::from_utf8_lossy(&o.stderr)),
        Err(_) => {
            let t0 = Instant::now();
            let o = Command::new(args[0])
                .args(&args[1..])
                .stdout(Stdio::null())
                .status()
                .expect("run");
            assert!(o.success());
            (t0.elapsed().as_secs_f64(), 0)
        }
    }
}

fn total_time(stdout: &str) -> f64 {
    stdout
        .lines()
        .find_map(|l| {
            let l = l.trim();
            l.strip_prefix("Total time:")
                .and_then(|r| r.split_whitespace().next())
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or_else(|| panic!("no `Total time:` in {stdout}"))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn lost_from_summary(stderr: &str) -> u64 {
    // "idleflow: N dispatches, M wakeups in S s, L lost; ..."
    stderr
        .split(", ")
        .find_map(|p| {
            p.strip_suffix(" lost")
                .or_else(|| p.split(" lost").next().filter(|_| p.contains(" lost")))
        })
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(u64::MAX)
}

/// perf's "Processed N events and lost M chunks!" warning, as M.
fn perf_lost_chunks(stderr: &str) -> u64 {
    stderr
        .split("lost ")
        .skip(1)
        .filter_map(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// `only`: run the workloads whose name contains it (all when `None`).
fn overhead(reps: usize, only: Option<&str>) {
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

/// Runs `cmd`, returns (wall seconds, lines containing `needle`, all lines).
fn count_lines_matching(cmd: &mut Command, needle: &str) -> (f64, u64, u64) {
    let t0 = Instant::now();
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (mut n, mut all) = (0u64, 0u64);
    use std::io::BufRead;
    for line in std::io::BufReader::with_capacity(1 << 20, stdout).lines() {
        all += 1;
        if line.map(|l| l.contains(needle)).unwrap_or(false) {
            n += 1;
        }
    }
    child.wait().unwrap();
    (t0.elapsed().as_secs_f64(), n, all)
}

fn report(loops: u64) {
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

/// Runs of each timed report command: this VM's host adds bursts of
/// interference to single runs, so the median and the minimum are shown.
const REPEATS: usize = 5;

/// Runs `argv` [`REPEATS`] times: (median wall s, minimum wall s, peak RSS KiB).
fn repeated(argv: &[&str]) -> (f64, f64, u64) {
    let mut walls = Vec::new();
    let mut rss = 0;
    for _ in 0..REPEATS {
        let (w, r) = peak_rss_kib(argv);
        walls.push(w);
        rss = rss.max(r);
    }
    let min = walls.iter().copied().fold(f64::INFINITY, f64::min);
    (median(&mut walls), min, rss)
}

fn report_table(rec: &Path, pdata: Option<&Path>) {
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
fn synthesize(path: &Path, n: u64) {
    let cpus = vec![0, 1];
    let info = RunInfo {
        tool_version: "synthetic".into(),
        kernel_release: "synthetic".into(),
        hostname: "synthetic".into(),
        cpus: cpus.clone(),
        clock: "CLOCK_MONOTONIC".into(),
        command: vec![],
        target_pids: vec![],
        start_ns: 1_000_000_000,
        start_unix_ns: 0,
        proc_stat_start: vec![],
        user_hz: 100,
        ring_bytes: 0,
        tool_pid: 0,
        java_waits: false,
        stacks: String::new(),
        wait_sample_period: 0,
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

fn synthetic(millions: &[u64]) {
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

/// The program's own "ms N" figure from its output.
fn program_ms(stdout: &str) -> f64 {
    let w: Vec<&str> = stdout.split_whitespace().collect();
    w.iter()
        .position(|x| *x == "ms")
        .and_then(|i| w.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no `ms N` in {stdout}"))
}

/// Method entries the agent counted in its final tree dump under `trees`.
fn entries_in_dump(trees: &Path) -> u64 {
    let f = std::fs::read_dir(trees)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "json"))
        .expect("a tree dump");
    let d: idleflow_format::TreeDump = serde_json::from_slice(&std::fs::read(f).unwrap()).unwrap();
    d.threads
        .iter()
        .flat_map(|t| &t.nodes)
        .map(|n| n.calls)
        .sum()
}

/// The JVM agent beside the bench binary's idleflow.
fn agent_so() -> PathBuf {
    Path::new(idleflow())
        .parent()
        .unwrap()
        .join("libidleflow_agent.so")
}

/// JDK 17's binaries.
const JDK_BIN: &str = "/usr/lib/jvm/java-17-openjdk-amd64/bin";

/// The Java examples `names` (`examples/java/NAME.java`) compiled into a
/// fresh directory.
fn compile_examples(names: &[&str]) -> tempfile::TempDir {
    let classes = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/java");
    let st = Command::new(Path::new(JDK_BIN).join("javac"))
        .arg("-d")
        .arg(classes.path())
        .args(names.iter().map(|n| src.join(format!("{n}.java"))))
        .status()
        .unwrap();
    assert!(st.success(), "javac");
    classes
}

fn agent(reps: usize) {
    let jdk = Path::new(JDK_BIN);
    let classes = compile_examples(&["Fib", "HandOff"]);
    let so = agent_so();
    assert!(so.exists(), "build the agent first: cargo build --release");
    let workloads: [(&str, Vec<&str>); 2] = [
        ("Fib 27 x2 (call-heavy)", vec!["Fib", "27", "2"]),
        (
            "HandOff 4 workers, 20000 tasks (hand-off-heavy)",
            vec!["HandOff", "4", "20000"],
        ),
    ];
    println!("| workload | plain (ms) | -Xint (ms) | empty agent (ms) | idleflow, clock_gettime (ms) | idleflow, TSC (ms) | clock_gettime / empty | TSC / empty | TSC / plain | entries | ns per event over empty (clock_gettime; TSC) |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for (name, args) in workloads {
        let mut t: [Vec<f64>; 5] = Default::default();
        let mut entries = 0;
        for _ in 0..reps {
            for (mode, times) in t.iter_mut().enumerate() {
                let dir = tempfile::tempdir().unwrap();
                let mut cmd = Command::new(jdk.join("java"));
                match mode {
                    1 => {
                        cmd.arg("-Xint");
                    }
                    2 => {
                        cmd.arg(format!("-agentpath:{}=noop=1", so.display()));
                    }
                    3 | 4 => {
                        let twa = dir.path().join("twa");
                        idleflow_wire::twa::WorkArea::create(&twa, 64, 4096, 2000).unwrap();
                        let trees = dir.path().join("trees");
                        std::fs::create_dir(&trees).unwrap();
                        let clock = if mode == 3 { "monotonic" } else { "tsc" };
                        cmd.arg(format!(
                            "-agentpath:{}=twa={},trees={},clock={clock}",
                            so.display(),
                            twa.display(),
                            trees.display()
                        ));
                    }
                    _ => {}
                }
                let (_, _, out, _) = measure(cmd.arg("-cp").arg(classes.path()).args(&args));
                times.push(program_ms(&out));
                if mode == 4 {
                    entries = entries_in_dump(&dir.path().join("trees"));
                }
            }
        }
        // Median and minimum of each mode: this VM's host adds bursts of
        // interference of up to +50 % to single runs, which the minimum of
        // a CPU-bound program is immune to and the median mostly is.
        let med: Vec<f64> = t.iter_mut().map(|v| median(v)).collect();
        let min: Vec<f64> = t
            .iter()
            .map(|v| v.iter().copied().fold(f64::INFINITY, f64::min))
            .collect();
        let ms = |i: usize| format!("{:.0} ({:.0})", med[i], min[i]);
        let ratio =
            |a: usize, b: usize| format!("{:.2}× ({:.2}×)", med[a] / med[b], min[a] / min[b]);
        let per_event = |m: &[f64], i: usize| (m[i] - m[2]) * 1e6 / (2.0 * entries.max(1) as f64);
        println!(
            "| {name} | {} | {} | {} | {} | {} | {} | {} | {:.0}× | {entries} | {:.1} ({:.1}); {:.1} ({:.1}) |",
            ms(0),
            ms(1),
            ms(2),
            ms(3),
            ms(4),
            ratio(3, 2),
            ratio(4, 2),
            med[4] / med[0].max(1.0),
            per_event(&med, 3),
            per_event(&min, 3),
            per_event(&med, 4),
            per_event(&min, 4),
        );
    }
    println!("\n(median (minimum) of {reps} runs, interleaved; times are measured inside each program; entries counted by the agent, all threads)");
}

/// `record --java waits`'s cost inside the JVM: the agent benchmark's
/// hand-off plain and with idleflow's JFR settings at several thresholds,
/// times measured inside each program; the waits recorded and JFR's bytes
/// per wait (issue 19).
fn waits(reps: usize) {
    let jdk = Path::new(JDK_BIN);
    let classes = compile_examples(&["HandOff"]);
    let thresholds_ms = [0.0, 1.0, 10.0];
    // The agent benchmark's hand-off (≈ 0.6 s: JFR's own start-up, ≈ 1
    // CPU-second of class loading and compiling, overlaps it) and the same
    // ten times longer (per-wait costs dominate).
    let workloads: [(&str, Vec<&str>); 2] = [
        (
            "HandOff 4 workers, 20000 tasks (the agent benchmark's)",
            vec!["HandOff", "4", "20000"],
        ),
        (
            "HandOff 4 workers, 200000 tasks",
            vec!["HandOff", "4", "200000"],
        ),
    ];
    println!("| workload | plain (ms) | JFR waits ≥ 0 ms | ≥ 1 ms | ≥ 10 ms (default) | ratio 0 / 1 / 10 ms | waits recorded (0 / 1 / 10 ms) | JFR bytes per wait (0 ms) | `idleflow record` (default mode, JFR through attach): ms, ratio, waits |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for (name, args) in workloads {
        // Modes: plain, JFR from the command line at each threshold, and
        // what a user runs: `idleflow record -- java …` in its default
        // mode (JFR started through the attach mechanism, 10 ms).
        let recorded = 1 + thresholds_ms.len();
        let mut t: Vec<Vec<f64>> = vec![Vec::new(); recorded + 1];
        let mut recorded_waits = 0u64;
        let mut waits = vec![0u64; thresholds_ms.len()];
        let mut bytes = 0u64;
        for _ in 0..reps {
            for (mode, times) in t.iter_mut().enumerate() {
                let dir = tempfile::tempdir().unwrap();
                if mode == recorded {
                    let rec = dir.path().join("w.idleflow");
                    let (_, _, out, _) = measure(
                        Command::new(idleflow())
                            .args(["record", "-q", "-o"])
                            .arg(&rec)
                            .arg("--")
                            .arg(jdk.join("java"))
                            .arg("-cp")
                            .arg(classes.path())
                            .args(&args),
                    );
                    times.push(program_ms(&out));
                    let json = Command::new(idleflow())
                        .args(["report", "--format", "json"])
                        .arg(&rec)
                        .output()
                        .unwrap();
                    let r: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
                    recorded_waits = r["java_waits"]["jvms"][0]["waits"].as_u64().unwrap_or(0);
                    continue;
                }
                let mut cmd = Command::new(jdk.join("java"));
                let jfr = dir.path().join("w.jfr");
                if mode > 0 {
                    let threshold_ns = (thresholds_ms[mode - 1] * 1e6) as u64;
                    let jfc = dir.path().join("w.jfc");
                    std::fs::write(
                        &jfc,
                        idleflow_jfr::settings(&idleflow_jfr::Thresholds::all(threshold_ns)),
                    )
                    .unwrap();
                    cmd.arg("-Xlog:jfr+startup=error").arg(format!(
                        "-XX:StartFlightRecording=name=idleflow,settings={},filename={},dumponexit=true",
                        jfc.display(),
                        jfr.display()
                    ));
                }
                let (_, _, out, _) = measure(cmd.arg("-cp").arg(classes.path()).args(&args));
                times.push(program_ms(&out));
                if mode > 0 {
                    let opts = idleflow_jfr::Options {
                        pid: 1,
                        offset_ns: 0,
                        thresholds: idleflow_jfr::Thresholds::all(0),
                        all_waits: Vec::new(),
                        ephemeral_ports: (32768, 60999),
                    };
                    let head = idleflow_jfr::convert(&jfr, &opts, |_| Ok::<(), std::io::Error>(()))
                        .unwrap();
                    waits[mode - 1] = head.waits;
                    if mode == 1 {
                        bytes = head.file_bytes;
                    }
                }
            }
        }
        let med: Vec<f64> = t.iter_mut().map(|v| median(v)).collect();
        println!(
            "| {name} | {:.0} | {:.0} | {:.0} | {:.0} | {:.2}× / {:.2}× / {:.2}× | {} / {} / {} | {:.1} | {:.0}, {:.2}×, {} |",
            med[0],
            med[1],
            med[2],
            med[3],
            med[1] / med[0],
            med[2] / med[0],
            med[3] / med[0],
            waits[0],
            waits[1],
            waits[2],
            bytes as f64 / waits[0].max(1) as f64,
            med[recorded],
            med[recorded] / med[0],
            recorded_waits
        );
    }
    println!("\n(median of {reps} runs, interleaved; times measured inside each program; waits and bytes of the last run; the file includes JFR's metadata, ≈ 100 KB)");
}

/// Unwinding + symbolization throughput: idleflow's resolver (run by
/// `record` when the window closes) against `perf script` on perf's own
/// recording of the same kind (user + kernel stacks of the switches to
/// idle, `--call-graph dwarf,8192`), both of `perf bench sched pipe`
/// (its two threads' stacks in libc's read and write).
fn unwind(loops: u64) {
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

/// `record --java stacks` on the agent benchmark's workloads: what the
/// JVM options cost (frame pointers kept in JIT code, the light agent
/// writing the perf map as the JVM compiles) against plain Java, and the whole recording against
/// `record --no-agent` (the same recorder, JVMs left alone).
fn jit_stacks(reps: usize) {
    let jdk = Path::new(JDK_BIN);
    let classes = compile_examples(&["Fib", "HandOff"]);
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("j.idleflow");
    let workloads: [(&str, Vec<&str>); 2] = [
        ("Fib 36 x2 (call-heavy)", vec!["Fib", "36", "2"]),
        (
            "HandOff 4 workers, 20000 tasks (hand-off-heavy)",
            vec!["HandOff", "4", "20000"],
        ),
    ];
    println!("| workload | plain (ms) | JVM options + light agent of --java stacks (ms) | idleflow record --no-agent (ms) | idleflow record --java stacks (ms) | options / plain | --java stacks / --no-agent |");
    println!("|---|---|---|---|---|---|---|");
    for (name, args) in workloads {
        let mut t: [Vec<f64>; 4] = Default::default();
        for _ in 0..reps {
            for (mode, times) in t.iter_mut().enumerate() {
                let mut cmd = match mode {
                    0 | 1 => Command::new(jdk.join("java")),
                    _ => {
                        let mut c = Command::new(idleflow());
                        c.args(["record", "-q", "-o"]).arg(&rec);
                        c.args(if mode == 2 {
                            ["--no-agent"]
                        } else {
                            ["--java=stacks"]
                        });
                        c.arg("--").arg(jdk.join("java"));
                        c
                    }
                };
                if mode == 1 {
                    cmd.arg("-XX:+PreserveFramePointer").arg(format!(
                        "-agentpath:{}=tree=0,perfmap=1",
                        agent_so().display()
                    ));
                }
                let (_, _, out, _) = measure(cmd.arg("-cp").arg(classes.path()).args(&args));
                times.push(program_ms(&out));
            }
        }
        let med: Vec<f64> = t.iter_mut().map(|v| median(v)).collect();
        println!(
            "| {name} | {:.0} | {:.0} | {:.0} | {:.0} | {:.3}× | {:.3}× |",
            med[0],
            med[1],
            med[2],
            med[3],
            med[1] / med[0],
            med[3] / med[2]
        );
    }
    println!("\n(medians of {reps} runs, interleaved; times measured inside each program)");
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let flag = |name: &str, default: u64| -> u64 {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    match args.first().map(String::as_str) {
        Some("overhead") => overhead(
            flag("--reps", 5) as usize,
            args.iter()
                .position(|a| a == "--only")
                .and_then(|i| args.get(i + 1))
                .map(String::as_str),
        ),
        Some("report") => report(flag("--loops", 2_700_000)),
        Some("agent") => agent(flag("--reps", 5) as usize),
        Some("waits") => waits(flag("--reps", 5) as usize),
        Some("unwind") => unwind(flag("--loops", 100_000)),
        Some("jitstacks") => jit_stacks(flag("--reps", 5) as usize),
        Some("synthetic") => synthetic(&[1, flag("--millions", 10), 4 * flag("--millions", 10)]),
        _ => eprintln!(
            "usage: cargo bench --bench compare -- overhead|report|synthetic|agent|waits|unwind|jitstacks [options]"
        ),
    }
}
