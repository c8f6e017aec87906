//! A Rust program whose idle-causing path is known: thread "worker" (on
//! CPU 1) waits for jobs on a `Mutex`/`Condvar` at the end of a chain of
//! named functions (`worker_loop → take_job → Condvar::wait`), while the
//! main thread (on CPU 0) posts one job every 0.5 ms, spinning in between,
//! so it never leaves its CPU idle: the worker's wait is the program's only
//! idle-causing path.
//!
//! Usage: `condvar [rounds]` (default 2000).

use std::hint::black_box;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Jobs posted and not yet taken, and the condition that says "one more".
type Queue = (Mutex<u64>, Condvar);

#[inline(never)]
fn take_job(q: &Queue) -> u64 {
    let mut jobs = q.0.lock().unwrap_or_else(|e| e.into_inner());
    while *jobs == 0 {
        jobs = q.1.wait(jobs).unwrap_or_else(|e| e.into_inner());
    }
    *jobs -= 1;
    black_box(*jobs)
}

#[inline(never)]
fn worker_loop(q: &Queue, rounds: u64) -> u64 {
    let mut sum = 0;
    for _ in 0..rounds {
        sum += take_job(q);
    }
    black_box(sum)
}

#[inline(never)]
fn post_job(q: &Queue) {
    *q.0.lock().unwrap_or_else(|e| e.into_inner()) += 1;
    q.1.notify_one();
}

/// Runs the calling thread on `cpu` only (where the machine has it).
fn pin(cpu: usize) {
    // Online CPUs (not this thread's affinity, which pinning narrows).
    // SAFETY: sysconf has no memory effects.
    if unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) } <= cpu as libc::c_long {
        return;
    }
    // SAFETY: `set` is a plain bit set initialised by CPU_ZERO; the call
    // only reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set);
    }
}

/// Spins for `d`: the producer never blocks.
#[inline(never)]
fn pace(d: Duration) {
    let until = Instant::now() + d;
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

fn main() {
    let rounds: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2000);
    pin(0);
    let q: Arc<Queue> = Arc::new((Mutex::new(0), Condvar::new()));
    let worker = {
        let q = Arc::clone(&q);
        std::thread::Builder::new()
            .name("worker".into())
            .spawn(move || {
                pin(1);
                worker_loop(&q, rounds)
            })
            .expect("spawn the worker")
    };
    for _ in 0..rounds {
        pace(Duration::from_micros(500));
        post_job(&q);
    }
    black_box(worker.join().expect("the worker ended"));
}
