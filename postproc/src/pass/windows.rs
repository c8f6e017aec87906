//! Idle split into time windows: how much of a path's (or a CPU's) idle
//! fell into each window of the recording, for what compares runs by their
//! own noise (`diff`, `history`) and what draws idle over time.
//!
//! Windows start at the analysis window's start and are all `width` long.
//! There are never more than `max` of them: when idle arrives past the last
//! one, the width doubles and every series folds pairs of windows into one,
//! so memory is `max` numbers per series whatever the recording's length.
//! Series fold lazily, the next time they are touched or at
//! [`Windows::settle`].
//!
//! Invariant: a series' windows add up to the idle given to it (a span is
//! split by overlap; idle outside its span's length goes to the span's
//! start).

/// The windows' geometry, shared by every series of one analysis.
#[derive(Debug, Clone)]
pub struct Windows {
    start: u64,
    width: u64,
    max: usize,
}

/// One series: idle (ns) per window.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Series {
    width: u64,
    ns: Vec<u64>,
}

impl Series {
    /// Idle per window, ns (trailing windows without idle left out).
    pub fn ns(&self) -> &[u64] {
        &self.ns
    }

    /// Adds `other` (settled to the same windows) into this one.
    pub fn merge(&mut self, other: &Series) {
        if self.ns.len() < other.ns.len() {
            self.ns.resize(other.ns.len(), 0);
        }
        self.width = self.width.max(other.width);
        for (a, b) in self.ns.iter_mut().zip(&other.ns) {
            *a = a.saturating_add(*b);
        }
    }
}

impl Windows {
    /// Windows from `start` (ns), `width` ns each at first, at most `max`.
    pub fn new(start: u64, width: u64, max: usize) -> Self {
        Windows {
            start,
            width: width.max(1),
            max: max.max(2),
        }
    }

    /// Window width now, ns.
    pub fn width(&self) -> u64 {
        self.width
    }

    /// Folds `s` to the current width.
    fn fold(&self, s: &mut Series) {
        if s.width == 0 {
            s.width = self.width;
            return;
        }
        while s.width < self.width {
            let folded: Vec<u64> =
                s.ns.chunks(2)
                    .map(|c| c.iter().fold(0u64, |a, b| a.saturating_add(*b)))
                    .collect();
            s.ns = folded;
            s.width *= 2;
        }
    }

    /// Adds `ns` of idle spanning `span` (start, end; ns on the recording's
    /// clock) to `s`.
    pub fn add(&mut self, s: &mut Series, span: (u64, u64), ns: u64) {
        let (from, to) = (span.0.max(self.start), span.1.max(span.0.max(self.start)));
        while ((to.saturating_sub(self.start)) / self.width) as usize >= self.max {
            self.width = self.width.saturating_mul(2);
        }
        self.fold(s);
        let len = to - from;
        let index = |t: u64| ((t - self.start) / self.width) as usize;
        let last = index(to.saturating_sub(1).max(from));
        if s.ns.len() <= last {
            s.ns.resize(last + 1, 0);
        }
        if len != ns || len == 0 {
            let i = index(from);
            s.ns[i] = s.ns[i].saturating_add(ns);
            return;
        }
        let mut t = from;
        while t < to {
            let i = index(t);
            let end = (self.start + (i as u64 + 1) * self.width).min(to);
            s.ns[i] = s.ns[i].saturating_add(end - t);
            t = end;
        }
    }

    /// Folds `s` to the final width, padded to `count` windows.
    pub fn settle(&self, s: &mut Series, count: usize) {
        self.fold(s);
        if s.ns.len() < count {
            s.ns.resize(count, 0);
        }
    }

    /// How many windows cover up to `stop` (ns on the recording's clock).
    pub fn count(&self, stop: u64) -> usize {
        (stop.saturating_sub(self.start).div_ceil(self.width) as usize).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_split_by_overlap_and_widths_double_past_the_last_window() {
        let mut w = Windows::new(1000, 10, 4);
        let mut a = Series::default();
        w.add(&mut a, (1005, 1025), 20);
        assert_eq!(a.ns(), [5, 10, 5]);
        let mut b = Series::default();
        w.add(&mut b, (1000, 1001), 1);
        // Past 4 windows of 10: the width doubles, both series fold.
        w.add(&mut b, (1045, 1050), 5);
        assert_eq!(w.width(), 20);
        assert_eq!(b.ns(), [1, 0, 5]);
        w.settle(&mut a, w.count(1050));
        assert_eq!(a.ns(), [15, 5, 0]);
        assert_eq!(a.ns().iter().sum::<u64>(), 20);
        a.merge(&b);
        assert_eq!(a.ns(), [16, 5, 5]);
        // Idle that is not its span's length goes to the span's start.
        let mut c = Series::default();
        w.add(&mut c, (1030, 1030), 7);
        assert_eq!(c.ns(), [0, 7]);
    }
}
