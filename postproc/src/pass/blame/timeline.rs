//! The per-thread timelines of blame (see [`super`]): a thread's recent
//! life as segments — running (named by the stacks at the switch-out that
//! ended it), runnable, blocked in a wait ended by its waker — and what a
//! wake-up carried (its stacks, the release site).
//!
//! Invariant: a line's segments are in time order and never overlap; at
//! most [`MAX_SEGMENTS`] are kept.

use std::collections::VecDeque;

/// Segments kept per thread, at most: a wait longer than that much of its
/// waker's history is resolved as far as it reaches, the rest unknown.
pub const MAX_SEGMENTS: usize = 1 << 12;

/// What ended a wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Waker {
    /// A thread's wake-up (an unlock, an unpark, a write).
    Thread(u32),
    /// An interrupt's: a timer, the network, a disk (or a switch-in from an
    /// idle CPU with no wake-up record: this kernel drops those raised in
    /// the idle task's context).
    Interrupt,
    /// No wake-up was seen.
    Unknown,
}

/// What a thread did during a segment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum What {
    Running,
    Runnable,
    /// Waiting; the waker once known.
    Blocked(Option<Waker>),
    /// Exited.
    Gone,
}

/// The stacks taken at a wake-up (kernel, user stack ids; 0: none): the
/// waker's — its release site, the unlock or write that ended a wait — or,
/// for an interrupt's, the interrupt's kernel path (which device).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct WakeStacks {
    pub kernel: u32,
    pub user: u32,
}

impl WakeStacks {
    pub(super) fn is_empty(self) -> bool {
        self.kernel == 0 && self.user == 0
    }
}

/// A stack id as a timeline keeps it (ids beyond `u32` — never seen: they
/// count distinct stacks — read as none).
pub(super) fn id32(id: u64) -> u32 {
    u32::try_from(id).unwrap_or(0)
}

/// One piece of a thread's timeline. A running segment's stacks are the
/// switch-out's that ended it; a wait's, the switch-out's that began it,
/// and `woke` the wake-up's that ended it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Segment {
    pub(super) start: u64,
    /// `u64::MAX` while open.
    pub(super) end: u64,
    pub(super) what: What,
    pub(super) kernel: u32,
    pub(super) user: u32,
    pub(super) node: u64,
    pub(super) woke: WakeStacks,
    /// A wait's system call's first argument (a futex's address), 0: none.
    pub(super) arg: u64,
}

impl Segment {
    pub(super) fn open(start: u64, what: What) -> Self {
        Segment {
            start,
            end: u64::MAX,
            what,
            kernel: 0,
            user: 0,
            node: 0,
            woke: WakeStacks::default(),
            arg: 0,
        }
    }
}

/// Idle charged to a wait that has no waker yet.
#[derive(Debug, Clone, Copy)]
pub(super) struct Piece {
    /// When the wait began (the switch-out).
    pub(super) out: u64,
    /// The idle instants: [start, end), and how much idle they are (more
    /// than `end - start` never; less where a window cut it).
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) idle_ns: u64,
    /// A flight-recorder wait containing `out` went on after the OS wait
    /// that ended (spurious wake-ups): the last OS wait's waker and wake
    /// time so far, and the flight-recorder wait's end.
    pub(super) last: Option<(Waker, u64)>,
    pub(super) jfr_end: u64,
}

/// One thread's recent life.
#[derive(Debug)]
pub(super) struct Line {
    pub(super) segments: VecDeque<Segment>,
    pub(super) current: Segment,
    /// Before this, nothing is known of the thread (its first dispatch, or
    /// where pruning dropped its history).
    pub(super) known_from: u64,
    /// Idle charged to its open wait (or to a flight-recorder wait that
    /// goes on), waiting for the waker.
    pub(super) pieces: Vec<Piece>,
    /// Roots in its open running segment, waiting for the switch-out's
    /// stacks.
    pub(super) pending: Vec<Pending>,
    /// What ended its last wait.
    pub(super) last_waker: Option<Waker>,
    /// Its current run began on an idle CPU after an interrupt's wake-up
    /// (its own timer) and no wake-up was raised on its time since: the idle it
    /// leaves behind is the idle it interrupted (a housekeeping thread's
    /// periodic tick, a timed park that found the lock still taken).
    pub(super) incidental: bool,
    /// When its last run ended, and whether that run was incidental.
    pub(super) last_run: Option<(u64, bool)>,
}

/// A root in a running segment not yet ended: (chain id, idle ns, the
/// wake-up stacks that go with it).
pub(super) type Pending = (u32, u64, Extra);

/// What a root's idle carries besides its key: the root thread's release
/// site (its stacks at the wake-up by which it ended the previous link's
/// wait) and, for a device's root, the interrupt's kernel stack at the
/// wake-up that ended its wait.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Extra {
    pub release: WakeStacks,
    pub irq: u64,
}

/// The wake-up stacks seen at one root's idle, with the idle they go with
/// (at most [`MAX_EXTRAS`] distinct of each kind).
#[derive(Debug, Default)]
pub(crate) struct Extras {
    pub release: Vec<(WakeStacks, u64)>,
    pub irq: Vec<(u64, u64)>,
}

/// Distinct release sites (and interrupt stacks) kept per root.
pub(super) const MAX_EXTRAS: usize = 32;

impl Extras {
    pub(super) fn add(&mut self, e: Extra, ns: u64) {
        fn bump<K: PartialEq>(v: &mut Vec<(K, u64)>, k: K, ns: u64) {
            if let Some(x) = v.iter_mut().find(|(x, _)| *x == k) {
                x.1 = x.1.saturating_add(ns);
            } else if v.len() < MAX_EXTRAS {
                v.push((k, ns));
            }
        }
        if !e.release.is_empty() {
            bump(&mut self.release, e.release, ns);
        }
        if e.irq != 0 {
            bump(&mut self.irq, e.irq, ns);
        }
    }
}

impl Line {
    pub(super) fn new(time: u64, what: What) -> Self {
        Line {
            segments: VecDeque::new(),
            current: Segment::open(time, what),
            known_from: time,
            pieces: Vec::new(),
            pending: Vec::new(),
            last_waker: None,
            incidental: false,
            last_run: None,
        }
    }

    /// Closes the current segment at `time` and opens `what`.
    pub(super) fn switch(&mut self, time: u64, what: What) {
        let mut closed = self.current;
        closed.end = time.max(closed.start);
        if closed.end > closed.start || matches!(closed.what, What::Blocked(_)) {
            if self.segments.len() >= MAX_SEGMENTS {
                if let Some(s) = self.segments.pop_front() {
                    self.known_from = s.end;
                }
            }
            self.segments.push_back(closed);
        }
        self.current = Segment::open(time, what);
    }

    /// The wait that began at `out`: the current segment or a closed one.
    pub(super) fn wait_from(&self, out: u64) -> Option<&Segment> {
        if self.current.start == out && matches!(self.current.what, What::Blocked(_)) {
            return Some(&self.current);
        }
        // Usually one of the last few.
        if let Some(s) = self
            .segments
            .iter()
            .rev()
            .take(4)
            .find(|s| s.start == out && matches!(s.what, What::Blocked(_)))
        {
            return Some(s);
        }
        let i = self.segments.partition_point(|s| s.start < out);
        (i.saturating_sub(1)..(i + 1).min(self.segments.len()))
            .rev()
            .map(|i| &self.segments[i])
            .find(|s| s.start == out && matches!(s.what, What::Blocked(_)))
    }
}
