//! The drain thread: moves the bytes of every CPU's ring into memory as soon
//! as the kernel says a ring passed its watermark, at real-time priority
//! when the recorder may have it, so that draining never waits for the
//! scheduler's fair share on a saturated machine. It only copies bytes;
//! everything else (parse, join, merge, tag, write) stays on the recorder's
//! ordinary thread, which cannot starve the traced program.
//!
//! Invariants: a [`Round`] holds whole records, copied out before the ring's
//! tail is handed back; rounds reach the recorder in the order they were
//! drained, each with the time it started (the merge's watermark). Memory
//! in flight is bounded by [`MAX_IN_FLIGHT`]: beyond it the drain waits, the
//! rings fill and the kernel counts what it drops (LOST records), never
//! silently.

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::ring::Ring;
use crate::sys::{self, EventFd, SysError};

/// The most ring bytes drained and not yet processed. A recorder starved of
/// CPU for this long (seconds of a saturated machine's records) lets the
/// rings fill instead of growing further.
pub const MAX_IN_FLIGHT: usize = 512 << 20;

/// Bytes of buffers the drain thread touches before its first round.
const PREFAULT: usize = 64 << 20;

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

/// What one pass over the rings copied out.
#[derive(Debug)]
pub struct Round {
    /// When the pass started, ns (`CLOCK_MONOTONIC`).
    pub start_ns: u64,
    /// (ring index, its records' bytes), rings with nothing left out.
    pub chunks: Vec<(usize, Vec<u8>)>,
}

impl Round {
    fn bytes(&self) -> usize {
        self.chunks.iter().map(|(_, b)| b.len()).sum()
    }
}

#[derive(Debug)]
struct Shared {
    stop: AtomicBool,
    in_flight: AtomicUsize,
    /// A period the recorder asks for (0: adaptive), ms.
    period_ms: AtomicI32,
    /// Wakes the drain thread (stop, or memory freed).
    wake: EventFd,
    /// Tells the recorder a round is ready.
    ready: EventFd,
}

/// Chunk buffers the recorder has processed, back for the drain to fill
/// again: memory the drain thread already touched, so that it neither maps
/// memory nor takes page faults (which wait for the process's memory lock,
/// held at times by the ordinary-priority recorder thread, which a
/// saturated machine may not run for a while).
type Recycled = mpsc::Sender<Vec<u8>>;

/// The drain thread and its rounds. See the module documentation.
#[derive(Debug)]
pub struct Drain {
    shared: Arc<Shared>,
    rounds: Receiver<Round>,
    recycle: Recycled,
    thread: Option<JoinHandle<()>>,
    /// How the thread runs: `"SCHED_FIFO 10"`, or ordinary and why.
    priority: Arc<std::sync::Mutex<String>>,
}

impl Drain {
    /// Starts draining `rings`; `fds` are the descriptors that become
    /// readable when a ring passes its watermark. The caller keeps those
    /// descriptors open until [`Drain::stop`] (a closed one only makes
    /// `poll` report it, never a fault).
    /// `fifo` is its `SCHED_FIFO` priority (0: ordinary priority).
    pub fn start(
        rings: Vec<Ring>,
        fds: Vec<i32>,
        ring_bytes: usize,
        fifo: i32,
    ) -> Result<Self, SysError> {
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            period_ms: AtomicI32::new(0),
            wake: EventFd::new()?,
            ready: EventFd::new()?,
        });
        let (tx, rounds) = mpsc::channel();
        let (recycle, recycled) = mpsc::channel();
        let priority = Arc::new(std::sync::Mutex::new(String::new()));
        let (s, p) = (Arc::clone(&shared), Arc::clone(&priority));
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
                run(rings, &fds, ring_bytes, &s, &tx, &recycled);
            })
            .map_err(|source| SysError {
                call: "spawning the drain thread".into(),
                source,
            })?;
        Ok(Drain {
            shared,
            rounds,
            recycle,
            thread: Some(thread),
            priority,
        })
    }

    /// The descriptor that is readable while rounds wait (for `poll`).
    pub fn ready_fd(&self) -> i32 {
        self.shared.ready.as_fd().as_raw_fd()
    }

    /// The rounds drained so far, oldest first. Hand each back with
    /// [`Drain::processed`] once its records are read.
    pub fn take_rounds(&self) -> Vec<Round> {
        self.shared.ready.clear();
        self.rounds.try_iter().collect()
    }

    /// A round's records were read: its memory goes back to the drain.
    pub fn processed(&self, round: Round) {
        let n = round.bytes();
        for (_, mut bytes) in round.chunks {
            bytes.clear();
            let _ = self.recycle.send(bytes);
        }
        if n > 0 {
            let before = self.shared.in_flight.fetch_sub(n, Ordering::AcqRel);
            if before >= MAX_IN_FLIGHT {
                self.shared.wake.notify(); // the drain waits for memory
            }
        }
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

    /// Stops the thread after one last pass over every ring (call after
    /// the events are disabled) and returns the rounds not taken yet.
    pub fn stop(&mut self) -> Vec<Round> {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.wake.notify();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.rounds.try_iter().collect()
    }
}

impl Drop for Drain {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The drain loop: wait for a watermark, the period, or a wake-up; copy
/// every ring's records out; hand the round over.
fn run(
    mut rings: Vec<Ring>,
    fds: &[i32],
    ring_bytes: usize,
    shared: &Shared,
    tx: &mpsc::Sender<Round>,
    recycled: &Receiver<Vec<u8>>,
) {
    let mut fds = fds.to_vec();
    fds.push(shared.wake.as_fd().as_raw_fd());
    let mut period = 25;
    // Buffers touched now, so that the first rounds take no page faults
    // either (half a ring each, at most PREFAULT bytes in all).
    let each = (ring_bytes / 2).min(PREFAULT / rings.len().max(1));
    let mut spare: Vec<Vec<u8>> = (0..rings.len())
        .map(|_| {
            let mut b = vec![0xa5u8; each]; // not zero: calloc would not touch the pages
            b.clear();
            b
        })
        .collect();
    loop {
        let stopping = shared.stop.load(Ordering::Acquire);
        if !stopping {
            let asked = shared.period_ms.load(Ordering::Relaxed);
            let wait = if asked > 0 { asked } else { period };
            let _ = sys::poll_fds(&fds, wait);
            shared.wake.clear();
        }
        if !stopping && shared.in_flight.load(Ordering::Acquire) >= MAX_IN_FLIGHT {
            // The recorder is behind: wait for it to free memory (the rings
            // fill meanwhile), without spinning on the readable rings.
            let _ = sys::poll_fds(&fds[fds.len() - 1..], MIN_PERIOD_MS);
            continue;
        }
        let start_ns = sys::monotonic_ns();
        let mut chunks = Vec::new();
        let mut fullest = 0;
        let mut total = 0;
        for (i, ring) in rings.iter_mut().enumerate() {
            let mut bytes = spare
                .pop()
                .or_else(|| recycled.try_recv().ok())
                .unwrap_or_default();
            let n = ring.drain_bytes(&mut bytes);
            fullest = fullest.max(n);
            if n > 0 {
                total += n;
                chunks.push((i, bytes));
            } else {
                spare.push(bytes); // kept, not freed (see `Recycled`)
            }
        }
        period = if total > ROUND_BYTES {
            (period / 2).max(BUSY_PERIOD_MS)
        } else if fullest > ring_bytes / 8 {
            (period / 2).max(MIN_PERIOD_MS)
        } else if fullest < ring_bytes / 64 {
            (period * 2).min(MAX_PERIOD_MS)
        } else {
            period
        };
        shared.in_flight.fetch_add(total, Ordering::AcqRel);
        // Even an empty round moves the watermark on.
        if tx.send(Round { start_ns, chunks }).is_err() {
            return;
        }
        shared.ready.notify();
        if stopping {
            return;
        }
    }
}
