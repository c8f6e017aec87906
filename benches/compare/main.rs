//! idleflow against perf, on the same workloads in one run. Not a timed
//! test: it measures and prints Markdown tables for `docs/PERFORMANCE.md`.
//!
//! ```text
//! cargo bench --bench compare -- overhead [--reps N] [--only pipe|messaging]  # recording overhead
//! cargo bench --bench compare -- report [--loops N]       # report throughput and memory
//! cargo bench --bench compare -- synthetic [--millions M] # report memory vs. recording length
//! cargo bench --bench compare -- agent [--reps N]         # JVM agent against an empty agent
//! cargo bench --bench compare -- waits [--reps N]         # JFR waits (record --java waits) against plain
//! ```
//! Needs root and `perf` (Debian's linux-perf).
//!
//! The code, a module per concern beside this file: `run` runs the
//! tools and measures them, `figures` reads their outputs, `sched`,
//! `report` and `java` are the benchmarks (`unwind` and `jitstacks` too:
//! `cargo bench --bench compare -- unwind [--loops N]`, `-- jitstacks
//! [--reps N]`); this file reads the command line.

mod figures;
mod java;
mod report;
mod run;
mod sched;

use java::{agent, jit_stacks, waits};
use report::{report, synthetic};
use sched::{overhead, unwind};

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let flag = |name: &str, default: u64| -> u64 {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    match args.first().map(String::as_str) {
        Some("overhead") => overhead(
            flag("--reps", 5) as usize,
            args.iter()
                .position(|a| a == "--only")
                .and_then(|i| args.get(i + 1))
                .map(String::as_str),
        ),
        Some("report") => report(flag("--loops", 2_700_000)),
        Some("agent") => agent(flag("--reps", 5) as usize),
        Some("waits") => waits(flag("--reps", 5) as usize),
        Some("unwind") => unwind(flag("--loops", 100_000)),
        Some("jitstacks") => jit_stacks(flag("--reps", 5) as usize),
        Some("synthetic") => synthetic(&[1, flag("--millions", 10), 4 * flag("--millions", 10)]),
        _ => eprintln!(
            "usage: cargo bench --bench compare -- overhead|report|synthetic|agent|waits|unwind|jitstacks [options]"
        ),
    }
}
