//! What one pass over a recording yields ([`Analysis`]), the options
//! that choose its window and views, and the questions the report asks of
//! it (the JVMs, process names, which threads it shows). The pass that
//! fills it is the parent module's.
//!
//! Invariant: an [`Analysis`] is complete once [`Analysis::run_observed`]
//! returns; nothing in it refers back to the recording.

use std::io::{Read, Seek};

use hdrhistogram::Histogram;
use idleflow_accounting::Accounting;
use idleflow_format::{FormatError, PrevState, Reader, Record, RunInfo, RunSummary};
use rustc_hash::{FxHashMap, FxHashSet};

use super::*;

/// Why a thread made a CPU idle, counted per (CPU, thread).
#[derive(Debug, Clone, Default)]
pub struct IdleCause {
    /// Dispatches to idle that followed the thread leaving.
    pub dispatches: u64,
    /// Idle time that followed, ns.
    pub idle_ns: u64,
    /// `dispatches` split by the thread's state when it left, indexed by [`PrevState::code`].
    pub by_state: [u64; PrevState::ALL.len()],
}

/// Everything one pass collects.
#[derive(Debug)]
pub struct Analysis {
    /// The recording's run information.
    pub info: RunInfo,
    /// How the recording ended.
    pub summary: RunSummary,
    /// The accounting after the whole stream.
    pub accounting: Accounting,
    /// Complete idle intervals per CPU (ns), in `info.cpus` order.
    pub intervals: Vec<Histogram<u64>>,
    /// Idle causes: (CPU index, tid) → counts.
    pub causes: FxHashMap<(usize, u32), IdleCause>,
    /// Latest known (pid, comm) of each thread.
    pub names: FxHashMap<u32, (u32, String)>,
    /// Each process's own name, as the kernel last named its main thread
    /// (a JVM's recorder names that thread `main`, the kernel `java`).
    pub process_names: FxHashMap<u32, String>,
    /// The processes whose threads the report shows (targets and their
    /// descendants); empty means all.
    pub shown_pids: FxHashSet<u32>,
    /// Dispatches read.
    pub dispatches: u64,
    /// Wakeups read.
    pub wakeups: u64,
    /// Of those, raised in an interrupt.
    pub interrupt_wakeups: u64,
    /// Wakeups with the waker's kernel stack (every sampled wake-up has
    /// one).
    pub wakeups_with_stacks: u64,
    /// Record kinds this version does not know, skipped.
    pub unknown_records: u64,
    /// The JVM agents' call trees, as the views asked for.
    pub views: BuiltViews,
    /// What the views were built with.
    pub view_options: ViewOptions,
    /// What the dispatch stream adds to each call-tree node.
    pub node_idle: NodeAttribution,
    /// idleflow's own threads (the recorder's, the JVM agents', the JVMs'
    /// flight recorder threads it turned on): never reported as causes of
    /// idle, shown apart.
    pub tool_tids: FxHashSet<u32>,
    /// Set when the recording ends without its end record (the recorder
    /// was killed, the disk filled up): it is read up to its last complete
    /// record, and the window ends there.
    pub cut_short: Option<CutShort>,
    /// The part of the recording analysed, ns on the recording's clock:
    /// the whole window, or what `--from` / `--to` chose.
    pub window: (u64, u64),
    /// Whether `window` is narrower than the recording (the kernel's
    /// `/proc/stat` readings then do not cover it).
    pub windowed: bool,
    /// The window starts where the program's start-up ended (`--skip-startup`).
    pub after_startup: bool,
    /// The JVMs' waits (their flight recorders), read before the pass.
    pub java: JavaWaits,
    /// What the dispatch stream adds to the JVMs' waits.
    pub java_idle: JavaIdle,
    /// The kernel stacks taken at switch-outs, and what they caused.
    pub kernel: KernelWaits,
    /// What each idle-causing dispatch's merged path is made of.
    pub idle_paths: IdlePathsAcc,
    /// Idle intervals begun by idleflow's own threads and charged to the
    /// dispatch whose idle they interrupted, and their idle (ns).
    pub continued_idle: (u64, u64),
    /// Each idle interval followed down its wait chain to its root.
    pub blame: BlameAcc,
    /// The time windows idle is split into ([`AnalysisOptions::windows`]).
    pub windows: Option<Windows>,
    /// Per CPU slot, its idle per window (with `windows`).
    pub cpu_windows: Vec<Series>,
}

/// Which part of a recording to analyse, in seconds from its start.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Window {
    /// Start, s (`None`: the recording's start).
    pub from_s: Option<f64>,
    /// End, s (`None`: the recording's end).
    pub to_s: Option<f64>,
    /// `from_s` is where the program's start-up ended ([`crate::pass::startup`]).
    pub after_startup: bool,
}

pub(super) fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 2).expect("constant bounds are valid")
}

/// What to analyse and which views to build.
#[derive(Debug, Clone, Default)]
pub struct AnalysisOptions {
    /// The part of the recording.
    pub window: Window,
    /// The call-tree views.
    pub views: ViewOptions,
    /// Also split each path's and each CPU's idle into time windows
    /// ([`crate::pass::windows`]; at most [`MAX_WINDOWS`], at least
    /// [`MIN_WINDOW_NS`] wide): what compares runs by their own noise and
    /// draws idle over time.
    pub windows: bool,
}

/// The most time windows a series keeps.
pub const MAX_WINDOWS: usize = 64;
/// The narrowest time window, ns.
pub const MIN_WINDOW_NS: u64 = 50_000_000;

impl Analysis {
    /// Reads the whole recording from `input`, with the default views.
    pub fn run(input: impl Read + Seek + Send) -> Result<Self, FormatError> {
        Self::run_with_progress(input, &AnalysisOptions::default(), |_| {})
    }

    /// Like [`Analysis::run`], for the part of the recording and the views
    /// `opts` choose, calling `progress` with the bytes read so far every
    /// few hundred thousand records.
    ///
    /// A window is accounted like a recording that started and stopped at
    /// its edges: dispatches, wake-ups and losses outside it are skipped, a
    /// CPU's first dispatch inside it says who had the CPU since the edge —
    /// unless the dispatches before the edge say otherwise (a stream break:
    /// the time from the edge is unknown, as in the whole recording).
    /// Thread names and call trees come from the whole recording; the
    /// trees' own counts (CALLS, BASE, …) are the agent's, for the whole run.
    ///
    /// The call trees (after the dispatches in a recording) are read twice
    /// more once the dispatches are accounted, one thread at a time
    /// ([`crate::pass::call_tree`]): memory never holds a whole dump.
    pub fn run_with_progress(
        input: impl Read + Seek + Send,
        opts: &AnalysisOptions,
        progress: impl FnMut(u64),
    ) -> Result<Self, FormatError> {
        Self::run_observed(input, opts, progress, None)
    }

    /// [`Analysis::run_with_progress`], with one more [`Handler`] of the
    /// caller's, told every event after the pass's own (outputs that
    /// follow time: `export --format perfetto`).
    pub fn run_observed(
        input: impl Read + Seek + Send,
        opts: &AnalysisOptions,
        mut progress: impl FnMut(u64),
        extra: Option<&mut dyn Handler>,
    ) -> Result<Self, FormatError> {
        let mut reader = Reader::new(input)?;
        // Call trees are walked node by node, never held decoded.
        reader.keep_trees_encoded(true);
        let mut pass = Pass::new(&mut reader, opts, extra)?;
        let mut batches = 0u32;
        // The one pass over the dispatches: decoded on a second thread.
        let decoded = std::thread::scope(|scope| {
            crate::pass::ahead::read_ahead(scope, reader, |batch| {
                batches = batches.wrapping_add(1);
                if batches.is_multiple_of(64) {
                    progress(batch.offset);
                }
                for rec in batch.records {
                    pass.record(rec);
                }
            })
        })?;
        let (mut reader, trees_at) = (decoded.reader, decoded.trees_at);
        pass.settle_own_threads();
        let mut a = pass.finish(&reader)?;
        if let Some(at) = trees_at {
            a.views = a.build_views(&mut reader, at)?;
        }
        Ok(a)
    }

    /// The pass's handlers, in the order each event is told to them, and
    /// the [`Context`] they read: the one place a new accumulator is
    /// listed.
    pub(super) fn handlers(&mut self) -> (Context<'_>, [&mut dyn Handler; 5]) {
        let ctx = Context {
            names: &self.names,
            own: &self.tool_tids,
            java: &self.java,
        };
        let handlers: [&mut dyn Handler; 5] = [
            &mut self.java_idle,
            &mut self.kernel,
            &mut self.blame,
            &mut self.node_idle,
            &mut self.idle_paths,
        ];
        (ctx, handlers)
    }

    /// The two passes of [`Views`] over the tree records from `at` on.
    pub(super) fn build_views<R: Read + Seek>(
        &self,
        reader: &mut Reader<R>,
        at: idleflow_format::Position,
    ) -> Result<BuiltViews, FormatError> {
        let mut views = Views::new(self.view_options.clone());
        for pass in 0..2 {
            reader.seek(at)?;
            while let Some(rec) = reader.next_complete_record()? {
                match rec {
                    Record::TreeHead(h) => views.head(&h),
                    // idleflow's own threads (a flight recorder it started)
                    // are never a cause, in the tree either.
                    Record::TreeThreadEncoded(t) if self.tool_tids.contains(&t.tid) => {}
                    Record::TreeThreadEncoded(t) => views.thread(&t, &self.node_idle, &self.java),
                    _ => {}
                }
            }
            if pass == 0 {
                views.end_first_pass();
            }
        }
        Ok(views.build())
    }

    /// Whether `tid` is one of idleflow's own threads, as far as the pass
    /// knows by now (the recorder's, named in the stream; the JVMs' that
    /// worked for it, from their waits record; flight-recorder threads
    /// named after idleflow attached).
    pub(super) fn note_own(&mut self, tid: u32, pid: u32, comm: &str, time: u64) {
        let own = (pid == self.info.tool_pid && pid != 0)
            || (comm.starts_with("JFR ")
                && self
                    .java
                    .jvms
                    .iter()
                    .any(|j| j.pid == pid && j.attached_ns != 0 && time >= j.attached_ns));
        if own {
            self.tool_tids.insert(tid);
        }
    }

    /// The JVMs of the recording (processes with HotSpot's `VM Thread`)
    /// among the shown ones.
    pub fn jvm_pids(&self) -> Vec<u32> {
        let mut jvms: Vec<u32> = self
            .names
            .values()
            .filter(|(pid, comm)| {
                comm == "VM Thread" && (self.shown_pids.is_empty() || self.shown_pids.contains(pid))
            })
            .map(|(pid, _)| *pid)
            .collect();
        jvms.sort_unstable();
        jvms.dedup();
        jvms
    }

    /// The name of process `pid` (`pid N` where unknown).
    pub fn process_name(&self, pid: u32) -> String {
        self.process_names
            .get(&pid)
            .or_else(|| self.names.get(&pid).map(|n| &n.1))
            .map_or_else(|| format!("pid {pid}"), Clone::clone)
    }

    /// Window length, ns.
    pub fn duration_ns(&self) -> u64 {
        self.window.1.saturating_sub(self.window.0)
    }

    /// Whether the report shows thread `tid` (in a target process, or all).
    pub fn shows(&self, tid: u32) -> bool {
        self.shown_pids.is_empty()
            || self
                .names
                .get(&tid)
                .is_some_and(|(pid, _)| self.shown_pids.contains(pid))
    }
}
