//! idleflow's post-processor: reads a recording (no privileges, no live
//! kernel needed) and reports where the CPUs went idle and who made them.
//!
//! Layers, each using only those before it (`docs/ARCHITECTURE.md`; checked
//! by `tests/layers.rs`): [`share`] and [`path`] (the path model) at the
//! bottom; [`pass`], the one streaming pass through the recording with the
//! shared dispatch accounting and its accumulators; the report's data,
//! [`sections`] (serialized as JSON as is); [`render`], every output;
//! [`compare`], runs against runs.

pub mod compare;
pub mod pass;
pub mod path;
pub mod reasons;
pub mod render;
pub mod sections;
pub mod share;

pub use pass::{Analysis, AnalysisOptions, Window};
pub use sections::Report;
