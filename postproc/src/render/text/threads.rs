//! The blocked-thread statistics: per thread of the recorded processes
//! (all threads when recorded system-wide), most runtime first, its
//! runtime and time slices, how it spent the window (running, waiting for
//! a CPU, blocked) and the idle that followed its leaving.
//!
//! Invariant: every line fits in 120 columns; names are fitted into the
//! 20-column thread-name column; the text shows `max_threads` of them.

use std::fmt::{self, Write};

use super::layout::{count, fit, ms, COMM, WIDTH};
use crate::sections::Report;

/// The table of the first `max_threads` threads, most runtime first.
pub(super) fn render_threads(o: &mut String, r: &Report, max_threads: usize) -> fmt::Result {
    writeln!(o)?;
    let scope = if r.target_pids.is_empty() {
        "all threads".to_string()
    } else {
        format!("threads of process {:?} and its children", r.target_pids)
    };
    writeln!(
        o,
        "{}",
        fit(
            &format!(
                "## Blocked-thread statistics ({scope}; {} of {} shown, most runtime first)",
                r.threads.len().min(max_threads),
                r.threads.len()
            ),
            WIDTH
        )
    )?;
    writeln!(
        o,
        "(run%, wait%, blk%: running, runnable but waiting for a CPU, blocked; idle ms: idle after its leaving)"
    )?;
    writeln!(
        o,
        "{:>7} {:>7} {:<20} {:>10} {:>8} {:>8} {:>8} {:>7} {:>5} {:>5} {:>5} {:>7} {:>9}",
        "pid",
        "tid",
        "comm",
        "runtime ms",
        "slices",
        "max ms",
        "non-run",
        "preempt",
        "run%",
        "wait%",
        "blk%",
        "to-idle",
        "idle ms"
    )?;
    for t in r.threads.iter().take(max_threads) {
        writeln!(
            o,
            "{:>7} {:>7} {:<20} {:>10} {:>8} {:>8} {:>8} {:>7} {:>5.1} {:>5.1} {:>5.1} {:>7} {:>9}",
            t.pid,
            t.tid,
            fit(&t.comm, COMM),
            ms(t.runtime_ns),
            count(t.timeslices),
            ms(t.max_timeslice_ns),
            count(t.non_runnable),
            count(t.preempted),
            t.running_pct,
            t.runnable_pct,
            t.blocked_pct,
            count(t.idle_dispatches_caused),
            ms(t.idle_ns_caused)
        )?;
    }
    Ok(())
}
