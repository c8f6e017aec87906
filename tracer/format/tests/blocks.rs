//! Compressed blocks (`kind::BLOCK`): records a writer encoded, kept
//! LZ4-compressed in the file, read back as if they stood in its place.

use idleflow_format::*;

mod common;

use common::*;

/// `records` encoded by a writer whose delta chain starts at `from`, as
/// `lz4_flex::compress_prepend_size` gives them, and the chain's last time.
fn block_of(records: &[Record], from: u64) -> (Vec<u8>, u64) {
    let mut w = Writer::new(
        Vec::new(),
        &RunInfo {
            start_ns: from,
            ..info()
        },
    )
    .unwrap();
    w.flush().unwrap();
    let head = w.get_mut().len();
    for r in records {
        w.write(r).unwrap();
    }
    w.flush().unwrap();
    let last = w.last_time();
    (lz4_flex::compress_prepend_size(&w.get_mut()[head..]), last)
}

fn summary() -> RunSummary {
    RunSummary {
        stop_ns: 9,
        stop_reason: "duration".into(),
        lost_per_cpu: vec![0, 12],
        ..Default::default()
    }
}

/// `records[..a]` written, `records[a..b]` as a block, the rest written.
fn with_block(records: &[Record], a: usize, b: usize) -> Vec<u8> {
    let mut w = Writer::new(Vec::new(), &info()).unwrap();
    for r in &records[..a] {
        w.write(r).unwrap();
    }
    let (block, last) = block_of(&records[a..b], w.last_time());
    w.append_compressed(&block, last).unwrap();
    for r in &records[b..] {
        w.write(r).unwrap();
    }
    w.finish(&summary()).unwrap()
}

fn read_all(bytes: &[u8]) -> Vec<Record> {
    let mut r = Reader::new(bytes).unwrap();
    let mut back = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        back.push(rec);
    }
    assert_eq!(r.summary().unwrap().lost_per_cpu, vec![0, 12]);
    assert_eq!(r.unknown_records(), 0);
    back
}

#[test]
fn records_in_a_block_read_back_as_if_they_stood_in_its_place() {
    let recs = records();
    let n = recs.len();
    for (a, b) in [(0, n), (0, 1), (3, 9), (5, n), (n, n), (2, 2)] {
        let bytes = with_block(&recs, a, b);
        assert_eq!(read_all(&bytes), recs, "block of records {a}..{b}");
        // A pass that copies records through (the resolver, a dump's
        // amendment) writes them out of the block, unchanged.
        let mut r = Reader::new(&bytes[..]).unwrap();
        let mut w = Writer::new(Vec::new(), r.info()).unwrap();
        while let Some(raw) = r.next_raw().unwrap() {
            w.write_raw(&raw).unwrap();
        }
        let copied = w.finish(r.summary().unwrap()).unwrap();
        assert_eq!(read_all(&copied), recs, "copied, block of records {a}..{b}");
    }
}

#[test]
fn a_block_is_smaller_than_its_records() {
    let recs: Vec<Record> = (0..10_000u64)
        .map(|i| {
            Record::Dispatch(Dispatch {
                time: 1_000_000_000 + i * 7_000,
                cpu: (i % 2) as u32,
                prev_tid: 1000 + (i % 8) as u32,
                prev_state: PrevState::Sleeping,
                next_tid: 0,
                prev_node: NodeTag::Untraced,
            })
        })
        .collect();
    let plain = write_all(&recs).len();
    let blocked = with_block(&recs, 0, recs.len());
    assert!(
        blocked.len() * 2 < plain,
        "{} bytes in a block, {plain} plain",
        blocked.len()
    );
    let mut r = Reader::new(&blocked[..]).unwrap();
    let mut back = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        back.push(rec);
    }
    assert_eq!(back, recs);
}

/// A block larger than the reader's buffer, between records: the records
/// after it are at their file offsets again.
#[test]
fn a_big_block_reads_back_and_offsets_after_it_are_the_files() {
    let recs: Vec<Record> = (0..400_000u64)
        .map(|i| {
            Record::Wakeup(Wakeup {
                time: 1_000_000_000 + i * 333,
                cpu: (i % 4) as u32,
                waker_tid: (i * 7919 % 100_000) as u32,
                wakee_tid: (i * 104_729 % 100_000) as u32,
                target_cpu: (i % 3) as u32,
                new_thread: false,
                context: WakeContext::Task,
            })
        })
        .collect();
    let tail = sleeping(1_000_000_000 + 400_000 * 333 + 5);
    let mut all = recs.clone();
    all.push(tail.clone());
    let bytes = with_block(&all, 0, recs.len());
    let mut r = Reader::new(std::io::Cursor::new(&bytes[..])).unwrap();
    let block_at = r.offset();
    for (i, want) in recs.iter().enumerate() {
        if i % 100_000 == 1 {
            // Between two of the block's records: the block's start, and
            // reading from there reads the block again from its first.
            let p = r.position();
            assert_eq!(p.offset(), block_at);
            assert_eq!(r.offset(), block_at);
        }
        assert_eq!(r.next_record().unwrap().as_ref(), Some(want), "record {i}");
    }
    let after = r.position();
    assert_eq!(r.next_record().unwrap(), Some(tail.clone()));
    // The offsets around the block are the file's: the block record where
    // it began, the tail record right after it, then the end record.
    assert_eq!(bytes[block_at as usize], kind::BLOCK);
    assert_eq!(bytes[after.offset() as usize], kind::DISPATCH);
    let end_at = r.offset() as usize;
    assert_eq!(bytes[end_at], kind::END);
    assert_eq!(
        end_at,
        bytes.len() - WAITS_TRAILER_LEN - end_len(&bytes, end_at)
    );
    r.seek(after).unwrap();
    assert_eq!(r.next_record().unwrap(), Some(tail));
    let mut again = Reader::new(std::io::Cursor::new(&bytes[..])).unwrap();
    let p = {
        again.next_record().unwrap();
        again.position()
    };
    again.seek(p).unwrap();
    assert_eq!(again.next_record().unwrap().as_ref(), Some(&recs[0]));
}

/// The length of the end record at `at`.
fn end_len(bytes: &[u8], at: usize) -> usize {
    let mut rest = &bytes[at + 1..];
    let before = rest.len();
    let len = leb128::read::unsigned(&mut rest).unwrap() as usize;
    1 + before - rest.len() + len
}

fn sleeping(time: u64) -> Record {
    Record::Dispatch(Dispatch {
        time,
        cpu: 0,
        prev_tid: 42,
        prev_state: PrevState::Sleeping,
        next_tid: 0,
        prev_node: NodeTag::Untraced,
    })
}

#[test]
fn every_cut_and_every_flipped_byte_of_a_block_is_an_error_or_a_value() {
    let recs = records();
    let bytes = with_block(&recs, 2, recs.len() - 2);
    assert_every_cut_is_truncation(&bytes);
    assert_every_flip_is_an_error_or_a_value(&bytes);
}

#[test]
fn a_block_in_a_block_and_an_implausible_length_are_corrupt() {
    let recs = records();
    // A block whose records are a block.
    let (inner, last) = block_of(&recs[..4], info().start_ns);
    let mut framed = vec![kind::BLOCK];
    leb128::write::unsigned(&mut framed, inner.len() as u64).unwrap();
    framed.extend_from_slice(&inner);
    let outer = lz4_flex::compress_prepend_size(&framed);
    let mut w = Writer::new(Vec::new(), &info()).unwrap();
    w.append_compressed(&outer, last).unwrap();
    let bytes = w.finish(&summary()).unwrap();
    let mut r = Reader::new(&bytes[..]).unwrap();
    let block_at = r.offset();
    match r.next_record() {
        Err(FormatError::Corrupt { offset, what }) => {
            assert_eq!(offset, block_at);
            assert!(what.contains("inside a compressed block"), "{what}");
        }
        other => panic!("{other:?}"),
    }
    // A block that says it holds 1 GiB.
    let mut lie = (1u32 << 30).to_le_bytes().to_vec();
    lie.extend_from_slice(&inner[4..]);
    let mut w = Writer::new(Vec::new(), &info()).unwrap();
    w.append_compressed(&lie, last).unwrap();
    let bytes = w.finish(&summary()).unwrap();
    match Reader::new(&bytes[..]).unwrap().next_record() {
        Err(FormatError::Corrupt { what, .. }) => assert!(what.contains("implausible"), "{what}"),
        other => panic!("{other:?}"),
    }
    // A cut short read stops before a damaged block and says where.
    let mut w = Writer::new(Vec::new(), &info()).unwrap();
    w.write(&recs[0]).unwrap();
    let at = w.bytes_written();
    // Its records say one byte more than they are.
    let mut bad = inner.clone();
    let said = u32::from_le_bytes(bad[..4].try_into().unwrap()) + 1;
    bad[..4].copy_from_slice(&said.to_le_bytes());
    w.append_compressed(&bad, last).unwrap();
    let bytes = w.finish(&summary()).unwrap();
    let mut r = Reader::new(&bytes[..]).unwrap();
    assert_eq!(r.next_complete_record().unwrap(), Some(recs[0].clone()));
    assert_eq!(r.next_complete_record().unwrap(), None);
    let cut = r.cut_short().unwrap();
    assert_eq!(cut.offset, at);
    assert!(cut.reason.contains("compressed block"), "{}", cut.reason);
}

/// A Java thread's wait to enter a monitor.
fn monitor_enter() -> Record {
    Record::JavaWait(JavaWait {
        pid: 7,
        tid: 7,
        start: 1_000,
        duration: 500,
        reason: WaitReason::MonitorEnter,
        stack: 0,
        object: 0,
        other_tid: 0,
        other: 0,
    })
}

/// Java waits in a block: the trailer points at the block, and a reader
/// that seeks there finds them.
#[test]
fn waits_in_a_block_are_where_the_trailer_says() {
    let wait = monitor_enter();
    let recs = records();
    let mut w = Writer::new(Vec::new(), &info()).unwrap();
    for r in &recs {
        w.write(r).unwrap();
    }
    let at = w.bytes_written();
    w.write_block(&[sleeping(2_000_000_000), wait.clone()])
        .unwrap();
    let bytes = w.finish(&summary()).unwrap();
    let mut r = Reader::new(std::io::Cursor::new(&bytes[..])).unwrap();
    match r.waits_at().unwrap() {
        WaitsAt::From(p) => {
            assert_eq!(p.offset(), at);
            r.seek(p).unwrap();
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(r.next_record().unwrap(), Some(sleeping(2_000_000_000)));
    assert_eq!(r.next_record().unwrap(), Some(wait));
}

/// A dump copied to add records after its stream (its Java waits; the
/// resolver copies the same way) stays compressed from its first block on:
/// the same records read back, the copy about as small as the dump, and
/// the trailer finds the waits added, inside a block.
#[test]
fn a_dump_copied_with_records_added_stays_compressed() {
    let wait = monitor_enter();
    // A dump: a few plain records, then 1-s segments as blocks (about
    // 1.2 compressed blocks' worth of records in all).
    let recs: Vec<Record> = (0..600_000u64).map(|i| sleeping(1_000 + i * 50)).collect();
    let mut w = Writer::new(Vec::new(), &info()).unwrap();
    for r in &recs[..3] {
        w.write(r).unwrap();
    }
    for chunk in recs[3..].chunks(100_000) {
        let (block, last) = block_of(chunk, w.last_time());
        w.append_compressed(&block, last).unwrap();
    }
    let dump = w.finish(&summary()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dump.idleflow");
    std::fs::write(&path, &dump).unwrap();

    add_after_stream(&path, std::slice::from_ref(&wait), |_| {}).unwrap();
    let copy = std::fs::read(&path).unwrap();
    let mut want = recs.clone();
    want.push(wait.clone());
    assert_eq!(read_all(&copy), want);
    // Plain, the records take ≈ 4.8 MB; the dump's blocks ≈ a tenth.
    assert!(
        copy.len() < dump.len() + dump.len() / 4,
        "copy {} bytes, dump {}",
        copy.len(),
        dump.len()
    );
    let mut r = Reader::new(std::io::Cursor::new(&copy[..])).unwrap();
    let mut n = 0;
    while r.next_record().unwrap().is_some() {
        n += 1;
    }
    assert_eq!(n, want.len());
    assert!(r.blocks_opened() >= 2, "{}", r.blocks_opened());
    let mut r = Reader::new(std::io::Cursor::new(&copy[..])).unwrap();
    r.only_java_waits(true);
    match r.waits_at().unwrap() {
        WaitsAt::From(p) => r.seek(p).unwrap(),
        other => panic!("{other:?}"),
    }
    let mut found = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        found.push(rec);
    }
    assert_eq!(found, vec![wait]);
}
