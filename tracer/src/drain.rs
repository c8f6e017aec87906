//! The drain thread: moves the bytes of every CPU's ring into memory as soon
//! as the kernel says a ring passed its watermark, at real-time priority
//! when the recorder may have it, so that draining never waits for the
//! scheduler's fair share on a saturated machine. It only copies bytes;
//! everything else (parse, join, merge, tag, write) stays on the recorder's
//! ordinary thread, which cannot starve the traced program.
//!
//! A real-time thread is only as fast as the locks it takes: once running,
//! the drain asks the kernel for no memory and frees none (it copies into
//! [`crate::staging`], reuses the rounds the recorder hands back, and waits
//! on a prepared [`PollSet`]), because the memory-map lock it would wait
//! for may be held by the ordinary-priority recorder, preempted among a
//! saturated machine's threads.
//!
//! Invariants: a [`Round`] holds whole records, copied out before the ring's
//! tail is handed back; rounds reach the recorder in the order they were
//! drained, each with the time it started (the merge's watermark), and free
//! their staging memory in that order. Memory in flight is bounded by the
//! staging mapping: when it is full the drain waits, the rings fill and the
//! kernel counts what it drops (LOST records), never silently. A stop
//! drains every ring to its end before the thread exits.

use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU8, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::ring::Ring;
use crate::staging::{self, Reader, Region, Writer};
use crate::sys::{self, EventFd, PollSet, SysError};

/// The most ring bytes a recording drains and does not process yet (the
/// staging mapping's length, unless two passes over the rings need more). A recorder starved of
/// CPU for this long (seconds of a saturated machine's records) lets the
/// rings fill instead of growing further.
pub const MAX_IN_FLIGHT: usize = 512 << 20;

/// Staging bytes touched before the first round: two passes over full
/// rings, within these bounds. (Pages touched later fault in the staging
/// mapping alone, which takes no lock the recorder holds.)
const PREFAULT_MIN: usize = 16 << 20;
const PREFAULT_MAX: usize = 64 << 20;

/// Rounds drained and not yet processed, at most (each is ≥ 1 ms apart).
const ROUNDS_IN_FLIGHT: usize = 4096;

/// The drain thread's default real-time priority (`perf record -r` uses
/// what the user gives; 10 is above ordinary work and below the kernel's
/// threads).
pub const DRAIN_PRIORITY: i32 = 10;

/// The adaptive period's bounds, ms: the drain also wakes when a ring passes
/// its watermark, so the period only matters for slow streams.
const MIN_PERIOD_MS: i32 = 10;
const MAX_PERIOD_MS: i32 = 250;

/// Ring bytes a round should stay under, whatever the number of CPUs: the
/// merge holds about two rounds, and kept this small they stay in the
/// cache, so its cost per record does not grow with the CPUs
/// (`benches/scale.rs`). Above it the period shortens, down to
/// `BUSY_PERIOD_MS`.
const ROUND_BYTES: usize = 1 << 20;
const BUSY_PERIOD_MS: i32 = 1;

/// Rings the drain empties besides perf's: the eBPF source's
/// (`recorder/bpf.rs` implements it for `idleflow_bpf::RingDrain`). Ring
/// `i`'s records reach the recorder as chunks of slot `perf rings + i`.
///
/// Like the perf rings, they are emptied by this thread only, without
/// allocating: a wait on [`SideRings::wait_fd`] (edge-triggered, so that
/// records coming in all the time do not keep the thread awake), then
/// [`SideRings::drain`] on every pass.
pub trait SideRings: Send {
    /// How many rings (the chunk slots `perf rings .. perf rings + n`).
    fn rings(&self) -> usize;
    /// Readable once after a ring passed its wake-up threshold.
    fn wait_fd(&self) -> i32;
    /// Takes the wake-ups pending on [`SideRings::wait_fd`].
    fn rearm(&mut self);
    /// Offers each ring's records, in order, to `place(ring, bytes)`, which
    /// returns whether it took them (records not taken are offered again).
    /// A ring that cannot be read keeps its records in the kernel, which
    /// counts what it drops when full.
    fn drain(&mut self, place: &mut dyn FnMut(usize, &[u8]) -> bool);
    /// Called before [`SideRings::drain`] at `now`: the oldest time of a
    /// record not in the rings yet (`u64::MAX`: none), after asking the
    /// source to move what waited too long.
    fn hold_back(&mut self, _now: u64) -> u64 {
        u64::MAX
    }
}

/// What one pass over the rings copied out.
#[derive(Debug)]
pub struct Round {
    /// Its place in the drain order (0, 1, …).
    seq: u64,
    /// When the pass started, ns (`CLOCK_MONOTONIC`).
    start_ns: u64,
    /// The oldest record not in the rings yet as the pass started (the
    /// eBPF programs' batches; `u64::MAX`: none).
    held_from: u64,
    /// (ring index, its records' bytes), rings with nothing left out.
    chunks: Vec<(usize, Region)>,
    /// The staging position after its bytes.
    end: u64,
    staging: Reader,
}

impl Round {
    /// When the pass started, ns (`CLOCK_MONOTONIC`).
    pub fn start_ns(&self) -> u64 {
        self.start_ns
    }

    /// Every record stamped before this was in its ring when the pass
    /// started or came in it (`u64::MAX`: every record stamped before the
    /// pass did): the merge may not release past it.
    pub fn held_from(&self) -> u64 {
        self.held_from
    }

    /// (ring index, the bytes of its whole records), oldest first; rings
    /// that had nothing are left out.
    pub fn chunks(&self) -> impl Iterator<Item = (usize, &[u8])> + '_ {
        self.chunks
            .iter()
            .map(|(ring, region)| (*ring, self.staging.bytes(region)))
    }
}

/// What the recorder asks of the thread.
const RUN: u8 = 0;
/// Drain every ring to its end, then exit.
const FINISH: u8 = 1;
/// Exit now (the recorder is gone).
const ABANDON: u8 = 2;

#[derive(Debug)]
struct Shared {
    state: AtomicU8,
    /// The thread sent its last round.
    finished: AtomicBool,
    /// The thread waits for the recorder to free staging memory or rounds.
    starved: AtomicBool,
    /// A period the recorder asks for (0: adaptive), ms.
    period_ms: AtomicI32,
    /// Wakes the drain thread (stop, or memory freed).
    wake: EventFd,
    /// Tells the recorder a round is ready.
    ready: EventFd,
}

/// Rounds processed out of order wait here until the ones before them are
/// processed: staging memory is freed in order.
#[derive(Debug, Default)]
struct Releases {
    next: u64,
    early: BTreeMap<u64, u64>,
}

/// The drain thread and its rounds. See the module documentation.
#[derive(Debug)]
pub struct Drain {
    shared: Arc<Shared>,
    rounds: Receiver<Round>,
    /// Processed rounds, emptied, back to the thread for reuse.
    recycle: SyncSender<Round>,
    staging: Reader,
    releases: Mutex<Releases>,
    thread: Option<JoinHandle<()>>,
    /// How the thread runs: `"SCHED_FIFO 10"`, or ordinary and why.
    priority: Arc<Mutex<String>>,
}

impl Drain {
    /// Starts draining `rings`; `fds` are the descriptors that become
    /// readable when a ring passes its watermark. The caller keeps those
    /// descriptors open until [`Drain::finish`] (a closed one only makes
    /// `poll` report it, never a fault).
    /// `fifo` is its `SCHED_FIFO` priority (0: ordinary priority);
    /// `max_in_flight` bounds the bytes drained and not yet processed
    /// ([`MAX_IN_FLIGHT`] for a recording; at least two passes over full
    /// rings are always allowed).
    ///
    /// `side` are rings of another kind to empty on every pass too
    /// ([`SideRings`]).
    pub fn start(
        rings: Vec<Ring>,
        fds: Vec<i32>,
        fifo: i32,
        max_in_flight: usize,
        side: Option<Box<dyn SideRings>>,
    ) -> Result<Self, SysError> {
        let shared = Arc::new(Shared {
            state: AtomicU8::new(RUN),
            finished: AtomicBool::new(false),
            starved: AtomicBool::new(false),
            period_ms: AtomicI32::new(0),
            wake: EventFd::new()?,
            ready: EventFd::new()?,
        });
        // One pass over full rings must fit, whatever the user's ring size.
        let one_pass: usize = rings.iter().map(Ring::data_size).sum();
        let (writer, staging) = staging::new(
            max_in_flight.max(2 * one_pass),
            (2 * one_pass).clamp(PREFAULT_MIN, PREFAULT_MAX),
        )?;
        // Every round the thread will fill, made now (so it never allocates).
        let shells: Vec<Round> = (0..ROUNDS_IN_FLIGHT)
            .map(|_| Round {
                seq: 0,
                start_ns: 0,
                held_from: u64::MAX,
                chunks: Vec::with_capacity(rings.len() + side.as_ref().map_or(0, |s| s.rings())),
                end: 0,
                staging: staging.clone(),
            })
            .collect();
        let (tx, rounds) = mpsc::sync_channel(ROUNDS_IN_FLIGHT);
        let (recycle, recycled) = mpsc::sync_channel(ROUNDS_IN_FLIGHT);
        let priority = Arc::new(Mutex::new(String::new()));
        let (s, p) = (Arc::clone(&shared), Arc::clone(&priority));
        let mut wait_set = fds.clone();
        wait_set.extend(side.as_ref().map(|s| s.wait_fd()));
        wait_set.push(shared.wake.as_fd().as_raw_fd());
        let thread = std::thread::Builder::new()
            .name("idleflow-drain".into())
            .spawn(move || {
                sys::block_signals();
                let how = if fifo == 0 {
                    "ordinary (--drain-priority 0)".to_string()
                } else {
                    match sys::set_fifo_priority(fifo) {
                        Ok(()) => format!("SCHED_FIFO {fifo}"),
                        Err(e) => format!("ordinary ({e}: {})", e.source),
                    }
                };
                if let Ok(mut g) = p.lock() {
                    *g = how;
                }
                let mut thread = Thread {
                    rings,
                    side,
                    writer,
                    shells,
                    next_seq: 0,
                    any: PollSet::new(&wait_set),
                    wake: PollSet::new(&wait_set[wait_set.len() - 1..]),
                };
                thread.run(&s, &tx, &recycled);
            })
            .map_err(|source| SysError {
                call: "spawning the drain thread".into(),
                source,
            })?;
        Ok(Drain {
            shared,
            rounds,
            recycle,
            staging,
            releases: Mutex::new(Releases::default()),
            thread: Some(thread),
            priority,
        })
    }

    /// The descriptor that is readable while rounds wait (for `poll`).
    pub fn ready_fd(&self) -> i32 {
        self.shared.ready.as_fd().as_raw_fd()
    }

    /// The rounds drained so far, oldest first. Hand each back with
    /// [`Drain::processed`] once its records are read, in this order (a
    /// round never handed back keeps its memory, and that of every round
    /// after it, from the drain).
    pub fn take_rounds(&self) -> Vec<Round> {
        self.shared.ready.clear();
        self.rounds.try_iter().collect()
    }

    /// A round's records were read: its memory goes back to the drain.
    pub fn processed(&self, mut round: Round) {
        let upto = {
            let mut guard = self.releases.lock().unwrap_or_else(|e| e.into_inner());
            let r = &mut *guard;
            r.early.insert(round.seq, round.end);
            let mut upto = None;
            while let Some(end) = r.early.remove(&r.next) {
                upto = Some(end);
                r.next += 1;
            }
            upto
        };
        if let Some(end) = upto {
            self.staging.release(end);
            if self.shared.starved.swap(false, Ordering::AcqRel) {
                self.shared.wake.notify();
            }
        }
        round.chunks.clear();
        let _ = self.recycle.try_send(round);
    }

    /// Asks for a fixed period (ms), or the adaptive one (`None`); a change
    /// applies at once, not after the thread's current wait.
    pub fn set_period(&self, ms: Option<i32>) {
        let ms = ms.unwrap_or(0).max(0);
        if self.shared.period_ms.swap(ms, Ordering::Relaxed) != ms {
            self.shared.wake.notify();
        }
    }

    /// How the thread runs (known once it started).
    pub fn priority(&self) -> String {
        self.priority.lock().map(|g| g.clone()).unwrap_or_default()
    }

    /// Asks the thread for one last pass that empties every ring (call after
    /// the events are disabled); keep taking and processing rounds until
    /// [`Drain::finished`].
    pub fn finish(&self) {
        self.shared.state.store(FINISH, Ordering::Release);
        self.shared.wake.notify();
    }

    /// Whether the thread sent its last round (or ended otherwise, a panic
    /// included: a stop never waits on a thread that is gone): rounds taken
    /// after this says so are all there will be.
    pub fn finished(&self) -> bool {
        self.shared.finished.load(Ordering::Acquire)
            || self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }
}

impl Drop for Drain {
    fn drop(&mut self) {
        if !self.finished() {
            self.shared.state.store(ABANDON, Ordering::Release);
            self.shared.wake.notify();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What the drain thread owns.
struct Thread {
    rings: Vec<Ring>,
    side: Option<Box<dyn SideRings>>,
    writer: Writer,
    /// Rounds to fill (the recorder sends processed ones back).
    shells: Vec<Round>,
    next_seq: u64,
    /// The rings' descriptors and the wake-up descriptor.
    any: PollSet,
    /// The wake-up descriptor alone.
    wake: PollSet,
}

impl Thread {
    /// The drain loop: wait for a watermark, the period, or a wake-up; copy
    /// every ring's records out; hand the round over.
    fn run(&mut self, shared: &Shared, tx: &SyncSender<Round>, recycled: &Receiver<Round>) {
        let mut period = 25;
        loop {
            let state = shared.state.load(Ordering::Acquire);
            if state == ABANDON {
                return;
            }
            if state == RUN {
                let asked = shared.period_ms.load(Ordering::Relaxed);
                let wait = if asked > 0 { asked } else { period };
                let _ = self.any.wait(wait);
                shared.wake.clear();
                if let Some(side) = self.side.as_mut() {
                    side.rearm();
                }
            }
            let shell = self.shells.pop().or_else(|| recycled.try_recv().ok());
            let Some(mut round) = shell else {
                self.starve(shared);
                continue;
            };
            round.seq = self.next_seq;
            round.start_ns = sys::monotonic_ns();
            round.held_from = self
                .side
                .as_mut()
                .map_or(u64::MAX, |s| s.hold_back(round.start_ns));
            let mut fullest = 0;
            let mut total = 0;
            let mut left_behind = false;
            for (i, ring) in self.rings.iter_mut().enumerate() {
                let writer = &mut self.writer;
                let (mut placed, mut wanted) = (None, 0);
                let n = ring.drain_into(|n| {
                    wanted = n;
                    let (region, bytes) = writer.place(n)?;
                    placed = Some(region);
                    Some(bytes)
                });
                match placed {
                    Some(region) => {
                        fullest = fullest.max(n);
                        total += n;
                        round.chunks.push((i, region));
                    }
                    None => left_behind |= wanted > 0,
                }
            }
            if let Some(side) = self.side.as_mut() {
                let base = self.rings.len();
                let writer = &mut self.writer;
                side.drain(&mut |i, bytes| {
                    let Some((region, out)) = writer.place(bytes.len()) else {
                        left_behind = true;
                        return false;
                    };
                    out[..bytes.len()].copy_from_slice(bytes);
                    fullest = fullest.max(bytes.len());
                    total += bytes.len();
                    round.chunks.push((base + i, region));
                    true
                });
            }
            round.end = self.writer.position();
            period = adapt(period, total, fullest, self.ring_bytes());
            self.next_seq += 1;
            // Even an empty round moves the watermark on. The channel has a
            // slot for every shell, so this never blocks.
            if tx.send(round).is_err() {
                return;
            }
            shared.ready.notify();
            if left_behind {
                self.starve(shared);
            } else if state == FINISH {
                shared.finished.store(true, Ordering::Release);
                shared.ready.notify();
                return;
            }
        }
    }

    /// The recorder holds all the staging memory or every round: wait for
    /// it to hand some back (the rings fill meanwhile), without spinning on
    /// the readable rings.
    fn starve(&mut self, shared: &Shared) {
        shared.starved.store(true, Ordering::Release);
        let _ = self.wake.wait(MIN_PERIOD_MS);
        shared.wake.clear();
    }

    fn ring_bytes(&self) -> usize {
        self.rings.first().map_or(0, Ring::data_size)
    }
}

/// The next period, ms, from what the last round moved.
fn adapt(period: i32, total: usize, fullest: usize, ring_bytes: usize) -> i32 {
    if total > ROUND_BYTES {
        (period / 2).max(BUSY_PERIOD_MS)
    } else if fullest > ring_bytes / 8 {
        (period / 2).max(MIN_PERIOD_MS)
    } else if fullest < ring_bytes / 64 {
        (period * 2).min(MAX_PERIOD_MS)
    } else {
        period
    }
}
