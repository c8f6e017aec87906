//! The stacks the programs take, on the real kernel: at every switch that
//! leaves a CPU idle (budget 0) the leaving thread's kernel call chain,
//! which starts at `__schedule` once the tracing glue is stripped, and its
//! user registers and stack copy; under a budget, about the budget's number
//! a second; at a waking, the waker's stacks — a thread's with its user
//! stack, an interrupt's kernel chain alone, starting at `try_to_wake_up`.

mod support;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use idleflow_bpf::{
    decode, records, stacks, KernelGlue, SchedEvent, SchedRecorder, StackConfig, WakeContext,
};
use support::{gettid, may_run, online_cpus, pin};

/// One test at a time: each needs the CPUs to go idle, which another
/// test's busy sleeper on the same CPU would prevent.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// Returns once thread `tid` of this process sleeps (state `S` in its
/// `stat`), or after a second.
fn wait_until_sleeping(tid: u32) {
    let path = format!("/proc/self/task/{tid}/stat");
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(1) {
        let stat = std::fs::read_to_string(&path).unwrap_or_default();
        // The state follows the command name's closing parenthesis.
        if stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('S'))
        {
            return;
        }
        std::thread::yield_now();
    }
}

/// The kernel's symbols, to name an address (the test's own lookup).
struct Kallsyms(Vec<(u64, String)>);

impl Kallsyms {
    fn load() -> Self {
        let text = std::fs::read_to_string("/proc/kallsyms").expect("reading /proc/kallsyms");
        let mut v: Vec<(u64, String)> = text
            .lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                let addr = u64::from_str_radix(f.next()?, 16).ok()?;
                let _kind = f.next()?;
                Some((addr, f.next()?.to_string()))
            })
            .filter(|(a, _)| *a != 0)
            .collect();
        v.sort();
        Kallsyms(v)
    }

    fn name(&self, addr: u64) -> &str {
        let i = self.0.partition_point(|(a, _)| *a <= addr);
        if i == 0 {
            return "?";
        }
        &self.0[i - 1].1
    }
}

/// One record with stacks, owned.
#[derive(Debug)]
struct Stacked {
    event: SchedEvent,
    kernel: Vec<u64>,
    /// (ip, sp, bytes copied, bytes asked)
    user: Option<(u64, u64, usize, u32)>,
}

/// Records with `config` on `cpus` while `work` runs; returns every event
/// and the records that carried stacks.
fn record(
    cpus: &[u32],
    config: StackConfig,
    work: impl FnOnce() + Send + 'static,
) -> (Vec<SchedEvent>, Vec<Stacked>) {
    let mut rec = SchedRecorder::open(cpus, 8 << 20, config).expect("open");
    let mut drain = rec.take_drain().expect("the rings");
    let mut events = Vec::new();
    let mut stacked = Vec::new();
    let mut take = |_: usize, bytes: &[u8]| {
        for r in records(bytes) {
            let event = decode(r).expect("every record decodes");
            events.push(event);
            if let Some(st) = stacks(r).expect("its stacks decode") {
                stacked.push(Stacked {
                    event,
                    kernel: st.kernel().collect(),
                    user: st.user.map(|u| (u.ip, u.sp, u.bytes.len(), u.asked)),
                });
            }
        }
        true
    };
    let worker = std::thread::spawn(work);
    while !worker.is_finished() {
        std::thread::sleep(Duration::from_millis(20));
        drain.drain(&mut take).unwrap();
    }
    worker.join().unwrap();
    rec.detach();
    drain.drain(&mut take).unwrap();
    let lost = rec.lost().unwrap();
    let full: u64 = lost.per_cpu.iter().map(|c| c.ring_full).sum();
    assert_eq!(
        (full, lost.skipped_runs, lost.undecodable),
        (0, 0, 0),
        "no record of the recorded CPUs lost"
    );
    (events, stacked)
}

/// The executable mappings of this process that hold `ip`.
fn mapping_of(ip: u64) -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|l| {
        let (range, rest) = l.split_once(' ')?;
        let (a, b) = range.split_once('-')?;
        let (a, b) = (
            u64::from_str_radix(a, 16).ok()?,
            u64::from_str_radix(b, 16).ok()?,
        );
        (a..b).contains(&ip).then(|| rest.to_string())
    })
}

#[test]
fn every_switch_to_idle_carries_the_stacks_perf_would_take() {
    if !may_run("every_switch_to_idle_carries_the_stacks_perf_would_take") {
        return;
    }
    let _one = one_at_a_time();
    let cpu = *online_cpus().last().unwrap();
    let config = StackConfig {
        idle_kernel: true,
        idle_user_bytes: 8192,
        idle_budget: 0,
        ..Default::default()
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let (events, stacked) = record(&[cpu], config, move || {
        pin(cpu);
        tx.send(gettid()).unwrap();
        for _ in 0..200 {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    let tid = rx.recv().unwrap();
    let to_idle: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            SchedEvent::Switch(s) if s.prev_tid == tid && s.next_tid == 0 => Some(s.time),
            _ => None,
        })
        .collect();
    let mine: Vec<&Stacked> = stacked
        .iter()
        .filter(|s| matches!(s.event, SchedEvent::Switch(sw) if sw.prev_tid == tid))
        .collect();
    println!(
        "{} switches of the sleeper to idle, {} with stacks",
        to_idle.len(),
        mine.len()
    );
    // Most of the 200 sleeps leave the CPU idle (not those during which
    // something else ran there).
    assert!(to_idle.len() >= 100, "{} switches to idle", to_idle.len());
    assert_eq!(mine.len(), to_idle.len(), "budget 0: every one has stacks");
    assert!(
        stacked
            .iter()
            .all(|s| matches!(s.event, SchedEvent::Switch(sw) if sw.next_tid == 0)),
        "only switches to idle carry stacks"
    );
    let ksyms = Kallsyms::load();
    let glue = KernelGlue::load();
    let mut sleeps = 0;
    for s in &mine {
        let chain = glue.strip(&s.kernel);
        assert!(chain.len() >= 4, "a kernel chain: {:x?}", s.kernel);
        let names: Vec<&str> = chain.iter().take(6).map(|&a| ksyms.name(a)).collect();
        assert_eq!(names[0], "__schedule", "{names:?}");
        if names.contains(&"do_task_dead") {
            // The thread's exit, its last switch.
            continue;
        }
        if names.iter().any(|n| n.ends_with("_fault")) {
            // A page fault that waited for the disk (a fresh machine reads
            // the test's pages in as they are first touched: CI saw
            // `io_schedule ← folio_wait_bit_common ← filemap_fault`); its
            // user registers are at the faulting instruction, anywhere.
            continue;
        }
        sleeps += 1;
        assert!(
            names.iter().any(|n| n.contains("nanosleep")),
            "a sleep's chain: {names:?}"
        );
        let (ip, sp, copied, asked) = s.user.expect("a user thread's registers");
        assert_eq!(asked, 8192);
        assert!(copied > 0 && copied <= 8192 && copied % 8 == 0, "{copied}");
        let lib = mapping_of(ip).unwrap_or_default();
        assert!(lib.contains("libc"), "ip {ip:#x} in {lib}");
        let stack = mapping_of(sp).unwrap_or_default();
        assert!(stack.starts_with("rw"), "sp {sp:#x} in {stack}");
    }
    assert!(
        sleeps >= 100,
        "{sleeps} of the switches to idle were sleeps"
    );
}

#[test]
fn under_a_budget_about_that_many_switches_a_second_get_stacks() {
    if !may_run("under_a_budget_about_that_many_switches_a_second_get_stacks") {
        return;
    }
    let _one = one_at_a_time();
    let cpu = *online_cpus().last().unwrap();
    let budget = 200;
    let config = StackConfig {
        idle_kernel: true,
        idle_user_bytes: 1024,
        idle_budget: budget,
        ..Default::default()
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let started = Instant::now();
    let (events, stacked) = record(&[cpu], config, move || {
        pin(cpu);
        tx.send(gettid()).unwrap();
        let until = Instant::now() + Duration::from_millis(1500);
        while Instant::now() < until {
            std::thread::sleep(Duration::from_micros(50));
        }
    });
    let secs = started.elapsed().as_secs_f64();
    let tid = rx.recv().unwrap();
    let to_idle = events
        .iter()
        .filter(|e| matches!(e, SchedEvent::Switch(s) if s.prev_tid == tid && s.next_tid == 0))
        .count();
    let taken = stacked
        .iter()
        .filter(|s| matches!(s.event, SchedEvent::Switch(sw) if sw.prev_tid == tid))
        .count();
    let all_taken = stacked.len();
    println!(
        "{to_idle} switches of the sleeper to idle in {secs:.2} s ({:.0}/s), {taken} with stacks; \
         {all_taken} on the CPU in all (budget {budget}/s)",
        to_idle as f64 / secs
    );
    assert!(
        to_idle as f64 > 4.0 * f64::from(budget) * secs,
        "the sleeper must go idle faster than the budget: {to_idle} in {secs:.2} s"
    );
    // Every 100 ms window takes at most twice its share; on average about
    // the budget.
    let most = 2.0 * f64::from(budget) * (secs + 0.1);
    assert!((all_taken as f64) <= most, "{all_taken} > {most}");
    assert!(
        (taken as f64) >= 0.5 * f64::from(budget) * 1.5,
        "{taken} stacks in 1.5 s under a budget of {budget}/s"
    );
}

#[test]
fn under_a_budget_a_threads_first_switch_to_idle_still_gets_stacks() {
    if !may_run("under_a_budget_a_threads_first_switch_to_idle_still_gets_stacks") {
        return;
    }
    let _one = one_at_a_time();
    let cpu = *online_cpus().last().unwrap();
    let config = StackConfig {
        idle_kernel: true,
        idle_user_bytes: 1024,
        idle_budget: 200,
        ..Default::default()
    };
    let (tx, rx) = std::sync::mpsc::channel();
    // A sleeper goes idle thousands of times a second (the sampler's chance
    // falls far below one); meanwhile 20 short threads on the same CPU go
    // idle once each, 50 ms apart, and end.
    let (events, stacked) = record(&[cpu], config, move || {
        pin(cpu);
        let sleeper = std::thread::spawn(move || {
            pin(cpu);
            let until = Instant::now() + Duration::from_millis(1300);
            while Instant::now() < until {
                std::thread::sleep(Duration::from_micros(200));
            }
        });
        std::thread::sleep(Duration::from_millis(150));
        for _ in 0..20 {
            let tx = tx.clone();
            std::thread::spawn(move || {
                pin(cpu);
                tx.send(gettid()).unwrap();
                std::thread::sleep(Duration::from_millis(2));
            })
            .join()
            .unwrap();
            std::thread::sleep(Duration::from_millis(50));
        }
        sleeper.join().unwrap();
    });
    let short: Vec<u32> = rx.try_iter().collect();
    assert_eq!(short.len(), 20);
    let to_idle = |tid: u32| {
        events
            .iter()
            .filter(|e| matches!(e, SchedEvent::Switch(s) if s.prev_tid == tid && s.next_tid == 0))
            .count()
    };
    let sampled = |tid: u32| {
        stacked
            .iter()
            .filter(|s| matches!(s.event, SchedEvent::Switch(sw) if sw.prev_tid == tid))
            .count()
    };
    let went_idle: Vec<u32> = short.iter().copied().filter(|&t| to_idle(t) > 0).collect();
    let with_stacks = went_idle.iter().filter(|&&t| sampled(t) > 0).count();
    println!(
        "{} of 20 short threads went idle, {with_stacks} of them with stacks; {} stacks in all",
        went_idle.len(),
        stacked.len()
    );
    // (The sleeper often has the CPU when a short thread leaves it.)
    assert!(
        went_idle.len() >= 5,
        "{} short threads went idle",
        went_idle.len()
    );
    assert_eq!(
        with_stacks,
        went_idle.len(),
        "every short thread's first switch to idle"
    );
}

#[test]
fn under_a_waker_budget_about_that_many_wakings_a_second_get_stacks() {
    if !may_run("under_a_waker_budget_about_that_many_wakings_a_second_get_stacks") {
        return;
    }
    let _one = one_at_a_time();
    let cpus = online_cpus();
    let budget = 100;
    let config = StackConfig {
        waker_one_in: 1,
        waker_budget: budget,
        waker_kernel: true,
        ..Default::default()
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let started = Instant::now();
    // Two threads hand a byte back and forth over a socket pair: each
    // hand-off is a waking, far more than the budget a second.
    let (events, stacked) = record(&cpus, config, move || {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let until = Instant::now() + Duration::from_millis(1500);
        let other = std::thread::spawn(move || {
            let mut byte = [0u8];
            while b.read_exact(&mut byte).is_ok() && byte[0] != 0 {
                b.write_all(&byte).unwrap();
            }
        });
        tx.send(gettid()).unwrap();
        let mut byte = [7u8];
        while Instant::now() < until {
            a.write_all(&byte).unwrap();
            a.read_exact(&mut byte).unwrap();
        }
        a.write_all(&[0]).unwrap();
        other.join().unwrap();
    });
    let secs = started.elapsed().as_secs_f64();
    let writer = rx.recv().unwrap();
    let wakings = events
        .iter()
        .filter(|e| matches!(e, SchedEvent::Waking(w) if w.waker_tid == writer))
        .count();
    let by_writer = stacked
        .iter()
        .filter(|s| matches!(s.event, SchedEvent::Waking(w) if w.waker_tid == writer))
        .count();
    let all_taken = stacked
        .iter()
        .filter(|s| matches!(s.event, SchedEvent::Waking(_)))
        .count();
    let per_cpu = f64::from(budget) * (secs + 0.1);
    println!(
        "{wakings} wakings by the writer in {secs:.2} s ({:.0}/s), {by_writer} with stacks; \
         {all_taken} wakings with stacks in all on {} CPUs (budget {budget}/s/CPU)",
        wakings as f64 / secs,
        cpus.len()
    );
    assert!(
        wakings as f64 > 20.0 * f64::from(budget) * secs,
        "the writer must wake its peer far faster than the budget: {wakings} in {secs:.2} s"
    );
    // Every 100 ms window of a CPU takes at most twice its share.
    let most = 2.0 * per_cpu * cpus.len() as f64;
    assert!((all_taken as f64) <= most, "{all_taken} > {most}");
    // At one in 1 without the budget every waking would have its stacks.
    assert!(
        (by_writer as f64) >= 0.3 * f64::from(budget) * 1.5,
        "{by_writer} waker stacks in 1.5 s under a budget of {budget}/s/CPU"
    );
}

#[test]
fn a_waking_carries_its_wakers_stacks_a_thread_s_with_its_user_stack() {
    if !may_run("a_waking_carries_its_wakers_stacks_a_thread_s_with_its_user_stack") {
        return;
    }
    let _one = one_at_a_time();
    let cpus = online_cpus();
    let config = StackConfig {
        waker_one_in: 1,
        waker_kernel: true,
        waker_user_bytes: 2048,
        ..Default::default()
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let (_, stacked) = record(&cpus, config, move || {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let (peer_tx, peer_rx) = std::sync::mpsc::channel();
        let other = std::thread::spawn(move || {
            peer_tx.send(gettid()).unwrap();
            let mut byte = [0u8];
            for _ in 0..100 {
                b.read_exact(&mut byte).unwrap();
                b.write_all(&byte).unwrap();
            }
        });
        tx.send(gettid()).unwrap();
        let peer = peer_rx.recv().unwrap();
        let mut byte = [7u8];
        for _ in 0..100 {
            // A write wakes the peer only if it already sleeps in its read:
            // on a CPU that wakes fast the writer would otherwise often
            // find it still on its way there (then no waking at all).
            wait_until_sleeping(peer);
            a.write_all(&byte).unwrap();
            a.read_exact(&mut byte).unwrap();
        }
        other.join().unwrap();
        for _ in 0..20 {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    let writer = rx.recv().unwrap();
    let ksyms = Kallsyms::load();
    let glue = KernelGlue::load();
    let mut by_writer = 0;
    let mut by_interrupt = 0;
    for s in &stacked {
        let SchedEvent::Waking(w) = s.event else {
            assert!(
                matches!(s.event, SchedEvent::Switch(_)),
                "a new thread's first wake-up carries no stacks"
            );
            continue;
        };
        let chain = glue.strip(&s.kernel);
        assert_eq!(
            chain.first().map(|&a| ksyms.name(a)),
            Some("try_to_wake_up"),
            "{:?}",
            chain
                .iter()
                .take(4)
                .map(|&a| ksyms.name(a))
                .collect::<Vec<_>>()
        );
        match w.context {
            WakeContext::Task => {
                if w.waker_tid == writer {
                    by_writer += 1;
                    let (ip, _, copied, asked) = s.user.expect("a thread waker's user stack");
                    assert_eq!(asked, 2048);
                    assert!(copied > 0, "copied");
                    assert!(mapping_of(ip).unwrap_or_default().contains("libc"));
                }
            }
            WakeContext::HardIrq | WakeContext::SoftIrq | WakeContext::Nmi => {
                by_interrupt += 1;
                assert_eq!(
                    s.user, None,
                    "an interrupt's waking keeps its kernel chain only"
                );
            }
            WakeContext::Unknown => {}
        }
    }
    println!("{by_writer} wakings by the writer with stacks, {by_interrupt} by interrupts");
    // Every write found its peer asleep: each one is a waking by the writer.
    assert!(
        by_writer >= 95,
        "{by_writer} of 100 of the writer's wakings"
    );
    assert!(by_interrupt >= 10, "the sleeps' timers: {by_interrupt}");
}
