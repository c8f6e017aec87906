//! Round trips and damaged input for the recording format.

use idleflow_format::*;

mod common;

use common::*;

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
fn the_event_source_reads_back_and_older_files_read_without_it() {
    let with = RunInfo {
        event_source: "perf".into(),
        event_source_why: "eBPF not available: no CAP_BPF".into(),
        java_frames: "waits,stacks".into(),
        java_frames_why: "default: the perf source cannot read the JVMs' structures".into(),
        ..info()
    };
    let bytes = Writer::new(Vec::new(), &with)
        .unwrap()
        .finish(&RunSummary::default())
        .unwrap();
    assert_eq!(Reader::new(&bytes[..]).unwrap().info(), &with);
    // Without a source the META is an older recorder's, byte for byte: the
    // keys are left out and read back empty.
    let old = write_all(&records());
    let text = String::from_utf8_lossy(&old);
    assert!(!text.contains("event_source"), "{text}");
    let r = Reader::new(&old[..]).unwrap();
    assert_eq!(r.info().event_source, "");
    assert_eq!(r.info().event_source_why, "");
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
    assert_every_cut_is_truncation(&write_all(&records()));
}

/// A recording cut anywhere after its run information (a killed
/// recorder, a full disk), or followed by the zeros a crash can leave, reads
/// as every record before the cut, then ends, saying where.
#[test]
fn a_recording_cut_short_reads_up_to_its_last_complete_record() {
    let recs = records();
    let bytes = write_all(&recs);
    // Where each record ends.
    let mut ends = Vec::new();
    {
        let mut r = Reader::new(&bytes[..]).unwrap();
        while r.next_record().unwrap().is_some() {
            ends.push(r.offset() as usize);
        }
    }
    let meta_end = Reader::new(&bytes[..]).unwrap().offset() as usize;
    for cut in meta_end..bytes.len() {
        // Zeros (what a crash can leave past the data that reached the
        // disk) are recognised where a record should start; inside a torn
        // record they cannot be told from data.
        let at_boundary = cut == meta_end || ends.contains(&cut);
        let tails: &[&[u8]] = if at_boundary {
            &[&[], &[0; 64]]
        } else {
            &[&[]]
        };
        for tail in tails {
            let mut file = bytes[..cut].to_vec();
            file.extend_from_slice(tail);
            let mut r = Reader::new(&file[..]).unwrap();
            let mut back = Vec::new();
            while let Some(rec) = r.next_complete_record().unwrap() {
                back.push(rec);
            }
            let complete = ends.iter().filter(|&&e| e <= cut).count();
            if r.summary().is_some() {
                // The cut fell after the end record's last byte.
                assert_eq!(back, recs, "cut at {cut}");
                continue;
            }
            assert_eq!(back, recs[..complete], "cut at {cut}");
            let c = r.cut_short().expect("a cut is reported");
            let expected_at = if complete == 0 {
                meta_end
            } else {
                ends[complete - 1]
            };
            assert_eq!(c.offset as usize, expected_at, "cut at {cut}: {c:?}");
            assert!(r.next_complete_record().unwrap().is_none());
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

/// A later version's timed kind (10–127) carries a time delta first: a
/// reader that does not know it applies the delta and skips the rest, so
/// the times of the records after it stay exact. An untimed unknown kind
/// (128–255) is skipped whole.
#[test]
fn unknown_timed_kinds_keep_the_time_chain_whole() {
    let d = sleeping_dispatch;
    // Dispatches at 1000 and 5000, with a future timed record (kind 42:
    // delta 1500, then 2 opaque bytes) and an untimed kind 200 between
    // them: the second dispatch's own delta is then 2500.
    let mut w = Writer::new(Vec::new(), &info()).unwrap();
    w.write(&d(1_000)).unwrap();
    let mut spliced = w.finish(&RunSummary::default()).unwrap();
    let end_len = end_record_len(&spliced);
    spliced.truncate(spliced.len() - end_len);
    let zz = |v: i64| ((v << 1) ^ (v >> 63)) as u64;
    let leb = |mut n: u64, out: &mut Vec<u8>| {
        while n >= 0x80 {
            out.push((n as u8) | 0x80);
            n >>= 7;
        }
        out.push(n as u8);
    };
    let mut future = Vec::new();
    leb(zz(1_500), &mut future);
    future.extend_from_slice(&[9, 9]);
    spliced.push(42);
    leb(future.len() as u64, &mut spliced);
    spliced.extend_from_slice(&future);
    spliced.extend_from_slice(&[200, 2, 5, 5]);
    // The dispatch at 5000, written with a delta of 2500 after the future
    // record's 1500: re-encode it by hand (kind 2: delta, cpu, prev_tid,
    // state code, next_tid).
    let mut disp = Vec::new();
    leb(zz(2_500), &mut disp);
    leb(0, &mut disp);
    leb(7, &mut disp);
    disp.push(PrevState::Sleeping.code());
    leb(0, &mut disp);
    spliced.push(2);
    leb(disp.len() as u64, &mut spliced);
    spliced.extend_from_slice(&disp);
    let tail = Writer::new(Vec::new(), &info())
        .unwrap()
        .finish(&RunSummary::default())
        .unwrap();
    spliced.extend_from_slice(&tail[tail.len() - end_record_len(&tail)..]);
    let mut r = Reader::new(&spliced[..]).unwrap();
    let mut times = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        if let Record::Dispatch(x) = rec {
            times.push(x.time);
        }
    }
    assert_eq!(times, vec![1_000, 5_000]);
    assert_eq!(r.unknown_records(), 2);
}

/// Thread 7 leaving CPU 0 asleep at `time`, untraced.
fn sleeping_dispatch(time: u64) -> Record {
    Record::Dispatch(Dispatch {
        time,
        cpu: 0,
        prev_tid: 7,
        prev_state: PrevState::Sleeping,
        next_tid: 0,
        prev_node: NodeTag::Untraced,
    })
}

/// Length in bytes of the END record and the trailer at the end of `bytes`.
fn end_record_len(bytes: &[u8]) -> usize {
    // Walk the records from the META record on, up to the trailer.
    let records_end = bytes.len() - WAITS_TRAILER_LEN;
    assert_eq!(&bytes[records_end..records_end + 8], WAITS_TRAILER);
    let mut pos = 12;
    let mut last = pos;
    while pos < records_end {
        last = pos;
        let mut rest = &bytes[pos + 1..];
        let before = rest.len();
        let len = leb_len(&mut rest);
        pos += 1 + (before - rest.len()) + len;
    }
    bytes.len() - last
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

/// A damaged length that claims far more than the file holds is a
/// truncation, found without reserving that much memory.
#[test]
fn a_huge_record_length_in_a_short_file_is_truncation() {
    let bytes = write_all(&records());
    let mut rest = &bytes[13..];
    let len = leb_len(&mut rest);
    let meta_end = bytes.len() - rest.len() + len;
    let mut damaged = bytes[..meta_end].to_vec();
    // Kind 200 with a length of 2^39 (512 GiB), then a few bytes.
    damaged.push(200);
    let mut n = 1u64 << 39;
    while n >= 0x80 {
        damaged.push((n as u8) | 0x80);
        n >>= 7;
    }
    damaged.push(n as u8);
    damaged.extend_from_slice(&[1, 2, 3, 4]);
    let mut r = Reader::new(&damaged[..]).unwrap();
    let e = r.next_record().unwrap_err();
    assert!(matches!(e, FormatError::Truncated { .. }), "{e}");
}

/// A thread that blocks again where it blocked before costs tens of bytes,
/// not its 8 KiB copy, and reads back whole; another thread's copy and an
/// exit in between do not disturb it.
#[test]
fn a_copy_like_the_threads_last_is_written_as_a_short_delta() {
    let base: Vec<u8> = (0..8192u32).map(|i| (i * 7 % 251) as u8).collect();
    let mut next = base.clone();
    next[100] = 1;
    next[4000..4016].fill(9);
    let recs = vec![
        stack_copy(10, 5, 0x7000_0000, base.clone()),
        stack_copy(20, 6, 0x7100_0000, base.clone()),
        stack_copy(30, 5, 0x7000_0000, next.clone()),
    ];
    let one = write_all(&recs[..2]).len();
    let bytes = write_all(&recs);
    assert!(
        bytes.len() - one < 80,
        "the second copy of thread 5 took {} bytes",
        bytes.len() - one
    );
    let mut r = Reader::new(&bytes[..]).unwrap();
    let mut back = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        back.push(rec);
    }
    assert_eq!(back, recs);
}

/// What the resolver writes in place of copy `c` unwound to stack `id`.
fn resolved(c: &idleflow_format::StackCopy, id: u64) -> Record {
    let st = idleflow_format::SwitchStack {
        time: c.time,
        cpu: c.cpu,
        tid: c.tid,
        stack: id,
    };
    if c.at_wakeup {
        Record::WakeUserStack(st)
    } else {
        Record::SwitchUserStack(st)
    }
}

/// The resolver's pass: raw records copied through, copies replaced by
/// records at the same times, reads back as the input with the copies
/// replaced, the time chain whole.
#[test]
fn a_raw_pass_keeps_every_other_record_and_the_times() {
    let recs = records();
    let bytes = write_all(&recs);
    let mut r = Reader::new(&bytes[..]).unwrap();
    let mut w = Writer::new(Vec::new(), r.info()).unwrap();
    let mut copies = Vec::new();
    while let Some(raw) = r.next_raw().unwrap() {
        match &raw {
            idleflow_format::RawRecord::StackCopy(c, b) => {
                let mut c = c.clone();
                c.bytes = b.to_vec();
                w.write(&resolved(&c, copies.len() as u64 + 1)).unwrap();
                copies.push(c);
            }
            idleflow_format::RawRecord::Other(_) => w.write_raw(&raw).unwrap(),
        }
    }
    let out = w.finish(r.summary().unwrap()).unwrap();
    let mut expected = Vec::new();
    let mut n = 0;
    for rec in &recs {
        match rec {
            Record::StackCopy(c) => {
                n += 1;
                assert_eq!(**c, copies[n - 1]);
                expected.push(resolved(c, n as u64));
            }
            r => expected.push(r.clone()),
        }
    }
    assert_eq!(n, 5);
    assert_eq!(copies.iter().filter(|c| c.at_wakeup).count(), 1);
    let mut r = Reader::new(&out[..]).unwrap();
    let mut back = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        back.push(rec);
    }
    assert_eq!(back, expected);
    assert_eq!(r.summary().unwrap().lost_per_cpu, vec![0, 12]);
}

/// Any byte of a recording with deltas changed: an error or other values,
/// never a panic, in either way of reading.
#[test]
fn a_damaged_delta_is_an_error_not_a_panic() {
    assert_every_flip_is_an_error_or_a_value(&write_all(&records()));
}

/// The trailer says where the JVMs' wait records begin: a reader finds
/// them there without reading the dispatches, and a recording without the
/// trailer (older, or cut inside it) says so and reads as before.
#[test]
fn the_trailer_points_at_the_first_wait_record() {
    let d = sleeping_dispatch;
    let wait = JavaWait {
        pid: 5,
        tid: 7,
        start: 2_000,
        duration: 900,
        reason: WaitReason::Park,
        stack: 0,
        object: 0,
        other_tid: 0,
        other: 0,
    };
    // No wait record: nowhere.
    let none = write_all(&[d(1_000), d(2_000)]);
    let mut r = Reader::new(std::io::Cursor::new(&none[..])).unwrap();
    assert_eq!(r.waits_at().unwrap(), WaitsAt::Nowhere);
    // Waits after the dispatches, and a dispatch after them.
    let recs = [d(1_000), d(2_000), Record::JavaWait(wait), d(3_000)];
    let with = write_all(&recs);
    let mut r = Reader::new(std::io::Cursor::new(&with[..])).unwrap();
    let WaitsAt::From(at) = r.waits_at().unwrap() else {
        panic!("no position")
    };
    assert!(at.offset() > 12 && (at.offset() as usize) < with.len() - WAITS_TRAILER_LEN);
    r.seek(at).unwrap();
    assert_eq!(r.next_record().unwrap(), Some(Record::JavaWait(wait)));
    // The time chain goes on from there: the last dispatch reads right.
    assert_eq!(r.next_record().unwrap(), Some(d(3_000)));
    assert_eq!(r.next_record().unwrap(), None);
    // Without the trailer: unknown, and every record still reads.
    let cut = &with[..with.len() - 1];
    let mut r = Reader::new(std::io::Cursor::new(cut)).unwrap();
    assert_eq!(r.waits_at().unwrap(), WaitsAt::Unknown);
    let mut r = Reader::new(cut).unwrap();
    let mut n = 0;
    while r.next_record().unwrap().is_some() {
        n += 1;
    }
    assert_eq!(n, recs.len());
}

/// Two CPUs' wake-ups and dispatches, each CPU's wake-up followed by its
/// next dispatch (the waker leaving), the other CPU's records between them
/// in time: written with the wake-ups and dispatches folded where they can
/// be, they read back as the records in time order, the file smaller.
#[test]
fn a_woken_dispatch_reads_back_as_its_two_records_in_time_order() {
    let wake = |time, cpu, waker, wakee| Wakeup {
        time,
        cpu,
        waker_tid: waker,
        wakee_tid: wakee,
        target_cpu: 1 - cpu,
        new_thread: false,
        context: if waker == 0 {
            WakeContext::HardIrq
        } else {
            WakeContext::Task
        },
    };
    let disp = |time, cpu, prev, next| Dispatch {
        time,
        cpu,
        prev_tid: prev,
        prev_state: PrevState::Sleeping,
        next_tid: next,
        prev_node: NodeTag::Untraced,
    };
    let t0 = info().start_ns;
    // (wake-up, the dispatch after it on its CPU) pairs; the writer is
    // given them in wake-up order (the recorder's merge key).
    let pairs = [
        (wake(t0 + 100, 0, 11, 21), disp(t0 + 900, 0, 11, 0)),
        (wake(t0 + 300, 1, 12, 22), disp(t0 + 350, 1, 12, 22)),
        (wake(t0 + 400, 1, 22, 12), disp(t0 + 900, 1, 22, 0)),
        // An interrupt's wake-up on an idle CPU, the idle task leaving.
        (wake(t0 + 1_000, 0, 0, 21), disp(t0 + 1_200, 0, 0, 21)),
    ];
    let thread = Record::Thread(ThreadInfo {
        time: t0 + 500,
        tid: 30,
        pid: 30,
        ppid: 1,
        comm: "between".into(),
    });
    let mut w = Writer::new(Vec::new(), &info()).unwrap();
    let mut plain = Writer::new(Vec::new(), &info()).unwrap();
    let mut expected = Vec::new();
    for (i, (wk, d)) in pairs.iter().enumerate() {
        w.write_woken_dispatch(wk, d).unwrap();
        expected.push((wk.time, Record::Wakeup(*wk)));
        expected.push((d.time, Record::Dispatch(*d)));
        if i == 2 {
            w.write(&thread).unwrap();
            expected.push((thread.time(), thread.clone()));
        }
    }
    // Stable: at equal times the order written.
    expected.sort_by_key(|(t, _)| *t);
    let expected: Vec<Record> = expected.into_iter().map(|(_, r)| r).collect();
    for r in &expected {
        plain.write(r).unwrap();
    }
    let bytes = w.finish(&RunSummary::default()).unwrap();
    let plain = plain.finish(&RunSummary::default()).unwrap();
    assert!(
        bytes.len() < plain.len(),
        "folded {} bytes, plain {}",
        bytes.len(),
        plain.len()
    );
    let mut r = Reader::new(&bytes[..]).unwrap();
    let mut back = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        back.push(rec);
    }
    assert_eq!(back, expected);
    // Cut anywhere, the dispatches read whole before the cut still come out.
    for cut in 12..bytes.len() {
        // (Cut inside the run information: no reader, nothing to read.)
        let Ok(mut r) = Reader::new(&bytes[..cut]) else {
            continue;
        };
        let mut back = Vec::new();
        while let Ok(Some(rec)) = r.next_complete_record() {
            back.push(rec);
        }
        assert!(
            back.windows(2).all(|p| p[0].time() <= p[1].time()),
            "cut at {cut}: {back:?}"
        );
        assert!(back.iter().all(|b| expected.contains(b)), "cut at {cut}");
        for (wk, d) in &pairs {
            if back.contains(&Record::Wakeup(*wk)) {
                assert!(back.contains(&Record::Dispatch(*d)), "cut at {cut}");
            }
        }
    }
}

/// What does not make one record is written as the two.
#[test]
fn a_wake_up_and_a_dispatch_that_do_not_fold_are_written_apart() {
    let t0 = info().start_ns;
    let w = Wakeup {
        time: t0 + 10,
        cpu: 0,
        waker_tid: 5,
        wakee_tid: 6,
        target_cpu: 0,
        new_thread: false,
        context: WakeContext::Task,
    };
    let d = Dispatch {
        time: t0 + 20,
        cpu: 0,
        prev_tid: 7, // not the waker
        prev_state: PrevState::Preempted,
        next_tid: 6,
        prev_node: NodeTag::Untraced,
    };
    let mut a = Writer::new(Vec::new(), &info()).unwrap();
    a.write_woken_dispatch(&w, &d).unwrap();
    let a = a.finish(&RunSummary::default()).unwrap();
    let b = write_all(&[Record::Wakeup(w), Record::Dispatch(d)]);
    let back = |bytes: &[u8]| {
        let mut r = Reader::new(bytes).unwrap();
        std::iter::from_fn(|| r.next_record().unwrap()).collect::<Vec<_>>()
    };
    assert_eq!(back(&a), vec![Record::Wakeup(w), Record::Dispatch(d)]);
    assert_eq!(back(&a), back(&b));
}

/// A held dispatch goes out after the records of its own time: another
/// CPU's dispatch of that time keeps its stack record right after it.
#[test]
fn a_held_dispatch_comes_after_the_records_of_its_own_time() {
    let t0 = info().start_ns;
    let w = Wakeup {
        time: t0 + 100,
        cpu: 0,
        waker_tid: 5,
        wakee_tid: 6,
        target_cpu: 1,
        new_thread: false,
        context: WakeContext::Task,
    };
    let held = Dispatch {
        time: t0 + 500,
        cpu: 0,
        prev_tid: 5,
        prev_state: PrevState::Sleeping,
        next_tid: 0,
        prev_node: NodeTag::Untraced,
    };
    let other = Record::Dispatch(Dispatch {
        cpu: 1,
        prev_tid: 7,
        next_tid: 0,
        ..held
    });
    let stack = Record::SwitchStack(SwitchStack {
        time: t0 + 500,
        cpu: 1,
        tid: 7,
        stack: 1,
    });
    let mut wr = Writer::new(Vec::new(), &info()).unwrap();
    wr.write_woken_dispatch(&w, &held).unwrap();
    wr.write(&other).unwrap();
    wr.write(&stack).unwrap();
    let bytes = wr.finish(&RunSummary::default()).unwrap();
    let mut r = Reader::new(&bytes[..]).unwrap();
    let back: Vec<Record> = std::iter::from_fn(|| r.next_record().unwrap()).collect();
    assert_eq!(
        back,
        vec![Record::Wakeup(w), other, stack, Record::Dispatch(held)]
    );
}

#[test]
fn java_states_roundtrip_and_an_unknown_state_is_a_clear_error() {
    let t0 = 1_000_000;
    let records: Vec<Record> = [
        JavaState::MonitorEnter,
        JavaState::MonitorWait,
        JavaState::Other,
    ]
    .into_iter()
    .enumerate()
    .map(|(i, state)| {
        Record::SwitchJavaState(SwitchJavaState {
            time: t0 + i as u64 * 10,
            cpu: i as u32,
            tid: 40 + i as u32,
            state,
        })
    })
    .collect();
    let mut wr = Writer::new(Vec::new(), &info()).unwrap();
    for r in &records {
        wr.write(r).unwrap();
    }
    let bytes = wr.finish(&RunSummary::default()).unwrap();
    let mut r = Reader::new(&bytes[..]).unwrap();
    let back: Vec<Record> = std::iter::from_fn(|| r.next_record().unwrap()).collect();
    assert_eq!(back, records);
    // The state byte is the record's last: 9 is no state.
    let last = bytes
        .windows(3)
        .rposition(|w| w == [0x02, 42, 3])
        .expect("the last record's cpu, tid and state");
    let mut bad = bytes.clone();
    bad[last + 2] = 9;
    let mut r = Reader::new(&bad[..]).unwrap();
    let err = std::iter::from_fn(|| r.next_record().transpose())
        .find_map(Result::err)
        .expect("an error for state 9");
    assert!(err.to_string().contains("Java thread state 9"), "{err}");
}
