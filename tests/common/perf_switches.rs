//! perf's own switch records (`perf record -e dummy --switch-events -a`),
//! the independent reference the recording tests hold idleflow's
//! dispatches to.

use super::under_perf;

/// One `PERF_RECORD_SWITCH_CPU_WIDE` line of `perf script --show-switch-events -F tid,cpu,time`.
pub struct PerfSwitch {
    /// The task the record was written for (its context).
    pub tid: u32,
    pub cpu: u32,
    pub time: u64,
    /// OUT (switch-out) or IN.
    pub out: bool,
    /// The other task (next for OUT, prev for IN).
    pub other_tid: u32,
}

pub fn perf_switches(script: &str) -> Vec<PerfSwitch> {
    script
        .lines()
        .filter_map(|line| {
            let out = if line.contains("SWITCH_CPU_WIDE OUT") {
                true
            } else if line.contains("SWITCH_CPU_WIDE IN") {
                false
            } else {
                return None;
            };
            let mut w = line.split_whitespace();
            let tid: u32 = w.next()?.parse().ok()?;
            let cpu: u32 = w
                .next()?
                .trim_matches(|ch| ch == '[' || ch == ']')
                .parse()
                .ok()?;
            let secs: f64 = w.next()?.trim_end_matches(':').parse().ok()?;
            let other = line.rsplit_once("pid/tid:")?.1.trim();
            let other_tid: u32 = other.rsplit_once('/')?.1.trim().parse().ok()?;
            Some(PerfSwitch {
                tid,
                cpu,
                time: (secs * 1e9).round() as u64,
                out,
                other_tid,
            })
        })
        .collect()
}

/// Runs `perf record --switch-events -a` (on our clock) around `work`, and
/// returns what `work` returned with perf's switch records.
pub fn under_perf_switch_records<T>(
    dir: &tempfile::TempDir,
    work: impl FnOnce() -> T,
) -> (T, Vec<PerfSwitch>) {
    let (result, script) = under_perf(
        dir,
        &["-e", "dummy", "--switch-events"],
        &["--show-switch-events", "-F", "tid,cpu,time"],
        work,
    );
    (result, perf_switches(&script))
}

/// Switch-ins from idle per CPU, as perf's own switch records saw them in
/// `[start_ns, stop_ns)` (perf run with `-k CLOCK_MONOTONIC`, our clock).
pub fn perf_switch_ins_from_idle(
    switches: &[PerfSwitch],
    start_ns: u64,
    stop_ns: u64,
) -> Vec<(u32, u64)> {
    let mut counts = std::collections::BTreeMap::new();
    for s in switches {
        if !s.out && s.other_tid == 0 && s.tid != 0 && s.time >= start_ns && s.time < stop_ns {
            *counts.entry(s.cpu).or_insert(0u64) += 1;
        }
    }
    counts.into_iter().collect()
}
