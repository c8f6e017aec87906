//! End to end through the CLI: record real workloads on the real kernel and
//! check the report's numbers on every CPU against what the workload does,
//! against the kernel's `/proc/stat`, and against perf's switch records.

mod common;

use common::perf_switches::*;
use common::*;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

fn record_dutycycle(dir: &tempfile::TempDir, args: &[&str]) -> (Value, Vec<(i64, u64)>) {
    let rec = dir.path().join("run.idleflow");
    let out = run(idleflow()
        .arg("record")
        .arg("-o")
        .arg(&rec)
        .arg("--")
        .arg(example("dutycycle"))
        .args(args));
    assert!(out.status.success(), "record failed: {}", stderr(&out));
    let summary = stderr(&out);
    assert!(summary.contains("dispatches"), "no summary line: {summary}");
    (report_json(&rec), cycles_by_cpu(&stdout(&out)))
}

/// Per CPU, the report's idle time against the kernel's idle + iowait over
/// the same window (ticks of 10 ms at both ends, so a few tens of ms slack).
fn assert_idle_matches_kernel(r: &Value) {
    let duration = u(r, "duration_ns") as f64;
    for c in r["per_cpu"].as_array().unwrap() {
        let ours = u(c, "idle_ns") as f64;
        let kernel = u(c, "kernel_idle_ns") as f64;
        println!(
            "| CPU {} | idle {:.1} ms | /proc/stat idle+iowait {:.1} ms | window {:.1} ms |",
            c["cpu"],
            ours / 1e6,
            kernel / 1e6,
            duration / 1e6
        );
        let slack = 0.02 * duration + 30e6;
        assert!(
            (ours - kernel).abs() <= slack,
            "CPU {}: idleflow idle {:.1} ms, /proc/stat {:.1} ms (slack {:.1} ms)",
            c["cpu"],
            ours / 1e6,
            kernel / 1e6,
            slack / 1e6
        );
    }
}

#[test]
fn duty_cycle_idles_each_cpu_half_the_time() {
    let Some(_m) = machine() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (r, cycles) = record_dutycycle(
        &dir,
        &["--busy-ms", "3", "--sleep-ms", "3", "--seconds", "3"],
    );
    assert_eq!(u(&r, "lost_events"), 0);
    let per_cpu = r["per_cpu"].as_array().unwrap();
    assert_eq!(per_cpu.len() as u64, u(&r, "cpus"));
    assert!(per_cpu.len() >= 2, "this test wants CPU 1 too");
    let duration = u(&r, "duration_ns");
    for c in per_cpu {
        let cpu = u(c, "cpu") as i64;
        let idle_pct = f(c, "idle_pct");
        assert!(
            (40.0..=60.0).contains(&idle_pct),
            "CPU {cpu}: idle {idle_pct}% for a 50% duty cycle"
        );
        // The pinned thread leaves idle once per cycle; other threads add a few.
        let k = cycles
            .iter()
            .find(|(c, _)| *c == cpu)
            .map(|(_, k)| *k)
            .unwrap_or_else(|| panic!("no thread ran on CPU {cpu}: {cycles:?}"));
        let from = u(c, "idle_dispatches_from");
        let to = u(c, "idle_dispatches_to");
        assert!(
            from >= k * 95 / 100 && from <= k * 3 / 2 + 50,
            "CPU {cpu}: {from} dispatches from idle for {k} cycles"
        );
        assert!(
            from.abs_diff(to) <= 2 + u(c, "breaks"),
            "CPU {cpu}: to {to} from {from}"
        );
        // The thread whose leaving made the CPU idle most is the pinned one,
        // and it left sleeping.
        let top = &c["idle_causes"][0];
        assert_eq!(
            top["comm"].as_str(),
            Some(format!("duty-{cpu}").as_str()),
            "CPU {cpu}: top idle cause {top}"
        );
        let sleeping = top["states"]["S"].as_u64().unwrap_or(0);
        assert!(
            sleeping as f64 >= 0.95 * u(top, "idle_dispatches_to") as f64,
            "{top}"
        );
        // Most of the CPU's idle time follows the pinned thread's sleeps, and
        // an idle interval after a 3 ms sleep lasts at most about 3 ms (less
        // when another thread wakes on the CPU in between: on CPU 0 the
        // recorder itself does 40 times a second, and the VM's agent; there
        // the pinned thread was measured at 75-84 % of the idle time).
        let after = u(top, "idle_ns") / u(top, "idle_dispatches_to").max(1);
        assert!(
            (1_500_000..4_000_000).contains(&after),
            "CPU {cpu}: {after} ns idle per sleep of duty-{cpu}"
        );
        assert!(
            u(top, "idle_ns") as f64 >= 0.6 * u(c, "idle_ns") as f64,
            "CPU {cpu}: duty-{cpu} is followed by {} of {} ns idle",
            u(top, "idle_ns"),
            u(c, "idle_ns")
        );
        // The interval distribution is ordered and its tail is the sleeps.
        let iv = &c["idle_intervals"];
        let (p50, p99, max) = (u(iv, "p50_ns"), u(iv, "p99_ns"), u(iv, "max_ns"));
        assert!(p50 <= p99 && p99 <= max, "CPU {cpu}: {iv}");
        assert!((2_500_000..10_000_000).contains(&p99), "CPU {cpu}: {iv}");
        // Gaps are counted and small.
        assert!(u(c, "unknown_ns") < duration / 50, "CPU {cpu}: {c}");
    }
    assert_idle_matches_kernel(&r);
    // The thread table shows the workload's threads with their timeslices.
    let threads = r["threads"].as_array().unwrap();
    for &(cpu, k) in &cycles {
        let name = format!("duty-{cpu}");
        let t = threads
            .iter()
            .find(|t| t["comm"] == name.as_str())
            .unwrap_or_else(|| panic!("{name} not in the thread table"));
        let slices = u(t, "timeslices");
        assert!(
            slices >= k && slices <= k * 3 / 2 + 20,
            "{name}: {slices} slices, {k} cycles"
        );
        assert!(u(t, "non_runnable") >= k, "{t}");
        let run_pct = f(t, "running_pct");
        assert!((40.0..=60.0).contains(&run_pct), "{name} ran {run_pct}%");
    }
}

#[test]
fn saturating_work_leaves_no_cpu_idle_and_threads_wait_runnable() {
    let Some(_m) = machine() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (r, _) = record_dutycycle(
        &dir,
        &[
            "--threads",
            "4",
            "--no-pin",
            "--busy-ms",
            "5",
            "--sleep-ms",
            "0",
            "--seconds",
            "2",
        ],
    );
    for c in r["per_cpu"].as_array().unwrap() {
        let idle_pct = f(c, "idle_pct");
        assert!(
            idle_pct < 5.0,
            "CPU {}: idle {idle_pct}% under 4 busy threads",
            c["cpu"]
        );
    }
    assert_idle_matches_kernel(&r);
    let duty: Vec<&Value> = r["threads"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["comm"].as_str().unwrap_or("").starts_with("duty-"))
        .collect();
    assert_eq!(duty.len(), 4);
    for t in duty {
        // 4 threads on 2 CPUs: each runs about half the time and waits runnable the rest.
        assert!(u(t, "preempted") > 10, "{t}");
        let run_pct = f(t, "running_pct");
        let runnable = f(t, "runnable_pct");
        assert!((30.0..=70.0).contains(&run_pct), "{t}");
        assert!(runnable >= 25.0, "{t}");
    }
}

/// Idle time per CPU in `[start_ns, stop_ns)` from perf's switch records,
/// with idleflow's definition of a dispatch's time: the record written in
/// the non-idle thread's context (complete on every CPU here). A CPU is
/// idle from a thread's switch-out to idle until a thread's switch-in from
/// idle. Where the thread's own record never arrives (the records of pid
/// 1's threads never do, NOTES.md), the idle task's record of the same
/// switch stands in where the kernel delivers it (CPU 0 here): its
/// switch-out ends the idle interval, its switch-in starts one. Where
/// neither arrives (a pid-1 thread coming from idle on CPU 1: its own
/// record never comes, the idle task's is dropped there), the next thread
/// seen switching in from a non-idle thread shows the idle ended at some
/// time perf does not know: like idleflow, the reference then gives a range,
/// `(idle, unknown)` per CPU, the idle lying in `[idle, idle + unknown]`.
fn perf_idle_ns(switches: &[PerfSwitch], start_ns: u64, stop_ns: u64) -> Vec<(u32, (u64, u64))> {
    #[derive(Default)]
    struct Cpu {
        since: Option<u64>,
        /// The idle task left for this thread at this time; its own
        /// switch-in, if it comes next, gives the time instead.
        idle_out: Option<(u32, u64)>,
        idle: u64,
        unknown: u64,
    }
    let clip = |a: u64, b: u64| b.min(stop_ns).saturating_sub(a.max(start_ns));
    let mut cpus = std::collections::BTreeMap::<u32, Cpu>::new();
    for s in switches {
        let c = cpus.entry(s.cpu).or_default();
        if let Some((next, t)) = c.idle_out.take() {
            let confirms = !s.out && s.tid == next && s.other_tid == 0;
            let end = if confirms { s.time } else { t };
            if let Some(since) = c.since.take() {
                c.idle += clip(since, end);
            }
            if confirms {
                continue;
            }
        }
        match (s.tid, s.out, s.other_tid) {
            // A thread left for idle (its own record).
            (tid, true, 0) if tid != 0 => c.since = Some(s.time),
            // A thread came from idle (its own record).
            (tid, false, 0) if tid != 0 => {
                if let Some(since) = c.since.take() {
                    c.idle += clip(since, s.time);
                }
            }
            // The idle task left for a thread: wait for that thread's record.
            (0, true, next) if next != 0 => c.idle_out = Some((next, s.time)),
            // The idle task came in: idle starts, unless the leaving thread's
            // own record already said so.
            (0, false, prev) if prev != 0 => {
                c.since.get_or_insert(s.time);
            }
            // A thread came in from another thread while the CPU was taken
            // for idle: a switch from idle went unrecorded, at some time
            // since then.
            (tid, false, prev) if tid != 0 && prev != 0 => {
                if let Some(since) = c.since.take() {
                    c.unknown += clip(since, s.time);
                }
            }
            _ => {}
        }
    }
    cpus.into_iter()
        .map(|(cpu, mut c)| {
            if let Some(since) = c.since {
                c.idle += clip(since, stop_ns);
            }
            (cpu, (c.idle, c.unknown))
        })
        .collect()
}

/// A second `perf record --switch-events -a` started while `idleflow` (pid
/// `recorder`) records: it waits until idleflow's command runs (idleflow
/// opened its events before it starts the command), then starts perf, and
/// returns it with the time its events were surely open (on our clock).
fn second_perf_after(recorder: u32, pdata: &Path) -> (std::process::Child, u64) {
    wait_until_command_runs(recorder);
    let perf = Command::new("perf")
        .args([
            "record",
            "-q",
            "-k",
            "CLOCK_MONOTONIC",
            "-a",
            "-e",
            "dummy",
            "--switch-events",
            "-o",
        ])
        .arg(pdata)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("perf is installed (Debian's linux-perf)");
    // perf opens its events within a few hundred ms; the window compared
    // starts after that.
    std::thread::sleep(Duration::from_millis(700));
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (perf, ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// idleflow's idle time per CPU agrees with perf's switch records.
///
/// Each tracer's switch record of one switch is written in turn, newest
/// tracer first, and on this machine kind each takes ~0.8 µs on average
/// (3 µs at times) at a switch-out, much less at a switch-in: two perf
/// recorders of the same run differ by 0.6–1.0 % of the idle under sched
/// pipe's 20 k idle intervals per second and CPU (measured,
/// PERFORMANCE.md §1), so one perf recorder is no reference to 0.2 %.
/// Two are: perf A starts before idleflow and perf B after it, so the
/// kernel writes B's record of a switch first, idleflow's next, A's last;
/// idleflow's idle must then lie between A's and B's, within 0.2 %.
#[test]
fn idle_time_agrees_with_perf_switch_records_on_every_cpu_under_sched_pipe() {
    idle_agrees_with_perf_switch_records_under_sched_pipe("perf");
}

/// The same with the eBPF event source: its dispatches give the idle of
/// perf's own switch records on every CPU. Ignored for now: it reads
/// less idle than perf in every run (3–10 ms of ~700 ms, 0.3–1.5 %), passing
/// only when a stream break's unknown time covers the gap. An eBPF switch
/// out of idle is stamped at the tracepoint, in the idle task, before the
/// context switch; perf's switch-in record after it, in the arriving
/// thread. Measured on a failing run's recording against perf A's records
/// of the same switches (debug build, two perf sessions recording too):
/// perf stamps the end of idle 1.0–1.7 µs (median) after eBPF and its
/// start 0.67 µs after, so ~0.4–1 µs less idle per interval × the ~10 k
/// intervals a CPU has here: 3.4 and 10.3 ms, the whole gap seen. And on
/// this kernel no switch out of pid 1's threads reaches eBPF (stream
/// breaks).
#[test]
#[ignore = "eBPF ends idle at the tracepoint, before the switch: ~0.3-1 µs less idle per interval than perf's switch-in records (0.3-1.5 % on sched pipe)"]
fn ebpf_idle_time_agrees_with_perf_switch_records_on_every_cpu_under_sched_pipe() {
    idle_agrees_with_perf_switch_records_under_sched_pipe("bpf");
}

/// Records `perf bench sched pipe` with `--events events` between two perf
/// recordings of switch records (A around it, B inside it) and compares
/// each CPU's idle.
fn idle_agrees_with_perf_switch_records_under_sched_pipe(events: &str) {
    let Some(_m) = machine() else { return };
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("pipe.idleflow");
    let b_data = dir.path().join("perf-b.data");
    let ((from_ns, b_script), switches_a) = under_perf_switch_records(&dir, || {
        let recorder = idleflow()
            .args(["record", "-q", "--events", events, "-o"])
            .arg(&rec)
            .args([
                "--",
                "sh",
                "-c",
                "sleep 1; exec perf bench sched pipe -l 60000",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (mut perf_b, from_ns) = second_perf_after(recorder.id(), &b_data);
        let out = recorder.wait_with_output().unwrap();
        assert!(out.status.success(), "record: {}", stderr(&out));
        // SAFETY: kill has no memory effects.
        unsafe { libc::kill(perf_b.id() as i32, libc::SIGINT) };
        perf_b.wait().unwrap();
        let script = run(Command::new("perf")
            .args([
                "script",
                "--ns",
                "--show-switch-events",
                "-F",
                "tid,cpu,time",
                "-i",
            ])
            .arg(&b_data));
        assert!(script.status.success(), "perf script: {}", stderr(&script));
        (from_ns, stdout(&script))
    });
    let switches_b = perf_switches(&b_script);
    let whole = report_json(&rec);
    assert_eq!(
        whole["event_source"], events,
        "the recording says its source"
    );
    assert!(
        from_ns > u(&whole, "start_ns"),
        "perf B started before idleflow's window"
    );
    let from_s = format!("{:.9}", (from_ns - u(&whole, "start_ns")) as f64 / 1e9);
    let out = run(idleflow()
        .args(["report", "--format", "json", "--from", &from_s])
        .arg(&rec));
    assert!(out.status.success(), "report --from: {}", stderr(&out));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let (start_ns, stop_ns) = (u(&r, "start_ns"), u(&r, "stop_ns"));
    assert!(
        start_ns.abs_diff(from_ns) < 1_000,
        "window starts at {start_ns}, asked {from_ns}"
    );
    let perf_a = perf_idle_ns(&switches_a, start_ns, stop_ns);
    let perf_b = perf_idle_ns(&switches_b, start_ns, stop_ns);
    let per_cpu = r["per_cpu"].as_array().unwrap();
    assert_eq!(perf_a.len(), per_cpu.len(), "perf A saw CPUs {perf_a:?}");
    assert_eq!(perf_b.len(), per_cpu.len(), "perf B saw CPUs {perf_b:?}");
    let mut outside_range = Vec::new();
    for ((c, (pcpu, a)), (_, b)) in per_cpu.iter().zip(&perf_a).zip(&perf_b) {
        assert_eq!(u(c, "cpu"), u64::from(*pcpu));
        let ours = u(c, "idle_ns");
        let ((a_ns, a_unknown), (b_ns, b_unknown)) = (*a, *b);
        // Each reference says the idle lies in [idle, idle + unknown]; the
        // two perf recorders together bound it by [lo, hi_perf].
        let (lo, hi_perf) = (a_ns.min(b_ns), (a_ns + a_unknown).max(b_ns + b_unknown));
        println!(
            "| {events} | CPU {pcpu} | idleflow idle {:.3} ms (unknown {:.3} ms, {} breaks) | perf A {:.3} ms (unknown {:.3}), perf B {:.3} ms (unknown {:.3}) ({:.3} % apart) | window {:.1} ms |",
            ours as f64 / 1e6,
            u(c, "unknown_ns") as f64 / 1e6,
            u(c, "breaks"),
            a_ns as f64 / 1e6,
            a_unknown as f64 / 1e6,
            b_ns as f64 / 1e6,
            b_unknown as f64 / 1e6,
            100.0 * a_ns.abs_diff(b_ns) as f64 / lo.max(1) as f64,
            u(&r, "duration_ns") as f64 / 1e6
        );
        assert!(
            lo > u(&r, "duration_ns") / 10,
            "CPU {pcpu}: sched pipe should leave the CPU idle often: {lo} ns"
        );
        // The kernel's idle (/proc/stat, read at the recording's start and
        // end) reads lower here, as much as the wake-ups explain.
        let w = &whole["per_cpu"][u(c, "cpu") as usize];
        let kernel = u(w, "kernel_idle_ns");
        println!(
            "|   | whole recording: idleflow {:.3} ms, /proc/stat {:.3} ms, {:.1} µs per dispatch from idle below, flagged: {} |",
            u(w, "idle_ns") as f64 / 1e6,
            kernel as f64 / 1e6,
            u(w, "idle_ns").saturating_sub(kernel) as f64 / 1e3 / u(w, "idle_dispatches_from").max(1) as f64,
            w["kernel_differs"]
        );
        assert_eq!(w["kernel_differs"], false, "{w}");
        // Where a CPU's stream breaks (records of pid 1's threads never
        // arrive here, NOTES.md), idleflow says the idle lies in
        // [idle, idle + unknown]; that range must meet perf's range (A and
        // B, each with the unknown of the same unseen switches), within
        // 0.2 %. Without breaks, unknown is 0: idle itself.
        let hi = ours + u(c, "unknown_ns");
        let outside = if hi < lo {
            lo - hi
        } else {
            ours.saturating_sub(hi_perf)
        };
        let outside_pct = 100.0 * outside as f64 / lo.max(1) as f64;
        if outside_pct > 0.2 {
            outside_range.push(format!(
                "CPU {pcpu}: idleflow {ours}..{hi} ns idle, perf's switch records {lo}..{hi_perf} ns ({outside_pct:.3} % outside)"
            ));
        }
    }
    // A failure keeps the recording and perf's data, to compare them
    // interval by interval.
    if !outside_range.is_empty() {
        let kept = dir.keep();
        panic!(
            "{} (over 0.2 %); pipe.idleflow, perf.data (A) and perf-b.data are kept in {}",
            outside_range.join("; "),
            kept.display()
        );
    }
}

#[test]
fn dispatches_from_idle_agree_with_perf_switch_records_on_every_cpu() {
    let Some(_m) = machine() else { return };
    let dir = tempfile::tempdir().unwrap();
    let ((r, _), switches) = under_perf_switch_records(&dir, || {
        record_dutycycle(
            &dir,
            &["--busy-ms", "2", "--sleep-ms", "2", "--seconds", "2"],
        )
    });
    let perf_counts = perf_switch_ins_from_idle(&switches, u(&r, "start_ns"), u(&r, "stop_ns"));
    let per_cpu = r["per_cpu"].as_array().unwrap();
    assert_eq!(
        perf_counts.len(),
        per_cpu.len(),
        "perf saw CPUs {perf_counts:?}"
    );
    for (c, (pcpu, perf_n)) in per_cpu.iter().zip(&perf_counts) {
        assert_eq!(u(c, "cpu"), u64::from(*pcpu));
        let ours = u(c, "idle_dispatches_from");
        println!("| CPU {pcpu} | idleflow dispatches from idle {ours} | perf switch-ins from idle {perf_n} |");
        // Perf misses switch-ins raised in contexts this kernel hides (see
        // NOTES.md); idleflow also sees those from the idle side on CPU 0.
        let tolerance = 3 + perf_n / 100;
        assert!(
            ours.abs_diff(*perf_n) <= tolerance,
            "CPU {pcpu}: idleflow {ours} dispatches from idle, perf {perf_n} switch-ins from idle"
        );
        assert!(
            *perf_n > 300,
            "CPU {pcpu}: the workload should leave idle often: {perf_n}"
        );
    }
}

/// A window whose edge falls inside a stream break (here: the thread that
/// ran from idle was never seen getting the CPU, like pid 1's agent on this
/// machine) counts the time from its edge as unknown, as the whole
/// recording does — not as the first dispatch's leaving thread running
/// since the edge. A constructed recording, read through the CLI.
#[test]
fn a_window_starting_inside_a_stream_break_leaves_that_time_unknown() {
    use idleflow_format::{Dispatch, PrevState, Record, RunInfo, RunSummary, Writer, IDLE_TID};
    const MS: u64 = 1_000_000;
    let start = 1_000 * MS;
    let mut w = Writer::new(Vec::new(), &RunInfo::minimal(vec![0], start)).unwrap();
    // 1 ms: A runs; 2 ms: A sleeps, the CPU is idle; unseen: idle -> 75;
    // 5 ms: 75 -> B; 6 ms: B sleeps; the recording stops at 10 ms.
    for (t, prev, next) in [
        (1, IDLE_TID, 4001),
        (2, 4001, IDLE_TID),
        (5, 75, 4002),
        (6, 4002, IDLE_TID),
    ] {
        w.write(&Record::Dispatch(Dispatch {
            time: start + t * MS,
            cpu: 0,
            prev_tid: prev,
            prev_state: PrevState::Sleeping,
            next_tid: next,
            prev_node: Default::default(),
        }))
        .unwrap();
    }
    let bytes = w
        .finish(&RunSummary {
            stop_ns: start + 10 * MS,
            ..Default::default()
        })
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("break.idleflow");
    std::fs::write(&rec, bytes).unwrap();
    let cpu0 = |args: &[&str]| {
        let out = run(idleflow()
            .arg("report")
            .arg(&rec)
            .args(["--format", "json"])
            .args(args));
        assert!(out.status.success(), "{}", stderr(&out));
        let r: Value = serde_json::from_slice(&out.stdout).unwrap();
        let c = &r["per_cpu"][0];
        (
            u(c, "idle_ns") / MS,
            u(c, "unknown_ns") / MS,
            u(c, "breaks"),
        )
    };
    // Whole: idle 0-1 (the edge's), 2-5 broken at 5 (3 ms unknown), 6-10.
    assert_eq!(cpu0(&[]), (5, 3, 1));
    // From 3 ms: the 2 ms up to the break are unknown too, not busy.
    assert_eq!(cpu0(&["--from", "0.003"]), (4, 2, 1));
    // From 5.5 ms: after the break, B ran since the edge.
    assert_eq!(cpu0(&["--from", "0.0055"]), (4, 0, 0));
}

/// `--from` / `--to` cut a recording into parts that add up: every
/// dispatch is in exactly one part, and the idle time of the parts sums to
/// the whole's (an idle interval across the cut counts in both, split there).
#[test]
fn report_windows_partition_the_recording() {
    let Some(_m) = machine() else { return };
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("run.idleflow");
    let out = run(idleflow()
        .args(["record", "-q", "-o"])
        .arg(&rec)
        .arg("--")
        .arg(example("dutycycle"))
        .args(["--seconds", "3"]));
    assert!(out.status.success(), "{}", stderr(&out));
    let window = |args: &[&str]| {
        let out = run(idleflow()
            .arg("report")
            .arg(&rec)
            .args(["--format", "json"])
            .args(args));
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let whole = window(&[]);
    let first = window(&["--to", "1.5"]);
    let rest = window(&["--from", "1.5"]);
    assert_eq!(first["windowed"], true);
    assert_eq!(
        u(&first, "dispatches") + u(&rest, "dispatches"),
        u(&whole, "dispatches")
    );
    assert_eq!(u(&first, "duration_ns"), 1_500_000_000);
    for i in 0..whole["per_cpu"].as_array().unwrap().len() {
        let idle = |r: &Value| u(&r["per_cpu"][i], "idle_ns");
        let sum = idle(&first) + idle(&rest);
        println!(
            "| CPU {i} | 0-1.5 s {:.3} ms | 1.5 s- {:.3} ms | whole {:.3} ms |",
            idle(&first) as f64 / 1e6,
            idle(&rest) as f64 / 1e6,
            idle(&whole) as f64 / 1e6
        );
        assert_eq!(sum, idle(&whole), "CPU {i}");
        // A 50 % duty cycle in each part.
        let pct = f(&first["per_cpu"][i], "idle_pct");
        assert!(
            (35.0..65.0).contains(&pct),
            "CPU {i}: {pct} % idle in the first 1.5 s"
        );
        assert!(first["per_cpu"][i]["kernel_idle_ns"].is_null());
    }
    let text = run(idleflow()
        .arg("report")
        .arg(&rec)
        .args(["--from", "1", "--to", "2"]));
    assert!(stdout(&text).contains("# reported: 1.000 s to 2.000 s of the recording"));
    let bad = run(idleflow()
        .arg("report")
        .arg(&rec)
        .args(["--from", "2", "--to", "1"]));
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        stderr(&bad).contains("must come before"),
        "{}",
        stderr(&bad)
    );
}

/// `--skip-startup` starts the report where the program's longest stretch
/// without a new thread or process begins: here a shell that starts two
/// short children, a third 0.2 s in, then `exec`s a long `sleep` (no new
/// process).
#[test]
fn skip_startup_reports_from_the_programs_steady_state() {
    let Some(_m) = machine() else { return };
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("s.idleflow");
    let out = run(idleflow().args(["record", "-q", "-o"]).arg(&rec).args([
        "--",
        "sh",
        "-c",
        "sleep 0.2 & sleep 0.2 & wait; sleep 0.2; exec sleep 1.6",
    ]));
    assert!(out.status.success(), "record: {}", stderr(&out));
    let json = run(idleflow()
        .arg("report")
        .arg(&rec)
        .args(["--skip-startup", "--format", "json"]));
    assert!(json.status.success(), "{}", stderr(&json));
    let r: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(r["after_startup"], true);
    assert_eq!(r["windowed"], true);
    let from_s = (u(&r, "start_ns") - u(&r, "recording_start_ns")) as f64 / 1e9;
    // The last new process is the shell's fork for the third `sleep`, at
    // about 0.2 s (the `exec` starts no process); the 1.8 s after it are
    // the longest quiet stretch.
    assert!(
        (0.15..0.6).contains(&from_s),
        "start-up ended at {from_s:.3} s"
    );
    let text = stdout(&run(idleflow()
        .arg("report")
        .arg(&rec)
        .arg("--skip-startup")));
    assert!(text.contains("(--skip-startup:"), "{text}");
    // A system-wide recording has no program to start up.
    let sw = dir.path().join("sw.idleflow");
    let out = run(idleflow()
        .args(["record", "-q", "-d", "0.3", "-o"])
        .arg(&sw));
    assert!(out.status.success(), "record: {}", stderr(&out));
    let bad = run(idleflow().arg("report").arg(&sw).arg("--skip-startup"));
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        stderr(&bad).contains("--skip-startup needs a recorded program"),
        "{}",
        stderr(&bad)
    );
    let both = run(idleflow()
        .arg("report")
        .arg(&rec)
        .args(["--skip-startup", "--from", "1"]));
    assert_eq!(
        both.status.code(),
        Some(2),
        "--from and --skip-startup conflict"
    );
}

/// One `sched:sched_switch` sample as `perf script -F cpu,time,trace` prints it.
struct PerfSwitchSample {
    cpu: u32,
    time: u64,
    prev: u32,
    /// perf's letter: `S`, `D`, `R+` (preempted), `I`, …
    state: String,
    next: u32,
}

fn perf_switch_samples(script: &str) -> Vec<PerfSwitchSample> {
    let field = |line: &str, key: &str| -> Option<String> {
        let at = line.find(key)? + key.len();
        Some(line[at..].split_whitespace().next()?.to_string())
    };
    script
        .lines()
        .filter_map(|line| {
            let mut w = line.split_whitespace();
            let cpu = w
                .next()?
                .trim_matches(|ch| ch == '[' || ch == ']')
                .parse()
                .ok()?;
            let secs: f64 = w.next()?.trim_end_matches(':').parse().ok()?;
            Some(PerfSwitchSample {
                cpu,
                time: (secs * 1e9).round() as u64,
                prev: field(line, " prev_pid=")?.parse().ok()?,
                state: field(line, " prev_state=")?,
                next: field(line, " next_pid=")?.parse().ok()?,
            })
        })
        .collect()
}

/// By default the kernel writes a `sched_switch` sample only for the states
/// a switch-out record cannot tell; a sleep is a switch-out that is not a
/// preemption. Recorded next to perf's own samples of every switch, each
/// dispatch's state must be the one the kernel gave: S, D and preemption
/// all occur (two pinned busy loops, synchronous writes, a pipe ping-pong).
/// `--all-switch-samples` (every sample written, as before the filter) is
/// held to the same standard.
#[test]
fn dispatch_states_agree_with_perf_sched_switch_samples() {
    let Some(_m) = machine() else { return };
    states_agree_with_perf(&[]);
    states_agree_with_perf(&["--all-switch-samples"]);
}

fn states_agree_with_perf(options: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("states.idleflow");
    let work = format!(
        "taskset -c 0 sh -c 'i=0; while [ $i -lt 150000 ]; do i=$((i+1)); done' & \
         taskset -c 0 sh -c 'i=0; while [ $i -lt 150000 ]; do i=$((i+1)); done' & \
         dd if=/dev/zero of={} bs=4k count=300 oflag=dsync 2>/dev/null; \
         perf bench sched pipe -l 5000 >/dev/null; wait",
        dir.path().join("dsync").display()
    );
    let (out, script) = under_perf(
        &dir,
        &["-e", "sched:sched_switch"],
        &["-F", "cpu,time,trace"],
        || {
            run(idleflow()
                .args(["record", "-q", "--no-agent"])
                .args(options)
                .arg("-o")
                .arg(&rec)
                .args(["--", "sh", "-c", &work]))
        },
    );
    assert!(out.status.success(), "record: {}", stderr(&out));
    let r = report_json(&rec);
    let start = u(&r, "start_ns");
    let samples = perf_switch_samples(&script);
    // idleflow's dispatches: (cpu, time, prev, state letter, next).
    let ours = run(idleflow().arg("script").arg(&rec));
    let mut by_cpu: std::collections::BTreeMap<u32, Vec<(u64, u32, String, u32)>> =
        Default::default();
    for line in stdout(&ours).lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        if w.len() >= 8 && w[1] == "cpu" && w[3] == "dispatch" {
            let t = start as f64 + w[0].parse::<f64>().unwrap() * 1e9;
            let state = w[5].trim_matches(|ch| ch == '[' || ch == ']').to_string();
            by_cpu.entry(w[2].parse().unwrap()).or_default().push((
                t.round() as u64,
                w[4].parse().unwrap(),
                state,
                w[7].parse().unwrap(),
            ));
        }
    }
    let stop = u(&r, "stop_ns");
    let (mut matched, mut agree) = (0u64, 0u64);
    let mut seen = std::collections::BTreeMap::<String, u64>::new();
    let mut disagreements = Vec::new();
    for s in &samples {
        // The idle task's samples never arrive from CPU 1 (NOTES.md).
        if s.prev == 0 || s.time < start || s.time + 1_000_000 > stop {
            continue;
        }
        let Some(list) = by_cpu.get(&s.cpu) else {
            continue;
        };
        // The dispatch's time is its switch-out record's, written just after
        // the sample in the same switch.
        let i = list.partition_point(|d| d.0 + 50_000 < s.time);
        let Some(d) = list[i..]
            .iter()
            .take_while(|d| d.0 < s.time + 50_000)
            .filter(|d| d.1 == s.prev && d.3 == s.next)
            .min_by_key(|d| d.0.abs_diff(s.time))
        else {
            continue;
        };
        matched += 1;
        // idleflow writes R for a preemption (perf: R+), X for dead and zombie.
        let perf_letter = match s.state.as_str() {
            st if st.starts_with('R') => "R",
            "Z" => "X",
            st => st,
        };
        *seen.entry(perf_letter.to_string()).or_default() += 1;
        if d.2 == perf_letter {
            agree += 1;
        } else if disagreements.len() < 10 {
            disagreements.push(format!(
                "cpu {} t {} {} [{}] -> {}: ours [{}]",
                s.cpu, s.time, s.prev, s.state, s.next, d.2
            ));
        }
    }
    println!(
        "{options:?}: {matched} switches matched, {agree} agree; perf's states {seen:?}; {disagreements:#?}"
    );
    for state in ["S", "D", "R"] {
        assert!(
            seen.get(state).copied().unwrap_or(0) >= 50,
            "the workload should switch out in state {state}: {seen:?}"
        );
    }
    assert!(matched >= 10_000, "{matched} switches matched");
    assert!(
        agree as f64 >= 0.999 * matched as f64,
        "{agree} of {matched} states agree: {disagreements:#?}"
    );
}
