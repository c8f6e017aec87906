//! Call-tree records: big dumps in their binary records, encoded threads,
//! the version 1 JSON record.

mod common;

use common::*;
use idleflow_format::*;

fn big_dump() -> TreeDump {
    let nodes: Vec<TreeNode> = (0..600_000u64)
        .map(|i| TreeNode {
            id: (4242 << 32) | (i + 1),
            parent_id: if i == 0 { 0 } else { (4242 << 32) | i },
            method: if i == 0 { u32::MAX } else { (i % 5000) as u32 },
            level: (i % 200) as u32,
            calls: 1_000_000 + i,
            callees: 2_000_000 + i,
            base_ns: 123_456_789 + i,
            mmax_ns: 9_876_543 + i,
            ao: i,
            ab: 64 * i,
            dip: i % 7,
            idle: i % 11,
        })
        .collect();
    TreeDump {
        pid: 4242,
        final_dump: true,
        time_ns: 77,
        methods: (0..5000).map(|i| format!("com.example.C{i}.m")).collect(),
        threads: vec![ThreadTree {
            pid: 4242,
            tid: 4243,
            name: "main".into(),
            nodes,
        }],
        unmatched_exits: 0,
        agent_tids: vec![4250],
    }
}

/// `bytes` hold `dump` (one thread) and then the end record.
fn assert_reads_back_as_head_and_thread(bytes: &[u8], dump: TreeDump) {
    let (head, threads) = dump.split();
    let mut r = Reader::new(bytes).unwrap();
    assert_eq!(
        r.next_record().unwrap(),
        Some(Record::TreeHead(Box::new(head)))
    );
    assert_eq!(
        r.next_record().unwrap(),
        Some(Record::TreeThread(Box::new(threads[0].clone())))
    );
    assert_eq!(r.next_record().unwrap(), None);
    assert!(r.summary().is_some());
}

/// A JVM with a big call tree reads back whole, in the compact binary form
/// (under 30 bytes a node, against about 140 in version 1's JSON).
#[test]
fn a_big_call_tree_reads_back_in_its_binary_records() {
    let dump = big_dump();
    let mut w = Writer::new(Vec::new(), &info()).unwrap();
    w.write_tree_dump(&dump).unwrap();
    let bytes = w.finish(&RunSummary::default()).unwrap();
    let json_len = serde_json::to_vec(&dump).unwrap().len();
    assert!(
        bytes.len() * 4 < json_len,
        "binary {} bytes, JSON {json_len}",
        bytes.len()
    );
    assert!(
        bytes.len() < 30 * 600_000 + 200_000,
        "{} bytes",
        bytes.len()
    );
    assert_reads_back_as_head_and_thread(&bytes, dump);
}

/// Read with its nodes kept encoded (the reports' way): the same nodes,
/// walked one by one, for a big record (handed over without a copy) and a
/// small one, and the records after them still read.
#[test]
fn encoded_threads_walk_to_the_same_nodes() {
    let dump = big_dump();
    let small = ThreadTree {
        pid: 4242,
        tid: 4244,
        name: "small".into(),
        nodes: dump.threads[0].nodes[..3].to_vec(),
    };
    let mut w = Writer::new(Vec::new(), &info()).unwrap();
    w.write_tree_dump(&dump).unwrap();
    w.write(&Record::TreeThread(Box::new(small.clone())))
        .unwrap();
    w.write(&Record::Exit(ThreadExit {
        time: 1_000_000_001,
        tid: 1,
        pid: 1,
    }))
    .unwrap();
    let bytes = w.finish(&RunSummary::default()).unwrap();
    let mut r = Reader::new(&bytes[..]).unwrap();
    r.keep_trees_encoded(true);
    assert!(matches!(
        r.next_record().unwrap(),
        Some(Record::TreeHead(_))
    ));
    for want in [&dump.threads[0], &small] {
        match r.next_record().unwrap() {
            Some(Record::TreeThreadEncoded(t)) => {
                assert_eq!((t.pid, t.tid, &t.name), (want.pid, want.tid, &want.name));
                assert_eq!(t.node_count, want.nodes.len() as u64);
                let nodes: Vec<TreeNode> = t.nodes().map(Result::unwrap).collect();
                assert_eq!(&nodes, &want.nodes);
                assert_eq!(&t.decode().unwrap(), want);
            }
            other => panic!("expected an encoded thread, got {other:?}"),
        }
    }
    assert!(matches!(r.next_record().unwrap(), Some(Record::Exit(_))));
    assert_eq!(r.next_record().unwrap(), None);
    assert!(r.summary().is_some());
}

/// Version 1's whole JSON dump (kind 9, larger than 64 MiB here) is still
/// read: handed out as its head, then its threads.
#[test]
fn a_version_1_json_tree_record_reads_back_as_head_and_threads() {
    let dump = big_dump();
    let json = serde_json::to_vec(&dump).unwrap();
    assert!(
        json.len() > 64 << 20,
        "{} bytes: not large enough",
        json.len()
    );
    let end = write_all(&[]);
    // Splice a kind-9 record in before the END record.
    let mut bytes = write_all(&[]);
    let mut rest = &end[13..];
    let meta_len = leb_len(&mut rest);
    let meta_end = end.len() - rest.len() + meta_len;
    bytes.truncate(meta_end);
    bytes.push(kind::TREE);
    let mut n = json.len() as u64;
    while n >= 0x80 {
        bytes.push((n as u8) | 0x80);
        n >>= 7;
    }
    bytes.push(n as u8);
    bytes.extend_from_slice(&json);
    bytes.extend_from_slice(&end[meta_end..]);
    assert_reads_back_as_head_and_thread(&bytes, dump);
}
