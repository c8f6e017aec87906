//! A workload whose idle behaviour is known in advance, for trying idleflow
//! and for its end-to-end tests.
//!
//! ```text
//! dutycycle [--threads N] [--busy-ms B] [--sleep-ms S] [--seconds T] [--no-pin]
//! ```
//!
//! Starts N threads (default: one per online CPU, thread i pinned to CPU i
//! unless `--no-pin`). Each alternates B ms of computing with S ms of
//! sleeping for T seconds, then prints one line per thread:
//! `thread I cpu C cycles K busy_ms X`. With B = S every CPU is idle about
//! half the time and leaves idle once per cycle; with S = 0 and more threads
//! than CPUs, the CPUs are saturated and threads are preempted instead.

use std::time::{Duration, Instant};

struct Opts {
    threads: usize,
    busy: Duration,
    sleep: Duration,
    seconds: f64,
    pin: bool,
}

fn parse() -> Result<Opts, String> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut o = Opts {
        threads: cpus,
        busy: Duration::from_millis(3),
        sleep: Duration::from_millis(3),
        seconds: 3.0,
        pin: true,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = |name: &str| -> Result<f64, String> {
            args.next()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("{name} needs a number"))
        };
        match a.as_str() {
            "--threads" => o.threads = val("--threads")? as usize,
            "--busy-ms" => o.busy = Duration::from_secs_f64(val("--busy-ms")? / 1e3),
            "--sleep-ms" => o.sleep = Duration::from_secs_f64(val("--sleep-ms")? / 1e3),
            "--seconds" => o.seconds = val("--seconds")?,
            "--no-pin" => o.pin = false,
            "-h" | "--help" => {
                return Err("usage: dutycycle [--threads N] [--busy-ms B] [--sleep-ms S] [--seconds T] [--no-pin]".into())
            }
            other => return Err(format!("unknown option {other} (try --help)")),
        }
    }
    if o.threads == 0 {
        return Err("--threads must be at least 1".into());
    }
    Ok(o)
}

fn pin_to(cpu: usize) {
    // SAFETY: `set` is a properly initialized cpu_set_t that lives across the call.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

fn main() {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("dutycycle: {e}");
            std::process::exit(2);
        }
    };
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let end = Instant::now() + Duration::from_secs_f64(o.seconds);
    let handles: Vec<_> = (0..o.threads)
        .map(|i| {
            let (busy, sleep, pin) = (o.busy, o.sleep, o.pin);
            std::thread::Builder::new()
                .name(format!("duty-{i}"))
                .spawn(move || {
                    if pin {
                        pin_to(i % cpus);
                    }
                    let (mut cycles, mut busy_total) = (0u64, Duration::ZERO);
                    let mut x = 0u64;
                    while Instant::now() < end {
                        let t0 = Instant::now();
                        while t0.elapsed() < busy {
                            x = std::hint::black_box(
                                x.wrapping_mul(6364136223846793005).wrapping_add(1),
                            );
                        }
                        busy_total += t0.elapsed();
                        if !sleep.is_zero() {
                            std::thread::sleep(sleep);
                        }
                        cycles += 1;
                    }
                    (i, cycles, busy_total)
                })
                .expect("spawn a thread")
        })
        .collect();
    for h in handles {
        let (i, cycles, busy) = h.join().expect("worker thread panicked");
        println!(
            "thread {i} cpu {} cycles {cycles} busy_ms {:.1}",
            if o.pin { (i % cpus) as i64 } else { -1 },
            busy.as_secs_f64() * 1e3
        );
    }
}
