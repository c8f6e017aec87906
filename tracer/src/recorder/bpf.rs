//! The eBPF event source (`record --events bpf`): the dispatches and
//! wake-ups come from `idleflow-bpf`'s records, one per switch or waking,
//! while perf keeps giving thread names, forks, exits, mappings and the
//! stacks. This module owns the eBPF recorder, the pairing of each perf
//! stack sample with its event ([`crate::pair`]) and the eBPF losses;
//! `recorder/round.rs` turns the events into the merge's records.
//!
//! Invariant: each CPU's eBPF events go into the merge under their own
//! source (`base + ring`), in the order the CPU wrote them, so that source
//! stays in time order whatever the perf ring of the same CPU holds; a
//! sample's stacks go there too, at its event's exact time (inserted in
//! place when the sample came a round after its event). Events stamped
//! before the window's start are dropped; every record the programs could
//! not deliver becomes a `Lost` record of its CPU.

use std::time::Duration;

use idleflow_bpf::{BpfError, RingDrain, RunTimeStats, SchedRecorder};
use idleflow_format::{KernelCost, Lost};

use super::{CpuRing, Merged, SampledStacks};
use crate::pair::Pairer;
use crate::parse::UserStackCopy;

/// The eBPF recorder and what pairs its events with perf's samples.
pub(super) struct BpfSource {
    pub(super) rec: SchedRecorder,
    pub(super) side: BpfSide,
    pub(super) cost: CostMeter,
}

/// How long the kernel times the programs, and how often: a tenth of
/// every second, so that a short recording's estimate spreads over its
/// whole window (a load that starts a second after the recorder was
/// missed by a first timed second).
const TIMED_NS: u64 = 100_000_000;
const TIMING_PERIOD_NS: u64 = 1_000_000_000;

/// Times the programs' runs a tenth of the time (`RunTimeStats`: timing
/// costs every run two clock reads), for the recording's
/// [`KernelCost`].
#[derive(Default)]
pub(super) struct CostMeter {
    /// Timing on, since.
    on: Option<(RunTimeStats, u64)>,
    /// When timing last went on (0: never).
    last_on: u64,
    /// ns timed so far.
    timed_ns: u64,
    /// The kernel refused to time (no privilege): no estimate.
    refused: bool,
}

impl CostMeter {
    /// Turns timing on or off as the duty cycle says at `now`.
    pub(super) fn tick(&mut self, now: u64) {
        match &self.on {
            Some((_, since)) if now.saturating_sub(*since) >= TIMED_NS => {
                self.timed_ns += now - since;
                self.on = None;
            }
            None if !self.refused
                && (self.last_on == 0 || now.saturating_sub(self.last_on) >= TIMING_PERIOD_NS) =>
            {
                match RunTimeStats::enable() {
                    Ok(s) => {
                        self.on = Some((s, now));
                        self.last_on = now;
                    }
                    Err(_) => self.refused = true,
                }
            }
            _ => {}
        }
    }

    /// Turns timing off at `now` and returns what the programs cost while
    /// timed.
    pub(super) fn finish(&mut self, now: u64, rec: &SchedRecorder) -> Option<KernelCost> {
        if let Some((_, since)) = self.on.take() {
            self.timed_ns += now.saturating_sub(since);
        }
        if self.refused || self.timed_ns == 0 {
            return None;
        }
        let stats = rec.program_stats().ok()?;
        Some(KernelCost {
            run_ns: stats.iter().map(|p| p.run_time_ns).sum(),
            runs: stats.iter().map(|p| p.run_count).sum(),
            timed_ns: self.timed_ns,
        })
    }
}

/// Per ring (the recorder's CPU order): the pairers, the losses written.
pub(super) struct BpfSide {
    /// Ring index of each CPU number (`usize::MAX`: not recorded).
    ring_of_cpu: Vec<usize>,
    /// The CPU of each of the eBPF recorder's rings, in its order (which
    /// the drain's chunks use; it may differ from ours).
    cpu_of_ring: Vec<u32>,
    /// The merge source of ring `i`'s eBPF events is `base + i`.
    base: usize,
    /// `--stacks waits`: perf's samples, paired with their switches.
    switches: Vec<Pairer<(u32, u32), SampledStacks>>,
    /// perf samples the switches' stacks (`--stacks waits`): each switch
    /// looks for its sample.
    pub(super) paired: bool,
    /// Strips the tracing glue off the programs' kernel call chains.
    glue: idleflow_bpf::LoadingGlue,
    /// eBPF records lost per ring, as written so far.
    lost_written: Vec<u64>,
    /// Events before this (the window's start) are dropped.
    pub(super) start_ns: u64,
}

impl BpfSource {
    /// Opens the eBPF recorder for `cpus` (the rings' order), detached
    /// until [`BpfSource::start`].
    pub(super) fn open(
        cpus: &[u32],
        ring_bytes: usize,
        stacks: idleflow_bpf::StackConfig,
        paired: bool,
    ) -> Result<Self, BpfError> {
        // Read while the programs load, and waited for before the window
        // opens: a thread of idleflow's reading `/proc/kallsyms` inside the
        // window blocks in the kernel, and wake-ups the kernel does not
        // report (its idle task's) end those waits.
        let glue = idleflow_bpf::LoadingGlue::start();
        let mut rec = SchedRecorder::open(cpus, ring_bytes, stacks)?;
        rec.detach();
        let max = cpus.iter().copied().max().map_or(0, |c| c as usize + 1);
        let mut ring_of_cpu = vec![usize::MAX; max];
        for (i, &c) in cpus.iter().enumerate() {
            ring_of_cpu[c as usize] = i;
        }
        let n = cpus.len();
        let cpu_of_ring = rec.cpus().to_vec();
        Ok(BpfSource {
            cost: CostMeter::default(),
            rec,
            side: BpfSide {
                ring_of_cpu,
                cpu_of_ring,
                base: n,
                switches: (0..n).map(|_| Pairer::default()).collect(),
                paired,
                glue,
                lost_written: vec![0; n],
                start_ns: 0,
            },
        })
    }

    /// Waits for what must be ready before the window opens (the kernel's
    /// tracing glue, read while the programs loaded).
    pub(super) fn ready(&self) {
        self.side.glue.get();
    }

    /// Starts recording at `start_ns`: what the rings held is dropped.
    pub(super) fn start(&mut self, start_ns: u64) -> Result<(), BpfError> {
        self.rec.poll(Duration::ZERO, |_, _| {})?;
        self.side.start_ns = start_ns;
        self.rec.attach()?;
        self.cost.tick(start_ns);
        Ok(())
    }
}

impl BpfSide {
    /// The merge source of ring `ring`'s eBPF events.
    pub(super) fn source(&self, ring: usize) -> usize {
        self.base + ring
    }

    /// How many rings (recorded CPUs).
    pub(super) fn rings(&self) -> usize {
        self.switches.len()
    }

    /// The CPU of the eBPF recorder's ring `ring` (a drained chunk's).
    pub(super) fn cpu(&self, ring: usize) -> Option<u32> {
        self.cpu_of_ring.get(ring).copied()
    }

    /// The ring of CPU `cpu`, if it is recorded.
    pub(super) fn ring(&self, cpu: u32) -> Option<usize> {
        self.ring_of_cpu
            .get(cpu as usize)
            .copied()
            .filter(|&r| r != usize::MAX)
    }

    /// The switch of `key` (prev, next) at `time` on ring `ring`: the
    /// stacks of its sample if that came already.
    pub(super) fn switch_event(
        &mut self,
        ring: usize,
        time: u64,
        key: (u32, u32),
    ) -> Option<SampledStacks> {
        if !self.paired {
            return None;
        }
        self.switches.get_mut(ring)?.event(time, key)
    }

    /// The stacks a record carries, as the recording keeps them: the
    /// kernel call chain without the tracing glue, the user copy.
    pub(super) fn stacks(
        &self,
        st: &idleflow_bpf::RecordStacks<'_>,
    ) -> (Option<Box<[u64]>>, Option<Box<UserStackCopy>>) {
        let ips: Vec<u64> = st.kernel().collect();
        let ips = self.glue.get().strip(&ips);
        let kernel = (!ips.is_empty()).then(|| ips.into());
        let user = st.user.map(|u| {
            Box::new(UserStackCopy {
                ip: u.ip,
                sp: u.sp,
                bp: u.bp,
                di: u.di,
                runs: u.runs,
                java_anchor: u.java_anchor,
                java_monitors: u.java_monitors,
                java_blocker: u.java_blocker,
                requested: u.asked,
                bytes: u.bytes.to_vec(),
            })
        });
        (kernel, user)
    }

    /// A `sched_switch` sample's stacks on ring `ring`: the time of its
    /// switch if that came already.
    pub(super) fn switch_sample(
        &mut self,
        ring: usize,
        time: u64,
        st: SampledStacks,
    ) -> Option<(u64, SampledStacks)> {
        let key = (st.prev, st.next);
        self.switches.get_mut(ring)?.sample(time, key, st)
    }

    /// Forgets the samples stamped before `time` that found no event,
    /// counting them; returns how many in all so far.
    pub(super) fn expire(&mut self, time: u64) -> u64 {
        self.switches
            .iter_mut()
            .map(|p| {
                p.expire(time);
                p.unpaired()
            })
            .sum()
    }
}

/// The drain thread empties the eBPF rings ([`RingDrain`]) on every pass,
/// as it does perf's: the records reach [`super::Recorder`] in its rounds.
impl crate::drain::SideRings for RingDrain {
    fn rings(&self) -> usize {
        self.cpus().len()
    }

    fn wait_fd(&self) -> i32 {
        RingDrain::wait_fd(self)
    }

    fn rearm(&mut self) {
        RingDrain::rearm(self);
    }

    fn hold_back(&mut self, now: u64) -> u64 {
        RingDrain::hold_back(self, now)
    }

    fn drain(&mut self, place: &mut dyn FnMut(usize, &[u8]) -> bool) {
        // An error leaves the records in the kernel's rings (counted there
        // if they fill): nothing is dropped here.
        let _ = RingDrain::drain(self, place);
    }
}

/// Writes the eBPF records lost since the last call as `Lost` records at
/// `time` (now: after every event of the source), per ring.
pub(super) fn write_losses(
    src: &mut BpfSource,
    rings: &mut [CpuRing],
    merge: &mut crate::merge::Merge<Merged>,
    time: u64,
) -> Result<(), BpfError> {
    let lost = src.rec.lost()?;
    for c in lost.per_cpu {
        let Some(&ring) = src.side.ring_of_cpu.get(c.cpu as usize) else {
            continue;
        };
        let (Some(r), Some(written)) = (rings.get_mut(ring), src.side.lost_written.get_mut(ring))
        else {
            continue;
        };
        let count = (c.ring_full + c.no_ring).saturating_sub(*written);
        if count > 0 {
            *written += count;
            r.lost += count;
            merge.push(
                src.side.base + ring,
                time,
                Merged::Lost(Lost {
                    time,
                    cpu: r.cpu,
                    count,
                }),
            );
        }
    }
    Ok(())
}
