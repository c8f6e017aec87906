//! The JVM benchmarks: the entry/exit agent against an empty agent
//! (`agent`), the flight recorder's waits (`waits`) and the light mode of
//! `record --java stacks` (`jitstacks`), on the Java examples
//! (`examples/java`) compiled with JDK 17.
//!
//! Invariant: every figure is the program's own time, measured inside the
//! JVM (`ms N`), so that JVM start-up and idleflow's own start and end are
//! left out; modes run interleaved, run by run.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::figures::{entries_in_dump, median, program_ms};
use crate::run::{idleflow, measure};

/// The JVM agent beside the bench binary's idleflow.
pub fn agent_so() -> PathBuf {
    Path::new(idleflow())
        .parent()
        .unwrap()
        .join("libidleflow_agent.so")
}

/// JDK 17's binaries.
pub const JDK_BIN: &str = "/usr/lib/jvm/java-17-openjdk-amd64/bin";

/// The Java examples `names` (`examples/java/NAME.java`) compiled into a
/// fresh directory.
pub fn compile_examples(names: &[&str]) -> tempfile::TempDir {
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

pub fn agent(reps: usize) {
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
pub fn waits(reps: usize) {
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

/// `record --java stacks` on the agent benchmark's workloads: what the
/// JVM options cost (frame pointers kept in JIT code, the light agent
/// writing the perf map as the JVM compiles) against plain Java, and the whole recording against
/// `record --no-agent` (the same recorder, JVMs left alone).
pub fn jit_stacks(reps: usize) {
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
