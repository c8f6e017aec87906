//! End to end through the CLI: the kernel stacks taken at the switch-outs
//! that leave a CPU idle name each thread's kernel wait, and agree with
//! perf's own call chains of the same switches (`perf record -e
//! sched:sched_switch --filter 'next_pid == 0' -g`, run at the same time).

mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

/// `examples/c/pipewait.c` built with `-O2` into `dir`.
fn pipewait(dir: &Path) -> PathBuf {
    build_c_example(dir, "pipewait.c", "pipewait", &["-O2", "-pthread"])
}

/// The report's kernel paths waited in by thread `comm`: (wait, dispatches).
fn waits_of<'a>(kw: &'a Value, comm: &str) -> Vec<(&'a str, u64)> {
    let mut v: Vec<(&str, u64)> = kw["paths"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| {
            let n: u64 = p["threads"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|t| t[0] == comm)
                .map(|t| t[1].as_u64().unwrap())
                .sum();
            (n > 0).then(|| (p["wait"].as_str().unwrap(), n))
        })
        .collect();
    v.sort_by_key(|w| std::cmp::Reverse(w.1));
    v
}

/// perf's switch-to-idle samples of thread `comm`: how many, and how many
/// have a frame whose name contains `frame`.
fn perf_samples(script: &str, comm: &str, frame: &str) -> (u64, u64) {
    let (mut all, mut with) = (0, 0);
    for sample in script.split("\n\n") {
        let mut lines = sample.lines().filter(|l| !l.trim().is_empty());
        let Some(head) = lines.next() else { continue };
        if head.split_whitespace().next() != Some(comm) {
            continue;
        }
        all += 1;
        with += u64::from(lines.any(|l| l.contains(frame)));
    }
    (all, with)
}

#[test]
fn each_threads_kernel_wait_is_named_at_the_switch_out_that_left_a_cpu_idle() {
    let Some(_m) = machine() else { return };
    let dir = tempfile::tempdir().unwrap();
    let bin = pipewait(dir.path());
    let rec = dir.path().join("k.idleflow");
    let (out, script) = under_perf(
        &dir,
        &[
            "-e",
            "sched:sched_switch",
            "--filter",
            "next_pid == 0",
            "-g",
        ],
        &["-F", "comm,tid,ip,sym"],
        || {
            run(idleflow()
                .args(["record", "-q", "-o"])
                .arg(&rec)
                .arg("--")
                .arg(&bin)
                .arg("2000"))
        },
    );
    assert!(out.status.success(), "record: {}", stderr(&out));
    let r = report_json(&rec);
    let kw = &r["kernel_waits"];
    assert!(kw.is_object(), "no kernel_waits section: {r}");
    // Nearly every dispatch to idle has its stack.
    let with = u(kw, "idle_dispatches_with_stack");
    let all = u(kw, "idle_dispatches_to");
    assert!(with * 100 >= all * 95, "{with} of {all} with a stack");
    // Each thread's wait, by its own kernel stack.
    let reader = waits_of(kw, "reader");
    let sleeper = waits_of(kw, "sleeper");
    assert!(reader[0].0.contains("pipe_read"), "{reader:?}");
    assert!(sleeper[0].0.contains("nanosleep"), "{sleeper:?}");
    // Their frames are path frames, as in every section: kind `kernel`.
    let first = &kw["paths"][0];
    let frames = first["frames"].as_array().unwrap();
    assert!(
        !frames.is_empty() && frames.iter().all(|f| f["kind"] == "kernel"),
        "{first}"
    );
    assert!(frames.iter().any(|f| f["name"] == first["wait"]), "{first}");
    let ours_reader: u64 = reader.iter().map(|w| w.1).sum();
    assert!(
        reader[0].1 * 10 >= ours_reader * 9,
        "the reader waits in the pipe: {reader:?}"
    );
    // idleflow's own threads are never a cause.
    for p in kw["paths"].as_array().unwrap() {
        for t in p["threads"].as_array().unwrap() {
            assert!(!t[0].as_str().unwrap().starts_with("idleflow"), "{p}");
        }
    }
    // perf's call chains of the same switches say the same.
    let (perf_reader, perf_in_pipe) = perf_samples(&script, "reader", "pipe_read");
    assert!(perf_reader > 200, "perf saw {perf_reader} reader samples");
    assert!(
        perf_in_pipe * 10 >= perf_reader * 9,
        "{perf_in_pipe} of {perf_reader}"
    );
    let (ours, theirs) = (reader[0].1 as f64, perf_in_pipe as f64);
    assert!(
        (ours - theirs).abs() <= theirs * 0.05,
        "reader's switches to idle in pipe_read: idleflow {ours}, perf {theirs}"
    );
    println!(
        "reader's switches to idle in pipe_read: idleflow {ours}, perf {theirs}; \
         {with} of {all} dispatches to idle with a stack"
    );
    // The flame graph draws them: process, thread, kernel frames.
    let svg = dir.path().join("k.svg");
    let out = run(idleflow().arg("flamegraph").arg(&rec).arg("-o").arg(&svg));
    assert!(out.status.success(), "{}", stderr(&out));
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(drawn.contains("pipe_read (") && drawn.contains("do_nanosleep ("));
    // The text report names the waits.
    let text = stdout(&run(idleflow()
        .arg("report")
        .arg(&rec)
        .args(["--view", "kernel"])));
    assert!(text.contains("## Idle-causing kernel waits"), "{text}");
    assert_fits_120_columns(&text);
}

#[test]
fn no_stacks_records_no_kernel_stacks() {
    let Some(_m) = machine() else { return };
    let dir = tempfile::tempdir().unwrap();
    let bin = pipewait(dir.path());
    let rec = dir.path().join("n.idleflow");
    let out = run(idleflow()
        .args(["record", "-q", "--no-stacks", "-o"])
        .arg(&rec)
        .arg("--")
        .arg(&bin)
        .arg("300"));
    assert!(out.status.success(), "record: {}", stderr(&out));
    let r = report_json(&rec);
    assert!(r["kernel_waits"].is_null(), "{}", r["kernel_waits"]);
    assert!(u(&r, "dispatches") > 600);
}

/// A switch to idle whose stacks the eBPF programs take is stamped once
/// they are taken: the 13-50 µs of the kernel walk and the user stack copy
/// are idleflow's own time on the CPU, in the leaving thread's context,
/// never idle (stamped before them, each one counted as idle: up to 1 % of
/// a CPU at the default budget; PERFORMANCE.md 5j).
///
/// A `bpftrace` probe on the same tracepoint stamps the same switches as a
/// reference. The programs on a tracepoint run in the order they were
/// attached, and bpftrace's (perf's probe on the tracepoint) runs first when
/// it is attached first, as here: idleflow's stamp then comes after
/// bpftrace's by bpftrace's run, a switch with stacks that much after too
/// if stamped at the program's start (measured: 9.5 µs with stacks, 8.3
/// without), and the stacks' walk later once stamped after them (20.4
/// against 8.5 on one kernel build, 4.2 against 0.4 on a later one whose
/// walk is faster). Had idleflow's programs run first (perf's probe left from
/// an earlier attach), bpftrace stamps after all of idleflow's work: a
/// switch with stacks stamped before them comes the walk earlier than one
/// without, stamped after them about as early (measured: -0.28 µs against
/// -0.47); the test takes either order.
#[test]
fn a_switch_to_idle_with_stacks_is_stamped_after_them() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let Some(_m) = machine() else { return };
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("duty.idleflow");
    // (args read once: bpftrace 0.17 reads them again through a moved
    // context pointer, which the verifier refuses.)
    let mut bt = Command::new("bpftrace")
        .args([
            "-e",
            "BEGIN { printf(\"attached\\n\"); }
             tracepoint:sched:sched_switch { $next = args->next_pid; $prev = args->prev_pid;
               if ($next == 0) { printf(\"%llu %d %d\\n\", nsecs, cpu, $prev); } }",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("bpftrace is installed (Debian's bpftrace; .ci/run installs it)");
    let mut lines = BufReader::new(bt.stdout.take().unwrap()).lines();
    while lines
        .next()
        .and_then(Result::ok)
        .expect("bpftrace attached")
        != "attached"
    {}
    // Read as it prints: a full pipe would stall it and lose events.
    let reader = std::thread::spawn(move || {
        // bpftrace's switches to idle: (time, cpu, prev).
        lines
            .map_while(Result::ok)
            .filter_map(|l| {
                let mut w = l.split_whitespace().map(|x| x.parse::<u64>().ok());
                Some((w.next()??, w.next()??, w.next()??))
            })
            .collect::<Vec<(u64, u64, u64)>>()
    });
    // About one switch to idle in three takes stacks here: the chance is
    // the budget over the CPU's rate of switches to idle, which bpftrace's
    // printing and the machine's other threads raise (a fresh clone's CI
    // run got 16 of 661 matched switches with stacks at a budget of 1,500;
    // this machine 74-95 of ≈ 800, and 473-510 of ≈ 1,400 at 20,000).
    let recorder = idleflow()
        .args(["record", "-q", "--events", "bpf", "--stack-budget", "20000"])
        .arg("-o")
        .arg(&rec)
        .arg("--")
        .arg(example("dutycycle"))
        .args(["--threads", "2", "--busy-ms", "0.2", "--sleep-ms", "1"])
        .args(["--seconds", "5"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until_command_runs(recorder.id());
    // 3 s: ≥ 30 switches with stacks matched (2 s gave 25-27 at times).
    std::thread::sleep(std::time::Duration::from_millis(3000));
    // SAFETY: kill has no memory effects.
    unsafe { libc::kill(bt.id() as i32, libc::SIGINT) };
    let theirs = reader.join().unwrap();
    bt.wait().unwrap();
    let out = recorder.wait_with_output().unwrap();
    assert!(out.status.success(), "record: {}", stderr(&out));
    let start = u(&report_json(&rec), "start_ns");
    // idleflow's switches of the duty cycle's threads to idle by (CPU,
    // thread), each with whether a kernel stack goes with it (a `kstack`
    // line of the same thread at the same time).
    let script = run(idleflow().arg("script").arg(&rec));
    assert!(script.status.success(), "script: {}", stderr(&script));
    let mut duty = std::collections::HashSet::new();
    let mut ours: std::collections::HashMap<(u64, u64), Vec<(u64, bool)>> = Default::default();
    let mut last: Option<(u64, u64, u64)> = None;
    for l in stdout(&script).lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        if w.len() >= 8 && w[1] == "thread" && w[w.len() - 1].starts_with("duty-") {
            duty.insert(w[2].parse::<u64>().unwrap());
        }
        if w.len() < 5 || w[1] != "cpu" {
            continue;
        }
        let t = start + (w[0].parse::<f64>().unwrap() * 1e9).round() as u64;
        let cpu: u64 = w[2].parse().unwrap();
        match w[3] {
            "dispatch" if w[w.len() - 1] == "0" && w[4] != "0" => {
                let prev = w[4].parse().unwrap();
                ours.entry((cpu, prev)).or_default().push((t, false));
                last = Some((t, cpu, prev));
            }
            "kstack" => {
                if let Some((lt, lc, lp)) = last {
                    if lt == t && lc == cpu && w[4] == lp.to_string() {
                        if let Some(x) = ours.get_mut(&(cpu, lp)).and_then(|v| v.last_mut()) {
                            x.1 = true;
                        }
                    }
                }
            }
            _ => {}
        }
    }
    assert_eq!(duty.len(), 2, "the duty cycle's threads: {duty:?}");
    // Each of bpftrace's switches of those threads with idleflow's nearest
    // of the same CPU and thread: how much later idleflow stamped it.
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for &(t, cpu, prev) in theirs.iter().filter(|x| duty.contains(&x.2)) {
        let Some(v) = ours.get(&(cpu, prev)) else {
            continue;
        };
        let i = v.partition_point(|x| x.0 < t);
        let near = [i.wrapping_sub(1), i]
            .into_iter()
            .filter_map(|j| v.get(j))
            .min_by_key(|x| x.0.abs_diff(t));
        if let Some(&(o, stacks)) = near.filter(|x| x.0.abs_diff(t) < 200_000) {
            let later = o as i64 - t as i64;
            if stacks { &mut with } else { &mut without }.push(later);
        }
    }
    with.sort_unstable();
    without.sort_unstable();
    assert!(
        with.len() >= 30 && without.len() >= 100,
        "{} switches with stacks and {} without matched",
        with.len(),
        without.len()
    );
    let (w, wo) = (with[with.len() / 2], without[without.len() / 2]);
    println!(
        "idleflow's stamp after bpftrace's (median): {w} ns with stacks ({} switches), {wo} ns without ({})",
        with.len(),
        without.len()
    );
    // bpftrace's program ran first (idleflow's stamp later) or last. The
    // walk: 11.9 µs on kernel build fc-v595, 3.1-3.7 µs on fc-v657 (hot,
    // ≈ 16 frames); stamped before the walk, 1.2 µs (the larger record).
    let bpftrace_first = wo > 0;
    let after_stacks = if bpftrace_first {
        w - wo >= 2_000
    } else {
        w - wo >= -2_000
    };
    assert!(
        after_stacks,
        "a switch with stacks stamped {w} ns after bpftrace's, one without {wo} ns \
         (bpftrace's program ran {}): stamped before its stacks",
        if bpftrace_first { "first" } else { "last" }
    );
}
