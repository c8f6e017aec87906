//! Two runs compared path by path (`idleflow diff`): which merged
//! idle-causing paths took a larger or smaller share of the idle, and
//! whether that is more than the runs' own noise.
//!
//! Paths are matched by what stays the same from run to run
//! ([`PathSummary::key`]: the process's name, the reason and the frames'
//! kinds and names, not their lines, the thread ids or the object's
//! address). Each run ([`RunSummary`]: one recording, or the history's runs
//! pooled) has its idle split into time windows ([`crate::pass::windows`]); a path's share in a run is its idle
//! over all CPUs' idle, summed over the windows. The noise is the windows'
//! own: both runs' windows are resampled with replacement ([`REPLICATES`]
//! times, a fixed seed, so the same inputs give the same answer) and the
//! change of share recomputed; a change is reported only when the central
//! [`INTERVAL_PCT`] % of those changes excludes zero and it is at least
//! `min_change` points. The changes come with the largest change of idle
//! per second first: the path whose idle grew before those whose share
//! moved only because of it.
//!
//! Invariants: memory is the distinct paths × the windows (at most
//! [`crate::pass::MAX_WINDOWS`] each).

use rustc_hash::FxHashMap;
use serde::Serialize;

use crate::compare::summary::{PathSummary, RecordingMode, RunSummary};
use crate::pass::Analysis;
use crate::path::FoldOptions;
use crate::path::PathFrame;
use crate::reasons::Reason;
use crate::share::pct;

/// Bootstrap replicates.
pub const REPLICATES: usize = 1000;
/// The central part of the replicates a change must leave zero out of, %.
pub const INTERVAL_PCT: f64 = 99.0;
/// Seed of the resampling.
const SEED: u64 = 0x1d1e_f10e;

/// One run of a comparison.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Side {
    /// The recording.
    pub file: String,
    /// Window length, ns.
    pub duration_ns: u64,
    /// CPUs.
    pub cpus: usize,
    /// All CPUs' idle, ns.
    pub idle_ns: u64,
    /// `idle_ns` as % of the CPUs' time.
    pub idle_pct: f64,
    /// Time windows the noise was measured over, and their width, ns.
    pub windows: usize,
    /// Width of each window, ns.
    pub window_ns: u64,
}

/// A path's figures in one run.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct PathFigures {
    /// Idle that followed it, ns.
    pub idle_ns: u64,
    /// Idle per second of window, ns/s (CPU-nanoseconds idle per second).
    pub idle_per_s_ns: u64,
    /// Its share of all CPUs' idle, %.
    pub share_pct: f64,
    /// Dispatches to idle through it.
    pub dispatches: u64,
}

/// One path's change (JSON `changes`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PathChange {
    /// The process's name.
    pub process: String,
    /// Why the threads waited.
    pub reason: Reason,
    /// Its threads (or pools), most dispatches first, in the run where it
    /// had more idle.
    pub threads: Vec<String>,
    /// The frames, innermost first (the newer run's where both have it).
    pub frames: Vec<PathFrame>,
    /// The index in `frames` of the program's own first frame.
    pub program_frame: Option<usize>,
    /// In the base run (zeros where it did not appear).
    pub base: PathFigures,
    /// In the new run.
    pub new: PathFigures,
    /// `new.share_pct - base.share_pct`, points.
    pub change_pts: f64,
    /// The central [`INTERVAL_PCT`] % of the resampled changes, points.
    pub interval_pts: (f64, f64),
    /// Replicates whose change has the same sign as `change_pts`, %.
    pub confidence_pct: f64,
    /// Beyond noise and at least `min_change` points.
    pub significant: bool,
}

/// A comparison of two runs (`idleflow diff --format json`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Diff {
    /// The run compared against.
    pub base: Side,
    /// The run compared.
    pub new: Side,
    /// The smallest change reported, points of share.
    pub min_change_pts: f64,
    /// The interval a change must leave zero out of, %.
    pub interval_pct: f64,
    /// Changes beyond noise, the largest change of idle per second first.
    pub changes: Vec<PathChange>,
    /// Paths whose share moved within noise (or less than the minimum),
    /// the largest change of share first.
    pub within_noise: Vec<PathChange>,
    /// The runs' recording modes, where they differ (absent: the same, or
    /// not known for a run kept before modes were): their frames differ
    /// by how they were recorded, so a path new in one run and gone in the
    /// other may be the same code named differently.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modes_differ: Option<ModesDiffer>,
}

/// Two runs' recording modes, in words ([`RecordingMode::words`]).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ModesDiffer {
    /// The base run's.
    pub base: String,
    /// The new run's.
    pub new: String,
}

/// The two modes, where both are known and they differ.
fn modes_differ(base: &RecordingMode, new: &RecordingMode) -> Option<ModesDiffer> {
    let unknown = RecordingMode::default();
    (*base != unknown && *new != unknown && base != new).then(|| ModesDiffer {
        base: base.words(),
        new: new.words(),
    })
}

/// The windows of `path` in a run of `n` windows (zeros where it is
/// absent).
fn windows_of(path: Option<&PathSummary>, n: usize) -> Vec<u64> {
    let mut v = path.map(|p| p.windows.clone()).unwrap_or_default();
    v.resize(n, 0);
    v
}

/// The share (%) of `part` in `whole` over the windows `pick` chooses.
fn share(part: &[u64], whole: &[u64], pick: impl Iterator<Item = usize>) -> f64 {
    let (mut p, mut w) = (0u128, 0u128);
    for i in pick {
        p += u128::from(part[i]);
        w += u128::from(whole[i]);
    }
    if w == 0 {
        0.0
    } else {
        100.0 * p as f64 / w as f64
    }
}

fn figures(p: Option<&PathSummary>, duration_ns: u64) -> PathFigures {
    p.map_or_else(PathFigures::default, |p| PathFigures {
        idle_ns: p.idle_ns,
        idle_per_s_ns: p.idle_per_s_ns(duration_ns),
        share_pct: p.share_pct,
        dispatches: p.dispatches,
    })
}

fn side(r: &RunSummary) -> Side {
    Side {
        file: r.file.clone(),
        duration_ns: r.duration_ns,
        cpus: r.cpus,
        idle_ns: r.idle_ns,
        idle_pct: r.idle_pct(),
        windows: r.idle_windows.len(),
        window_ns: r.window_ns,
    }
}

/// Compares `new` with `base`: every path of either, matched, with its
/// change of share and whether it is beyond the runs' noise and at least
/// `min_change_pts` points.
pub fn diff(base: &RunSummary, new: &RunSummary, min_change_pts: f64) -> Diff {
    // Paths that match are one on each side (a run can hold two that differ
    // only in what matching ignores).
    let (base, new) = (&base.merged(), &new.merged());
    let (nb, nn) = (base.idle_windows.len(), new.idle_windows.len());
    let mut pairs: FxHashMap<String, (Option<&PathSummary>, Option<&PathSummary>)> =
        FxHashMap::default();
    for p in &base.paths {
        pairs.entry(p.key()).or_default().0 = Some(p);
    }
    for p in &new.paths {
        pairs.entry(p.key()).or_default().1 = Some(p);
    }
    let mut rng = fastrand::Rng::with_seed(SEED);
    // The resampled windows, shared by every path so that paths of one
    // replicate see the same windows.
    let picks: Vec<(Vec<usize>, Vec<usize>)> = (0..REPLICATES)
        .map(|_| {
            (
                (0..nb).map(|_| rng.usize(..nb.max(1))).collect(),
                (0..nn).map(|_| rng.usize(..nn.max(1))).collect(),
            )
        })
        .collect();
    let tail = (100.0 - INTERVAL_PCT) / 200.0;
    let mut all: Vec<PathChange> = pairs
        .into_values()
        .map(|(b, n)| {
            let (wb, wn) = (windows_of(b, nb), windows_of(n, nn));
            let observed =
                share(&wn, &new.idle_windows, 0..nn) - share(&wb, &base.idle_windows, 0..nb);
            let mut changes: Vec<f64> = picks
                .iter()
                .map(|(pb, pn)| {
                    share(&wn, &new.idle_windows, pn.iter().copied())
                        - share(&wb, &base.idle_windows, pb.iter().copied())
                })
                .collect();
            changes.sort_by(f64::total_cmp);
            let at = |q: f64| changes[((changes.len() - 1) as f64 * q).round() as usize];
            let interval = (at(tail), at(1.0 - tail));
            let agree = changes
                .iter()
                .filter(|c| c.signum() == observed.signum() && **c != 0.0)
                .count();
            let (fb, fn_) = (figures(b, base.duration_ns), figures(n, new.duration_ns));
            let change_pts = fn_.share_pct - fb.share_pct;
            let shown = match (b, n) {
                (Some(b), Some(n)) if b.idle_ns > n.idle_ns => (n, b),
                (Some(_), Some(n)) => (n, n),
                (Some(b), None) => (b, b),
                (None, Some(n)) => (n, n),
                (None, None) => unreachable!("every key came from a path"),
            };
            PathChange {
                process: shown.0.process.clone(),
                reason: shown.0.reason.clone(),
                threads: shown.1.threads.clone(),
                frames: shown.0.frames.clone(),
                program_frame: shown.0.program_frame,
                base: fb,
                new: fn_,
                change_pts,
                interval_pts: interval,
                confidence_pct: pct(agree as u64, changes.len() as u64),
                significant: (interval.0 > 0.0 || interval.1 < 0.0)
                    && change_pts.abs() >= min_change_pts,
            }
        })
        .collect();
    all.sort_by(|x, y| {
        y.change_pts
            .abs()
            .total_cmp(&x.change_pts.abs())
            .then_with(|| x.frames.cmp(&y.frames))
    });
    let (mut changes, within_noise): (Vec<_>, Vec<_>) =
        all.into_iter().partition(|c| c.significant);
    // What grew or shrank the most idle per second first: a path whose
    // share moved only because another one's idle grew comes after it.
    changes.sort_by(|x, y| {
        idle_change(y)
            .abs()
            .total_cmp(&idle_change(x).abs())
            .then_with(|| y.change_pts.abs().total_cmp(&x.change_pts.abs()))
    });
    Diff {
        base: side(base),
        new: side(new),
        min_change_pts,
        interval_pct: INTERVAL_PCT,
        changes,
        within_noise,
        modes_differ: modes_differ(&base.mode, &new.mode),
    }
}

/// A path's change of idle per second, ns/s.
fn idle_change(c: &PathChange) -> f64 {
    c.new.idle_per_s_ns as f64 - c.base.idle_per_s_ns as f64
}

/// [`differential_folded`] of two analyses' merged paths, by idle time,
/// pool threads merged (what `diff --svg` draws).
pub fn differential_of(base: &Analysis, new: &Analysis) -> std::io::Result<Vec<String>> {
    let fold = FoldOptions {
        dispatches: false,
        merge_threads: true,
    };
    let folded = |a| {
        use crate::path::Fold;
        crate::sections::idle_paths::MergedPaths::all(a).folded_lines(fold)
    };
    differential_folded(&folded(base), &folded(new))
}

/// Folded stacks of both runs' merged paths, matched by their names, as
/// `inferno`'s differential flame graph reads them (`stack base new`).
pub fn differential_folded(base: &[String], new: &[String]) -> std::io::Result<Vec<String>> {
    let (b, n) = (base.join("\n"), new.join("\n"));
    let mut out = Vec::new();
    inferno::differential::from_readers(
        inferno::differential::Options {
            normalize: false,
            strip_hex: true,
        },
        b.as_bytes(),
        n.as_bytes(),
        &mut out,
    )?;
    Ok(String::from_utf8_lossy(&out)
        .lines()
        .map(str::to_string)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn share_sums_parts_over_wholes_of_the_chosen_windows() {
        let part = [1, 2, 3, 0];
        let whole = [10, 10, 10, 10];
        assert_eq!(share(&part, &whole, 0..4), 15.0);
        assert_eq!(share(&part, &whole, [2, 2].into_iter()), 30.0);
        assert_eq!(share(&part, &[0; 4], 0..4), 0.0);
    }
}
