//! Runs the fuzz target of the reader and reports (`postproc/fuzz`,
//! cargo-fuzz on the nightly toolchain) for a bounded time, from seed
//! recordings written here with the real writer: any bytes given to
//! `report`, `flamegraph` or `script` must give an error or a report,
//! never a panic. `IDLEFLOW_FUZZ_SECONDS` sets the time (default 60).

#[path = "../../tests/support/fuzz.rs"]
mod fuzz;

use std::path::Path;

use idleflow_format::{
    Dispatch, FrameKind, JavaFrame, JavaStack, JavaSymbol, JavaWait, JvmWaits, NodeTag, PrevState,
    Record, RunInfo, RunSummary, ThreadInfo, ThreadTree, TreeDump, TreeNode, WaitReason, Wakeup,
    Writer, IDLE_TID,
};

/// A small valid recording: two CPUs, a traced JVM thread going idle and
/// back, its call tree.
fn seed() -> Vec<u8> {
    let info = RunInfo {
        command: vec!["java".into()],
        target_pids: vec![7],
        tool_pid: 9,
        java_waits: true,
        stacks: "waits".into(),
        ..RunInfo::minimal(vec![0, 1], 1_000)
    };
    let node = (7u64 << 32) | 2;
    let mut w = Writer::new(Vec::new(), &info).unwrap();
    w.write(&Record::Thread(ThreadInfo {
        time: 1_000,
        tid: 7,
        pid: 7,
        ppid: 1,
        comm: "java".into(),
    }))
    .unwrap();
    let mut t = 1_000;
    for i in 0..20u32 {
        let cpu = i % 2;
        t += 500;
        w.write(&Record::Wakeup(Wakeup {
            time: t,
            cpu,
            waker_tid: 9,
            wakee_tid: 7,
            target_cpu: cpu,
            new_thread: false,
            context: idleflow_format::WakeContext::Task,
        }))
        .unwrap();
        for (prev, next, state, tag) in [
            (IDLE_TID, 7, PrevState::Unknown, NodeTag::Untraced),
            (7, IDLE_TID, PrevState::Sleeping, NodeTag::Current(node)),
        ] {
            t += 700;
            w.write(&Record::Dispatch(Dispatch {
                time: t,
                cpu,
                prev_tid: prev,
                prev_state: state,
                next_tid: next,
                prev_node: tag,
            }))
            .unwrap();
            if next == IDLE_TID {
                // Its user stack, as `record` resolves it.
                w.write(&Record::SwitchUserStack(idleflow_format::SwitchStack {
                    time: t,
                    cpu,
                    tid: prev,
                    stack: 1 + u64::from(i % 2),
                }))
                .unwrap();
            }
        }
    }
    for (id, frames) in [(1, vec![1, 2]), (2, vec![3, 2])] {
        w.write(&Record::UserStack(Box::new(idleflow_format::UserStack {
            id,
            end: idleflow_format::UnwindEnd::Complete,
            frames,
        })))
        .unwrap();
    }
    let frame = |id, kind, module, name: &str| idleflow_format::UserFrame {
        id,
        kind,
        module,
        addr: 0x1000 * id,
        name: name.into(),
        inlined: vec![],
        file: String::new(),
        line: 0,
    };
    w.write(&Record::UserSymbols(Box::new(
        idleflow_format::UserSymbols {
            modules: vec![idleflow_format::UserModule {
                id: 1,
                path: "/usr/lib/x86_64-linux-gnu/libc.so.6".into(),
                build_id: String::new(),
                note: String::new(),
            }],
            frames: vec![
                frame(1, idleflow_format::CodeKind::Native, 1, "read"),
                frame(2, idleflow_format::CodeKind::Jit, 0, "LMain;::run"),
                frame(3, idleflow_format::CodeKind::Native, 1, ""),
            ],
            counts: Default::default(),
            notes: vec![],
        },
    )))
    .unwrap();
    w.write_tree_dump(&TreeDump {
        pid: 7,
        final_dump: true,
        time_ns: t,
        methods: vec!["Main.run".into()],
        threads: vec![ThreadTree {
            pid: 7,
            tid: 7,
            name: "main".into(),
            nodes: vec![TreeNode {
                id: node,
                parent_id: 0,
                method: 0,
                level: 1,
                calls: 1,
                callees: 0,
                base_ns: 5,
                mmax_ns: 5,
                ao: 0,
                ab: 0,
                dip: 0,
                idle: 0,
            }],
        }],
        unmatched_exits: 0,
        agent_tids: vec![8],
    })
    .unwrap();
    // The JVM's waits (its flight recorder): texts, a stack, two waits.
    for (id, text) in [(1, "Main.run"), (2, "Main$Lock"), (3, "other")] {
        w.write(&Record::JavaSymbol(Box::new(JavaSymbol {
            pid: 7,
            id,
            text: text.into(),
        })))
        .unwrap();
    }
    w.write(&Record::JavaStack(Box::new(JavaStack {
        pid: 7,
        id: 1,
        truncated: false,
        frames: vec![JavaFrame {
            method: 1,
            line: 3,
            kind: FrameKind::Jit,
        }],
    })))
    .unwrap();
    for start in [2_000, 9_000] {
        w.write(&Record::JavaWait(JavaWait {
            pid: 7,
            tid: 7,
            start,
            duration: 2_500,
            reason: WaitReason::MonitorEnter,
            stack: 1,
            object: 2,
            other_tid: 8,
            other: 3,
        }))
        .unwrap();
    }
    w.write(&Record::JvmWaits(Box::new(JvmWaits {
        pid: 7,
        source: "jfr".into(),
        waits: 2,
        recorded_from_ns: 1_000,
        recorded_to_ns: t,
        threads: vec![(7, "main".into())],
        ..Default::default()
    })))
    .unwrap();
    w.finish(&RunSummary {
        stop_ns: t + 1_000,
        ..Default::default()
    })
    .unwrap()
}

/// The seed with its timed records in a compressed block, as a flight
/// recorder's dump holds them.
fn blocked(seed: &[u8]) -> Vec<u8> {
    let mut r = idleflow_format::Reader::new(seed).unwrap();
    let mut w = Writer::new(Vec::new(), r.info()).unwrap();
    let mut stream = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        match rec {
            Record::Dispatch(_) | Record::Wakeup(_) | Record::SwitchUserStack(_) => {
                stream.push(rec)
            }
            other => {
                if !stream.is_empty() {
                    w.write_block(&std::mem::take(&mut stream)).unwrap();
                }
                w.write(&other).unwrap();
            }
        }
    }
    w.finish(r.summary().unwrap()).unwrap()
}

#[test]
fn the_reader_and_reports_survive_fuzzing() {
    let corpus = tempfile::tempdir().unwrap();
    let s = seed();
    std::fs::write(corpus.path().join("seed"), &s).unwrap();
    std::fs::write(corpus.path().join("seed-blocked"), blocked(&s)).unwrap();
    std::fs::write(corpus.path().join("seed-cut"), &s[..s.len() * 2 / 3]).unwrap();
    fuzz::run_fuzz_target(
        Path::new(env!("CARGO_MANIFEST_DIR")),
        "report",
        corpus.path(),
        &["-rss_limit_mb=2048".into(), "-max_len=65536".into()],
        10_000,
    );
}
