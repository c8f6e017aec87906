//! Does the recorder's merge and the dispatch accounting cost the same per
//! record on 2 CPUs and on 128? Feeds both with synthetic per-CPU streams
//! (the same number of records for every CPU count) and prints, per CPU
//! count, records per second and the memory they held at their peak (a
//! counting allocator). Not a timed test: figures for `docs/PERFORMANCE.md`
//! (issue 18).
//!
//! ```text
//! cargo bench --bench scale [-- --millions M]     # ROUND_NS=N: drain rounds of N ns (default: 5 ms or the drain's 1 MiB budget)
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use idleflow_accounting::Accounting;
use idleflow_format::{Dispatch, NodeTag, PrevState, IDLE_TID};
use idleflow_tracer::merge::Merge;

/// The system allocator, counting the bytes held and their peak.
struct Counting;

static HELD: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged; the
// counters only observe sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let held = HELD.fetch_add(l.size(), Ordering::Relaxed) + l.size();
        PEAK.fetch_max(held, Ordering::Relaxed);
        // SAFETY: the caller's contract is passed on as is.
        unsafe { System.alloc(l) }
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        HELD.fetch_sub(l.size(), Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Measures `f`: (seconds, peak bytes held above what was held before).
fn measure(f: impl FnOnce()) -> (f64, usize) {
    let base = HELD.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let t = Instant::now();
    f();
    (
        t.elapsed().as_secs_f64(),
        PEAK.load(Ordering::Relaxed) - base,
    )
}

/// One CPU's stream: its threads alternate with the idle task, a switch
/// every few µs, the CPUs' clocks offset so that rounds interleave.
fn stream(cpu: u32, n: usize, threads_per_cpu: u32) -> Vec<Dispatch> {
    let mut t = 1_000 + u64::from(cpu) * 7;
    (0..n)
        .map(|i| {
            t += 3_000 + (i as u64 * 13 + u64::from(cpu)) % 2_000;
            let tid = 1_000 + cpu * threads_per_cpu + (i as u32 / 2) % threads_per_cpu;
            let (prev, next) = if i % 2 == 0 {
                (IDLE_TID, tid)
            } else {
                (tid, IDLE_TID)
            };
            Dispatch {
                time: t,
                cpu,
                prev_tid: prev,
                prev_state: if prev == IDLE_TID {
                    PrevState::Unknown
                } else {
                    PrevState::Sleeping
                },
                next_tid: next,
                prev_node: NodeTag::Untraced,
            }
        })
        .collect()
}

/// The last record's time over all streams.
fn end_of(streams: &[Vec<Dispatch>]) -> u64 {
    streams
        .iter()
        .filter_map(|s| s.last())
        .map(|d| d.time)
        .max()
        .unwrap_or(0)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let millions: f64 = args
        .iter()
        .position(|a| a == "--millions")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(4.0);
    let total = (millions * 1e6) as usize;
    println!("| CPUs | records | round | merge: records/s | merge: peak memory | accounting: records/s | accounting: peak memory |");
    println!("|---|---|---|---|---|---|---|");
    for ncpu in [2u32, 16, 64, 128] {
        let per_cpu = total / ncpu as usize;
        let streams: Vec<Vec<Dispatch>> = (0..ncpu).map(|c| stream(c, per_cpu, 8)).collect();
        // Rounds as the drain makes them: every CPU's records of 5 ms, or
        // less where that would pass its round budget of 1 MiB of ring
        // bytes (about 25 k records of 40 bytes).
        let per_round_ns = (end_of(&streams) / per_cpu.max(1) as u64).max(1);
        let budget_ns = 25_000 / u64::from(ncpu) * per_round_ns;
        let round_ns: u64 = std::env::var("ROUND_NS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(budget_ns.clamp(1, 5_000_000));
        let end = end_of(&streams);
        let mut merged: Vec<Dispatch> = Vec::with_capacity(total);
        let (merge_s, merge_peak) = measure(|| {
            let mut m: Merge<Dispatch> = Merge::default();
            let mut next = vec![0usize; streams.len()];
            let mut watermark = 0;
            let mut round_end = round_ns;
            while watermark <= end {
                for (c, s) in streams.iter().enumerate() {
                    while next[c] < s.len() && s[next[c]].time < round_end {
                        let d = s[next[c]];
                        m.push(c, d.time, d);
                        next[c] += 1;
                    }
                }
                m.release(watermark, |_, d| merged.push(d));
                watermark = round_end - round_ns;
                round_end += round_ns;
            }
            m.release(u64::MAX, |_, d| merged.push(d));
        });
        assert_eq!(
            merged.len(),
            per_cpu * ncpu as usize,
            "the merge keeps every record"
        );
        assert!(
            merged.windows(2).all(|w| w[0].time <= w[1].time),
            "in time order"
        );
        let cpus: Vec<u32> = (0..ncpu).collect();
        let mut idle = 0;
        let (acc_s, acc_peak) = measure(|| {
            let mut a = Accounting::new(&cpus, 0);
            for d in &merged {
                a.dispatch(d);
            }
            idle = a.finish(end).len();
        });
        let n = merged.len() as f64;
        println!(
            "| {ncpu} | {:.1} M | {:.2} ms | {:.1} M/s | {:.1} MB | {:.1} M/s | {:.2} MB |",
            n / 1e6,
            round_ns as f64 / 1e6,
            n / merge_s / 1e6,
            merge_peak as f64 / 1e6,
            n / acc_s / 1e6,
            acc_peak as f64 / 1e6
        );
        std::hint::black_box(idle);
    }
}
