//! Why a thread left its CPU: the BPF recorder and the perf path say the
//! same for the same switch.
//!
//! Threads of this test leave their CPU in each way there is: asleep (S,
//! 1 ms sleeps), preempted (R, two threads spinning on one CPU), in an
//! uninterruptible wait (D: a process spawned with vfork, which glibc's
//! posix_spawn does, keeps its parent waiting killable until the child
//! execs; and a file written and fsync'ed), stopped (T: a child sent
//! SIGSTOP) and exiting (X). Each BPF switch of them is matched with the
//! perf path's dispatch on the same CPU between the same threads within a
//! few µs, and the two states must agree. The children's first wake-ups
//! (`sched_wakeup_new`) are checked on the way.

mod support;

use std::collections::BTreeMap;
use std::io::Write;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use idleflow_bpf::{SchedEvent, WakeContext};
use support::{close, gettid, may_run, online_cpus, pin, Recording};

/// How far apart the two paths may stamp one switch: BPF at the
/// tracepoint, perf at its switch-out record right after (or, leaving
/// idle, at the switch-in record in the next thread's context).
const MATCH_US: u64 = 10;

#[test]
fn prev_state_agrees_with_the_perf_path() {
    if !may_run("prev_state_agrees_with_the_perf_path") {
        return;
    }
    let cpus = online_cpus();
    let recording = Recording::start();
    let mut ours = vec![gettid()];

    // S: a thread sleeping 1 ms, 50 times.
    let sleeper = std::thread::spawn(|| {
        for _ in 0..50 {
            std::thread::sleep(Duration::from_millis(1));
        }
        gettid()
    });
    // R: two threads on one CPU, spinning 150 ms each.
    let spin = Arc::new(AtomicBool::new(true));
    let spinners: Vec<_> = (0..2)
        .map(|_| {
            let spin = Arc::clone(&spin);
            let cpu = cpus[0];
            std::thread::spawn(move || {
                pin(cpu);
                let start = Instant::now();
                while spin.load(Ordering::Relaxed) && start.elapsed() < Duration::from_millis(150) {
                    std::hint::spin_loop();
                }
                gettid()
            })
        })
        .collect();
    // D: processes spawned with vfork (the parent waits killable), and a
    // file written through to the disk.
    let mut children = Vec::new();
    for _ in 0..20 {
        let mut child = Command::new("/bin/true")
            .spawn()
            .expect("spawning /bin/true");
        children.push(child.id());
        child.wait().unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let mut file = std::fs::File::create(dir.path().join("d-state")).unwrap();
    for _ in 0..4 {
        file.write_all(&vec![1u8; 1 << 20]).unwrap();
        file.sync_all().unwrap();
    }
    // T: a child stopped and let go.
    let mut stopped = Command::new("sleep")
        .arg("5")
        .spawn()
        .expect("spawning sleep");
    let pid = stopped.id() as i32;
    std::thread::sleep(Duration::from_millis(20));
    let mut status = 0;
    // SAFETY: signals and waits for our own child; `status` outlives the call.
    unsafe {
        libc::kill(pid, libc::SIGSTOP);
        libc::waitpid(pid, &mut status, libc::WUNTRACED);
        libc::kill(pid, libc::SIGCONT);
    }
    stopped.kill().unwrap();
    stopped.wait().unwrap();
    children.push(pid as u32);
    ours.push(pid as u32);

    ours.push(sleeper.join().unwrap());
    for s in spinners {
        ours.push(s.join().unwrap());
    }
    spin.store(false, Ordering::Relaxed);
    let (bpf, perf) = recording.stop();
    assert_eq!(bpf.lost.total(), 0, "BPF records lost: {:?}", bpf.lost);
    assert_eq!(perf.lost, 0, "the perf reference lost records");

    // Every BPF switch of our threads, matched with the perf path's.
    let (mut total, mut matched) = (0, 0);
    let mut agree: BTreeMap<&str, u64> = BTreeMap::new();
    let mut differ = Vec::new();
    let mut gaps = Vec::new();
    for (&cpu, events) in &bpf.events {
        for e in events {
            let SchedEvent::Switch(s) = e else { continue };
            if !ours.contains(&s.prev_tid) {
                continue;
            }
            total += 1;
            // The nearest: a thread stopped by SIGSTOP and let go with
            // SIGCONT leaves its CPU twice within a few µs (T, then S as
            // its sleep restarts), and the first within reach may be the
            // other switch's twin.
            let twin = perf.dispatches[&cpu]
                .iter()
                .filter(|d| {
                    d.prev_tid == s.prev_tid
                        && d.next_tid == s.next_tid
                        && close(d.time, s.time, MATCH_US)
                })
                .min_by_key(|d| d.time.abs_diff(s.time));
            let Some(d) = twin else { continue };
            matched += 1;
            gaps.push(d.time.abs_diff(s.time));
            if d.prev_state == s.prev_state {
                *agree.entry(s.prev_state.letter()).or_default() += 1;
            } else {
                differ.push((
                    cpu,
                    s.time,
                    s.prev_tid,
                    s.raw_state,
                    s.prev_state,
                    d.prev_state,
                ));
            }
        }
    }
    gaps.sort_unstable();
    let pct = |q: usize| {
        gaps.get(gaps.len().saturating_sub(1) * q / 100)
            .copied()
            .unwrap_or(0)
    };

    // The children's first wake-ups, raised by the thread that spawned them.
    let me = ours[0];
    let new: Vec<_> = bpf
        .events
        .values()
        .flatten()
        .filter_map(|e| match e {
            SchedEvent::WakeupNew(w) if children.contains(&w.wakee_tid) => Some(w),
            _ => None,
        })
        .collect();

    eprintln!(
        "our switches: {total}, matched with perf's: {matched}; agreeing by state: {agree:?}"
    );
    eprintln!(
        "|BPF - perf| time of matched switches: median {} ns, p99 {} ns, max {} ns",
        pct(50),
        pct(99),
        pct(100)
    );
    eprintln!(
        "first wake-ups of the {} children seen: {}",
        children.len(),
        new.len()
    );

    assert!(
        differ.is_empty(),
        "states differ (cpu, time, tid, raw, BPF, perf): {differ:?}"
    );
    assert!(
        matched * 100 >= total * 95,
        "{matched} of {total} switches matched"
    );
    for (letter, at_least) in [("S", 30), ("R", 5), ("D", 10), ("T", 1), ("X", 3)] {
        let n = agree.get(letter).copied().unwrap_or(0);
        assert!(
            n >= at_least,
            "{n} switches in state {letter} (want {at_least}): {agree:?}"
        );
    }
    assert_eq!(new.len(), children.len(), "a first wake-up per child");
    for w in new {
        assert_eq!((w.waker_tid, w.context), (me, WakeContext::Task), "{w:?}");
    }
}
