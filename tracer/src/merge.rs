//! Time-ordered merge of the per-CPU streams.
//!
//! Records are read from the CPUs' rings in rounds, ring after ring, so what
//! one round yields is in time order per CPU but not across CPUs. The merge
//! holds them back until it is safe to release them in one global order.
//!
//! Invariant (after samply's sorter): a record stamped before the start of
//! round `k` was committed to its ring before any ring was read in round
//! `k + 1`, so once round `k + 1` has been read, every record stamped before
//! `start(k)` is here, and those can be released in time order. Records of a
//! CPU keep their relative order. A record that still arrives stamped before
//! something already released is counted as late and released at once,
//! never dropped.
//!
//! Each source (a CPU's ring) has its own queue, kept in time order as it
//! is filled (a ring is in time order but for the odd record, which is
//! inserted in place); releasing is a k-way merge of the queues' fronts
//! through a heap: O(log CPUs) per record, and records held over a round
//! are not sorted again (`benches/scale.rs`: sorting everything held ran at
//! 30 M records/s on 2 CPUs and 11 M/s on 128).

/// Holds records of type `T` until they can be released in time order.
#[derive(Debug)]
pub struct Merge<T> {
    queues: Vec<VecDeque<(u64, T)>>,
    held: usize,
    heap: BinaryHeap<Reverse<(u64, usize)>>,
    released_until: u64,
    late: u64,
}

impl<T> Default for Merge<T> {
    fn default() -> Self {
        Merge {
            queues: Vec::new(),
            held: 0,
            heap: BinaryHeap::new(),
            released_until: 0,
            late: 0,
        }
    }
}

impl<T> Merge<T> {
    /// Adds a record stamped `time` from `source` (a CPU's ring index).
    pub fn push(&mut self, source: usize, time: u64, record: T) {
        if self.queues.len() <= source {
            self.queues.resize_with(source + 1, VecDeque::new);
        }
        let q = &mut self.queues[source];
        if q.back().is_some_and(|(t, _)| *t > time) {
            // Out of order in its own stream: in place, after equal times.
            let at = q.partition_point(|(t, _)| *t <= time);
            q.insert(at, (time, record));
        } else {
            q.push_back((time, record));
        }
        self.held += 1;
    }

    /// Records that arrived after later ones had been released.
    pub fn late(&self) -> u64 {
        self.late
    }

    /// Records held.
    pub fn len(&self) -> usize {
        self.held
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.held == 0
    }

    /// Releases, in time order, every held record stamped before `watermark`
    /// (pass `u64::MAX` to release everything). Equal times: the lower
    /// source first, and a source's records in the order they came.
    pub fn release(&mut self, watermark: u64, mut out: impl FnMut(u64, T)) {
        self.heap.clear();
        for (i, q) in self.queues.iter().enumerate() {
            if let Some(&(t, _)) = q.front() {
                if t < watermark {
                    self.heap.push(Reverse((t, i)));
                }
            }
        }
        // The top is replaced in place (one sift) while its queue goes on.
        while let Some(mut top) = self.heap.peek_mut() {
            let Reverse((_, i)) = *top;
            let q = &mut self.queues[i];
            let Some((t, r)) = q.pop_front() else {
                PeekMut::pop(top);
                continue;
            };
            self.held -= 1;
            match q.front() {
                Some(&(next, _)) if next < watermark => *top = Reverse((next, i)),
                _ => {
                    PeekMut::pop(top);
                }
            }
            if t < self.released_until {
                self.late += 1;
            } else {
                self.released_until = t;
            }
            out(t, r);
        }
    }
}

use std::cmp::Reverse;
use std::collections::binary_heap::PeekMut;
use std::collections::{BinaryHeap, VecDeque};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_in_time_order_up_to_the_watermark() {
        let mut m = Merge::default();
        for (src, t, c) in [
            (0, 5, 'a'),
            (0, 9, 'a'),
            (1, 3, 'b'),
            (1, 7, 'b'),
            (2, 7, 'c'),
        ] {
            m.push(src, t, c);
        }
        let mut out = Vec::new();
        m.release(8, |t, c| out.push((t, c)));
        assert_eq!(out, vec![(3, 'b'), (5, 'a'), (7, 'b'), (7, 'c')]);
        assert_eq!(m.len(), 1);
        m.push(1, 8, 'b');
        m.release(u64::MAX, |t, c| out.push((t, c)));
        assert_eq!(out[4..], [(8, 'b'), (9, 'a')]);
        assert_eq!(m.late(), 0);
    }

    #[test]
    fn a_late_record_is_counted_and_kept() {
        let mut m = Merge::default();
        m.push(0, 10, ());
        m.release(u64::MAX, |_, _| {});
        m.push(1, 4, ());
        let mut n = 0;
        m.release(u64::MAX, |_, _| n += 1);
        assert_eq!((n, m.late()), (1, 1));
    }

    #[test]
    fn a_record_out_of_order_in_its_own_stream_is_put_in_place() {
        let mut m = Merge::default();
        for (t, c) in [(1, 'a'), (5, 'b'), (3, 'c'), (5, 'd'), (4, 'e')] {
            m.push(0, t, c);
        }
        m.push(1, 4, 'f');
        let mut out = Vec::new();
        m.release(u64::MAX, |t, c| out.push((t, c)));
        assert_eq!(
            out,
            vec![(1, 'a'), (3, 'c'), (4, 'e'), (4, 'f'), (5, 'b'), (5, 'd')]
        );
        assert_eq!((m.late(), m.len()), (0, 0));
    }
}
