//! The ground truth of the Java frames read from a JVM's structures: in a
//! recording made with both `--java vm` and the flight recorder (`record
//! --java vm,waits --wait-threshold 0`), each wait the structures named
//! (`JVM_WAITS` source `vm`, ids from 2^40) is paired with the flight
//! recorder's wait of the same thread that holds its switch-out, and their
//! innermost five Java frames are compared, weighted by the wait's length.
//! Leading `java.lang.Thread.sleep…` frames are left out on both sides
//! (JDK 21+'s flight recorder names a sleep from the method that sleeps),
//! and the structures' stack is compared from the flight recorder's first
//! frame where it holds it (its socket and file events are emitted from
//! the streams' methods, NIO's frames below them left out).
//! Only the structures' waits inside the flight recording's span count
//! (JFR takes a second or two to start in a JVM), and of the program's
//! threads (not the flight recorder's own, which it does not record).
//!
//! `cargo run -p idleflow-hotspot --example agreement -- REC [--json]`
//! prints, per JVM: the weight paired, the share whose innermost five
//! frames agree by method, and by method and line, the share the flight
//! recorder had no wait for, and the commonest disagreements.

use std::collections::BTreeMap;

use idleflow_format::{JavaStack, JavaWait, Reader, Record};
use rustc_hash::FxHashMap;

/// Where the structures' ids begin (`tracer/src/recorder/vm_waits.rs`).
const VM_IDS: u64 = 1 << 40;
/// The frames compared.
const DEPTH: usize = 5;
/// How deep in the structures' stack the flight recorder's first frame is
/// looked for.
const ALIGN_WITHIN: usize = 16;

/// One JVM's comparison, ns of wait.
#[derive(Debug, Default)]
struct Agreement {
    vm_ns: u64,
    paired_ns: u64,
    methods_ns: u64,
    lines_ns: u64,
    /// (vm frames, jfr frames) → ns, where the methods differ.
    differ: BTreeMap<(String, String), u64>,
    /// Reason → ns of the structures' waits no flight recorder's held.
    unpaired: BTreeMap<String, u64>,
}

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(path) = args.next() else {
        eprintln!("usage: agreement REC [--json]");
        std::process::exit(2);
    };
    let json = args.next().as_deref() == Some("--json");
    let by_jvm = match compare(&path) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("agreement: {path}: {e}");
            std::process::exit(1);
        }
    };
    if json {
        let rows: Vec<String> = by_jvm
            .iter()
            .map(|(pid, a)| {
                format!(
                    "{{\"pid\":{pid},\"vm_ns\":{},\"paired_ns\":{},\"methods_ns\":{},\"lines_ns\":{}}}",
                    a.vm_ns, a.paired_ns, a.methods_ns, a.lines_ns
                )
            })
            .collect();
        println!("[{}]", rows.join(","));
        return;
    }
    let pct = |n: u64, of: u64| 100.0 * n as f64 / of.max(1) as f64;
    for (pid, a) in &by_jvm {
        println!(
            "JVM {pid}: {:.1} ms waited (vm) in its flight recording's span, {:.1} % of it paired with one of its waits; \
             of that, innermost {DEPTH} frames agree: {:.1} % by method, {:.1} % by method and line",
            a.vm_ns as f64 / 1e6,
            pct(a.paired_ns, a.vm_ns),
            pct(a.methods_ns, a.paired_ns),
            pct(a.lines_ns, a.paired_ns)
        );
        let unpaired: Vec<String> = a
            .unpaired
            .iter()
            .map(|(r, ns)| format!("{r} {:.1} %", pct(*ns, a.vm_ns)))
            .collect();
        if !unpaired.is_empty() {
            println!("  not paired: {}", unpaired.join(", "));
        }
        let mut differ: Vec<_> = a.differ.iter().collect();
        differ.sort_by(|x, y| y.1.cmp(x.1));
        for ((vm, jfr), ns) in differ.into_iter().take(3) {
            println!(
                "  {:.1} % differ:\n    vm:  {vm}\n    jfr: {jfr}",
                pct(*ns, a.paired_ns)
            );
        }
    }
}

/// Per JVM, how the structures' waits agree with the flight recorder's.
fn compare(path: &str) -> Result<BTreeMap<u32, Agreement>, String> {
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut r = Reader::new(std::io::BufReader::new(file)).map_err(|e| e.to_string())?;
    let mut symbols: FxHashMap<(u32, u64), String> = FxHashMap::default();
    let mut stacks: FxHashMap<(u32, u64), JavaStack> = FxHashMap::default();
    let (mut vm, mut jfr): (Vec<JavaWait>, Vec<JavaWait>) = (Vec::new(), Vec::new());
    // Per JVM, the span its flight recording covers, and its flight
    // recorder's own threads (which it does not record).
    let mut spans: FxHashMap<u32, (u64, u64)> = FxHashMap::default();
    let mut own: rustc_hash::FxHashSet<u32> = Default::default();
    while let Some(rec) = r.next_record().map_err(|e| e.to_string())? {
        match rec {
            Record::JavaSymbol(s) => {
                symbols.insert((s.pid, s.id), s.text);
            }
            Record::JavaStack(s) => {
                stacks.insert((s.pid, s.id), *s);
            }
            Record::JvmWaits(j) if j.source == "jfr" => {
                spans.insert(j.pid, (j.recorded_from_ns, j.recorded_to_ns));
                own.extend(j.own_tids.iter().copied());
            }
            Record::JavaWait(w) if w.stack >= VM_IDS => vm.push(w),
            Record::JavaWait(w) if w.stack != 0 => jfr.push(w),
            _ => {}
        }
    }
    if vm.is_empty() || jfr.is_empty() {
        return Err(format!(
            "{} waits from the structures, {} from flight recorders: record with \
             `--java vm,waits --wait-threshold 0`",
            vm.len(),
            jfr.len()
        ));
    }
    // The flight recorder's waits by thread, in time order.
    let mut by_tid: FxHashMap<u32, Vec<JavaWait>> = FxHashMap::default();
    for w in jfr {
        by_tid.entry(w.tid).or_default().push(w);
    }
    for v in by_tid.values_mut() {
        v.sort_by_key(|w| w.start);
    }
    // The innermost DEPTH frames of `w`'s stack from its `from`th (with
    // `from` ALIGN_WITHIN: all of the first ALIGN_WITHIN).
    let frames = |w: &JavaWait, lines: bool, from: usize| -> Vec<String> {
        let depth = if from == ALIGN_WITHIN {
            ALIGN_WITHIN
        } else {
            DEPTH
        };
        let from = if from == ALIGN_WITHIN { 0 } else { from };
        stacks
            .get(&(w.pid, w.stack))
            .map(|s| {
                let method = |f: &idleflow_format::JavaFrame| {
                    let m = symbols.get(&(w.pid, f.method)).map_or("?", String::as_str);
                    m.split_once('(').map_or(m, |(m, _)| m).to_string()
                };
                s.frames
                    .iter()
                    // JDK 21+'s flight recorder names a sleep from the
                    // sleeping method, without Thread.sleep's own frames.
                    .skip_while(|f| method(f).starts_with("java.lang.Thread.sleep"))
                    .skip(from)
                    .take(depth)
                    .map(|f| {
                        if lines {
                            format!("{}:{}", method(f), f.line)
                        } else {
                            method(f)
                        }
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut out: BTreeMap<u32, Agreement> = BTreeMap::new();
    for w in &vm {
        let Some(&(from, to)) = spans.get(&w.pid) else {
            continue;
        };
        if w.start < from || w.end() > to || own.contains(&w.tid) {
            continue;
        }
        let a = out.entry(w.pid).or_default();
        a.vm_ns += w.duration;
        // The flight recorder's wait that holds this switch-out.
        let Some(j) = by_tid.get(&w.tid).and_then(|v| {
            let i = v.partition_point(|j| j.start <= w.start);
            v[..i].last().filter(|j| j.end() > w.start)
        }) else {
            *a.unpaired.entry(w.reason.words().to_string()).or_default() += w.duration;
            continue;
        };
        a.paired_ns += w.duration;
        // The flight recorder's stack starts at the method its event is
        // emitted from (the socket streams, not NIO's internals below them):
        // the structures' stack is compared from that frame on.
        let jfr_m = frames(j, false, 0);
        let from = frames(w, false, ALIGN_WITHIN)
            .iter()
            .position(|m| Some(m) == jfr_m.first())
            .unwrap_or(0);
        let vm_m = frames(w, false, from);
        if vm_m == jfr_m {
            a.methods_ns += w.duration;
            if frames(w, true, from) == frames(j, true, 0) {
                a.lines_ns += w.duration;
            }
        } else {
            *a.differ
                .entry((vm_m.join(" ← "), jfr_m.join(" ← ")))
                .or_default() += w.duration;
        }
    }
    Ok(out)
}
