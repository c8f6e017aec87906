//! `report` and `flamegraph` stream the call trees: their peak memory does
//! not grow with the size of the JVM's trees (issue 12, part 3).
//!
//! Synthetic recordings (written with the format's own writer, no kernel
//! needed) of one JVM whose pool threads each have a 20,000-node tree, with
//! a few dispatches to idle tagged with deep nodes; one recording has 8×
//! the threads of the other (3.2 M nodes, as many as Tomcat's under load).
//! Peak memory of each `idleflow` run is its own `ru_maxrss` (wait4).

mod common;

use std::path::Path;
use std::process::Stdio;

use common::{dispatch, idleflow};
use idleflow_format::{
    NodeTag, Record, RunInfo, RunSummary, ThreadTree, TreeHead, TreeNode, Writer, IDLE_TID,
};

const PID: u32 = 500;
const NODES: u64 = 20_000;
const METHODS: u64 = 3_000;
/// Dispatches to idle per thread, each tagged with a deep node.
const IDLE_PER_THREAD: u64 = 4;
/// Idle time after each, ns.
const IDLE_NS: u64 = 1_000;

fn node_id(thread: u64, i: u64) -> u64 {
    (u64::from(PID) << 32) | (thread * NODES + i + 1)
}

/// The deep node the `k`th idle dispatch of a thread is tagged with.
fn tagged(thread: u64, k: u64) -> u64 {
    node_id(thread, NODES - 1 - k * 17)
}

/// Writes a recording of `threads` pool threads; returns the idle time
/// attributed to tree nodes, ns.
fn write_recording(path: &Path, threads: u64) -> u64 {
    let info = RunInfo {
        target_pids: vec![PID],
        ..RunInfo::minimal(vec![0], 1_000)
    };
    let file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut w = Writer::new(file, &info).unwrap();
    let mut t = 2_000;
    let mut idle = 0;
    for th in 0..threads {
        let tid = PID + 1 + th as u32;
        for k in 0..IDLE_PER_THREAD {
            for (prev, next, tag) in [
                (IDLE_TID, tid, NodeTag::Untraced),
                (tid, IDLE_TID, NodeTag::Current(tagged(th, k))),
            ] {
                t += IDLE_NS;
                w.write(&dispatch(t, 0, prev, next, tag)).unwrap();
            }
            idle += IDLE_NS;
        }
    }
    t += IDLE_NS;
    // The last interval is still open at the end: it counts too.
    let stop = t;
    // A 4-ary tree per thread; half the threads run other methods, so the
    // merged view has many distinct paths.
    // Written one thread at a time: this process stays small (a child's
    // peak memory starts from its parent's at the fork).
    w.write(&Record::TreeHead(Box::new(TreeHead {
        pid: PID,
        final_dump: true,
        time_ns: stop,
        methods: (0..METHODS)
            .map(|m| format!("org.apache.tomcat.util.net.NioEndpoint$SocketProcessor{m}.doRun"))
            .collect(),
        threads,
        unmatched_exits: 0,
        agent_tids: vec![],
    })))
    .unwrap();
    for th in 0..threads {
        let thread = {
            let mut levels = vec![0u32; NODES as usize];
            let nodes = (0..NODES)
                .map(|i| {
                    let parent = (i > 0).then(|| (i - 1) / 4);
                    let level = parent.map_or(0, |p| levels[p as usize] + 1);
                    levels[i as usize] = level;
                    TreeNode {
                        id: node_id(th, i),
                        parent_id: parent.map_or(0, |p| node_id(th, p)),
                        method: if i == 0 {
                            u32::MAX
                        } else {
                            ((i + (th % 2) * 1_000) % METHODS) as u32
                        },
                        level,
                        calls: 1 + i % 3,
                        callees: i % 4,
                        base_ns: 1_000 + i,
                        mmax_ns: 900 + i,
                        ao: 0,
                        ab: 0,
                        dip: 0,
                        idle: 0,
                    }
                })
                .collect();
            ThreadTree {
                pid: PID,
                tid: PID + 1 + th as u32,
                name: format!("http-nio-8080-exec-{}", th + 1),
                nodes,
            }
        };
        w.write(&Record::TreeThread(Box::new(thread))).unwrap();
    }
    w.finish(&RunSummary {
        stop_ns: stop,
        ..Default::default()
    })
    .unwrap();
    idle
}

/// Runs `idleflow ARGS`, stdout to `out`; returns its peak memory, bytes.
// The child is reaped by wait4, which std does not know of.
#[allow(clippy::zombie_processes)]
fn peak_rss(args: &[&str], out: &Path) -> u64 {
    let child = idleflow()
        .args(args)
        .stdout(Stdio::from(std::fs::File::create(out).unwrap()))
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut status = 0;
    // SAFETY: rusage is plain data, written by wait4.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child; the pointers are valid for the call.
    let r = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(r, child.id() as i32, "wait4");
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "idleflow {args:?} failed: status {status}"
    );
    usage.ru_maxrss as u64 * 1024
}

#[test]
fn report_and_flamegraph_memory_does_not_grow_with_the_trees() {
    let dir = tempfile::tempdir().unwrap();
    let mut peaks: Vec<Vec<u64>> = Vec::new();
    for threads in [20u64, 160] {
        let rec = dir.path().join(format!("big-{threads}.idleflow"));
        let idle = write_recording(&rec, threads);
        let size = std::fs::metadata(&rec).unwrap().len();
        let rec = rec.to_str().unwrap();
        let json = dir.path().join("r.json");
        let svg = dir.path().join("f.svg");
        let per_thread = dir.path().join("p.json");
        let svg_arg = svg.to_str().unwrap();
        let runs = [
            peak_rss(
                &["report", "--format", "json", "--view", "tree", rec],
                &json,
            ),
            peak_rss(
                &[
                    "report",
                    "--format",
                    "json",
                    "--view",
                    "tree",
                    "--per-thread",
                    rec,
                ],
                &per_thread,
            ),
            peak_rss(
                &["flamegraph", "--view", "tree", rec, "-o", svg_arg],
                &dir.path().join("f.out"),
            ),
        ];
        eprintln!(
            "{threads} threads, {} nodes, {:.1} MB: report {:.1} MB, --per-thread {:.1} MB, \
             flamegraph {:.1} MB peak",
            threads * NODES,
            size as f64 / 1e6,
            runs[0] as f64 / 1e6,
            runs[1] as f64 / 1e6,
            runs[2] as f64 / 1e6
        );
        // The numbers are all there: every tagged path's idle time.
        let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        let jvm = &r["arcflow"]["jvms"][0];
        assert_eq!(jvm["nodes"].as_u64(), Some(threads * NODES));
        assert_eq!(jvm["threads"].as_u64(), Some(threads));
        assert_eq!(jvm["tree_idle_ns"].as_u64(), Some(idle));
        let p: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&per_thread).unwrap()).unwrap();
        let rows = p["arcflow"]["rows"].as_array().unwrap();
        let leaf_idle: u64 = rows.iter().filter_map(|row| row["idle_ns"].as_u64()).sum();
        // Every thread's 4 tagged nodes are at 4 % of the total or less:
        // shown (the cut is 1 %) only while there are few threads.
        if threads <= 20 {
            assert_eq!(leaf_idle, idle, "per-thread rows carry all the idle time");
        }
        assert!(std::fs::metadata(&svg).unwrap().len() > 1_000);
        peaks.push(runs.to_vec());
    }
    for (small, big) in peaks[0].iter().zip(&peaks[1]) {
        assert!(
            *big <= 200 << 20,
            "peak {:.1} MB over the 200 MB goal",
            *big as f64 / 1e6
        );
        assert!(
            *big < small + (40 << 20),
            "8x the tree nodes took {:.1} MB more (from {:.1} MB): memory grows with the trees",
            (*big - small.min(big)) as f64 / 1e6,
            *small as f64 / 1e6
        );
    }
}
