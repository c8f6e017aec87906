//! idleflow's recorder (the patent's "device driver"): it opens the
//! scheduler events on every online CPU, reads their rings, joins each CPU's
//! records into dispatches, merges the CPUs into one time order and writes
//! the recording. It knows nothing of Java.
//!
//! Modules, each with one job: [`sys`] (the perf ABI, all `unsafe` about it),
//! [`ring`] (ring buffer reading), [`drain`] (the real-time thread that
//! empties the rings) and [`staging`] (the memory it copies into),
//! [`tracefs`] (tracepoint formats),
//! [`parse`] (ring records), [`join`] (records → dispatches), [`merge`]
//! (time order across CPUs), [`pair`] (perf's stack samples ↔ eBPF's
//! switches and wakings, for the eBPF event source), [`names`] (thread names in time order),
//! [`procfs`] (`/proc` and `/sys`), [`flight`] (the flight recorder's ring,
//! dumps and triggers), and [`recorder`] (the whole, driven by
//! the recording session, `idleflow-session`).

pub mod drain;
pub mod flight;
pub mod join;
pub mod ksyms;
pub mod merge;
pub mod names;
pub mod pair;
pub mod parse;
pub mod procfs;
pub mod recorder;
pub mod ring;
pub mod staging;
pub mod sys;
pub mod tracefs;
pub mod workarea;

pub use recorder::{
    Chosen, Counted, EventSource, RecordOptions, Recorded, Recorder, RecorderError,
    DEFAULT_STACK_BUDGET, DEFAULT_WAKER_SAMPLE_PERIOD, DEFAULT_WAKER_STACK_BUDGET,
    DEFAULT_WAKER_STACK_BYTES,
};
