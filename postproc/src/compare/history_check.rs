//! A run checked against its job's history (`idleflow history check`):
//! did a path's share of the idle rise beyond the job's noise?
//!
//! The baseline is chosen as the patent describes: the job's runs at a
//! similar time of day and week first — started within
//! [`SIMILAR_HOURS`] hours of the new run's time of day (UTC), on the same
//! kind of day (weekday or weekend) — where there are at least
//! [`MIN_SIMILAR`] of them, else all the job's runs; the newest
//! [`MAX_BASELINE`] of those. They are pooled into one run
//! ([`RunSummary::pooled`]) and compared with the new one by [`diff`]
//! (both runs' windows resampled: the noise within runs). A path *rose*
//! when that change is beyond noise, at least `min_change` points
//! ([`MIN_RISE_PTS`] by default, [`MIN_RISE_FEW_RUNS_PTS`] while the
//! baseline is too small to measure the spread between runs), and —
//! where the baseline has [`MIN_SPREAD_RUNS`] runs or more, so that the
//! noise between runs can be measured — above the baseline runs' mean
//! share by more than [`SPREAD_SIGMAS`] of their standard deviation.
//!
//! Invariant: the new run itself (same host and start) is never in its
//! own baseline.

use serde::Serialize;

use crate::compare::diff::{diff, Diff, PathChange};
use crate::compare::summary::{match_key, RunSummary};

/// Hours either side of the new run's time of day that count as similar.
pub const SIMILAR_HOURS: u64 = 2;
/// Similar runs needed to use only them.
pub const MIN_SIMILAR: usize = 3;
/// The most runs in a baseline (the newest).
pub const MAX_BASELINE: usize = 20;
/// Baseline runs needed to measure the noise between runs.
pub const MIN_SPREAD_RUNS: usize = 3;
/// How many standard deviations of the runs' shares a rise must exceed.
pub const SPREAD_SIGMAS: f64 = 3.0;
/// The smallest rise that fails a check by default, points of share, when
/// the baseline's runs measure their own spread ([`MIN_SPREAD_RUNS`]).
pub const MIN_RISE_PTS: f64 = 1.0;
/// The same with fewer runs: identical runs' shares differ by more than
/// their windows' noise says (up to 1.34 points in 45 pairs of
/// `examples/c/stages.c`, docs/PERFORMANCE.md), which one or two runs
/// cannot measure.
pub const MIN_RISE_FEW_RUNS_PTS: f64 = 1.5;

const HOUR_NS: u64 = 3_600_000_000_000;
const DAY_NS: u64 = 24 * HOUR_NS;

/// What the run was compared with.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Baseline {
    /// The job.
    pub job: String,
    /// The job's runs in the history (the new run itself left out).
    pub job_runs: usize,
    /// Of those, at a similar time of day and week.
    pub similar_runs: usize,
    /// Whether the baseline is the similar runs only.
    pub similar_only: bool,
    /// The runs pooled into the baseline (their ids, oldest first).
    pub run_ids: Vec<i64>,
}

/// A path that rose, with the noise between the baseline's runs.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Rise {
    /// The change, as `diff` reports it.
    #[serde(flatten)]
    pub change: PathChange,
    /// The path's mean share over the baseline runs, %.
    pub runs_mean_pct: f64,
    /// Their standard deviation, points (`None`: too few runs).
    pub runs_sd_pts: Option<f64>,
}

/// The outcome of a check (`history check --format json`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Check {
    /// What the run was compared with.
    pub baseline: Baseline,
    /// The paths that rose beyond the job's noise, most first: the check
    /// fails when there is any.
    pub rose: Vec<Rise>,
    /// The whole comparison of the pooled baseline with the run.
    pub diff: Diff,
}

/// Whether two instants (ns since the epoch, UTC) are at a similar time
/// of day and on the same kind of day.
fn similar(a: u64, b: u64) -> bool {
    let weekend = |t: u64| {
        // 1970-01-01 was a Thursday: day 0 → Thursday; 2, 3 → Sat, Sun.
        matches!((t / DAY_NS) % 7, 2 | 3)
    };
    let (da, db) = (a % DAY_NS, b % DAY_NS);
    let apart = da.abs_diff(db).min(DAY_NS - da.abs_diff(db));
    weekend(a) == weekend(b) && apart <= SIMILAR_HOURS * HOUR_NS
}

/// Checks `new` against `history` (the job's stored runs with their ids,
/// any order): see the module documentation. `min_change_pts`: the
/// smallest rise that fails, `None` for the default ([`MIN_RISE_PTS`], or
/// [`MIN_RISE_FEW_RUNS_PTS`] when the baseline has fewer than
/// [`MIN_SPREAD_RUNS`] runs). `None` when the history has no run of the
/// job but the new one.
pub fn check(
    job: &str,
    history: &[(i64, RunSummary)],
    new: &RunSummary,
    min_change_pts: Option<f64>,
) -> Option<Check> {
    let mut runs: Vec<&(i64, RunSummary)> = history
        .iter()
        .filter(|(_, r)| !(r.start_unix_ns == new.start_unix_ns && r.host == new.host))
        .collect();
    runs.sort_by_key(|(id, r)| (r.start_unix_ns, *id));
    let similar_runs: Vec<&(i64, RunSummary)> = runs
        .iter()
        .copied()
        .filter(|(_, r)| similar(r.start_unix_ns, new.start_unix_ns))
        .collect();
    let job_runs = runs.len();
    let similar_only = similar_runs.len() >= MIN_SIMILAR;
    let n_similar = similar_runs.len();
    let mut chosen = if similar_only { similar_runs } else { runs };
    if chosen.len() > MAX_BASELINE {
        chosen.drain(..chosen.len() - MAX_BASELINE);
    }
    let base_runs: Vec<RunSummary> = chosen.iter().map(|(_, r)| r.clone()).collect();
    let pooled = RunSummary::pooled(&base_runs, format!("job {job} ({} runs)", base_runs.len()))?;
    let min_change_pts = min_change_pts.unwrap_or(if base_runs.len() >= MIN_SPREAD_RUNS {
        MIN_RISE_PTS
    } else {
        MIN_RISE_FEW_RUNS_PTS
    });
    let d = diff(&pooled, new, min_change_pts);
    let rose = d
        .changes
        .iter()
        .filter(|c| c.change_pts > 0.0)
        .filter_map(|c| {
            let key = match_key(&c.process, &c.reason, &c.frames);
            let shares: Vec<f64> = base_runs
                .iter()
                .map(|r| {
                    r.paths
                        .iter()
                        .filter(|p| p.key() == key)
                        .map(|p| p.share_pct)
                        .sum::<f64>()
                })
                .collect();
            let n = shares.len() as f64;
            let mean = shares.iter().sum::<f64>() / n;
            let sd = (shares.len() >= MIN_SPREAD_RUNS).then(|| {
                (shares.iter().map(|s| (s - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
            });
            let beyond_runs = sd.is_none_or(|sd| c.new.share_pct > mean + SPREAD_SIGMAS * sd);
            beyond_runs.then(|| Rise {
                change: c.clone(),
                runs_mean_pct: mean,
                runs_sd_pts: sd,
            })
        })
        .collect();
    Some(Check {
        baseline: Baseline {
            job: job.to_string(),
            job_runs,
            similar_runs: n_similar,
            similar_only,
            run_ids: chosen.iter().map(|(id, _)| *id).collect(),
        },
        rose,
        diff: d,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::summary::PathSummary;

    const MONDAY_NOON: u64 = (4 * DAY_NS) + 12 * HOUR_NS; // 1970-01-05

    #[test]
    fn similar_times_are_close_in_the_day_and_of_the_same_kind_of_day() {
        assert!(similar(MONDAY_NOON, MONDAY_NOON + 7 * DAY_NS + HOUR_NS));
        assert!(!similar(MONDAY_NOON, MONDAY_NOON + 3 * HOUR_NS));
        // Saturday noon is not like Monday noon.
        assert!(!similar(MONDAY_NOON, MONDAY_NOON + 5 * DAY_NS));
        // Across midnight.
        let late = 4 * DAY_NS + 23 * HOUR_NS;
        assert!(similar(late, late + 2 * HOUR_NS));
    }

    /// A run of 40 windows: path `a` takes `a_pct` % of each window's
    /// idle (± `wobble` points alternating), `b` the rest.
    fn run(start: u64, a_pct: f64, wobble: f64) -> RunSummary {
        let n = 40;
        let total = 1_000_000u64;
        let mut wa = Vec::new();
        let mut wb = Vec::new();
        for i in 0..n {
            let pct = a_pct + if i % 2 == 0 { wobble } else { -wobble };
            let a = (total as f64 * pct / 100.0) as u64;
            wa.push(a);
            wb.push(total - a);
        }
        let path = |name: &str, w: Vec<u64>| {
            let idle: u64 = w.iter().sum();
            PathSummary {
                share_pct: 100.0 * idle as f64 / (total * n as u64) as f64,
                ..crate::compare::summary::tests::path(name, idle, w)
            }
        };
        RunSummary {
            duration_ns: 2_000_000_000,
            window_ns: 50_000_000,
            ..crate::compare::summary::tests::run(
                start,
                vec![total; n],
                vec![path("a", wa), path("b", wb)],
            )
        }
    }

    #[test]
    fn a_rise_beyond_noise_fails_and_the_same_share_passes() {
        let history: Vec<(i64, RunSummary)> = (0..5)
            .map(|i| (i, run(MONDAY_NOON + i as u64 * DAY_NS, 40.0, 3.0)))
            .collect();
        let same = run(MONDAY_NOON + 7 * DAY_NS, 40.0, 3.0);
        let c = check("j", &history, &same, None).unwrap();
        assert!(c.rose.is_empty(), "{:?}", c.rose);
        assert_eq!(c.baseline.job_runs, 5);
        let worse = run(MONDAY_NOON + 7 * DAY_NS, 45.0, 3.0);
        let c = check("j", &history, &worse, None).unwrap();
        assert_eq!(c.rose.len(), 1);
        assert_eq!(c.rose[0].change.threads, vec!["a".to_string()]);
        assert!((c.rose[0].change.change_pts - 5.0).abs() < 0.01);
        assert_eq!(c.rose[0].runs_sd_pts, Some(0.0));
    }

    #[test]
    fn runs_at_a_similar_time_are_the_baseline_when_there_are_enough() {
        // Three Monday-noon runs at 40 %, three Monday-evening runs at 50 %.
        let mut history: Vec<(i64, RunSummary)> = (0..3)
            .map(|i| (i, run(MONDAY_NOON + i as u64 * 7 * DAY_NS, 40.0, 1.0)))
            .collect();
        history.extend((3..6).map(|i| {
            (
                i,
                run(MONDAY_NOON + 6 * HOUR_NS + i as u64 * 7 * DAY_NS, 50.0, 1.0),
            )
        }));
        let noon = run(MONDAY_NOON + 28 * DAY_NS, 40.0, 1.0);
        let c = check("j", &history, &noon, Some(1.0)).unwrap();
        assert!(c.baseline.similar_only);
        assert_eq!(c.baseline.run_ids, vec![0, 1, 2]);
        assert!(c.rose.is_empty());
        // The same run against the evening runs would have been lower,
        // and a run in the evening is held to the evening's share.
        let evening = run(MONDAY_NOON + 6 * HOUR_NS + 42 * DAY_NS, 40.0, 1.0);
        let c = check("j", &history, &evening, Some(1.0)).unwrap();
        assert_eq!(c.baseline.run_ids, vec![3, 4, 5]);
        assert!(c
            .rose
            .iter()
            .all(|r| r.change.threads != vec!["a".to_string()]));
        // Itself is never in its baseline; nothing else: no baseline.
        assert!(check("j", &[(9, noon.clone())], &noon, None).is_none());
    }
}
