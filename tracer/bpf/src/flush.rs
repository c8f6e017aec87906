//! The programs' per-CPU batches seen from user space: which CPUs hold
//! records that are not in their rings yet, since when, and a flush of a
//! CPU's batch on demand.
//!
//! The programs keep records without stacks in a per-CPU batch and write
//! it into the CPU's ring when it fills, when the CPU goes idle, or at the
//! CPU's first run after its oldest record is 4 ms old
//! (`src/bpf/sched.bpf.c`). A CPU that then runs one thread without a
//! switch or a waking runs no program, so its batch would wait: the reader
//! runs the program `flush_cpu` on that CPU (`BPF_PROG_TEST_RUN` with
//! `BPF_F_TEST_RUN_ON_CPU`, an interrupt there). The `pending` map, one
//! cache line per CPU mapped here, holds the time of each batch's oldest
//! record (0: empty).
//!
//! Invariant: after [`Flusher::hold_back`] returned `t`, every record
//! stamped before `t` that a program had written when it was called is in
//! its CPU's ring (so a reader that reads the rings after it may release
//! everything before `t`). It allocates nothing, so a real-time drain may
//! call it.

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use libbpf_rs::libbpf_sys;
use memmap2::{MmapOptions, MmapRaw};

use crate::error::BpfError;

/// Bytes of one CPU's slot in the `pending` map (`struct pending`).
const SLOT_BYTES: usize = 64;

/// A batch this much older than the reader's now is flushed by the reader
/// (its CPU ran no program since: the programs flush at 4 ms themselves).
pub const STALE_NS: u64 = 10_000_000;

/// The `pending` map and the flush program, for one recording.
#[derive(Debug)]
pub(crate) struct Flusher {
    prog: OwnedFd,
    pending: MmapRaw,
    cpus: Vec<u32>,
}

impl Flusher {
    /// Over the `pending` map `pending_map` (one slot per possible CPU,
    /// `possible`) and the program `flush_cpu`, for the CPUs `cpus`.
    pub fn new(
        prog: BorrowedFd<'_>,
        pending_map: BorrowedFd<'_>,
        possible: usize,
        cpus: &[u32],
    ) -> Result<Self, BpfError> {
        let prog = prog
            .try_clone_to_owned()
            .map_err(|e| BpfError::kernel("keeping the flush program", e))?;
        let pending = MmapOptions::new()
            .len(possible * SLOT_BYTES)
            .map_raw_read_only(pending_map.as_raw_fd())
            .map_err(|e| BpfError::kernel("mapping the pending batches", e))?;
        Ok(Flusher {
            prog,
            pending,
            cpus: cpus.to_vec(),
        })
    }

    /// When CPU `cpu`'s oldest batched record was stamped (0: none).
    fn oldest(&self, cpu: u32) -> u64 {
        let at = cpu as usize * SLOT_BYTES;
        if at + SLOT_BYTES > self.pending.len() {
            return 0;
        }
        // SAFETY: in bounds (checked), 8-byte aligned (slots are 64 bytes
        // from a page-aligned start), mapped for as long as `self` lives;
        // the programs store it concurrently, which an atomic load models
        // (a plain load on the targets BPF runs on; the page is never
        // written from here).
        unsafe {
            std::sync::atomic::AtomicU64::from_ptr(self.pending.as_mut_ptr().add(at).cast())
                .load(std::sync::atomic::Ordering::Acquire)
        }
    }

    /// Runs `flush_cpu` on `cpu`. Returns whether the batch was flushed
    /// (false: a program of that CPU held it, or the kernel refused).
    pub fn flush(&self, cpu: u32) -> bool {
        // SAFETY: a zeroed bpf_test_run_opts is valid (no buffers); the
        // kernel reads it and writes back only retval and duration.
        let mut opts: libbpf_sys::bpf_test_run_opts = unsafe { std::mem::zeroed() };
        opts.sz = std::mem::size_of::<libbpf_sys::bpf_test_run_opts>() as _;
        opts.cpu = cpu;
        opts.flags = libbpf_sys::BPF_F_TEST_RUN_ON_CPU;
        // SAFETY: `prog` is an open program descriptor owned by `self`;
        // `opts` lives across the call.
        let rc = unsafe { libbpf_sys::bpf_prog_test_run_opts(self.prog.as_raw_fd(), &mut opts) };
        rc == 0 && opts.retval == 0
    }

    /// Flushes the batches whose oldest record is [`STALE_NS`] older than
    /// `now`, then returns the oldest time still batched (`u64::MAX`:
    /// none): every record stamped before it is in the rings.
    pub fn hold_back(&self, now: u64) -> u64 {
        let mut oldest = u64::MAX;
        for &cpu in &self.cpus {
            let mut t = self.oldest(cpu);
            if t != 0 && now.saturating_sub(t) >= STALE_NS && self.flush(cpu) {
                t = self.oldest(cpu);
            }
            if t != 0 {
                oldest = oldest.min(t);
            }
        }
        oldest
    }
}
