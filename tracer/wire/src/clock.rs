//! The clock of every timestamp in a recording and in the thread work
//! area: `CLOCK_MONOTONIC`, in nanoseconds (the recorder opens its perf
//! events with `use_clockid` on it; the agent stamps node changes on it).
//! One reader for both sides, so that they cannot drift apart. Also
//! `CLOCK_BOOTTIME`, the clock of `/proc`'s process start times, and the
//! calling thread's CPU time.

/// Now on `CLOCK_MONOTONIC`, in ns.
pub fn monotonic_ns() -> u64 {
    now_ns(libc::CLOCK_MONOTONIC)
}

/// Now on `CLOCK_BOOTTIME` (the clock of `/proc/PID/stat`'s start times),
/// in ns.
pub fn boottime_ns() -> u64 {
    now_ns(libc::CLOCK_BOOTTIME)
}

/// The calling thread's time on a CPU so far (`CLOCK_THREAD_CPUTIME_ID`),
/// in ns.
pub fn thread_cpu_ns() -> u64 {
    now_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

fn now_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
