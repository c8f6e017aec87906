//! The agent's clock: `CLOCK_MONOTONIC` nanoseconds, the clock the recorder
//! stamps perf samples with (`use_clockid`), read cheaply on the hot path.
//!
//! `clock_gettime` through the vDSO costs ≈ 29 ns a call on this machine
//! kind (it serialises `rdtsc` and walks the vDSO's seqlock); a bare `rdtsc`
//! costs ≈ 11 ns. The perf mmap page does not offer the TSC → perf-time
//! conversion here (`cap_user_time_zero = 0`), so the agent converts itself:
//! each thread keeps an *anchor*, one `(tsc, CLOCK_MONOTONIC)` pair read
//! together, and extrapolates from it with a process-wide rate
//! (ns per TSC cycle) that is re-measured against `CLOCK_MONOTONIC` over an
//! ever longer base. An anchor is renewed once it is [`REANCHOR_NS`] old, so
//! an error in the rate can only grow for that long.
//!
//! The TSC is used only when the kernel itself keeps time with it
//! (clocksource `tsc`, which the kernel picks only for an invariant TSC
//! synchronised across CPUs) on x86_64; otherwise, or with the agent option
//! `clock=monotonic`, every read is a `clock_gettime`.
//!
//! Invariants: readings are `CLOCK_MONOTONIC` nanoseconds within a
//! fraction of a microsecond (measured by `tsc_follows_clock_monotonic`
//! below, asserted < 1 µs); a thread's readings never go backwards.

use std::sync::atomic::{AtomicU64, Ordering};

/// How long one anchor is extrapolated before it is renewed.
pub const REANCHOR_NS: u64 = 1_000_000;

/// How the agent reads time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockKind {
    /// `rdtsc`, converted to `CLOCK_MONOTONIC` through per-thread anchors.
    Tsc,
    /// `clock_gettime(CLOCK_MONOTONIC)` at every read.
    Monotonic,
}

/// `clock_gettime(CLOCK_MONOTONIC)` in nanoseconds (the recording's clock).
pub use idleflow_wire::clock::monotonic_ns;

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn rdtsc() -> u64 {
    // SAFETY: `rdtsc` reads the time-stamp counter; it touches no memory and
    // is available on every x86_64 CPU (user mode may read it unless the
    // kernel set CR4.TSD, which Linux does only for seccomp'd processes
    // that asked for it; `Clock::new` would then fault at calibration, never
    // later).
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn rdtsc() -> u64 {
    0
}

/// A `(tsc, CLOCK_MONOTONIC)` pair read as close together as possible: the
/// TSC is the midpoint of two reads around the clock read, and of four
/// tries the one with the narrowest window is kept (an interrupt between
/// the reads would otherwise skew the pair by microseconds).
fn pair() -> (u64, u64) {
    let mut best = (u64::MAX, 0, 0);
    for _ in 0..4 {
        let a = rdtsc();
        let ns = monotonic_ns();
        let width = rdtsc().wrapping_sub(a);
        if width < best.0 {
            best = (width, a + width / 2, ns);
        }
    }
    (best.1, best.2)
}

/// Whether the kernel keeps time with an invariant, synchronised TSC.
fn kernel_uses_tsc() -> bool {
    cfg!(target_arch = "x86_64")
        && std::fs::read_to_string(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        )
        .is_ok_and(|s| s.trim() == "tsc")
}

/// The process-wide clock: its kind and, for the TSC, the rate.
#[derive(Debug)]
pub struct Clock {
    kind: ClockKind,
    /// The first pair, the base the rate is measured over.
    base: (u64, u64),
    /// ns per TSC cycle, as `f64` bits.
    rate: AtomicU64,
}

impl Clock {
    /// A clock of `wanted` kind, or `Monotonic` when the TSC is not usable
    /// here. Calibrating the TSC spins for about 1 ms.
    pub fn new(wanted: ClockKind) -> Clock {
        let kind = if wanted == ClockKind::Tsc && kernel_uses_tsc() {
            ClockKind::Tsc
        } else {
            ClockKind::Monotonic
        };
        let base = pair();
        let mut rate = 0.0;
        if kind == ClockKind::Tsc {
            let mut p = pair();
            while p.1 < base.1 + REANCHOR_NS {
                std::hint::spin_loop();
                p = pair();
            }
            rate = (p.1 - base.1) as f64 / p.0.wrapping_sub(base.0).max(1) as f64;
        }
        Clock {
            kind,
            base,
            rate: AtomicU64::new(rate.to_bits()),
        }
    }

    /// The kind in use (`Monotonic` when `Tsc` was asked for but the kernel
    /// does not keep time with the TSC).
    pub fn kind(&self) -> ClockKind {
        self.kind
    }

    /// A per-thread reader, anchored now.
    pub fn thread(&self) -> ThreadClock {
        let mut t = ThreadClock {
            tsc: self.kind == ClockKind::Tsc,
            anchor_tsc: 0,
            anchor_ns: 0,
            floor: 0,
            mult: 0,
            reanchor_cycles: 0,
        };
        if t.tsc {
            t.reanchor(self);
        }
        t
    }

    /// Measures the rate again over the whole time since `base` (so it only
    /// gets more precise) and returns it.
    fn refine(&self, now: (u64, u64)) -> f64 {
        let dns = now.1.saturating_sub(self.base.1);
        let old = f64::from_bits(self.rate.load(Ordering::Relaxed));
        if dns < 10 * REANCHOR_NS {
            return old;
        }
        let rate = dns as f64 / now.0.wrapping_sub(self.base.0).max(1) as f64;
        self.rate.store(rate.to_bits(), Ordering::Relaxed);
        rate
    }
}

/// One thread's reader of a [`Clock`]; lives in the thread's own state, so
/// reading it takes no lock and no atomic.
#[derive(Debug, Clone)]
pub struct ThreadClock {
    tsc: bool,
    anchor_tsc: u64,
    anchor_ns: u64,
    /// The last reading before the anchor was renewed: readings never fall
    /// below it.
    floor: u64,
    /// ns per cycle in 32.32 fixed point (integer arithmetic on the hot
    /// path; `d * mult` cannot overflow while `d < reanchor_cycles`).
    mult: u64,
    reanchor_cycles: u64,
}

impl ThreadClock {
    /// `CLOCK_MONOTONIC` now, in nanoseconds.
    #[inline]
    pub fn now(&mut self, clock: &Clock) -> u64 {
        if !self.tsc {
            return monotonic_ns();
        }
        let d = rdtsc().wrapping_sub(self.anchor_tsc);
        if d < self.reanchor_cycles {
            let ns = self.anchor_ns + ((d * self.mult) >> 32);
            return ns.max(self.floor);
        }
        self.reanchor(clock)
    }

    #[cold]
    fn reanchor(&mut self, clock: &Clock) -> u64 {
        let p = pair();
        if self.anchor_ns != 0 {
            let d = u128::from(p.0.wrapping_sub(self.anchor_tsc));
            let extrapolated = (d * u128::from(self.mult)) >> 32;
            self.floor = self.anchor_ns + extrapolated.min(u128::from(u32::MAX)) as u64;
        }
        // A rate between 1/16 and 16 ns per cycle (TSCs run at 60 MHz to
        // 16 GHz), so that `mult` and `d * mult` stay in range.
        let ns_per_cycle = clock.refine(p).clamp(1.0 / 16.0, 16.0);
        self.mult = (ns_per_cycle * (1u64 << 32) as f64) as u64;
        self.anchor_tsc = p.0;
        self.anchor_ns = p.1;
        self.reanchor_cycles = (REANCHOR_NS as f64 / ns_per_cycle) as u64;
        p.1.max(self.floor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_kind_is_clock_gettime() {
        let c = Clock::new(ClockKind::Monotonic);
        assert_eq!(c.kind(), ClockKind::Monotonic);
        let mut t = c.thread();
        let a = monotonic_ns();
        let b = t.now(&c);
        let d = monotonic_ns();
        assert!(a <= b && b <= d, "{a} {b} {d}");
    }

    /// Over 300 ms of reads, spanning many anchor renewals, the TSC clock
    /// stays within 1 µs of `CLOCK_MONOTONIC` and never goes backwards.
    #[test]
    fn tsc_follows_clock_monotonic() {
        let c = Clock::new(ClockKind::Tsc);
        if c.kind() != ClockKind::Tsc {
            println!(
                "clocksource is not tsc here: the agent uses clock_gettime, nothing to compare"
            );
            assert!(!kernel_uses_tsc());
            return;
        }
        let mut t = c.thread();
        let start = monotonic_ns();
        let (mut worst, mut last, mut n) = (0i64, 0u64, 0u64);
        while monotonic_ns() < start + 300_000_000 {
            let before = monotonic_ns();
            let ours = t.now(&c);
            let after = monotonic_ns();
            assert!(ours >= last, "went backwards: {ours} < {last}");
            last = ours;
            // Distance outside the [before, after] window, if any.
            let off = if ours < before {
                before as i64 - ours as i64
            } else if ours > after {
                ours as i64 - after as i64
            } else {
                0
            };
            worst = worst.max(off);
            n += 1;
        }
        println!("{n} reads, worst distance from CLOCK_MONOTONIC {worst} ns");
        assert!(worst < 1_000, "TSC clock off by {worst} ns");
        assert!(n > 1000);
    }
}
