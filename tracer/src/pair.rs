//! Pairing the stack samples perf takes with the events eBPF records, on
//! one CPU: the `sched_switch` sample carrying the leaving thread's stacks
//! with the eBPF switch it belongs to, a sampled waker stack with the eBPF
//! waking.
//!
//! The two are stamped by different hooks of the same tracepoint, a few µs
//! apart and in either order, and come from different rings drained at
//! slightly different instants: a sample may be read a round before or
//! after its event. So both sides wait here: an event for [`Pairer::event`]
//! remembers itself until its sample comes, a sample for
//! [`Pairer::sample`] until its event comes; [`Pairer::expire`] forgets
//! what is older than both rings have been read to, counting the samples
//! that never paired.
//!
//! Each side comes in time order (one CPU's ring), which keeps a look-up
//! to the entries within the window: a saturated CPU's thousands of
//! switches a round cost no more per sample than an idle one's.
//!
//! Invariant: a sample pairs with at most one event and an event with at
//! most one sample, of the same key (switch: prev and next tid; waking:
//! waker and wakee tid), the nearest in time within [`PAIR_WINDOW_NS`];
//! the caller stamps the stacks with the *event's* time, which the
//! post-processor joins stacks to dispatches by.

use std::collections::VecDeque;

/// The farthest apart a sample and its event may be stamped, ns: the two
/// hooks of one tracepoint run within a few µs (the perf path measured
/// ≤ 1.1 µs between the switch's stamps), so this only guards against
/// pairing with another switch of the same two threads.
pub const PAIR_WINDOW_NS: u64 = 50_000;

/// One CPU's samples and events waiting for their other half.
#[derive(Debug)]
pub struct Pairer<K, S> {
    /// Samples not yet paired, in arrival (time) order.
    samples: VecDeque<(u64, K, S)>,
    /// Events not yet paired, in arrival (time) order.
    events: VecDeque<(u64, K)>,
    /// Samples forgotten without an event.
    unpaired: u64,
}

impl<K, S> Default for Pairer<K, S> {
    fn default() -> Self {
        Pairer {
            samples: VecDeque::new(),
            events: VecDeque::new(),
            unpaired: 0,
        }
    }
}

impl<K: Copy + Eq, S> Pairer<K, S> {
    /// An event stamped `time` that may have a sample: the sample, if one
    /// is waiting (its stacks then go at `time`); otherwise the event waits
    /// for it.
    pub fn event(&mut self, time: u64, key: K) -> Option<S> {
        match nearest(&self.samples, |s| (s.0, s.1), time, key) {
            Some(i) => self.samples.remove(i).map(|s| s.2),
            None => {
                self.events.push_back((time, key));
                None
            }
        }
    }

    /// A sample stamped `time`: the time of its event, if one is waiting
    /// (the stacks go there), with the sample back; otherwise it waits.
    pub fn sample(&mut self, time: u64, key: K, sample: S) -> Option<(u64, S)> {
        match nearest(&self.events, |e| *e, time, key) {
            Some(i) => self.events.remove(i).map(|e| (e.0, sample)),
            None => {
                self.samples.push_back((time, key, sample));
                None
            }
        }
    }

    /// Forgets what was stamped before `time` — both rings have been read
    /// past it, so no other half can come — and counts the samples among
    /// them as never paired.
    pub fn expire(&mut self, time: u64) {
        let limit = time.saturating_sub(PAIR_WINDOW_NS);
        while self.samples.front().is_some_and(|s| s.0 < limit) {
            self.samples.pop_front();
            self.unpaired += 1;
        }
        while self.events.front().is_some_and(|e| e.0 < limit) {
            self.events.pop_front();
        }
    }

    /// Samples forgotten without their event so far.
    pub fn unpaired(&self) -> u64 {
        self.unpaired
    }

    /// Samples still waiting.
    pub fn waiting_samples(&self) -> usize {
        self.samples.len()
    }
}

/// The index of the entry of `key` nearest to `time` within
/// [`PAIR_WINDOW_NS`]. The entries are in time order (each side comes from
/// one CPU's ring), so only those within the window are looked at.
fn nearest<T, K: Eq>(
    entries: &VecDeque<T>,
    time_key: impl Fn(&T) -> (u64, K),
    time: u64,
    key: K,
) -> Option<usize> {
    let from = entries.partition_point(|e| time_key(e).0 < time.saturating_sub(PAIR_WINDOW_NS));
    entries
        .range(from..)
        .map(&time_key)
        .take_while(|(t, _)| *t <= time.saturating_add(PAIR_WINDOW_NS))
        .enumerate()
        .filter(|(_, (_, k))| *k == key)
        .min_by_key(|(_, (t, _))| t.abs_diff(time))
        .map(|(i, _)| from + i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_read_after_its_event_takes_the_events_time() {
        let mut p = Pairer::default();
        assert_eq!(p.event(1_000_000, (5, 0)), None);
        assert_eq!(
            p.sample(1_000_700, (5, 0), "stacks"),
            Some((1_000_000, "stacks"))
        );
        p.expire(u64::MAX);
        assert_eq!(p.unpaired(), 0);
    }

    #[test]
    fn a_sample_read_before_its_event_waits_for_it_even_across_rounds() {
        let mut p = Pairer::default();
        assert_eq!(p.sample(2_000_300, (5, 0), 'a'), None);
        // The perf ring was read past it, the eBPF ring not yet.
        p.expire(1_900_000);
        assert_eq!(p.waiting_samples(), 1);
        assert_eq!(p.event(1_000_000, (5, 0)), None, "another key's time");
        assert_eq!(p.event(2_000_000, (5, 0)), Some('a'));
        assert_eq!(p.unpaired(), 0);
    }

    #[test]
    fn a_saturated_cpus_many_events_are_looked_up_by_time() {
        let mut p = Pairer::default();
        for i in 0..200_000u64 {
            assert_eq!(p.event(i * 1_000, (i as u32 % 7, 1)), None);
        }
        // Each look-up sees only the ~100 events within the window.
        for i in (0..200_000u64).step_by(1_000) {
            let key = (i as u32 % 7, 1);
            assert_eq!(p.sample(i * 1_000 + 300, key, i), Some((i * 1_000, i)));
        }
        p.expire(u64::MAX);
        assert_eq!(p.unpaired(), 0);
    }

    #[test]
    fn each_half_pairs_once_with_the_nearest_of_its_key() {
        let mut p = Pairer::default();
        p.event(1_000, (1, 0));
        p.event(10_000, (5, 0));
        p.event(12_000, (5, 0));
        assert_eq!(p.sample(11_500, (5, 0), 'a'), Some((12_000, 'a')));
        assert_eq!(p.sample(11_600, (5, 0), 'b'), Some((10_000, 'b')));
        assert_eq!(p.sample(11_700, (5, 0), 'c'), None, "both taken");
        // Too far from any event of its key: never paired.
        assert_eq!(p.sample(10_000_000, (1, 0), 'd'), None);
        p.expire(u64::MAX);
        assert_eq!(p.unpaired(), 2);
        assert_eq!(p.waiting_samples(), 0);
    }

    #[test]
    fn expiry_keeps_what_the_window_could_still_pair() {
        let mut p = Pairer::default();
        p.sample(1_000_000, (5, 0), 'a');
        p.expire(1_000_000 + PAIR_WINDOW_NS);
        assert_eq!((p.waiting_samples(), p.unpaired()), (1, 0));
        p.expire(1_000_001 + PAIR_WINDOW_NS);
        assert_eq!((p.waiting_samples(), p.unpaired()), (0, 1));
    }
}
