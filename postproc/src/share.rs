//! Shares and sums of idle: every section and output computes a share of
//! the idle and a sum of nanoseconds the same way.
//!
//! Invariant: no sum overflows (a damaged recording's times can add up
//! past `u64::MAX`: sums saturate), and a share of nothing is 0.

/// The sum of `ns`, held at `u64::MAX` (a damaged recording's times can
/// add up past it).
pub fn saturating_sum(ns: impl IntoIterator<Item = u64>) -> u64 {
    ns.into_iter().fold(0u64, u64::saturating_add)
}

/// `part` as % of `whole`, rounded to 2 decimals (0 for an empty whole).
pub fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        ((part as f64 * 10000.0 / whole as f64).round()) / 100.0
    }
}

/// `part` as a percentage of `whole` (0 for an empty whole): a stack
/// path's share of the idle after the threads with a stack left.
pub fn share_pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}
