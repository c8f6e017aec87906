//! A run as comparisons and the history see it: the recording's facts, its
//! idle per time window, and each merged idle-causing path with its idle
//! per window. Made from a [`Report`] (whose analysis kept windows), kept
//! in a history store as it is, pooled from several stored runs into one
//! baseline ([`RunSummary::pooled`]); `diff` and `history check` compare
//! two of them ([`crate::compare::diff`]).
//!
//! Paths are matched across runs by [`PathSummary::key`]: the process's
//! name, the reason and the frames' kinds and names — what stays the same
//! from run to run (not lines, thread ids, addresses, or how the JIT ran a
//! Java method).
//!
//! Invariants: a summary's size is its distinct paths × its windows (at
//! most [`crate::pass::MAX_WINDOWS`] each), never its dispatches; every
//! path's windows are as many as the run's (`idle_windows`), zeros where
//! it had no idle.

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use crate::pass::Analysis;
use crate::path::FrameKind;
use crate::path::{FrameSource, PathFrame};
use crate::reasons::Reason;
use crate::sections::Report;
use crate::share::pct;

/// One run (see the module documentation).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    /// The recording it was made from (its path as given).
    pub file: String,
    /// The recording machine's name.
    pub host: String,
    /// Its kernel release.
    pub kernel: String,
    /// CPUs recorded.
    pub cpus: usize,
    /// The command launched (empty: system-wide or `--pid`).
    pub command: Vec<String>,
    /// Window start, wall clock, ns since the epoch.
    pub start_unix_ns: u64,
    /// Window length, ns.
    pub duration_ns: u64,
    /// All CPUs' idle, ns.
    pub idle_ns: u64,
    /// Width of each time window, ns.
    pub window_ns: u64,
    /// All CPUs' idle per window, ns.
    pub idle_windows: Vec<u64>,
    /// The merged idle-causing paths, most idle first.
    pub paths: Vec<PathSummary>,
    /// How its frames were recorded (empty in runs kept before it was).
    #[serde(default)]
    pub mode: RecordingMode,
}

/// How a run's frames were recorded: which sources named its Java frames
/// and where its stacks were taken. Two runs of different modes differ in
/// their frames, not in their code: a run without Java frames against one
/// with them has every Java wait new in one and gone in the other.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordingMode {
    /// The sources of Java frames the recording had, in a fixed order:
    /// `flight recorder`, `call-tree agent`, `JIT perf maps`.
    pub java_sources: Vec<String>,
    /// Where the stacks were taken: `switch-outs to idle`, `every wait`
    /// or `none` (empty: not known).
    pub stacks: String,
}

impl RecordingMode {
    /// The mode of the run `report` shows.
    pub fn of(report: &Report) -> Self {
        let mut java_sources = Vec::new();
        if let Some(j) = &report.java_waits {
            // Each JVM's waits: its own structures (`vm`) or its flight
            // recorder.
            for (source, said) in [("vm", "JVMs' own structures"), ("jfr", "flight recorder")] {
                if j.jvms.iter().any(|w| w.source == source) {
                    java_sources.push(said.to_string());
                }
            }
        }
        if report.arcflow.is_some() {
            java_sources.push("call-tree agent".to_string());
        }
        let perf_maps = report
            .idle_paths
            .paths
            .iter()
            .any(|p| p.frames.iter().any(|f| f.source == FrameSource::PerfMap));
        if perf_maps {
            java_sources.push("JIT perf maps".to_string());
        }
        let rc = &report.root_causes;
        let stacks = if rc.stacks_at_waits {
            "every wait"
        } else if report.idle_paths.paths.iter().any(|p| {
            p.frames
                .iter()
                .any(|f| matches!(f.source, FrameSource::Stack | FrameSource::Kernel))
        }) {
            "switch-outs to idle"
        } else {
            "none"
        };
        RecordingMode {
            java_sources,
            stacks: stacks.to_string(),
        }
    }

    /// The mode in words: `Java frames from the flight recorder and JIT
    /// perf maps, stacks at switch-outs to idle`.
    pub fn words(&self) -> String {
        let java = if self.java_sources.is_empty() {
            "no Java frames".to_string()
        } else {
            format!("Java frames from the {}", self.java_sources.join(" and "))
        };
        if self.stacks.is_empty() {
            java
        } else {
            format!("{java}, stacks at {}", self.stacks)
        }
    }
}

/// One merged path of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PathSummary {
    /// The process's name.
    pub process: String,
    /// Why the threads waited.
    pub reason: Reason,
    /// Its threads or pools (`handler-* ×4`), most dispatches first.
    pub threads: Vec<String>,
    /// The frames, innermost first.
    pub frames: Vec<PathFrame>,
    /// The index in `frames` of the program's own first frame.
    pub program_frame: Option<usize>,
    /// Idle that followed it, ns.
    pub idle_ns: u64,
    /// Its share of all CPUs' idle, %.
    pub share_pct: f64,
    /// Dispatches to idle through it.
    pub dispatches: u64,
    /// Its idle per window, ns (as many as the run's windows).
    pub windows: Vec<u64>,
}

/// What matches a path across runs: process, reason, and the frames' kinds
/// and names, as one text (`process|reason|kind:name;…`). How a Java
/// method ran (interpreted, compiled, inlined into its caller) is the JIT's
/// choice of the moment, not the code: measured on H2, two runs of the same
/// load inlined `NioSocketImpl.read` in one and not in the other, and the
/// path looked new. Those kinds all match as `Java`.
pub fn match_key(process: &str, reason: &Reason, frames: &[PathFrame]) -> String {
    let mut k = format!("{process}|{reason}|");
    for f in frames {
        let kind = match f.frame.kind {
            FrameKind::Jit | FrameKind::Inlined | FrameKind::Interpreted => FrameKind::Java,
            other => other,
        };
        k.push_str(&format!("{kind:?}:{};", f.frame.name));
    }
    k
}

impl PathSummary {
    /// What matches this path across runs: process, reason, and the frames'
    /// kinds and names, as one text (`process|reason|kind:name;…`).
    pub fn key(&self) -> String {
        match_key(&self.process, &self.reason, &self.frames)
    }

    /// Its idle per second of `duration_ns`, ns/s.
    pub fn idle_per_s_ns(&self, duration_ns: u64) -> u64 {
        (u128::from(self.idle_ns) * 1_000_000_000 / u128::from(duration_ns.max(1))) as u64
    }
}

impl RunSummary {
    /// The summary of a whole recording's `analysis` (of the recording
    /// `file`, made with its time windows); `None` without them.
    pub fn of_analysis(file: impl Into<String>, analysis: &Analysis) -> Option<Self> {
        Self::new(file, &Report::new(analysis, 0))
    }

    /// The summary of `report` (of the recording `file`); `None` when its
    /// analysis kept no windows (`AnalysisOptions::windows`).
    pub fn new(file: impl Into<String>, report: &Report) -> Option<Self> {
        let t = report.idle_over_time.as_ref()?;
        let idle_windows = t.all_cpus();
        let n = idle_windows.len();
        let paths = report
            .idle_paths
            .paths
            .iter()
            .map(|p| {
                let mut windows = p.windows.ns().to_vec();
                windows.resize(n.max(windows.len()), 0);
                PathSummary {
                    process: p.process.clone(),
                    reason: p.reason.clone(),
                    threads: p.threads.iter().map(|t| p.process_threads(t)).collect(),
                    frames: p.frames.clone(),
                    program_frame: p.program_frame,
                    idle_ns: p.idle_ns,
                    share_pct: p.share_pct,
                    dispatches: p.dispatches,
                    windows,
                }
            })
            .collect();
        Some(RunSummary {
            file: file.into(),
            host: report.hostname.clone(),
            kernel: report.kernel_release.clone(),
            cpus: report.cpus,
            command: report.command.clone(),
            start_unix_ns: report.start_unix_ns,
            duration_ns: report.duration_ns,
            idle_ns: report.total.idle_ns,
            window_ns: t.window_ns,
            idle_windows,
            paths,
            mode: RecordingMode::of(report),
        })
    }

    /// All CPUs' idle as % of the CPUs' time.
    pub fn idle_pct(&self) -> f64 {
        pct(
            self.idle_ns,
            self.duration_ns.saturating_mul(self.cpus.max(1) as u64),
        )
    }

    /// The same run with the paths that match ([`PathSummary::key`]) as one.
    pub fn merged(&self) -> RunSummary {
        RunSummary::pooled(std::slice::from_ref(self), self.file.clone())
            .expect("one run pools into one")
    }

    /// Several runs as one baseline: their windows one after the other
    /// (each run's paths zero in the others' windows), durations and idle
    /// summed, shares recomputed; the facts (host, command, …) of the
    /// newest run. `None` for no runs.
    pub fn pooled(runs: &[RunSummary], file: impl Into<String>) -> Option<RunSummary> {
        let newest = runs.iter().max_by_key(|r| r.start_unix_ns)?;
        let total: usize = runs.iter().map(|r| r.idle_windows.len()).sum();
        let mut idle_windows = Vec::with_capacity(total);
        let mut paths: Vec<PathSummary> = Vec::new();
        let mut at: FxHashMap<String, usize> = FxHashMap::default();
        for r in runs {
            let offset = idle_windows.len();
            let n = r.idle_windows.len();
            idle_windows.extend_from_slice(&r.idle_windows);
            for p in &r.paths {
                let i = *at.entry(p.key()).or_insert_with(|| {
                    paths.push(PathSummary {
                        idle_ns: 0,
                        dispatches: 0,
                        windows: vec![0; total],
                        ..p.clone()
                    });
                    paths.len() - 1
                });
                let q = &mut paths[i];
                q.idle_ns = q.idle_ns.saturating_add(p.idle_ns);
                q.dispatches += p.dispatches;
                for (w, ns) in q.windows[offset..offset + n].iter_mut().zip(&p.windows) {
                    *w = w.saturating_add(*ns);
                }
            }
        }
        let idle_ns = idle_windows
            .iter()
            .fold(0u64, |a, b| a.saturating_add(*b))
            .max(runs.iter().fold(0u64, |a, r| a.saturating_add(r.idle_ns)));
        for p in &mut paths {
            p.share_pct = pct(p.idle_ns, idle_ns);
        }
        paths.sort_by(|a, b| {
            b.idle_ns
                .cmp(&a.idle_ns)
                .then_with(|| a.key().cmp(&b.key()))
        });
        Some(RunSummary {
            file: file.into(),
            host: newest.host.clone(),
            kernel: newest.kernel.clone(),
            cpus: newest.cpus,
            command: newest.command.clone(),
            start_unix_ns: newest.start_unix_ns,
            duration_ns: runs.iter().map(|r| r.duration_ns).sum(),
            idle_ns,
            window_ns: runs.iter().map(|r| r.window_ns).max().unwrap_or(0),
            idle_windows,
            paths,
            mode: newest.mode.clone(),
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::path::Frame;
    use crate::path::FrameSource;

    /// A path of thread `name` in `name` (native), `idle` ns spread over
    /// `windows` (shared with the check's tests).
    pub(crate) fn path(name: &str, idle: u64, windows: Vec<u64>) -> PathSummary {
        PathSummary {
            process: "p".into(),
            reason: Reason::Kernel(crate::reasons::KernelReason::Sleep),
            threads: vec![name.into()],
            frames: vec![PathFrame {
                frame: Frame::new(FrameKind::Native, name),
                source: FrameSource::Stack,
                runtime: false,
                module: String::new(),
            }],
            program_frame: Some(0),
            idle_ns: idle,
            share_pct: 0.0,
            dispatches: 1,
            windows,
        }
    }

    /// A run started at `start` (shared with the check's tests).
    pub(crate) fn run(start: u64, idle_windows: Vec<u64>, paths: Vec<PathSummary>) -> RunSummary {
        RunSummary {
            file: "r".into(),
            host: "h".into(),
            kernel: "k".into(),
            cpus: 2,
            command: vec![],
            start_unix_ns: start,
            duration_ns: 1_000,
            idle_ns: idle_windows.iter().sum(),
            window_ns: 500,
            idle_windows,
            paths,
            mode: RecordingMode::default(),
        }
    }

    #[test]
    fn pooled_runs_keep_each_paths_windows_in_its_own_runs_place() {
        let a = run(1, vec![10, 20], vec![path("f", 12, vec![4, 8])]);
        let b = run(
            2,
            vec![30, 40, 50],
            vec![path("g", 60, vec![0, 10, 50]), path("f", 6, vec![6, 0, 0])],
        );
        let p = RunSummary::pooled(&[a, b], "base").unwrap();
        assert_eq!(p.idle_windows, vec![10, 20, 30, 40, 50]);
        assert_eq!(p.idle_ns, 150);
        assert_eq!(p.duration_ns, 2_000);
        let f = p
            .paths
            .iter()
            .find(|x| x.frames[0].frame.name == "f")
            .unwrap();
        assert_eq!(f.windows, vec![4, 8, 6, 0, 0]);
        assert_eq!(f.idle_ns, 18);
        assert!((f.share_pct - 12.0).abs() < 1e-9);
        let g = &p.paths[0];
        assert_eq!(g.frames[0].frame.name, "g");
        assert_eq!(g.windows, vec![0, 0, 0, 10, 50]);
        assert!(RunSummary::pooled(&[], "none").is_none());
    }

    #[test]
    fn a_java_method_matches_however_the_jit_ran_it_but_not_a_native_namesake() {
        let with = |kind| {
            let mut p = path("read", 10, vec![5, 5]);
            p.frames[0].frame.kind = kind;
            p
        };
        let jit = with(FrameKind::Jit);
        assert_eq!(jit.key(), with(FrameKind::Inlined).key());
        assert_eq!(jit.key(), with(FrameKind::Interpreted).key());
        assert_eq!(jit.key(), with(FrameKind::Java).key());
        assert_ne!(jit.key(), with(FrameKind::Native).key());
        // One run holding both forms: one path once merged.
        let r = run(
            1,
            vec![20, 20],
            vec![with(FrameKind::Jit), with(FrameKind::Inlined)],
        );
        let m = r.merged();
        assert_eq!(m.paths.len(), 1);
        assert_eq!(m.paths[0].windows, vec![10, 10]);
        assert!((m.paths[0].share_pct - 50.0).abs() < 1e-9);
    }

    #[test]
    fn a_summary_reads_back_from_its_json() {
        let a = run(7, vec![10, 20], vec![path("f", 12, vec![4, 8])]);
        let text = serde_json::to_string(&a).unwrap();
        let back: RunSummary = serde_json::from_str(&text).unwrap();
        assert_eq!(back, a);
    }
}
