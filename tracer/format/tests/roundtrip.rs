//! Round trips and damaged input for the recording format.

use idleflow_format::*;

fn info() -> RunInfo {
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
    }
}

fn records() -> Vec<Record> {
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
        Record::Tree(Box::new(TreeDump {
            pid: 42,
            final_dump: false,
            time_ns: 1_000_003_500,
            methods: vec!["com.example.Pool.take".into()],
            threads: vec![ThreadTree {
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
            }],
            unmatched_exits: 0,
        })),
    ];
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

fn write_all(records: &[Record]) -> Vec<u8> {
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

#[test]
fn every_record_reads_back_unchanged() {
    let recs = records();
    let bytes = write_all(&recs);
    let mut r = Reader::new(&bytes[..]).unwrap();
    assert_eq!(r.info(), &info());
    let mut back = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        back.push(rec);
    }
    assert_eq!(back, recs);
    let s = r.summary().unwrap();
    assert_eq!(s.exit_code, Some(3));
    assert_eq!(s.lost_per_cpu, vec![0, 12]);
    assert_eq!(r.next_record().unwrap(), None);
}

#[test]
fn a_dispatch_costs_few_bytes() {
    let base = write_all(&[]).len();
    let n = 1000u64;
    let recs: Vec<Record> = (0..n)
        .map(|i| {
            Record::Dispatch(Dispatch {
                time: 1_000_000_000 + i * 7_000,
                cpu: (i % 2) as u32,
                prev_tid: 123_456,
                prev_state: PrevState::Sleeping,
                next_tid: 0,
                prev_node: NodeTag::Current(i),
            })
        })
        .collect();
    let per = (write_all(&recs).len() - base) as f64 / n as f64;
    assert!(per <= 16.0, "{per} bytes per dispatch");
}

#[test]
fn every_truncation_is_an_error_not_a_panic() {
    let bytes = write_all(&records());
    for cut in 0..bytes.len() {
        let res = Reader::new(&bytes[..cut]).and_then(|mut r| {
            while r.next_record()?.is_some() {}
            Ok(())
        });
        match res {
            Err(FormatError::Truncated { .. }) | Err(FormatError::NotARecording) => {}
            other => panic!("cut at {cut}: {other:?}"),
        }
    }
}

#[test]
fn foreign_and_future_files_are_refused_clearly() {
    let e = Reader::new(&b"PERFILE2\0\0\0\0\0\0\0\0"[..]).unwrap_err();
    assert!(matches!(e, FormatError::NotARecording), "{e}");
    let mut bytes = write_all(&records());
    bytes[8] = 99;
    let e = Reader::new(&bytes[..]).unwrap_err();
    assert!(e.to_string().contains("version 99"), "{e}");
}

#[test]
fn unknown_record_kinds_are_skipped_and_counted() {
    let bytes = write_all(&records());
    // Splice an unknown kind 200 with a 3-byte payload after the META record.
    let mut r = Reader::new(&bytes[..]).unwrap();
    let _ = r.next_record();
    let mut spliced = bytes[..12].to_vec();
    // Find the end of the META record: kind + LEB length + payload.
    let mut rest = &bytes[13..];
    let len = leb_len(&mut rest);
    let meta_end = bytes.len() - rest.len() + len;
    spliced.extend_from_slice(&bytes[12..meta_end]);
    spliced.extend_from_slice(&[200, 3, 1, 2, 3]);
    spliced.extend_from_slice(&bytes[meta_end..]);
    let mut r = Reader::new(&spliced[..]).unwrap();
    let mut n = 0;
    while r.next_record().unwrap().is_some() {
        n += 1;
    }
    assert_eq!(n, records().len());
    assert_eq!(r.unknown_records(), 1);
}

fn leb_len(rest: &mut &[u8]) -> usize {
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

#[test]
fn garbage_after_the_header_is_corrupt_not_a_panic() {
    let mut bytes = write_all(&records());
    // Damage a dispatch's state code and every byte in turn: never a panic.
    for i in 12..bytes.len() {
        let old = bytes[i];
        bytes[i] = 0xff;
        if let Ok(mut r) = Reader::new(&bytes[..]) {
            while let Ok(Some(_)) = r.next_record() {}
        }
        bytes[i] = old;
    }
}
