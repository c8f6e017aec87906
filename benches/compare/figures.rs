//! The figures read from the tools' outputs (a benchmark's `Total time:`,
//! idleflow's summary line, perf's lost chunks, a Java example's `ms N`,
//! the agent's tree dump) and the median the tables report.
//!
//! Invariant: each reader parses the words its tool prints, as printed;
//! a figure that must be there and is not panics with the output it read.

use std::path::Path;

pub fn total_time(stdout: &str) -> f64 {
    stdout
        .lines()
        .find_map(|l| {
            let l = l.trim();
            l.strip_prefix("Total time:")
                .and_then(|r| r.split_whitespace().next())
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or_else(|| panic!("no `Total time:` in {stdout}"))
}

pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

pub fn lost_from_summary(stderr: &str) -> u64 {
    // "idleflow: N dispatches, M wakeups in S s, L lost; ..."
    stderr
        .split(", ")
        .find_map(|p| {
            p.strip_suffix(" lost")
                .or_else(|| p.split(" lost").next().filter(|_| p.contains(" lost")))
        })
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(u64::MAX)
}

/// perf's "Processed N events and lost M chunks!" warning, as M.
pub fn perf_lost_chunks(stderr: &str) -> u64 {
    stderr
        .split("lost ")
        .skip(1)
        .filter_map(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// The program's own "ms N" figure from its output.
pub fn program_ms(stdout: &str) -> f64 {
    let w: Vec<&str> = stdout.split_whitespace().collect();
    w.iter()
        .position(|x| *x == "ms")
        .and_then(|i| w.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no `ms N` in {stdout}"))
}

/// Method entries the agent counted in its final tree dump under `trees`.
pub fn entries_in_dump(trees: &Path) -> u64 {
    let f = std::fs::read_dir(trees)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "json"))
        .expect("a tree dump");
    let d: idleflow_format::TreeDump = serde_json::from_slice(&std::fs::read(f).unwrap()).unwrap();
    d.threads
        .iter()
        .flat_map(|t| &t.nodes)
        .map(|n| n.calls)
        .sum()
}
