//! Fixtures shared by the format's tests: a run, one record of every
//! kind, and a recording written from them.

// Each test file uses only part of these.
#![allow(dead_code)]
use idleflow_format::*;

pub fn info() -> RunInfo {
    RunInfo {
        tool_version: "test".into(),
        kernel_release: "6.18".into(),
        hostname: "h".into(),
        cpus: vec![0, 1],
        clock: "CLOCK_MONOTONIC".into(),
        command: vec!["sleep".into(), "1".into()],
        target_pids: vec![42],
        start_ns: 1_000_000_000,
        start_unix_ns: 5,
        proc_stat_start: vec![ProcStatCpu {
            cpu: 0,
            idle: 10,
            iowait: 1,
        }],
        user_hz: 100,
        ring_bytes: 4096,
        tool_pid: 0,
        java_waits: false,
        stacks: String::new(),
        wait_sample_period: 0,
        idle_stack_budget: 0,
        waker_sample_period: 0,
        waker_stack_budget: 0,
        event_source: String::new(),
        event_source_why: String::new(),
        java_frames: String::new(),
        java_frames_why: String::new(),
    }
}

pub fn records() -> Vec<Record> {
    let mut v = vec![
        Record::Thread(ThreadInfo {
            time: 1_000_000_000,
            tid: 42,
            pid: 42,
            ppid: 1,
            comm: "wörker".into(),
        }),
        Record::Dispatch(Dispatch {
            time: 1_000_000_500,
            cpu: 1,
            prev_tid: 0,
            prev_state: PrevState::Unknown,
            next_tid: 42,
            prev_node: NodeTag::Untraced,
        }),
        Record::Wakeup(Wakeup {
            time: 1_000_000_400, // earlier than the previous record: negative delta
            cpu: 0,
            waker_tid: 7,
            wakee_tid: 42,
            target_cpu: 1,
            new_thread: true,
            context: idleflow_format::WakeContext::SoftIrq,
        }),
        Record::Lost(Lost {
            time: 1_000_002_000,
            cpu: 1,
            count: 12,
        }),
        Record::Exit(ThreadExit {
            time: 1_000_003_000,
            tid: 42,
            pid: 42,
        }),
        Record::TreeHead(Box::new(TreeHead {
            pid: 42,
            final_dump: false,
            time_ns: 1_000_003_500,
            methods: vec!["com.example.Pool.take".into()],
            threads: 1,
            unmatched_exits: 0,
            agent_tids: vec![44],
        })),
        Record::TreeThread(Box::new(ThreadTree {
            pid: 42,
            tid: 43,
            name: "worker-1".into(),
            nodes: vec![TreeNode {
                id: 42 << 32 | 1,
                parent_id: 0,
                method: 0,
                level: 1,
                calls: 3,
                callees: 0,
                base_ns: 10,
                mmax_ns: 5,
                ao: 0,
                ab: 0,
                dip: 1,
                idle: 2,
            }],
        })),
    ];
    // The user-stack kinds: a copy, a mapping, and what resolving makes.
    v.push(Record::ModuleMap(Box::new(idleflow_format::ModuleMap {
        time: 1_000_005_000,
        pid: 77,
        start: 0x7f00_0000_1000,
        len: 0x20_0000,
        pgoff: 0x2000,
        ino: 1_234_567,
        path: "/usr/lib/x86_64-linux-gnu/libc.so.6".into(),
    })));
    v.push(Record::StackCopy(Box::new(idleflow_format::StackCopy {
        time: 1_000_006_000,
        cpu: 1,
        tid: 78,
        pid: 77,
        ip: 0x7f00_0000_1234,
        sp: 0x7ffd_0000_0000,
        bp: 0,
        requested: 8192,
        bytes: (0..=255u8).cycle().take(1000).collect(),
        at_wakeup: false,
    })));
    // The same thread again: a delta against the copy above (the same
    // SP, a few bytes changed; then an SP 24 bytes lower, a frame deeper).
    let mut again: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
    again[10] ^= 0xff;
    again[999] = 7;
    v.push(stack_copy(
        1_000_006_100,
        78,
        0x7ffd_0000_0000,
        again.clone(),
    ));
    let mut deeper = vec![1u8; 24];
    deeper.extend_from_slice(&again);
    deeper.truncate(1000);
    v.push(stack_copy(
        1_000_006_200,
        78,
        0x7ffd_0000_0000 - 24,
        deeper.clone(),
    ));
    // The waker's stacks at a wake-up: its kernel stack, a copy (a delta
    // against the same thread's switch-out copy above) and what resolving
    // makes of it.
    v.push(Record::WakeStack(idleflow_format::SwitchStack {
        time: 1_000_006_250,
        cpu: 0,
        tid: 78,
        stack: 5,
    }));
    let mut woke = stack_copy(1_000_006_250, 78, 0x7ffd_0000_0000 - 24, deeper);
    if let Record::StackCopy(c) = &mut woke {
        c.at_wakeup = true;
        c.bytes[3] ^= 0x55;
    }
    v.push(woke);
    v.push(Record::SwitchArg(idleflow_format::SwitchArg {
        time: 1_000_006_250,
        cpu: 0,
        tid: 78,
        arg: 0x5581_dead_beef,
    }));
    v.push(Record::WakeUserStack(idleflow_format::SwitchStack {
        time: 1_000_006_250,
        cpu: 0,
        tid: 78,
        stack: 4,
    }));
    // After the thread's exit its tid's next copy is whole again.
    v.push(Record::Exit(idleflow_format::ThreadExit {
        time: 1_000_006_300,
        tid: 78,
        pid: 77,
    }));
    v.push(stack_copy(1_000_006_400, 78, 0x7ffd_0000_0000, again));
    v.push(Record::UserStack(Box::new(idleflow_format::UserStack {
        id: 3,
        end: idleflow_format::UnwindEnd::Truncated,
        frames: vec![1, 2, 300, 1 << 40],
    })));
    v.push(Record::SwitchUserStack(idleflow_format::SwitchStack {
        time: 1_000_006_000,
        cpu: 1,
        tid: 78,
        stack: 3,
    }));
    v.push(Record::WalkedStack(Box::new(
        idleflow_format::WalkedStack {
            id: 1,
            complete: true,
            frames: vec![
                idleflow_format::WalkedFrame {
                    kind: idleflow_format::FrameKind::Native,
                    method: "jdk.internal.misc.Unsafe.park(boolean, long)".into(),
                    line: 0,
                },
                idleflow_format::WalkedFrame {
                    kind: idleflow_format::FrameKind::Inlined,
                    method: "java.util.concurrent.locks.LockSupport.park(java.lang.Object)".into(),
                    line: 221,
                },
                idleflow_format::WalkedFrame {
                    kind: idleflow_format::FrameKind::Jit,
                    method: "Kiln.main(java.lang.String[])".into(),
                    line: 1 << 20,
                },
            ],
        },
    )));
    v.push(Record::SwitchJavaStack(idleflow_format::SwitchStack {
        time: 1_000_006_500,
        cpu: 1,
        tid: 78,
        stack: 1,
    }));
    v.push(Record::WakeJavaStack(idleflow_format::SwitchStack {
        time: 1_000_006_600,
        cpu: 0,
        tid: 79,
        stack: 1,
    }));
    v.push(Record::UserSymbols(Box::new(
        idleflow_format::UserSymbols {
            modules: vec![idleflow_format::UserModule {
                id: 1,
                path: "/bin/x".into(),
                build_id: "ab12".into(),
                note: String::new(),
            }],
            frames: vec![idleflow_format::UserFrame {
                id: 1,
                kind: idleflow_format::CodeKind::Native,
                module: 1,
                addr: 0x1234,
                name: "fill_buffer".into(),
                inlined: vec!["inner".into()],
                file: "chain.c".into(),
                line: 29,
            }],
            counts: idleflow_format::UserStackCounts {
                copies: 5,
                resolved: 4,
                truncated: 1,
                ..Default::default()
            },
            notes: vec!["a note".into()],
        },
    )));
    for (i, s) in PrevState::ALL.into_iter().enumerate() {
        v.push(Record::Dispatch(Dispatch {
            time: 1_000_010_000 + i as u64 * 3_000_000_000,
            cpu: i as u32,
            prev_tid: u32::MAX,
            prev_state: s,
            next_tid: 0,
            prev_node: if i % 2 == 0 {
                NodeTag::Ring(1 << 40)
            } else {
                NodeTag::Unknown
            },
        }));
    }
    v
}

pub fn stack_copy(time: u64, tid: u32, sp: u64, bytes: Vec<u8>) -> Record {
    Record::StackCopy(Box::new(idleflow_format::StackCopy {
        time,
        cpu: 1,
        tid,
        pid: 77,
        ip: 0x7f00_0000_1234,
        sp,
        bp: 0,
        requested: 8192,
        bytes,
        at_wakeup: false,
    }))
}

pub fn write_all(records: &[Record]) -> Vec<u8> {
    let mut w = Writer::new(Vec::new(), &info()).unwrap();
    for r in records {
        w.write(r).unwrap();
    }
    let summary = RunSummary {
        stop_ns: 9,
        stop_reason: "duration".into(),
        exit_code: Some(3),
        lost_per_cpu: vec![0, 12],
        dispatches: 10,
        ..Default::default()
    };
    w.finish(&summary).unwrap()
}

pub fn leb_len(rest: &mut &[u8]) -> usize {
    let mut v = 0usize;
    let mut shift = 0;
    loop {
        let b = rest[0];
        *rest = &rest[1..];
        v |= ((b & 0x7f) as usize) << shift;
        if b & 0x80 == 0 {
            return v;
        }
        shift += 7;
    }
}

/// Every cut of `bytes` reads as truncated (or, inside the trailer, as a
/// whole recording); never a panic.
pub fn assert_every_cut_is_truncation(bytes: &[u8]) {
    // The trailer after the end record is optional: a cut inside it leaves
    // a whole recording.
    let whole = bytes.len() - WAITS_TRAILER_LEN;
    for cut in 0..bytes.len() {
        let res = Reader::new(&bytes[..cut]).and_then(|mut r| {
            while r.next_record()?.is_some() {}
            Ok(())
        });
        match res {
            Ok(()) if cut >= whole => {}
            Err(FormatError::Truncated { .. }) | Err(FormatError::NotARecording) if cut < whole => {
            }
            other => panic!("cut at {cut}: {other:?}"),
        }
    }
}

/// Any byte of `bytes` after the header changed: an error or other values,
/// never a panic, in either way of reading.
pub fn assert_every_flip_is_an_error_or_a_value(bytes: &[u8]) {
    for at in 12..bytes.len() {
        for flip in [0x01u8, 0x80, 0xff] {
            let mut b = bytes.to_vec();
            b[at] ^= flip;
            if let Ok(mut r) = Reader::new(&b[..]) {
                while let Ok(Some(_)) = r.next_record() {}
            }
            if let Ok(mut r) = Reader::new(&b[..]) {
                while let Ok(Some(_)) = r.next_raw() {}
            }
        }
    }
}
