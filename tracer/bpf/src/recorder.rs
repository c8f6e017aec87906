//! [`SchedRecorder`]: the life of an eBPF recording of switches and
//! wake-ups — open (check, load, make the rings, attach) → poll … →
//! detach → poll what is left → drop.
//!
//! Invariant: from `open` until `detach` every switch and wake-up on every
//! CPU is either a record in its CPU's ring, in its CPU's batch (on its
//! way to the ring: `flush`), or counted in [`Lost`]; after `detach` the
//! programs write nothing more, the batches are in the rings, and `poll`
//! reads what the rings still hold.

use std::os::fd::{AsFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use libbpf_rs::{Link, MapCore, MapFlags};

use crate::error::BpfError;
use crate::flush::Flusher;
use crate::loader::Loaded;
use crate::percpu::WakeContextSource;
use crate::probe::preconditions;
use crate::record::{SchedEvent, RECORD_BYTES};
use crate::stack_config::StackConfig;

use crate::rings::{RingDrain, Rings};
use crate::stats::{program_stats, ProgramStats};

/// What a record costs in a ring: the record and libbpf's 8-byte header.
pub const RING_BYTES_PER_RECORD: usize = RECORD_BYTES + 8;

/// The programs wake the reader when a ring holds this much (or 32 of the
/// longest records with stacks, if more; or a quarter of the ring, if
/// less).
pub const WAKEUP_BYTES: usize = 64 * 1024;

/// Records the recording did not get.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lost {
    /// Per CPU: each recorded CPU, and any other CPU that had events.
    pub per_cpu: Vec<CpuLost>,
    /// Program runs the kernel skipped because a program was already
    /// running on that CPU (recursion): their events are lost, on a CPU
    /// the kernel does not say.
    pub skipped_runs: u64,
    /// Records read that were not handed on: a kind or size this version
    /// does not know (decoded by the reader or after a [`RingDrain`]).
    pub undecodable: u64,
}

impl Lost {
    /// Every record lost, whatever the reason.
    pub fn total(&self) -> u64 {
        self.per_cpu
            .iter()
            .map(|c| c.ring_full + c.no_ring)
            .sum::<u64>()
            + self.skipped_runs
            + self.undecodable
    }
}

/// One CPU's lost records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuLost {
    /// The CPU.
    pub cpu: u32,
    /// Its ring was full (the reader was late).
    pub ring_full: u64,
    /// It has no ring (it was not in the recorder's list of CPUs).
    pub no_ring: u64,
    /// Wake-ups written without their context (not lost; counted so that
    /// [`crate::WakeContext::Unknown`] is never a surprise).
    pub context_unknown: u64,
}

/// Tells the programs where each Java thread's JVM keeps its frame anchor
/// (`java_threads` in `sched.bpf.c`): a switch-out stack of a thread it
/// holds carries the thread's last Java frame, read in the kernel at the
/// switch.
#[derive(Debug)]
pub struct JavaAnchors {
    map: libbpf_rs::MapHandle,
}

impl JavaAnchors {
    /// Thread `tid`'s anchor words (sp, fp, pc) are at `at[..3]`, its
    /// pending and waiting monitor words at `at[3]` and `at[4]` (0: not
    /// read), and an ObjectMonitor's owner word at offset `at[5]`; its
    /// `java.lang.Thread`'s handle at `at[6]` (0: not read), whose
    /// `parkBlocker` is at offset `at[7]`, compressed oops decoded with
    /// base `at[8]` and shift `at[9]`, an object's class word at offset
    /// `at[10]`.
    pub fn insert(&self, tid: u32, at: [u64; 11]) -> Result<(), BpfError> {
        let mut value = [0u8; 88];
        for (i, a) in at.iter().enumerate() {
            value[i * 8..i * 8 + 8].copy_from_slice(&a.to_ne_bytes());
        }
        self.map
            .update(&tid.to_ne_bytes(), &value, MapFlags::ANY)
            .map_err(|e| BpfError::kernel("adding a Java thread", e))
    }

    /// Forgets thread `tid` (it exited).
    pub fn remove(&self, tid: u32) {
        // A thread that was never added is no error.
        let _ = self.map.delete(&tid.to_ne_bytes());
    }
}

/// An eBPF recording of every switch and wake-up on a set of CPUs.
#[derive(Debug)]
pub struct SchedRecorder {
    // Field order is drop order: the programs detached first, then the
    // reader, then the programs and maps.
    links: Vec<Link>,
    /// `None` once handed to a drain ([`SchedRecorder::take_drain`]).
    rings: Option<Rings>,
    /// Records taken off the rings and not handed on, wherever they are read.
    undecodable: Arc<AtomicU64>,
    /// The programs' per-CPU batches (shared with a drain).
    flusher: Arc<Flusher>,
    loaded: Loaded,
    cpus: Vec<u32>,
    possible: usize,
}

impl SchedRecorder {
    /// Loads the programs, gives each CPU of `cpus` a ring of
    /// `ring_bytes_per_cpu` (rounded up to a power of two of at least a
    /// page; a CPU writes [`RING_BYTES_PER_RECORD`] per event), and
    /// attaches them: recording starts on return. Events on CPUs not in
    /// `cpus` are counted as [`CpuLost::no_ring`]. The records carry the
    /// stacks `stacks` asks for ([`crate::record::stacks`]).
    pub fn open(
        cpus: &[u32],
        ring_bytes_per_cpu: usize,
        stacks: StackConfig,
    ) -> Result<Self, BpfError> {
        preconditions()?;
        let possible = libbpf_rs::num_possible_cpus()
            .map_err(|e| BpfError::kernel("counting the possible CPUs", e))?;
        if let Some(&cpu) = cpus.iter().find(|&&c| c as usize >= possible) {
            return Err(BpfError::NoSuchCpu { cpu, possible });
        }
        let mut cpus = cpus.to_vec();
        cpus.sort_unstable();
        cpus.dedup();
        let bytes = ring_size(ring_bytes_per_cpu);
        // Records with stacks are kilobytes: the reader is woken after
        // tens of them, not after every few.
        let wakeup = WAKEUP_BYTES
            .max(32 * stacks.max_record())
            .min(bytes as usize / 4) as u64;
        let loaded = Loaded::load(possible as u32, wakeup, stacks)?;
        let rings = Rings::create(&loaded.skel.maps.rings, &cpus, bytes, page_size())?;
        let flusher = Arc::new(Flusher::new(
            loaded.skel.progs.flush_cpu.as_fd(),
            loaded.skel.maps.pending.as_fd(),
            possible,
            &cpus,
        )?);
        let links = loaded.attach()?;
        Ok(SchedRecorder {
            links,
            flusher,
            undecodable: rings.undecodable(),
            rings: Some(rings),
            loaded,
            cpus,
            possible,
        })
    }

    /// Where the programs find Java threads' frame anchors (a handle of
    /// its own on the map, for the thread that reads the records).
    pub fn java_anchors(&self) -> Result<JavaAnchors, BpfError> {
        let map = libbpf_rs::MapHandle::try_from(&self.loaded.skel.maps.java_threads)
            .map_err(|e| BpfError::kernel("opening the Java threads' map", e))?;
        Ok(JavaAnchors { map })
    }

    /// The CPUs recorded, in order.
    pub fn cpus(&self) -> &[u32] {
        &self.cpus
    }

    /// Where the wake-ups' context comes from on this kernel.
    pub fn wake_context(&self) -> &WakeContextSource {
        self.loaded.wake_context()
    }

    /// Waits up to `timeout` for a ring to fill past the wake-up threshold,
    /// then reads every ring and calls `f(cpu, event)` for each record —
    /// each CPU's in the order the CPU wrote them (time order but for a
    /// program run interrupted by another on the same CPU, which only an
    /// NMI or an interrupt during a task's waking of itself can do), the
    /// CPUs one after the other: merge them by time. Returns how many
    /// events it passed on. A timeout of 0 reads without waiting. After
    /// [`SchedRecorder::take_drain`] the drain reads the rings: this reads
    /// nothing.
    pub fn poll(
        &mut self,
        timeout: Duration,
        f: impl FnMut(u32, SchedEvent),
    ) -> Result<usize, BpfError> {
        match self.rings.as_mut() {
            Some(rings) => {
                // Every batch, not only the stale ones (at the end of time
                // all are): this reader is not the hot path, and its
                // callers expect what happened.
                self.flusher.hold_back(u64::MAX);
                rings.read(timeout, f)
            }
            None => Ok(0),
        }
    }

    /// A descriptor that polls readable when a ring passed the wake-up
    /// threshold, for a caller's own `poll`/`epoll` loop (then call
    /// [`SchedRecorder::poll`] with a zero timeout). Readable does not
    /// mean every record: below the threshold nothing wakes, so read on a
    /// timer too. `None` once the rings went to a drain.
    pub fn wait_fd(&self) -> Option<RawFd> {
        self.rings.as_ref().map(Rings::wait_fd)
    }

    /// Hands the rings to a thread that only moves bytes ([`RingDrain`]),
    /// for a recorder whose reading must never wait for a CPU: from then on
    /// [`SchedRecorder::poll`] reads nothing. `None` if taken already.
    pub fn take_drain(&mut self) -> Option<RingDrain> {
        let flusher = Arc::clone(&self.flusher);
        self.rings.take().map(|r| RingDrain::new(r, flusher))
    }

    /// Stops the programs; the rings keep what they hold for
    /// [`SchedRecorder::poll`].
    pub fn detach(&mut self) {
        self.links.clear();
        // A program that was running as its link went may still add to a
        // batch: flush until none holds records (a few tries, a
        // millisecond apart).
        for _ in 0..3 {
            // Everything is stale at the end of time: all are flushed.
            if self.flusher.hold_back(u64::MAX) == u64::MAX {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Attaches the programs again after [`SchedRecorder::detach`].
    pub fn attach(&mut self) -> Result<(), BpfError> {
        if self.links.is_empty() {
            self.links = self.loaded.attach()?;
        }
        Ok(())
    }

    /// What was lost so far.
    pub fn lost(&self) -> Result<Lost, BpfError> {
        let counters = self.per_cpu_counters()?;
        let per_cpu = counters
            .into_iter()
            .enumerate()
            .map(|(cpu, [ring_full, no_ring, context_unknown])| CpuLost {
                cpu: cpu as u32,
                ring_full,
                no_ring,
                context_unknown,
            })
            .filter(|c| {
                self.cpus.binary_search(&c.cpu).is_ok()
                    || c.ring_full + c.no_ring + c.context_unknown > 0
            })
            .collect();
        let skipped_runs = self.program_stats()?.iter().map(|p| p.skipped).sum();
        Ok(Lost {
            per_cpu,
            skipped_runs,
            undecodable: self.undecodable.load(Ordering::Relaxed),
        })
    }

    /// The programs' counters: runs, run time (while a
    /// [`crate::RunTimeStats`] is held), skipped runs.
    pub fn program_stats(&self) -> Result<Vec<ProgramStats>, BpfError> {
        let progs = &self.loaded.skel.progs;
        [
            ("on_switch", progs.on_switch.as_fd()),
            ("on_waking", progs.on_waking.as_fd()),
            ("on_wakeup_new", progs.on_wakeup_new.as_fd()),
        ]
        .into_iter()
        .map(|(name, fd)| program_stats(name, fd))
        .collect()
    }

    /// The `counters` map: per possible CPU, ring_full, no_ring,
    /// context_unknown.
    fn per_cpu_counters(&self) -> Result<Vec<[u64; 3]>, BpfError> {
        let values = self
            .loaded
            .skel
            .maps
            .counters
            .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)
            .map_err(|e| BpfError::kernel("reading the lost-record counters", e))?
            .unwrap_or_default();
        let word = |v: &[u8], i: usize| {
            v.get(i * 8..i * 8 + 8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_ne_bytes)
                .unwrap_or(0)
        };
        Ok(values
            .iter()
            .take(self.possible)
            .map(|v| [word(v, 0), word(v, 1), word(v, 2)])
            .collect())
    }
}

/// A ring size the kernel takes: a power of two, at least a page.
fn ring_size(bytes: usize) -> u32 {
    let page = page_size();
    let size = bytes.max(page).next_power_of_two();
    u32::try_from(size).unwrap_or(1 << 31)
}

fn page_size() -> usize {
    // SAFETY: sysconf has no memory effects.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).ok().filter(|&p| p > 0).unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_sizes_are_powers_of_two_of_at_least_a_page() {
        let page = page_size() as u32;
        assert_eq!(ring_size(0), page);
        assert_eq!(ring_size(1), page);
        assert_eq!(ring_size(1 << 20), 1 << 20);
        assert_eq!(ring_size((1 << 20) + 1), 1 << 21);
        assert_eq!(ring_size(usize::MAX / 4), 1 << 31);
    }

    #[test]
    fn the_total_adds_every_kind_of_loss_but_unknown_contexts() {
        let lost = Lost {
            per_cpu: vec![
                CpuLost {
                    cpu: 0,
                    ring_full: 2,
                    no_ring: 0,
                    context_unknown: 100,
                },
                CpuLost {
                    cpu: 3,
                    ring_full: 0,
                    no_ring: 5,
                    context_unknown: 0,
                },
            ],
            skipped_runs: 1,
            undecodable: 1,
        };
        assert_eq!(lost.total(), 9);
    }
}
