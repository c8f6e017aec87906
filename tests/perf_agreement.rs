//! End to end through the CLI: idleflow's idle, dispatches from idle and
//! switch-out states on every CPU against perf's own records of the same
//! run (its switch records, recorded around idleflow's and inside it, and
//! its `sched_switch` samples).

mod common;

use common::perf_switches::*;
use common::*;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

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
