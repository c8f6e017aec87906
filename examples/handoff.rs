//! A saturated thread-pool stand-in: pairs of threads handing one byte back
//! and forth over pipes, with a little work per hand-off, for measuring
//! idleflow at extreme switch rates (issue 18).
//!
//! ```text
//! handoff [--pairs N] [--work-us W] [--seconds T]
//! ```
//!
//! Starts N pairs (default 64: 128 threads). In each pair one thread writes
//! a byte to the other and waits for it to come back; the other spins W µs
//! (default 2) per byte and sends it back. After T seconds (default 3) it
//! prints `handoffs K per_s R`: the hand-offs completed, and per second.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn arg(args: &[String], name: &str, default: f64) -> f64 {
    match args.iter().position(|a| a == name) {
        Some(i) => match args.get(i + 1).and_then(|v| v.parse().ok()) {
            Some(v) => v,
            None => {
                eprintln!("handoff: {name} needs a number");
                std::process::exit(2);
            }
        },
        None => default,
    }
}

fn spin(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(a) = args
        .iter()
        .step_by(2)
        .find(|a| !matches!(a.as_str(), "--pairs" | "--work-us" | "--seconds"))
    {
        eprintln!(
            "handoff: unknown option {a}; usage: handoff [--pairs N] [--work-us W] [--seconds T]"
        );
        std::process::exit(2);
    }
    let pairs = arg(&args, "--pairs", 64.0) as usize;
    let work = Duration::from_nanos((arg(&args, "--work-us", 2.0) * 1000.0) as u64);
    let seconds = arg(&args, "--seconds", 3.0);
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    for _ in 0..pairs {
        // A socket pair: one byte each way per hand-off.
        let (mut a, mut b) = UnixStream::pair().expect("a socket pair");
        let (stop_a, count_a) = (Arc::clone(&stop), Arc::clone(&count));
        threads.push(std::thread::spawn(move || {
            let mut byte = [0u8];
            let mut n = 0;
            while !stop_a.load(Ordering::Relaxed) {
                if a.write_all(&byte).is_err() || a.read_exact(&mut byte).is_err() {
                    break;
                }
                n += 1;
            }
            count_a.fetch_add(n, Ordering::Relaxed);
            // Closing `a` ends the partner's loop.
        }));
        threads.push(std::thread::spawn(move || {
            let mut byte = [0u8];
            while b.read_exact(&mut byte).is_ok() {
                spin(work);
                if b.write_all(&byte).is_err() {
                    break;
                }
            }
        }));
    }
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        let _ = t.join();
    }
    let n = count.load(Ordering::Relaxed);
    let secs = started.elapsed().as_secs_f64();
    println!("handoffs {n} per_s {:.0}", n as f64 / secs);
}
