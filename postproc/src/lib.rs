//! idleflow's post-processor: reads a recording (no privileges, no live
//! kernel needed) and reports where the CPUs went idle and who made them.
//!
//! [`analysis`] makes one streaming pass through the recording with the
//! shared dispatch accounting; [`report`] turns the result into the report's
//! data (serialized as JSON as is); [`text`] prints it for people.

pub mod ahead;
pub mod analysis;
pub mod arcflow;
pub mod blame;
pub mod callpaths;
pub mod check;
pub mod diff;
pub mod flame;
pub mod history_text;
pub mod html;
pub mod idlepaths;
pub mod kwaits;
pub mod nodes;
pub mod path;
pub mod perfetto;
pub mod pprof;
pub mod report;
pub mod script;
pub mod startup;
pub mod summary;
pub mod text;
pub mod views;
pub mod waits;
pub mod windows;

pub use analysis::{Analysis, AnalysisOptions, Window};
pub use report::Report;
