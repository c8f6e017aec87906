//! Comparisons of runs: [`diff`] of two recordings' merged paths (and its
//! [`diff_text`]), the run
//! [`summary`] a history keeps, the [`history_check`] of a run against its
//! job's history, and the [`history_text`] that prints them.
//!
//! Comparisons read the report's sections (and the pass's time windows),
//! never the other way round.

pub mod diff;
pub mod diff_text;
pub mod history_check;
pub mod history_text;
pub mod summary;
