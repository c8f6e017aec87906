//! The machine's pressure stall (PSI, `/proc/pressure/*`) for the
//! `io-full>=`-style triggers: the kernel's totals as sampled after every
//! drain batch, and the share of a window they stalled.
//!
//! Invariant: samples are kept oldest first, as far back as the longest
//! window asks and one more, so that a window is covered whole.

use std::collections::VecDeque;

/// A pressure-stall line of the kernel's (`/proc/pressure/RESOURCE`,
/// `some` or `full`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stall {
    /// `cpu-some`: some runnable task waited for a CPU.
    CpuSome,
    /// `io-some`: some task stalled on I/O.
    IoSome,
    /// `io-full`: every non-idle task stalled on I/O at once.
    IoFull,
    /// `memory-some`.
    MemorySome,
    /// `memory-full`.
    MemoryFull,
}

impl Stall {
    pub(super) fn parse(word: &str) -> Option<Stall> {
        Some(match word {
            "cpu-some" => Stall::CpuSome,
            "io-some" => Stall::IoSome,
            "io-full" => Stall::IoFull,
            "memory-some" => Stall::MemorySome,
            "memory-full" => Stall::MemoryFull,
            _ => return None,
        })
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Stall::CpuSome => "cpu some",
            Stall::IoSome => "io some",
            Stall::IoFull => "io full",
            Stall::MemorySome => "memory some",
            Stall::MemoryFull => "memory full",
        }
    }
}

/// The kernel's pressure stall totals at one moment, µs (`None`: not
/// shown, a kernel without PSI).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pressure {
    /// `cpu` `some`.
    pub cpu_some: Option<u64>,
    /// `io` `some`.
    pub io_some: Option<u64>,
    /// `io` `full`.
    pub io_full: Option<u64>,
    /// `memory` `some`.
    pub memory_some: Option<u64>,
    /// `memory` `full`.
    pub memory_full: Option<u64>,
}

impl Pressure {
    /// The `total=` of the `kind` (`some`, `full`) line of a
    /// `/proc/pressure/*` file.
    pub fn total(text: &str, kind: &str) -> Option<u64> {
        text.lines()
            .find(|l| l.starts_with(kind))?
            .split_whitespace()
            .find_map(|f| f.strip_prefix("total="))?
            .parse()
            .ok()
    }

    pub(super) fn of(&self, s: Stall) -> Option<u64> {
        match s {
            Stall::CpuSome => self.cpu_some,
            Stall::IoSome => self.io_some,
            Stall::IoFull => self.io_full,
            Stall::MemorySome => self.memory_some,
            Stall::MemoryFull => self.memory_full,
        }
    }
}

/// The totals as sampled: (when, totals), oldest first.
#[derive(Debug, Default)]
pub(super) struct Samples(VecDeque<(u64, Pressure)>);

impl Samples {
    /// Takes note of the totals at `at_ns`, forgetting those a window of
    /// `longest_ns` no longer needs.
    pub(super) fn observe(&mut self, at_ns: u64, totals: Pressure, longest_ns: u64) {
        while self
            .0
            .get(1)
            .is_some_and(|(t, _)| at_ns.saturating_sub(*t) >= longest_ns)
        {
            self.0.pop_front();
        }
        self.0.push_back((at_ns, totals));
    }

    /// The share of the last `for_ns` (to the latest sample) that the
    /// machine stalled on `s`, %, once the samples span it.
    pub(super) fn stall_pct(&self, s: Stall, for_ns: u64) -> Option<f64> {
        let (last_at, last) = self.0.back()?;
        let (first_at, first) = self
            .0
            .iter()
            .rev()
            .find(|(t, _)| last_at.saturating_sub(*t) >= for_ns)?;
        let stalled_us = last.of(s)?.saturating_sub(first.of(s)?);
        Some(stalled_us as f64 * 1e3 * 100.0 / (last_at - first_at).max(1) as f64)
    }
}
