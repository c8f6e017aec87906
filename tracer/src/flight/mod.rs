//! The flight recorder (`record --flight`): the recording kept in memory as
//! a ring of segments bounded by age and bytes, and dumps of the ring's
//! window written as ordinary recordings when a trigger fires.
//!
//! A segment is a run of records exactly as the writer encoded them for a
//! file, cut at a drain batch: the writer forgets its stack-copy references
//! at each cut, so a segment needs nothing written before it except the
//! delta chain's previous time (its `base_ns`), the threads' names, the
//! processes' executable mappings and the kernel stacks it names. Those the
//! [`directory`] keeps for every thread and process that the ring's window
//! may mention. A dump ([`Window::write`]) is then: the header and run
//! information with `start_ns` = the first segment's base, the directory's
//! THREAD, MODULE_MAP and KERNEL_STACK records at that time, the segments
//! as they are kept (one compressed BLOCK record each), the kernel symbols
//! of their stacks, and an END record that says which trigger fired
//! ([`idleflow_format::FlightDump`]).
//!
//! Invariants: segments are consecutive (each one's base is the previous
//! one's last time), so any run of the newest ones is one delta chain; the
//! ring drops only whole segments, oldest first; a window is a snapshot
//! (segments are shared, immutable), so writing a dump never holds the
//! recorder up and never changes the ring.
//!
//! Modules: [`directory`] (names, mappings, stacks of the window),
//! [`policy`] (the triggers: their language and their evaluation on the
//! record stream), this file (segments, the ring, windows, dumps).

pub mod directory;
pub mod policy;

use std::collections::VecDeque;
use std::ffi::OsStr;
use std::io::{BufWriter, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use idleflow_format::files::{Dir, Staged};
use idleflow_format::{
    FlightDump, FormatError, JavaWalkCounts, KernelStack, ModuleMap, ProcStatCpu, Record, RunInfo,
    RunSummary, ThreadInfo, WalkedStack, Writer,
};
use rustc_hash::FxHashSet;

use crate::ksyms::KernelNamer;
use directory::Directory;

/// A segment is cut at the first drain batch after it spans this long, ns.
pub const SEGMENT_NS: u64 = 1_000_000_000;

/// … or holds this many bytes.
pub const SEGMENT_BYTES: usize = 8 << 20;

/// How long and how big the ring may grow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlightLimits {
    /// Keep the segments of the last this many ns (`--flight`).
    pub keep_ns: u64,
    /// … and this many more (`--tail`): a dump is written this long after
    /// its trigger and reaches `keep_ns` back from the trigger.
    pub tail_ns: u64,
    /// … and at most this many bytes of them (`--flight-bytes`).
    pub max_bytes: u64,
}

/// What the writer hands over: into the open segment, or (before the first
/// cut) nowhere: the header and run information are written again for each
/// dump.
#[derive(Debug, Default)]
pub struct SegmentSink {
    bytes: Vec<u8>,
    open: bool,
}

impl SegmentSink {
    /// From now on, bytes go into the open segment.
    pub fn open(&mut self) {
        self.open = true;
    }

    /// The open segment's bytes, taken (the next segment starts empty).
    pub fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.bytes)
    }
}

impl std::io::Write for SegmentSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.open {
            self.bytes.extend_from_slice(buf);
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// One closed segment.
#[derive(Debug)]
pub struct Segment {
    /// The delta chain's time before its first record.
    pub base_ns: u64,
    /// Its last record's time (the next segment's base).
    pub end_ns: u64,
    /// The stream was complete up to here when it was cut (≥ `end_ns`).
    pub until_ns: u64,
    /// Its records, encoded, then compressed (LZ4, its length first): the
    /// delta-coded stream of one second shrinks about threefold.
    pub compressed: Vec<u8>,
    /// Their length before compression.
    pub raw_len: usize,
    /// The kernel stacks its records name.
    pub stack_ids: Vec<u64>,
    /// The walked Java stacks its records name.
    pub walked_ids: Vec<u64>,
    /// The recorder's Java walks so far when it was opened (`None`: no
    /// walks).
    pub java_walks: Option<JavaWalkCounts>,
    /// `/proc/stat`'s idle counters when it was opened.
    pub proc_stat: Vec<ProcStatCpu>,
    /// Its dispatches and wake-ups.
    pub dispatches: u64,
    /// Its wake-ups.
    pub wakeups: u64,
    /// Records the kernel dropped in it, per CPU (in `RunInfo::cpus` order).
    pub lost_per_cpu: Vec<u64>,
}

/// The open segment's counts.
#[derive(Debug, Default)]
struct Open {
    base_ns: u64,
    opened_ns: u64,
    stack_ids: FxHashSet<u64>,
    walked_ids: FxHashSet<u64>,
    java_walks: Option<JavaWalkCounts>,
    proc_stat: Vec<ProcStatCpu>,
    dispatches: u64,
    wakeups: u64,
    lost_per_cpu: Vec<u64>,
}

/// The ring: closed segments, the open one's counts, and the directory.
#[derive(Debug)]
pub struct FlightRing {
    limits: FlightLimits,
    /// `RunInfo::cpus`, for the per-CPU losses.
    cpus: Vec<u32>,
    segments: VecDeque<Arc<Segment>>,
    bytes: u64,
    open: Open,
    directory: Directory,
    /// Segments dropped since the recorder started (for the logs).
    dropped: u64,
}

impl FlightRing {
    /// An empty ring whose first segment starts at `start_ns`.
    pub fn new(
        limits: FlightLimits,
        cpus: &[u32],
        start_ns: u64,
        proc_stat: Vec<ProcStatCpu>,
    ) -> Self {
        FlightRing {
            limits,
            cpus: cpus.to_vec(),
            segments: VecDeque::new(),
            bytes: 0,
            open: Open {
                base_ns: start_ns,
                opened_ns: start_ns,
                proc_stat,
                lost_per_cpu: vec![0; cpus.len()],
                ..Default::default()
            },
            directory: Directory::default(),
            dropped: 0,
        }
    }

    /// The ring's limits.
    pub fn limits(&self) -> FlightLimits {
        self.limits
    }

    /// Bytes held in closed segments.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Segments dropped for age or size so far.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Takes note of a record the writer just wrote into the open segment.
    pub fn observe(&mut self, r: &Record) {
        match r {
            Record::Dispatch(_) => self.open.dispatches += 1,
            Record::Wakeup(_) => self.open.wakeups += 1,
            Record::SwitchStack(s) | Record::WakeStack(s) => {
                self.open.stack_ids.insert(s.stack);
            }
            Record::SwitchJavaStack(s) | Record::WakeJavaStack(s) => {
                self.open.walked_ids.insert(s.stack);
            }
            Record::Lost(l) => {
                if let Some(i) = self.cpus.iter().position(|&c| c == l.cpu) {
                    self.open.lost_per_cpu[i] += l.count;
                }
            }
            _ => {}
        }
        self.directory.observe(r);
    }

    /// Whether the open segment should be cut now (`now_ns`, its bytes).
    pub fn due(&self, now_ns: u64, open_bytes: usize) -> bool {
        open_bytes > 0
            && (now_ns.saturating_sub(self.open.opened_ns) >= SEGMENT_NS
                || open_bytes >= SEGMENT_BYTES)
    }

    /// Closes the open segment with `bytes` (everything the writer handed
    /// over since the last cut; its last record at `end_ns`, the stream
    /// complete up to `until_ns`), opens the next
    /// at `now_ns`, and drops what is older than the limits allow.
    pub fn cut(
        &mut self,
        bytes: Vec<u8>,
        end_ns: u64,
        until_ns: u64,
        now_ns: u64,
        proc_stat: Vec<ProcStatCpu>,
    ) {
        let open = std::mem::replace(
            &mut self.open,
            Open {
                base_ns: end_ns,
                opened_ns: now_ns,
                proc_stat,
                lost_per_cpu: vec![0; self.cpus.len()],
                ..Default::default()
            },
        );
        if !bytes.is_empty() || open.dispatches > 0 {
            let mut stack_ids: Vec<u64> = open.stack_ids.into_iter().collect();
            stack_ids.sort_unstable();
            let mut walked_ids: Vec<u64> = open.walked_ids.into_iter().collect();
            walked_ids.sort_unstable();
            let compressed = lz4_flex::compress_prepend_size(&bytes);
            self.bytes += compressed.len() as u64;
            self.segments.push_back(Arc::new(Segment {
                base_ns: open.base_ns,
                end_ns,
                until_ns: until_ns.max(end_ns),
                compressed,
                raw_len: bytes.len(),
                stack_ids,
                walked_ids,
                java_walks: open.java_walks,
                proc_stat: open.proc_stat,
                dispatches: open.dispatches,
                wakeups: open.wakeups,
                lost_per_cpu: open.lost_per_cpu,
            }));
        } else {
            // Nothing in it: the next one starts where it started.
            self.open.base_ns = open.base_ns;
            self.open.proc_stat = open.proc_stat;
            self.open.java_walks = open.java_walks;
        }
        let oldest_kept = end_ns.saturating_sub(self.limits.keep_ns + self.limits.tail_ns);
        while let Some(first) = self.segments.front() {
            let too_old = first.end_ns < oldest_kept;
            let too_big = self.bytes > self.limits.max_bytes && self.segments.len() > 1;
            if !(too_old || too_big) {
                break;
            }
            self.bytes -= first.compressed.len() as u64;
            self.segments.pop_front();
            self.dropped += 1;
        }
        let from = self.segments.front().map_or(end_ns, |s| s.base_ns);
        self.directory.forget_before(from);
        let named: FxHashSet<u64> = self
            .segments
            .iter()
            .flat_map(|s| s.walked_ids.iter().copied())
            .collect();
        self.directory.forget_walked_but(&named);
    }

    /// Where the ring's oldest segment begins (the open one's start when
    /// none is closed).
    pub fn oldest_ns(&self) -> u64 {
        self.segments
            .front()
            .map_or(self.open.base_ns, |s| s.base_ns)
    }

    /// Takes note of the recorder's Java walks so far, at the open
    /// segment's start (a dump says its window's walks).
    pub fn set_java_walks(&mut self, counts: &JavaWalkCounts) {
        self.open.java_walks = Some(counts.clone());
    }

    /// The closed segments that reach past `from_ns`, with what a dump of
    /// them needs from the directory.
    pub fn window(&self, from_ns: u64) -> Window {
        let segments: Vec<Arc<Segment>> = self
            .segments
            .iter()
            .filter(|s| s.end_ns >= from_ns)
            .cloned()
            .collect();
        let base_ns = segments.first().map_or(self.open.base_ns, |s| s.base_ns);
        let mut ids: Vec<u64> = segments
            .iter()
            .flat_map(|s| s.stack_ids.iter().copied())
            .collect();
        ids.sort_unstable();
        ids.dedup();
        let mut walked: Vec<u64> = segments
            .iter()
            .flat_map(|s| s.walked_ids.iter().copied())
            .collect();
        walked.sort_unstable();
        walked.dedup();
        Window {
            base_ns,
            threads: self.directory.threads_at(base_ns),
            maps: self.directory.maps_at(base_ns),
            stacks: self.directory.stacks(&ids),
            walked: self.directory.walked(&walked),
            after: Vec::new(),
            java_walks: None,
            segments,
            proc_stat_end: self.open.proc_stat.clone(),
        }
    }
}

/// A snapshot of the ring to dump: everything [`Window::write`] needs.
#[derive(Debug)]
pub struct Window {
    /// The first segment's base: the dump's start.
    pub base_ns: u64,
    threads: Vec<ThreadInfo>,
    maps: Vec<ModuleMap>,
    stacks: Vec<KernelStack>,
    /// The walked Java stacks its records name.
    walked: Vec<WalkedStack>,
    /// What follows the stream (the JVMs' waits read from their
    /// structures: [`Window::follow_with`]).
    after: Vec<Record>,
    /// The Java walks of the window (its end record's).
    java_walks: Option<JavaWalkCounts>,
    segments: Vec<Arc<Segment>>,
    /// `/proc/stat`'s idle counters when the last segment was cut.
    proc_stat_end: Vec<ProcStatCpu>,
}

/// A dump written.
#[derive(Debug, Clone)]
pub struct Dumped {
    /// Its path.
    pub path: PathBuf,
    /// Its size, bytes.
    pub bytes: u64,
    /// Its end record.
    pub summary: RunSummary,
    /// From [`Window::write`]'s call to the rename (a complete file).
    pub latency: std::time::Duration,
}

impl Window {
    /// The window's end: where the stream was complete when its last
    /// segment was cut.
    pub fn end_ns(&self) -> u64 {
        self.segments.last().map_or(self.base_ns, |s| s.until_ns)
    }

    /// Dispatches in the window.
    pub fn dispatches(&self) -> u64 {
        self.segments.iter().map(|s| s.dispatches).sum()
    }

    /// The recorder's Java walks when the window began (`None`: none).
    pub fn java_walks_before(&self) -> Option<&JavaWalkCounts> {
        self.segments.first().and_then(|s| s.java_walks.as_ref())
    }

    /// Has the dump write `records` after the stream (untimed: the JVMs'
    /// waits, as `Recorder::finish` writes them) and `java_walks` in its
    /// end record.
    pub fn follow_with(&mut self, records: Vec<Record>, java_walks: Option<JavaWalkCounts>) {
        self.after = records;
        self.java_walks = java_walks;
    }

    /// Writes the window to `path` (created new and private under a
    /// temporary name beside it, renamed when complete:
    /// `idleflow_format::files`) as an ordinary recording: `info` is the
    /// recorder's run information, `flight` what fired.
    pub fn write(
        &self,
        path: &Path,
        info: &RunInfo,
        flight: FlightDump,
        namer: &KernelNamer,
    ) -> Result<Dumped, DumpError> {
        let (dir, name) = Dir::of(path).map_err(DumpError::Files)?;
        self.write_reusing(&Arc::new(dir), &name, info, flight, namer, |_| None)
    }

    /// [`Window::write`], as `name` in `dir` (opened once by the caller),
    /// into the file `reuse(name)` returns when it returns one: a private
    /// file of the caller's staged to become `name` (a spare whose pages
    /// are already in memory: it is written over from its start and cut to
    /// the dump's length).
    pub fn write_reusing(
        &self,
        dir: &Arc<Dir>,
        name: &OsStr,
        info: &RunInfo,
        flight: FlightDump,
        namer: &KernelNamer,
        reuse: impl FnOnce(&OsStr) -> Option<(std::fs::File, Staged)>,
    ) -> Result<Dumped, DumpError> {
        let started = std::time::Instant::now();
        let path = dir.path().join(name);
        let io = |what: &'static str, p: &Path| {
            let p = p.to_path_buf();
            move |source| DumpError::Io {
                what,
                path: p,
                source,
            }
        };
        let (file, staged) = match reuse(name) {
            Some((mut f, staged)) => {
                f.seek(SeekFrom::Start(0))
                    .map_err(io("cannot write", &staged.temp_path()))?;
                (f, staged)
            }
            None => dir.stage(name).map_err(DumpError::Files)?,
        };
        let partial = staged.temp_path();
        // A dump that cannot be completed (a full disk) leaves nothing: its
        // partial file would hold the space and read as a broken recording.
        let written = self.write_into(file, &partial, info, flight, namer);
        if written.is_err() {
            staged.discard();
        }
        let (file, bytes, summary) = written?;
        staged
            .commit()
            .map_err(io("cannot rename the dump to", &path))?;
        let latency = started.elapsed();
        // Complete once renamed; on the disk a little later (the caller's
        // latency is to the rename).
        file.sync_all().map_err(io("cannot write", &path))?;
        Ok(Dumped {
            path,
            bytes,
            summary,
            latency,
        })
    }

    /// Writes the window into `file` (at `partial`): the file, its bytes
    /// and the summary written.
    fn write_into(
        &self,
        file: std::fs::File,
        partial: &Path,
        info: &RunInfo,
        flight: FlightDump,
        namer: &KernelNamer,
    ) -> Result<(std::fs::File, u64, RunSummary), DumpError> {
        let mut info = info.clone();
        // The window's start, on both clocks: a dump is a run of its own
        // (the history tells runs apart by their start).
        info.start_unix_ns = info
            .start_unix_ns
            .saturating_add(self.base_ns.saturating_sub(info.start_ns));
        info.start_ns = self.base_ns;
        if let Some(first) = self.segments.first() {
            info.proc_stat_start = first.proc_stat.clone();
        }
        let mut w = Writer::new(BufWriter::with_capacity(1 << 20, file), &info)?;
        for t in &self.threads {
            w.write(&Record::Thread(ThreadInfo {
                time: self.base_ns,
                ..t.clone()
            }))?;
        }
        for m in &self.maps {
            w.write(&Record::ModuleMap(Box::new(ModuleMap {
                time: self.base_ns,
                ..m.clone()
            })))?;
        }
        for k in &self.stacks {
            w.write(&Record::KernelStack(Box::new(k.clone())))?;
        }
        for s in &self.walked {
            w.write(&Record::WalkedStack(Box::new(s.clone())))?;
        }
        let mut summary = RunSummary {
            stop_ns: self.end_ns(),
            stop_reason: format!("flight recorder dump: {}", flight.trigger),
            lost_per_cpu: vec![0; info.cpus.len()],
            proc_stat_stop: self.proc_stat_end.clone(),
            ..Default::default()
        };
        for s in &self.segments {
            // Kept compressed: a dump writes half the bytes and decompresses
            // nothing (the reader opens the blocks).
            w.append_compressed(&s.compressed, s.end_ns)?;
            summary.dispatches += s.dispatches;
            summary.wakeups += s.wakeups;
            for (sum, n) in summary.lost_per_cpu.iter_mut().zip(&s.lost_per_cpu) {
                *sum += n;
            }
        }
        for r in &self.after {
            w.write(r)?;
        }
        summary.java_walks = self.java_walks.clone();
        let mut addrs: Vec<u64> = self
            .stacks
            .iter()
            .flat_map(|k| k.ips.iter().copied())
            .collect();
        addrs.sort_unstable();
        addrs.dedup();
        if !addrs.is_empty() {
            w.write(&Record::KernelSymbols(Box::new(namer.name(&addrs))))?;
        }
        summary.flight = Some(flight);
        let file = w
            .finish(&summary)?
            .into_inner()
            .map_err(|e| DumpError::Io {
                what: "cannot write",
                path: partial.to_path_buf(),
                source: e.into_error(),
            })?;
        // A reused file was longer: what follows the end record goes.
        let mut file = file;
        let bytes = file.stream_position().map_err(|source| DumpError::Io {
            what: "cannot write",
            path: partial.to_path_buf(),
            source,
        })?;
        file.set_len(bytes).map_err(|source| DumpError::Io {
            what: "cannot write",
            path: partial.to_path_buf(),
            source,
        })?;
        Ok((file, bytes, summary))
    }
}

/// Why a dump could not be written.
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    /// A file could not be created, written or renamed.
    #[error("{what} {path}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why it failed.
        source: std::io::Error,
    },
    /// Encoding failed.
    #[error("writing the dump")]
    Format(#[from] FormatError),
    /// The dump's file could not be created safely.
    #[error(transparent)]
    Files(idleflow_format::files::FilesError),
}

#[cfg(test)]
mod tests {
    use super::*;
    use idleflow_format::{Dispatch, NodeTag, PrevState, Reader, SwitchStack};

    const S: u64 = 1_000_000_000;

    fn dispatch(time: u64, cpu: u32, prev: u32, next: u32) -> Record {
        Record::Dispatch(Dispatch {
            time,
            cpu,
            prev_tid: prev,
            prev_state: PrevState::Sleeping,
            next_tid: next,
            prev_node: NodeTag::Untraced,
        })
    }

    fn info(start_ns: u64) -> RunInfo {
        RunInfo::minimal(vec![0, 1], start_ns)
    }

    /// Writes `records` through a writer into the ring, cutting after each
    /// second of stream time, as the recorder does.
    fn fill(ring: &mut FlightRing, records: &[Record]) {
        let mut w = Writer::new(SegmentSink::default(), &info(0)).unwrap();
        w.flush().unwrap();
        w.get_mut().open();
        let mut opened = 0;
        for r in records {
            let t = match r {
                Record::Dispatch(d) => d.time,
                Record::SwitchStack(s) => s.time,
                _ => opened,
            };
            if t >= opened + S {
                w.flush().unwrap();
                let bytes = w.get_mut().take();
                ring.cut(bytes, w.last_time(), t, t, vec![]);
                w.forget_copies();
                opened = t;
            }
            w.write(r).unwrap();
            ring.observe(r);
        }
        w.flush().unwrap();
        let bytes = w.get_mut().take();
        let last = w.last_time();
        ring.cut(bytes, last, last, last, vec![]);
    }

    #[test]
    fn the_ring_keeps_the_tail_too_so_a_dump_reaches_its_whole_window_back_from_its_trigger() {
        for tail in [0, 2 * S] {
            let limits = FlightLimits {
                keep_ns: 3 * S,
                tail_ns: tail,
                max_bytes: 1 << 20,
            };
            let mut ring = FlightRing::new(limits, &[0, 1], 0, vec![]);
            // A dispatch every 100 ms for 10 s; a trigger at 7.9 s with a
            // tail of `tail` is written at 9.9 s, reaching back to 4.9 s.
            let records: Vec<Record> = (1..100u64)
                .map(|i| dispatch(i * S / 10, (i % 2) as u32, 7, 0))
                .collect();
            fill(&mut ring, &records);
            let last = 99 * S / 10;
            let w = ring.window(last - tail - 3 * S);
            assert!(
                w.base_ns <= last - tail - 3 * S && w.base_ns + 2 * S >= last - tail - 3 * S,
                "tail {tail}: base {}",
                w.base_ns
            );
        }
    }

    #[test]
    fn the_ring_keeps_whole_segments_of_the_last_seconds_and_a_window_reads_back() {
        let limits = FlightLimits {
            keep_ns: 3 * S,
            tail_ns: 0,
            max_bytes: 1 << 20,
        };
        let mut ring = FlightRing::new(limits, &[0, 1], 0, vec![]);
        let mut records = vec![
            Record::Thread(ThreadInfo {
                time: 0,
                tid: 7,
                pid: 7,
                ppid: 1,
                comm: "worker".into(),
            }),
            Record::KernelStack(Box::new(KernelStack {
                id: 1,
                ips: vec![0xffff_ffff_8100_0000],
            })),
        ];
        // 10 s: a dispatch every 100 ms; the stack interned at 0 s is named
        // again at 9.5 s.
        for i in 1..100u64 {
            records.push(dispatch(i * S / 10, (i % 2) as u32, 7, 0));
            if i == 95 {
                records.push(Record::SwitchStack(SwitchStack {
                    time: i * S / 10,
                    cpu: 1,
                    tid: 7,
                    stack: 1,
                }));
            }
        }
        fill(&mut ring, &records);
        assert!(ring.dropped() >= 5, "dropped {}", ring.dropped());
        let w = ring.window(0);
        // At least the last 3 s, in whole segments of about 1 s.
        assert!(
            w.base_ns >= 5 * S && w.base_ns <= 99 * S / 10 - 3 * S,
            "base {}",
            w.base_ns
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dump.idleflow");
        let d = w
            .write(
                &path,
                &info(0),
                FlightDump {
                    trigger: "signal".into(),
                    ..Default::default()
                },
                &KernelNamer::start().unwrap(),
            )
            .unwrap();
        assert_eq!(d.summary.dispatches, w.dispatches());
        // The segments are in the file as they were kept: compressed.
        let file = std::fs::read(&path).unwrap();
        for s in &w.segments {
            assert!(file
                .windows(s.compressed.len())
                .any(|b| b == &s.compressed[..]));
        }
        // Read back: the delta chain is whole (times as written), the
        // thread is named before its first dispatch, the stack is defined.
        let mut r =
            Reader::new(std::io::BufReader::new(std::fs::File::open(&path).unwrap())).unwrap();
        assert_eq!(r.info().start_ns, w.base_ns);
        let (mut times, mut named, mut stack) = (Vec::new(), false, false);
        while let Some(rec) = r.next_record().unwrap() {
            match rec {
                Record::Thread(t) if t.tid == 7 => named = true,
                Record::KernelStack(k) if k.id == 1 => stack = true,
                Record::Dispatch(d) => {
                    assert!(named, "named first");
                    times.push(d.time);
                }
                Record::SwitchStack(s) => assert!(stack && s.stack == 1),
                _ => {}
            }
        }
        let want: Vec<u64> = (1..100u64)
            .map(|i| i * S / 10)
            .filter(|&t| t > w.base_ns)
            .collect();
        assert_eq!(times, want);
        assert!(stack);
        assert_eq!(
            r.summary().unwrap().flight.as_ref().unwrap().trigger,
            "signal"
        );

        // Written over a longer spare file: the same bytes, nothing after.
        let spare = dir.path().join("spare");
        std::fs::write(&spare, vec![0xaa_u8; file.len() * 2 + 4096]).unwrap();
        let again = dir.path().join("again.idleflow");
        let opened = Arc::new(Dir::open(dir.path()).unwrap());
        let d2 = w
            .write_reusing(
                &opened,
                OsStr::new("again.idleflow"),
                &info(0),
                FlightDump {
                    trigger: "signal".into(),
                    ..Default::default()
                },
                &KernelNamer::start().unwrap(),
                |name| {
                    let file = opened.open_own(OsStr::new("spare")).unwrap();
                    Some((file, Staged::adopt(&opened, "spare".into(), name.into())))
                },
            )
            .unwrap();
        assert_eq!(d2.bytes, file.len() as u64);
        assert_eq!(std::fs::read(&again).unwrap(), file);
        assert!(!spare.exists());
    }
}
