//! The recorder: owns the events of every CPU, their rings and joiners, the
//! merge and the recording being written.
//!
//! Life cycle: [`Recorder::open`] (all privileged work; nothing is written
//! yet, so a refusal leaves no file) → [`Recorder::enable`] (the window
//! starts) → [`Recorder::begin`] (the output file appears as
//! `<path>.RANDOM.partial`) → [`Recorder::poll`] until the caller decides to stop →
//! [`Recorder::finish`] (drains every ring, writes the end record, renames
//! the file to `<path>`).
//!
//! What is written reaches the kernel in bounded chunks: whenever the
//! writer's 1 MiB buffer fills, and at least every [`FLUSH_NS`]. So a
//! recorder that is killed, a disk that fills up, or an error mid-run
//! leaves `<path>.RANDOM.partial` readable up to its last complete record (the
//! reader's [`idleflow_format::Reader::next_complete_record`]); dropped
//! before `finish`, the recorder flushes and keeps that file.
//!
//! The options live in `recorder/options.rs`, opening the events in `recorder/open.rs`, reading each drained
//! round into the merge in `recorder/round.rs`, choosing the event source
//! (perf or eBPF) in `recorder/source.rs`, the eBPF source's recorder,
//! pairing and losses in `recorder/bpf.rs`, where the recording goes (the
//! file or the flight recorder's ring, and what heads it) in
//! `recorder/output.rs`, the eBPF records kept undecoded until released in
//! `recorder/pending.rs`, where released records go (the merge or the
//! output) in `recorder/emit.rs`, the counts of watched processes'
//! blocking switch-outs (for the JVM policy) in `recorder/blocking.rs`, the deferred merge (`IDLEFLOW_DEFER=1`) in
//! `recorder/spool.rs`, the Java frames walked at the switch-outs in
//! `recorder/java.rs`; this file keeps the recorder's state and the rest
//! of its life cycle (writing what the merge releases, stopping,
//! finishing).

use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::PathBuf;

mod blocking;
mod bpf;
mod emit;
mod java;
mod java_io;
mod open;
mod options;
mod output;
mod pending;
mod round;
mod source;
mod spool;
mod trees;
mod vm_waits;

use blocking::BlockingCount;
pub use blocking::Counted;
use emit::{Discard, Emit, Put};
pub use open::{IRQ_WAKE_FILTER, TASK_WAKE_FILTER};
pub use options::{
    RecordOptions, DEFAULT_RING_BYTES, DEFAULT_STACK_BUDGET, DEFAULT_USER_STACK_BYTES,
    DEFAULT_WAKER_SAMPLE_PERIOD, DEFAULT_WAKER_STACK_BUDGET, DEFAULT_WAKER_STACK_BYTES,
};
use output::{Output, Sink};
pub use source::{choose, Chosen, EventSource, Recorded};

use crate::drain::{Drain, Round};
use crate::join::Joiner;
use crate::merge::Merge;
use crate::names::{TaskEvent, ThreadNames};
use crate::parse::{Layout, UserStackCopy};
use crate::procfs;
use crate::ring::Ring;
use crate::sys::{self, PerfEvent, SysError};
use crate::tracefs::TracefsError;
use crate::workarea::LiveWorkArea;
use idleflow_format::{
    Dispatch, FormatError, KernelStack, Lost, ModuleMap, ProcStatCpu, Record, RunSummary,
    StackCopy, SwitchArg, SwitchStack, ThreadExit, Wakeup,
};
use idleflow_wire::twa::WorkArea;
use rustc_hash::FxHashMap;
use std::sync::Arc;

/// The longest written records wait in memory before they are handed to
/// the kernel, ns: a recorder killed at any instant loses at most this much.
pub const FLUSH_NS: u64 = 1_000_000_000;

/// The drain thread ([`crate::drain`]) wakes when a ring is half full, and
/// otherwise after a period that adapts to the traffic (10–250 ms), so a
/// quiet machine sees the recorder a few times a second; the recorder
/// wakes for each round it drained. While a JVM agent has threads in the
/// work area the period is this, ms: dispatches are tagged when read, and
/// a thread's node history lasts tens of ms.
const WORK_AREA_PERIOD_MS: i32 = 5;

/// The drain's period while a flight recorder runs, ms: its triggers are
/// judged after every batch, so this bounds how late a condition is seen.
const FLIGHT_PERIOD_MS: i32 = 20;

/// Why recording failed.
#[derive(Debug, thiserror::Error)]
pub enum RecorderError {
    /// The kernel refused to open system-wide events.
    #[error("recording needs root, or CAP_PERFMON and CAP_BPF (system-wide scheduler events; without CAP_BPF, perf's tracepoints, whose formats in tracefs only root may read)")]
    Privilege(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// Another system call failed.
    #[error(transparent)]
    Sys(#[from] SysError),
    /// tracefs could not be found, mounted or read.
    #[error(transparent)]
    Tracefs(#[from] TracefsError),
    /// A file could not be written or read.
    #[error("{what} {path}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why it failed.
        source: std::io::Error,
    },
    /// Writing the recording failed.
    #[error("writing the recording")]
    Format(#[from] FormatError),
    /// The recording's file could not be created safely.
    #[error(transparent)]
    Files(idleflow_format::files::FilesError),
    /// eBPF recording was asked for (`--events bpf`) and cannot be used here.
    #[error("eBPF recording (--events bpf) cannot be used here")]
    NoBpf(#[source] idleflow_bpf::BpfError),
    /// The eBPF recorder failed.
    #[error("eBPF recording")]
    Bpf(#[source] idleflow_bpf::BpfError),
    /// A ring size that is not a power-of-two number of pages.
    #[error("ring size {0} bytes is not a power-of-two number of pages (e.g. 1M, 4M, 16M)")]
    RingSize(usize),
}

struct CpuRing {
    cpu: u32,
    joiner: Joiner,
    lost: u64,
    /// The stacks of the last switch sample that had one, until the
    /// joiner emits that switch's dispatch.
    stack: Option<SampledStacks>,
    /// The last wake-up written from this ring (time, waker, wakee): the
    /// waker-stack event's sample of a wake-up and the plain event's
    /// sample of the same one come one after the other; the second is not
    /// written again.
    last_wake: Option<(u64, u32, u32)>,
}

/// The stacks a `sched_switch` sample carried, waiting for its dispatch.
struct SampledStacks {
    prev: u32,
    next: u32,
    pid: u32,
    kernel: Option<Box<[u64]>>,
    user: Option<Box<UserStackCopy>>,
}

/// What the merge holds: records ready to write, and task events whose
/// THREAD records need the names known at their time ([`crate::names`]).
#[derive(Debug)]
///
/// Kept small (the rare name events boxed): every record moves into the
/// merge's queue and out of it, and on a busy server those moves were a
/// tenth of the recorder's CPU when this held a whole [`Record`].
enum Merged {
    Dispatch(Dispatch),
    KernelStack(Box<KernelStack>),
    SwitchStack(SwitchStack),
    WakeStack(SwitchStack),
    SwitchArg(SwitchArg),
    /// What a Java thread that left a CPU idle was blocked in.
    SwitchJavaState(idleflow_format::SwitchJavaState),
    StackCopy(Box<StackCopy>),
    /// A walked Java stack met for the first time (`recorder/java.rs`).
    WalkedStack(Box<idleflow_format::WalkedStack>),
    /// The Java frames of a switch-out, before its stack copy.
    SwitchJavaStack(SwitchStack),
    /// A waker's walked Java frames at a wake-up (`recorder/java.rs`).
    WakeJavaStack(SwitchStack),
    Module(Box<ModuleMap>),
    Wakeup(Wakeup),
    /// A waking and the next dispatch of its CPU (`recorder/round.rs`'s
    /// fold), at the waking's time: one record of the recording.
    WokenDispatch(Woken),
    Exit(ThreadExit),
    Lost(Lost),
    Task(Box<TaskEvent>),
}

/// A waking and the dispatch after it on its CPU, kept as small as the
/// merge's other records: the dispatch's CPU and leaving thread are the
/// waking's (`cpu`, `waker_tid`), its node untagged.
#[derive(Debug, Clone, Copy)]
struct Woken {
    wake: Wakeup,
    time: u64,
    next_tid: u32,
    prev_state: idleflow_format::PrevState,
}

impl Woken {
    fn dispatch(&self) -> Dispatch {
        Dispatch {
            time: self.time,
            cpu: self.wake.cpu,
            prev_tid: self.wake.waker_tid,
            prev_state: self.prev_state,
            next_tid: self.next_tid,
            prev_node: Default::default(),
        }
    }
}

/// A recording in progress. See the module documentation.
pub struct Recorder {
    cpus: Vec<u32>,
    layout: Layout,
    ring_bytes: usize,
    events: Vec<PerfEvent>,
    ring_owner: Vec<usize>,
    rings: Vec<CpuRing>,
    /// The mapped rings, until [`Recorder::enable`] hands them to the drain.
    mapped: Vec<Ring>,
    drain_priority: i32,
    drain: Option<Drain>,
    merge: Merge<Merged>,
    names: ThreadNames,
    start_ns: u64,
    start_unix_ns: u64,
    proc_stat_start: Vec<ProcStatCpu>,
    last_round_start: u64,
    summary: RunSummary,
    output: Option<Output>,
    work_area: Option<LiveWorkArea>,
    tree_dir: Option<PathBuf>,
    /// JVMs run with their flight recorder: their waits follow the stream.
    java_waits: bool,
    /// The window's end, once [`Recorder::stop`] closed it.
    stop_ns: Option<u64>,
    /// Processes whose main thread took a new name (an `exec`, mostly)
    /// since [`Recorder::take_renamed_processes`] last asked.
    renamed: Vec<u32>,
    /// Kernel stacks seen, interned: stack → id (from 1).
    kernel_stacks: FxHashMap<Box<[u64]>, u64>,
    /// Processes whose blocking switch-outs are counted
    /// ([`Recorder::count_blocking_switch_outs`]), with their counts.
    blocking: Vec<BlockingCount>,
    /// The rounds drained and not read yet, while the merge is deferred
    /// (`recorder/spool.rs`).
    spool: Option<spool::Spool>,
    /// Fold wakings into the next switch of their CPU where the output
    /// allows (`recorder/round.rs`); `IDLEFLOW_NO_FOLD=1` turns it off, for
    /// the benchmarks' comparison with the records apart.
    fold: bool,
    /// User stacks are copied (and executable mappings recorded).
    user_stacks: bool,
    /// `RunInfo::stacks`.
    stacks: &'static str,
    /// `RunInfo::wait_sample_period`.
    wait_sample_period: u32,
    /// `RunInfo::idle_stack_budget`: the eBPF programs' budget when they
    /// take the stacks at the switches to idle, else 0.
    idle_stack_budget: u32,
    /// `RunInfo::waker_sample_period` and `waker_stack_budget` (0, 0: no
    /// waker stacks).
    waker_sampling: (u32, u32),
    /// `RunInfo::event_source` and `event_source_why`.
    event_source: Chosen,
    /// With the eBPF source: its recorder and pairers.
    bpf: Option<bpf::BpfSource>,
    /// With the eBPF source: each ring's records not yet written.
    pending: Vec<pending::Pending>,
    /// The newest time written, and the records written late.
    written: (u64, u64),
    /// Java frames walked from the JVMs' structures at the switch-outs
    /// ([`Recorder::walk_java_frames`]).
    java: Option<java::JavaWalks>,
    /// `RunInfo::java_frames` and `java_frames_why`.
    java_frames: (String, String),
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("cpus", &self.cpus)
            .field("ring_bytes", &self.ring_bytes)
            .finish_non_exhaustive()
    }
}

impl Recorder {
    /// Walks the Java frames of each JVM thread whose switch-out stack is
    /// copied, from its JVM's own structures (`recorder/java.rs`): needs
    /// the eBPF source, whose records carry each thread's count of runs.
    /// Call before [`Recorder::enable`].
    pub fn walk_java_frames(&mut self) {
        let anchors = self.bpf.as_ref().and_then(|b| b.rec.java_anchors().ok());
        self.java = Some(java::JavaWalks::new(anchors));
    }

    /// The CPUs recorded.
    pub fn cpus(&self) -> &[u32] {
        &self.cpus
    }

    /// Starts the window: enables every event.
    pub fn enable(&mut self) -> Result<(), RecorderError> {
        if let Some(b) = &self.bpf {
            b.ready();
        }
        for e in &self.events {
            e.enable()?;
        }
        self.start_ns = sys::monotonic_ns();
        self.start_unix_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        self.last_round_start = self.start_ns;
        if let Some(b) = self.bpf.as_mut() {
            b.start(self.start_ns).map_err(RecorderError::Bpf)?;
        }
        self.proc_stat_start = procfs::proc_stat().unwrap_or_default();
        let fds = self
            .ring_owner
            .iter()
            .map(|&i| self.events[i].fd().as_raw_fd())
            .collect();
        // The eBPF rings are emptied by the drain too, never waiting for the
        // recorder's thread to get a CPU.
        let side = self
            .bpf
            .as_mut()
            .and_then(|b| b.rec.take_drain())
            .map(|d| Box::new(d) as Box<dyn crate::drain::SideRings>);
        let drain = Drain::start(
            std::mem::take(&mut self.mapped),
            fds,
            self.drain_priority,
            crate::drain::MAX_IN_FLIGHT,
            side,
        )?;
        self.drain = Some(drain);
        Ok(())
    }

    /// Waits for work (a round drained, `wake` readable, a signal, or
    /// `max_wait_ms`), then processes every round drained so far and writes
    /// what the merge can release.
    pub fn poll(
        &mut self,
        wake: Option<BorrowedFd<'_>>,
        max_wait_ms: i32,
    ) -> Result<(), RecorderError> {
        if let Some(b) = self.bpf.as_mut() {
            b.cost.tick(sys::monotonic_ns());
        }
        let Some(drain) = self.drain.as_ref() else {
            return Ok(());
        };
        let flight = self.output.as_ref().is_some_and(|o| o.flight.is_some());
        drain.set_period(if self.work_area.as_ref().is_some_and(|w| w.active()) {
            Some(WORK_AREA_PERIOD_MS)
        } else if flight {
            Some(FLIGHT_PERIOD_MS)
        } else {
            None
        });
        let fds: Vec<i32> = std::iter::once(drain.ready_fd())
            .chain(wake.map(|w| w.as_raw_fd()))
            .collect();
        sys::poll_fds(&fds, max_wait_ms.max(0))?;
        for round in drain.take_rounds() {
            self.take(&round)?;
            if let Some(d) = self.drain.as_ref() {
                d.processed(round);
            }
        }
        Ok(())
    }

    /// Takes one drained round: into the spool while the merge is deferred
    /// (`recorder/spool.rs`), else read at once.
    fn take(&mut self, round: &Round) -> Result<(), RecorderError> {
        if self.spool.is_some() {
            return self.spool_round(round);
        }
        let chunks: Vec<(usize, &[u8])> = round.chunks().collect();
        self.process(round.start_ns(), round.held_from(), &chunks)
    }

    /// Reads one drained round (started at `start_ns`, nothing stamped
    /// from `held_from` on released, its `chunks`) and writes what it lets
    /// the merge release.
    fn process(
        &mut self,
        start_ns: u64,
        held_from: u64,
        chunks: &[(usize, &[u8])],
    ) -> Result<(), RecorderError> {
        // Records the eBPF programs still batched may be older than the
        // round before: nothing past the oldest of them is released.
        let watermark = self.last_round_start.min(held_from);
        self.read_round(chunks)?;
        self.last_round_start = start_ns;
        self.release(watermark)?;
        self.read_bpf(watermark)
    }

    /// Tags dispatches from the thread work area at `area` from now on, and
    /// keeps its threads' idle counts current. Call after [`Recorder::enable`].
    /// `tree_dir` is where the agents write their call-tree dumps
    /// (`tree-<pid>.bin`); [`Recorder::finish`] embeds them.
    pub fn attach_work_area(&mut self, area: Arc<WorkArea>, tree_dir: PathBuf) {
        self.work_area = Some(LiveWorkArea::new(area, &self.cpus, self.start_ns));
        self.tree_dir = Some(tree_dir);
    }

    fn release(&mut self, watermark: u64) -> Result<(), RecorderError> {
        if self.bpf.is_some() && self.work_area.is_none() {
            // The eBPF records wait undecoded: they and the merge's
            // records leave in one time order.
            let mut held = Vec::new();
            self.merge
                .release_sourced(watermark, |t, source, m| held.push((t, source, m)));
            return self.release_streamed(watermark, held);
        }
        let Recorder {
            merge,
            output,
            names,
            work_area,
            summary,
            stop_ns,
            written,
            ..
        } = self;
        let Some(out) = output.as_mut() else {
            merge.release(watermark, |_, _| {});
            return Ok(());
        };
        let mut emit = Emit {
            out,
            names,
            work_area: work_area.as_mut(),
            stopped: stop_ns.is_some(),
            written,
            result: Ok(()),
        };
        merge.release(watermark, |t, m| emit.emit(summary, t, m));
        let result = emit.result;
        self.after_release(watermark, result)
    }

    /// The flight recorder's policy and ring, or the file's flush, after
    /// a release to `watermark` that ended with `result`.
    pub(super) fn after_release(
        &mut self,
        watermark: u64,
        mut result: Result<(), RecorderError>,
    ) -> Result<(), RecorderError> {
        let Some(out) = self.output.as_mut() else {
            return result;
        };
        if result.is_ok() {
            let now = sys::monotonic_ns();
            if let Some(f) = out.flight.as_mut() {
                if watermark != u64::MAX {
                    f.released_to = f.released_to.max(watermark);
                    if f.policy.wants_pressure() {
                        f.policy.observe_pressure(now, crate::procfs::pressure());
                    }
                    if let Some(fired) = f.policy.evaluate(watermark) {
                        f.fired.push(fired);
                    }
                }
                let open = out.writer.bytes_written() - f.cut_at_bytes;
                if f.ring.due(now, open as usize) {
                    result = out.cut(now);
                    self.after_flight_cut();
                }
            } else if now.saturating_sub(out.flushed_at) >= FLUSH_NS {
                out.flushed_at = now;
                result = out.writer.flush().map_err(RecorderError::from);
            }
        }
        result
    }

    /// After a cut of the flight recorder's ring: the JVMs' waits it no
    /// longer reaches are forgotten, the walks so far noted at the new
    /// segment's start.
    fn after_flight_cut(&mut self) {
        let (Some(f), Some(j)) = (
            self.output.as_mut().and_then(|o| o.flight.as_mut()),
            self.java.as_mut(),
        ) else {
            return;
        };
        j.waits.forget_before(f.ring.oldest_ns());
        f.ring.set_java_walks(&j.counts);
    }

    /// The file being written (`<path>.RANDOM.partial` until
    /// [`Recorder::finish`]).
    pub fn partial_path(&self) -> Option<PathBuf> {
        self.output.as_ref()?.staged.as_ref().map(|s| s.temp_path())
    }

    /// Records why JVMs ran without call trees (their agents' notes) in
    /// the end record.
    pub fn set_agent_notes(&mut self, notes: Vec<String>) {
        self.summary.agent_notes = notes;
    }

    /// Records what went wrong reading the JVMs' flight recordings in the
    /// end record.
    pub fn set_java_notes(&mut self, notes: Vec<String>) {
        self.summary.java_notes = notes;
    }

    /// Processes whose main thread took a new name since the last call, in
    /// the order seen: every `exec` (and `prctl` renames of a main thread).
    /// What drives the search for new JVMs, instead of scanning `/proc`.
    pub fn take_renamed_processes(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.renamed)
    }

    /// Dispatches written so far (spooled, while the merge is deferred).
    pub fn dispatches_written(&self) -> u64 {
        if let Some(s) = self.spool.as_ref() {
            return s.switches;
        }
        self.summary.dispatches
    }

    /// Adds, per CPU, the records the kernel counted as lost but never
    /// reported in the ring (a ring full at the very end: the kernel writes
    /// its LOST record only once a later record fits), as lost at `time`.
    fn count_unreported_losses(&mut self, time: u64) {
        let mut first = 0;
        for (slot, &owner) in self.ring_owner.iter().enumerate() {
            let counted: Option<u64> = self.events[first..=owner]
                .iter()
                .map(PerfEvent::lost_records)
                .sum();
            first = owner + 1;
            let Some(r) = self.rings.get_mut(slot) else {
                continue;
            };
            let missing = counted.unwrap_or(0).saturating_sub(r.lost);
            if missing > 0 {
                r.lost += missing;
                self.merge.push(
                    slot,
                    time,
                    Merged::Lost(Lost {
                        time,
                        cpu: r.cpu,
                        count: missing,
                    }),
                );
            }
        }
    }

    /// Records lost so far, per CPU.
    pub fn lost_per_cpu(&self) -> Vec<u64> {
        self.rings.iter().map(|r| r.lost).collect()
    }

    /// Ends the window: disables the events, writes what the rings still
    /// held and the JVMs' call trees. Records that belong after the stream
    /// ([`Recorder::write_after`]) can follow; [`Recorder::finish`] then
    /// ends the file. Calling it again does nothing.
    pub fn stop(&mut self) -> Result<(), RecorderError> {
        if self.stop_ns.is_some() {
            return Ok(());
        }
        for e in &self.events {
            e.disable()?;
        }
        let stop_ns = sys::monotonic_ns();
        if let Some(b) = self.bpf.as_mut() {
            self.summary.kernel_cost = b.cost.finish(stop_ns, &b.rec);
            b.rec.detach();
        }
        self.stop_ns = Some(stop_ns);
        self.summary.stop_ns = stop_ns;
        self.summary.proc_stat_stop = procfs::proc_stat().unwrap_or_default();
        if let Some(drain) = self.drain.take() {
            self.summary.drain_priority = drain.priority();
            drain.finish();
            loop {
                // Read before taking: the rounds taken after the last one
                // was sent are all there is.
                let done = drain.finished();
                for round in drain.take_rounds() {
                    self.take(&round)?;
                    drain.processed(round);
                }
                if done {
                    break;
                }
                sys::poll_fds(&[drain.ready_fd()], 100)?;
            }
        }
        self.replay_spool()?;
        self.count_unreported_losses(stop_ns);
        // The drain's last pass emptied the eBPF rings (the programs were
        // detached before it): every loss, then everything left; the pairs
        // still waiting will find no other half.
        if let Some(b) = self.bpf.as_mut() {
            bpf::write_losses(b, &mut self.rings, &mut self.merge, stop_ns)
                .map_err(RecorderError::Bpf)?;
        }
        self.release(u64::MAX)?;
        self.read_bpf(u64::MAX)?;
        self.embed_trees()
    }

    /// Writes an untimed record after the stream ([`Recorder::stop`] first):
    /// what JVMs reported of themselves once the window closed.
    pub fn write_after(&mut self, record: &Record) -> Result<(), RecorderError> {
        self.stop()?;
        let out = self.output.as_mut().ok_or_else(|| RecorderError::Io {
            what: "no output was begun for",
            path: PathBuf::from("the recording"),
            source: std::io::Error::other("write_after called before begin"),
        })?;
        out.writer.write(record)?;
        Ok(())
    }

    /// What to add to a wall-clock time (ns since the epoch) to get the
    /// recording's clock, as read when the window started.
    pub fn clock_offset_ns(&self) -> i64 {
        self.start_ns as i64 - self.start_unix_ns as i64
    }

    /// Says what names the JVMs' frames and why (`RunInfo::java_frames`,
    /// `java_frames_why`; before [`Recorder::begin`]).
    pub fn set_java_frames(&mut self, modes: String, why: String) {
        self.java_frames = (modes, why);
    }

    /// Whether the dispatches are recorded by the eBPF programs (which
    /// read the Java threads' anchors, [`Recorder::walk_java_frames`]).
    pub fn is_bpf(&self) -> bool {
        self.event_source.source == source::Recorded::Bpf
    }

    /// Says whether JVMs run with their flight recorder (before
    /// [`Recorder::begin`]): the recording's readers then look for their
    /// waits after the stream.
    pub fn set_java_waits(&mut self, on: bool) {
        self.java_waits = on;
    }

    /// Ends the window: disables the events, drains the rings, writes the
    /// end record and renames the file to its final path.
    pub fn finish(
        mut self,
        stop_reason: &str,
        exit_code: Option<i32>,
    ) -> Result<(PathBuf, RunSummary), RecorderError> {
        self.stop()?;
        if let Some(j) = self.java.take() {
            self.summary.java_walks = Some(j.counts.clone());
            // The waits the walks showed, after the stream, as a flight
            // recorder's are (`recorder/vm_waits.rs`).
            let end = self.summary.stop_ns;
            for r in j.waits.records(end) {
                self.write_after(&r)?;
            }
        }
        self.summary.stop_reason = stop_reason.to_string();
        self.summary.exit_code = exit_code;
        self.summary.lost_per_cpu = self.lost_per_cpu();
        self.summary.late_events = self.written.1;
        let out = self.output.take().ok_or_else(|| RecorderError::Io {
            what: "no output was begun for",
            path: PathBuf::from("the recording"),
            source: std::io::Error::other("finish called before begin"),
        })?;
        // The stacks' addresses are named now, after the program's window.
        let mut addrs: Vec<u64> = self
            .kernel_stacks
            .keys()
            .flat_map(|k| k.iter().copied())
            .collect();
        addrs.sort_unstable();
        addrs.dedup();
        let mut out = out;
        if !addrs.is_empty() {
            out.writer
                .write(&Record::KernelSymbols(Box::new(crate::ksyms::name(&addrs))))?;
        }
        let summary = self.summary.clone();
        let Some(staged) = out.staged.take() else {
            return Err(RecorderError::Io {
                what: "a flight recorder has no file to finish",
                path: PathBuf::from("the recording"),
                source: std::io::Error::other("finish called in flight mode"),
            });
        };
        let partial = staged.temp_path();
        let result = out
            .writer
            .finish(&summary)
            .map_err(RecorderError::from)
            .and_then(|w| {
                let Sink::File(w) = w else {
                    return Err(RecorderError::Io {
                        what: "a flight recorder has no file to finish",
                        path: partial.clone(),
                        source: std::io::Error::other("finish called in flight mode"),
                    });
                };
                w.into_inner()
                    .map_err(|e| RecorderError::Io {
                        what: "cannot write",
                        path: partial.clone(),
                        source: e.into_error(),
                    })?
                    .sync_all()
                    .map_err(|source| RecorderError::Io {
                        what: "cannot write",
                        path: partial.clone(),
                        source,
                    })
            })
            .and_then(|()| {
                staged.commit().map_err(|source| RecorderError::Io {
                    what: "cannot rename the recording to",
                    path: staged.path(),
                    source,
                })
            });
        // On an error the partial file stays: it holds the recording up to
        // its last complete record.
        result?;
        Ok((staged.path(), summary))
    }
}

impl Drop for Recorder {
    /// Dropped before [`Recorder::finish`] (an error mid-run): what was
    /// written stays in the partial file, flushed as far as the disk takes it.
    fn drop(&mut self) {
        // The drain thread polls the events' descriptors: stop it first.
        drop(self.drain.take());
        // What was spooled goes into the partial file, as far as it can.
        let _ = self.replay_spool();
        if let Some(mut out) = self.output.take() {
            let _ = out.writer.flush();
        }
    }
}
