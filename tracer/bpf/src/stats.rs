//! What the programs cost and skipped, as the kernel counts it: run count,
//! run time (while [`RunTimeStats`] is held), and runs skipped because a
//! program was already running on that CPU (recursion).
//!
//! Invariant: the kernel's `bpf_prog_info` is read through libbpf's
//! `bpf_prog_get_info_by_fd` into a zeroed struct of the size libbpf was
//! built with; fields the kernel does not know stay 0.

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use crate::error::BpfError;

/// One program's counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgramStats {
    /// The program (`on_switch`, `on_waking`, `on_wakeup_new`).
    pub name: &'static str,
    /// Runs, counted while run-time statistics were on.
    pub run_count: u64,
    /// Nanoseconds spent in it over those runs.
    pub run_time_ns: u64,
    /// Runs the kernel skipped because a program was already running on
    /// that CPU: their events are lost.
    pub skipped: u64,
}

impl ProgramStats {
    /// Mean nanoseconds a run, if it ran.
    pub fn ns_per_run(&self) -> Option<f64> {
        (self.run_count > 0).then(|| self.run_time_ns as f64 / self.run_count as f64)
    }
}

/// Reads the counters of the program behind `fd`.
pub(crate) fn program_stats(
    name: &'static str,
    fd: BorrowedFd<'_>,
) -> Result<ProgramStats, BpfError> {
    let mut info = libbpf_rs::libbpf_sys::bpf_prog_info::default();
    let mut len = std::mem::size_of_val(&info) as u32;
    // SAFETY: `info` is a zeroed bpf_prog_info of `len` bytes, which the
    // call fills (at most `len` bytes); no pointer field is set, so the
    // kernel writes nowhere else; `fd` is a program's open descriptor.
    let rc = unsafe {
        libbpf_rs::libbpf_sys::bpf_prog_get_info_by_fd(fd.as_raw_fd(), &mut info, &mut len)
    };
    if rc != 0 {
        return Err(BpfError::kernel(
            format!("reading the statistics of program {name}"),
            std::io::Error::from_raw_os_error(-rc),
        ));
    }
    Ok(ProgramStats {
        name,
        run_count: info.run_cnt,
        run_time_ns: info.run_time_ns,
        skipped: info.recursion_misses,
    })
}

/// While held, the kernel times every BPF program run
/// (`bpf_enable_stats(BPF_STATS_RUN_TIME)`), which costs each run two
/// clock reads: hold it to measure, not to record.
#[derive(Debug)]
pub struct RunTimeStats {
    _fd: OwnedFd,
}

impl RunTimeStats {
    /// Turns run-time statistics on until the value is dropped.
    pub fn enable() -> Result<Self, BpfError> {
        // SAFETY: takes an enum value, returns a new descriptor or -errno.
        let fd = unsafe {
            libbpf_rs::libbpf_sys::bpf_enable_stats(libbpf_rs::libbpf_sys::BPF_STATS_RUN_TIME)
        };
        if fd < 0 {
            return Err(BpfError::kernel(
                "turning BPF run-time statistics on",
                std::io::Error::from_raw_os_error(-fd),
            ));
        }
        // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(RunTimeStats { _fd: fd })
    }
}
