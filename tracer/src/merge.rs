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
//! CPU keep their relative order (the sort is stable). A record that still
//! arrives stamped before something already released is counted as late and
//! released at once, never dropped.

/// Holds records of type `T` until they can be released in time order.
#[derive(Debug)]
pub struct Merge<T> {
    held: Vec<(u64, T)>,
    released_until: u64,
    late: u64,
}

impl<T> Default for Merge<T> {
    fn default() -> Self {
        Merge {
            held: Vec::new(),
            released_until: 0,
            late: 0,
        }
    }
}

impl<T> Merge<T> {
    /// Adds a record stamped `time`.
    pub fn push(&mut self, time: u64, record: T) {
        self.held.push((time, record));
    }

    /// Records that arrived after later ones had been released.
    pub fn late(&self) -> u64 {
        self.late
    }

    /// Records held.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Releases, in time order, every held record stamped before `watermark`
    /// (pass `u64::MAX` to release everything).
    pub fn release(&mut self, watermark: u64, mut out: impl FnMut(u64, T)) {
        // Stable, and fast on the few long sorted runs a round produces.
        self.held.sort_by_key(|(t, _)| *t);
        let n = self.held.partition_point(|(t, _)| *t < watermark);
        for (t, r) in self.held.drain(..n) {
            if t < self.released_until {
                self.late += 1;
            } else {
                self.released_until = t;
            }
            out(t, r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_in_time_order_up_to_the_watermark() {
        let mut m = Merge::default();
        for (t, c) in [(5, 'a'), (9, 'a'), (3, 'b'), (7, 'b'), (7, 'c')] {
            m.push(t, c);
        }
        let mut out = Vec::new();
        m.release(8, |t, c| out.push((t, c)));
        assert_eq!(out, vec![(3, 'b'), (5, 'a'), (7, 'b'), (7, 'c')]);
        assert_eq!(m.len(), 1);
        m.push(8, 'b');
        m.release(u64::MAX, |t, c| out.push((t, c)));
        assert_eq!(out[4..], [(8, 'b'), (9, 'a')]);
        assert_eq!(m.late(), 0);
    }

    #[test]
    fn a_late_record_is_counted_and_kept() {
        let mut m = Merge::default();
        m.push(10, ());
        m.release(u64::MAX, |_, _| {});
        m.push(4, ());
        let mut n = 0;
        m.release(u64::MAX, |_, _| n += 1);
        assert_eq!((n, m.late()), (1, 1));
    }
}
