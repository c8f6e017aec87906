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
//! inserted in place). Releasing takes every queue's records below the
//! watermark and orders them with an LSD radix sort of their times relative
//! to the oldest (two or three passes of 11–12 bits for a round's span),
//! so the cost per record does not depend on the number of sources:
//! `benches/scale.rs` measured a heap-based k-way merge at 28 M records/s on
//! 2 CPUs and 12 M/s on 128 (7 mispredicted sift levels a record), and a
//! comparison sort of everything at 30 and 11 M/s.

/// Holds records of type `T` until they can be released in time order.
#[derive(Debug)]
pub struct Merge<T> {
    queues: Vec<VecDeque<(u64, T)>>,
    held: usize,
    released: Released,
    /// Sort keys of the records being released (see `release`).
    keys: Vec<u64>,
    /// The keys' sources, where the keys are absolute times.
    sources: Vec<usize>,
    scratch: Vec<u64>,
    counts: Vec<u32>,
}

impl<T> Default for Merge<T> {
    fn default() -> Self {
        Merge {
            queues: Vec::new(),
            held: 0,
            released: Released::default(),
            sources: Vec::new(),
            keys: Vec::new(),
            scratch: Vec::new(),
            counts: Vec::new(),
        }
    }
}

/// What has been released: the newest time, and how many came late.
#[derive(Debug, Default)]
struct Released {
    until: u64,
    late: u64,
}

impl Released {
    /// Hands one record out, counting it late if it is older than one
    /// released before.
    fn emit<T>(&mut self, t: u64, source: usize, r: T, out: &mut impl FnMut(u64, usize, T)) {
        if t < self.until {
            self.late += 1;
        } else {
            self.until = t;
        }
        out(t, source, r);
    }
}

/// Below this many records a release sorts its keys by comparison.
const RADIX_MIN: usize = 256;
/// Widest radix digit, in bits (4096 counters: fits the L1 cache).
const MAX_DIGIT_BITS: u32 = 12;

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
        self.released.late
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
        self.release_sourced(watermark, |t, _, r| out(t, r));
    }

    /// [`Merge::release`], handing out each record's source too.
    pub fn release_sourced(&mut self, watermark: u64, mut out: impl FnMut(u64, usize, T)) {
        let mut oldest = u64::MAX;
        let mut newest = 0;
        let mut sources = 0;
        let mut total = 0;
        for q in &self.queues {
            let n = q.partition_point(|(t, _)| *t < watermark);
            if n > 0 {
                sources += 1;
                total += n;
                oldest = oldest.min(q[0].0);
                newest = newest.max(q[n - 1].0);
            }
        }
        if total == 0 {
            return;
        }
        self.held -= total;
        if sources == 1 {
            // One source is already in order.
            let (i, q) = self
                .queues
                .iter_mut()
                .enumerate()
                .find(|(_, q)| q.front().is_some_and(|(t, _)| *t < watermark))
                .expect("a source was counted");
            for (t, r) in q.drain(..total) {
                self.released.emit(t, i, r, &mut out);
            }
            return;
        }
        // One key per record: its time relative to the oldest above its
        // source. Sorted, equal keys are the same source's records of one
        // time, so each key pops the front of its source's queue: a queue is
        // in time order, and the records move once, from queue to `out`.
        let span = newest - oldest;
        self.keys.clear();
        for (i, q) in self.queues.iter().enumerate() {
            let n = q.partition_point(|(t, _)| *t < watermark);
            let src = i as u64;
            if span < 1 << 32 {
                self.keys
                    .extend(q.range(..n).map(|(t, _)| ((t - oldest) << 32) | src));
            } else {
                // A recording's end after a long quiet stretch: absolute
                // times, sorted with their sources by comparison below.
                self.keys.extend(q.range(..n).map(|(t, _)| *t));
                self.sources.extend(std::iter::repeat_n(i, n));
            }
        }
        if span >= 1 << 32 {
            let mut order: Vec<(u64, usize)> = self
                .keys
                .iter()
                .copied()
                .zip(self.sources.drain(..))
                .collect();
            order.sort_unstable();
            for (_, i) in order {
                self.pop(i, &mut out);
            }
            return;
        }
        if total < RADIX_MIN {
            self.keys.sort_unstable();
        } else {
            self.radix_sort(64 - span.leading_zeros());
        }
        for i in 0..self.keys.len() {
            self.pop(self.keys[i] as u32 as usize, &mut out);
        }
    }

    /// Hands out the front record of queue `i`.
    fn pop(&mut self, i: usize, out: &mut impl FnMut(u64, usize, T)) {
        let (t, r) = self.queues[i].pop_front().expect("a key per record");
        self.released.emit(t, i, r, out);
    }

    /// LSD radix sort of `keys` on their `bits` relative-time bits (stable:
    /// equal times keep their sources' order).
    fn radix_sort(&mut self, bits: u32) {
        if bits == 0 {
            return;
        }
        let passes = bits.div_ceil(MAX_DIGIT_BITS);
        let width = bits.div_ceil(passes);
        let buckets = 1usize << width;
        let mask = (buckets - 1) as u64;
        self.scratch.resize(self.keys.len(), 0);
        for pass in 0..passes {
            let shift = 32 + pass * width;
            self.counts.clear();
            self.counts.resize(buckets, 0);
            for &k in &self.keys {
                self.counts[((k >> shift) & mask) as usize] += 1;
            }
            let mut sum = 0;
            for c in &mut self.counts {
                let n = *c;
                *c = sum;
                sum += n;
            }
            for &k in &self.keys {
                let d = ((k >> shift) & mask) as usize;
                self.scratch[self.counts[d] as usize] = k;
                self.counts[d] += 1;
            }
            std::mem::swap(&mut self.keys, &mut self.scratch);
        }
    }
}

use std::collections::VecDeque;

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

    /// The reference order: by time, then source, then arrival.
    fn reference(pushed: &[(usize, u64, u32)], watermark: u64) -> Vec<(u64, u32)> {
        let mut v: Vec<_> = pushed.iter().filter(|p| p.1 < watermark).copied().collect();
        v.sort_by_key(|&(src, t, seq)| (t, src, seq));
        v.into_iter().map(|(_, t, seq)| (t, seq)).collect()
    }

    #[test]
    fn large_releases_match_a_stable_sort_at_any_span() {
        // Sizes across the comparison/radix boundary, spans needing one to
        // three digits and one beyond 32 bits; many equal times.
        for (sources, per_source, step, seed) in [
            (3usize, 50u64, 7u64, 1u64),
            (16, 40, 1_000, 2),
            (128, 30, 3_000_000, 3),
            (5, 500, 40_000_000, 4),
            (4, 300, 1 << 28, 5),
        ] {
            let mut x = seed;
            let mut rnd = move || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            let mut m = Merge::default();
            let mut pushed = Vec::new();
            let mut seq = 0u32;
            for src in 0..sources {
                let mut t = 1_000 + rnd() % 5;
                for _ in 0..per_source {
                    t += rnd() % step / 4 * 4; // multiples of 4: equal times across sources
                    m.push(src, t, seq);
                    pushed.push((src, t, seq));
                    seq += 1;
                }
            }
            let max = pushed.iter().map(|p| p.1).max().unwrap();
            let watermark = 1_000 + (max - 1_000) / 2;
            let mut out = Vec::new();
            m.release(watermark, |t, s| out.push((t, s)));
            assert_eq!(
                out,
                reference(&pushed, watermark),
                "{sources} sources, step {step}"
            );
            assert_eq!(m.len(), pushed.len() - out.len());
            m.release(u64::MAX, |t, s| out.push((t, s)));
            assert_eq!(out, reference(&pushed, u64::MAX));
            assert_eq!((m.late(), m.len()), (0, 0));
        }
    }
}
