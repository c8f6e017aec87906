//! The eBPF records of each CPU not yet written, kept as the programs
//! wrote them, and their release in time order straight to the output.
//!
//! A round's eBPF chunks are appended here as bytes (one copy, no
//! decoding); [`Recorder::release`](super::Recorder) then takes every
//! CPU's records stamped before the watermark and the merge's other
//! records (perf's task events, mappings, samples, losses) in one time
//! order, and decodes each eBPF record only then, writing it and the
//! stacks it carries at once. A record of a busy server used to be
//! decoded into the merge's queue, sorted and taken out again a round
//! later: three passes over memory that was cold by then, a quarter of the
//! recorder's thread (docs/PERFORMANCE.md 5l).
//!
//! Invariant: a CPU's records leave in the order the CPU wrote them; two
//! records of one time leave in the order of their merge source (a CPU's
//! eBPF records before anything the merge holds under the same source, so
//! stacks paired late still follow their switch); what is written is what
//! the merge would have released, in the same order.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// One CPU's eBPF records not yet written: the drained chunks, copied
/// whole (ring records framed as in the ring), and where the next record
/// is in the oldest.
#[derive(Debug, Default)]
pub(super) struct Pending {
    chunks: VecDeque<Vec<u8>>,
    /// Emptied chunks, for the next ones.
    spare: Vec<Vec<u8>>,
    /// The current ring record in the oldest chunk: its start, length and
    /// the size of the records it holds ([`idleflow_bpf::split_size`]),
    /// and the next record's offset in it.
    record: (usize, usize, usize),
    inner: usize,
    /// Where the ring record after the current one starts.
    next: usize,
}

impl Pending {
    /// Appends the ring records of a drained chunk.
    pub(super) fn append(&mut self, run: &[u8]) {
        if run.is_empty() {
            return;
        }
        let mut c = self.spare.pop().unwrap_or_default();
        c.clear();
        c.extend_from_slice(run);
        self.chunks.push_back(c);
        if self.chunks.len() == 1 {
            self.next = 0;
            self.settle();
        }
    }

    /// The next record's bytes, if any.
    pub(super) fn front(&self) -> Option<&[u8]> {
        let c = self.chunks.front()?;
        let (start, len, size) = self.record;
        let from = start + self.inner;
        Some(&c[from..from + size.min(len - self.inner)])
    }

    /// The next record's time (the first eight bytes of every eBPF
    /// record; a record too short for them comes first, to be counted).
    pub(super) fn front_time(&self) -> Option<u64> {
        let r = self.front()?;
        Some(r.get(..8).map_or(0, |t| {
            u64::from_ne_bytes(t.try_into().expect("eight bytes"))
        }))
    }

    /// Goes past the next record.
    pub(super) fn advance(&mut self) {
        if self.chunks.is_empty() {
            return;
        }
        let (_, len, size) = self.record;
        self.inner += size;
        if self.inner >= len {
            self.settle();
        }
    }

    /// Moves to the ring record at `next`, past discarded ones and emptied
    /// chunks.
    fn settle(&mut self) {
        while let Some(c) = self.chunks.front() {
            match idleflow_bpf::ring_record_at(c, self.next) {
                Some((next, record)) => {
                    self.next = next;
                    if let Some(r) = record {
                        let start = r.as_ptr() as usize - c.as_ptr() as usize;
                        // An empty record is one (undecodable, so counted).
                        self.record = (start, r.len(), idleflow_bpf::split_size(r));
                        self.inner = 0;
                        return;
                    }
                }
                None => {
                    if let Some(done) = self.chunks.pop_front() {
                        self.spare.push(done);
                    }
                    self.next = 0;
                }
            }
        }
        self.record = (0, 0, 0);
        self.inner = 0;
    }

    /// Whether nothing is pending.
    pub(super) fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }
}

/// Rings up to this many are compared one by one for the oldest front;
/// more go through a heap.
const LINEAR_FRONTS: usize = 16;

/// The order in which the CPUs' pending records leave: by time, then by
/// merge source. Holds each CPU's next record below the watermark.
#[derive(Debug)]
pub(super) struct Fronts {
    /// Per ring (few rings): its front's (time, source), if in line.
    each: Vec<Option<(u64, usize)>>,
    /// Many rings: (time, source, ring) of each front in line.
    heap: BinaryHeap<Reverse<(u64, usize, usize)>>,
}

impl Fronts {
    /// No front in line, for `rings` rings.
    pub(super) fn new(rings: usize) -> Self {
        Fronts {
            each: if rings <= LINEAR_FRONTS {
                vec![None; rings]
            } else {
                Vec::new()
            },
            heap: BinaryHeap::new(),
        }
    }

    /// Puts ring `ring` (merge source `source`) in line if its next record
    /// is stamped before `watermark`.
    pub(super) fn offer(&mut self, pending: &Pending, ring: usize, source: usize, watermark: u64) {
        let front = pending.front_time().filter(|&t| t < watermark);
        match self.each.get_mut(ring) {
            Some(slot) => *slot = front.map(|t| (t, source)),
            None => {
                if let Some(t) = front {
                    self.heap.push(Reverse((t, source, ring)));
                }
            }
        }
    }

    /// The oldest (time, source, ring) in line, without taking it.
    pub(super) fn peek(&self) -> Option<(u64, usize, usize)> {
        if self.each.is_empty() {
            return self.heap.peek().map(|r| r.0);
        }
        let mut best: Option<(u64, usize, usize)> = None;
        for (ring, f) in self.each.iter().enumerate() {
            if let Some((t, s)) = *f {
                if best.is_none_or(|(bt, bs, _)| (t, s) < (bt, bs)) {
                    best = Some((t, s, ring));
                }
            }
        }
        best
    }

    /// Takes the oldest in line: its ring.
    pub(super) fn pop(&mut self) -> Option<usize> {
        if self.each.is_empty() {
            return self.heap.pop().map(|r| r.0 .2);
        }
        let (_, _, ring) = self.peek()?;
        self.each[ring] = None;
        Some(ring)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ring run of `records`, each framed on its own (a batch of
    /// fixed-size records is one of them).
    fn run(records: &[Vec<u8>]) -> Vec<u8> {
        let mut out = Vec::new();
        for r in records {
            out.extend_from_slice(&(r.len() as u32).to_ne_bytes());
            out.extend_from_slice(&[0; 4]);
            out.extend_from_slice(r);
            out.resize(out.len().next_multiple_of(8), 0);
        }
        out
    }

    fn rec(t: u64) -> Vec<u8> {
        let mut v = vec![0u8; idleflow_bpf::RECORD_BYTES];
        v[..8].copy_from_slice(&t.to_ne_bytes());
        v
    }

    #[test]
    fn records_come_back_in_order_across_chunks_and_batches() {
        let mut p = Pending::default();
        let batch: Vec<u8> = [rec(5), rec(6)].concat();
        p.append(&run(&[batch, rec(7)]));
        assert_eq!(p.front_time(), Some(5));
        p.advance();
        assert_eq!(p.front_time(), Some(6));
        p.append(&run(&[rec(9)]));
        p.advance();
        assert_eq!(p.front(), Some(rec(7).as_slice()));
        p.advance();
        assert_eq!(p.front_time(), Some(9));
        p.advance();
        assert!(p.is_empty());
        assert_eq!(p.front_time(), None);
        // A chunk after the emptied ones starts afresh.
        p.append(&run(&[rec(11)]));
        assert_eq!(p.front_time(), Some(11));
    }

    #[test]
    fn fronts_leave_by_time_then_source() {
        let mut one = Pending::default();
        let mut two = Pending::default();
        one.append(&run(&[rec(4)]));
        two.append(&run(&[rec(4), rec(3)]));
        // Few rings, compared one by one; many, through the heap.
        for rings in [2, LINEAR_FRONTS + 1] {
            let mut f = Fronts::new(rings);
            f.offer(&one, 0, 7, 10);
            f.offer(&two, 1, 6, 10);
            assert_eq!(f.peek(), Some((4, 6, 1)));
            assert_eq!(f.pop(), Some(1));
            assert_eq!(f.pop(), Some(0));
            assert_eq!(f.pop(), None);
            // Past the watermark: not in line.
            f.offer(&one, 0, 7, 4);
            assert_eq!(f.peek(), None);
        }
    }
}
