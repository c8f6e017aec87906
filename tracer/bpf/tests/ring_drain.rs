//! The rings handed to a drain ([`RingDrain`]) on the real kernel: every
//! record comes out once, in its CPU's time order, decodable; the wait
//! descriptor is readable after a ring passed its threshold and quiet again
//! once the wake-up is taken (edge-triggered: records arriving all the
//! time must not keep a waiter awake); `poll` reads nothing once the rings
//! are handed over; bytes a taker refuses are offered again.

mod support;

use std::time::Duration;

use idleflow_bpf::{
    decode, framed_len, records, ring_records, SchedEvent, SchedRecorder, RECORD_BYTES,
    WAKEUP_BYTES,
};
use support::{may_run, online_cpus, sleep_pinned};

/// Whether `fd` polls readable within `ms`.
fn readable(fd: i32, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let rc = unsafe { libc::poll(&mut p, 1, ms) };
    rc == 1 && p.revents & libc::POLLIN != 0
}

#[test]
fn a_ring_drain_hands_every_record_once_in_order_and_wakes_on_edges() {
    if !may_run("a_ring_drain_hands_every_record_once_in_order_and_wakes_on_edges") {
        return;
    }
    let cpu = online_cpus()[0];
    // A 256 KiB ring: the programs wake the reader every 64 KiB.
    let mut rec = SchedRecorder::open(&[cpu], 256 << 10, Default::default()).expect("open");
    let mut drain = rec.take_drain().expect("the rings");
    assert!(rec.take_drain().is_none(), "handed over once");
    assert_eq!(rec.wait_fd(), None);
    assert_eq!(drain.cpus(), [cpu]);
    let mut taken = Vec::new();
    let mut take = |ring: usize, bytes: &[u8]| {
        assert_eq!(ring, 0);
        assert_eq!(
            ring_records(bytes)
                .map(|r| framed_len(r.len()))
                .sum::<usize>(),
            bytes.len(),
            "whole records"
        );
        taken.extend_from_slice(bytes);
        true
    };
    drain.drain(&mut take).unwrap();
    drain.rearm();
    assert!(!readable(drain.wait_fd(), 0), "taken wake-ups stay taken");

    // ≥ 2 switches and a waking per sleep, ≥ 32 B each in the ring (a
    // batch of records has one 8-byte header): past the 64 KiB threshold.
    let needed = WAKEUP_BYTES / RECORD_BYTES / 3 + 200;
    sleep_pinned(cpu, needed, Duration::from_micros(50));
    assert!(
        readable(drain.wait_fd(), 1000),
        "no wake-up after {needed} sleeps"
    );
    assert!(
        readable(drain.wait_fd(), 0),
        "readable until the wake-up is taken"
    );
    drain.rearm();
    assert!(
        !readable(drain.wait_fd(), 0),
        "readable again with no new wake-up: a waiter would spin"
    );

    // A taker that refuses keeps the bytes for the next offer.
    let mut offered = 0;
    drain
        .drain(&mut |_, bytes| {
            offered = bytes.len();
            false
        })
        .unwrap();
    assert!(
        offered >= WAKEUP_BYTES,
        "{offered} bytes offered after a wake-up"
    );
    let mut poll_saw = 0;
    rec.poll(Duration::ZERO, |_, _| poll_saw += 1).unwrap();
    assert_eq!(
        poll_saw, 0,
        "poll reads nothing once the drain has the rings"
    );
    drain.drain(&mut take).unwrap();
    assert!(taken.len() >= offered, "the refused bytes came again");

    let events: Vec<SchedEvent> = records(&taken)
        .map(|r| decode(r).expect("every record decodes"))
        .collect();
    assert!(
        events.windows(2).all(|w| w[0].time() <= w[1].time()),
        "time order"
    );
    let switches = events
        .iter()
        .filter(|e| matches!(e, SchedEvent::Switch(_)))
        .count();
    assert!(
        switches >= needed,
        "{switches} switches for {needed} sleeps"
    );
    // Other CPUs have no ring here (their events count as no_ring); the
    // recorded one lost nothing.
    let lost = rec.lost().unwrap();
    let here = lost.per_cpu.iter().find(|c| c.cpu == cpu).expect("its CPU");
    assert_eq!((here.ring_full, here.no_ring), (0, 0), "{lost:?}");
    assert_eq!(lost.undecodable, 0, "{lost:?}");
}

/// A CPU that runs one thread without a switch runs no program, so the
/// records its batch holds would wait: the reader's `hold_back` flushes
/// them there (an interrupt on that CPU). Tried until the switch into a
/// spinning thread is seen held (nothing else ran on its CPU to flush it).
#[test]
fn a_cpu_running_one_thread_gets_its_batch_flushed_by_the_reader() {
    if !may_run("a_cpu_running_one_thread_gets_its_batch_flushed_by_the_reader") {
        return;
    }
    let cpus = online_cpus();
    let cpu = *cpus.last().expect("a CPU");
    let mut rec = SchedRecorder::open(&[cpu], 1 << 20, Default::default()).expect("open");
    let mut drain = rec.take_drain().expect("the rings");
    if let Some(&other) = cpus.iter().find(|&&c| c != cpu) {
        support::pin(other);
    }
    let switches_into = |bytes: &[u8], tid: u32| {
        records(bytes)
            .map(|r| decode(r).expect("every record decodes"))
            .filter(|e| matches!(e, SchedEvent::Switch(s) if s.next_tid == tid))
            .count()
    };
    let take = |drain: &mut idleflow_bpf::RingDrain| {
        let mut taken = Vec::new();
        drain
            .drain(&mut |_, bytes| {
                taken.extend_from_slice(bytes);
                true
            })
            .unwrap();
        taken
    };
    for _ in 0..20 {
        let spinning = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let spin = {
            let spinning = std::sync::Arc::clone(&spinning);
            std::thread::spawn(move || {
                support::pin(cpu);
                tid_tx.send(support::gettid()).unwrap();
                let until = std::time::Instant::now() + Duration::from_millis(30);
                while std::time::Instant::now() < until {
                    std::hint::spin_loop();
                }
                spinning.store(false, std::sync::atomic::Ordering::SeqCst);
            })
        };
        let tid = tid_rx.recv().unwrap();
        std::thread::sleep(Duration::from_millis(2));
        let before = take(&mut drain);
        if switches_into(&before, tid) > 0 {
            // Something else ran there and its program flushed the batch.
            spin.join().unwrap();
            continue;
        }
        // Everything is stale at the end of time.
        let held = drain.hold_back(u64::MAX);
        let after = take(&mut drain);
        let still_spinning = spinning.load(std::sync::atomic::Ordering::SeqCst);
        spin.join().unwrap();
        if !still_spinning {
            continue;
        }
        assert_eq!(held, u64::MAX, "every batch flushed");
        // The held switch into the spinner reached the ring. Not "exactly
        // once": a thread that preempted the spinner on its CPU (a kworker,
        // a timer's wakee) before the flush brings a second switch into it
        // (seen in CI), and one that preempts it across the flush leaves its
        // switch back in for the next batch: a count of the spinner's
        // switches depends on that CPU's other work, its first one does not.
        assert!(
            switches_into(&after, tid) >= 1,
            "the held switch reached the ring"
        );
        return;
    }
    panic!("in 20 tries the spinner's CPU never held the switch into it");
}
