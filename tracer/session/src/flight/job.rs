//! A dump's thread: the window written (over the spare when there is one,
//! at a real-time priority from the trigger to the complete file), then
//! the JVMs' waits of its span added and its user stacks resolved in place,
//! and the line that says what was written.
//!
//! Invariant: a window that could not be written leaves no file and is one
//! line of error; what follows a complete file (waits, stacks) may fail
//! without taking the dump with it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use idleflow_format::{FlightDump, RunInfo};
use idleflow_tracer::flight::{Dumped, Window};
use idleflow_tracer::ksyms::KernelNamer;
use idleflow_tracer::sys;

use super::spare;
use crate::jfr::{Waits, WatchAsker};
use crate::resolve;

/// The real-time priority a dump is written at (the drain's is 10 by
/// default: the drain still comes first).
pub(super) const DUMP_FIFO_PRIORITY: i32 = 1;

/// How long a dump waits for the JVM watcher's answer.
pub(super) const WATCH_ANSWERS_WITHIN: Duration = Duration::from_secs(10);

/// What a dump's thread asks of the JVMs.
pub(super) struct DumpJvms {
    /// The perf maps of this process tree's JVMs (`--java stacks`).
    pub(super) perf_maps_of: Option<u32>,
    /// Their waits (`--java waits`).
    pub(super) waits: Option<JvmWaitsOf>,
}

/// What a dump's thread needs to add the JVMs' waits of its window.
#[derive(Clone)]
pub(super) struct JvmWaitsOf {
    pub(super) waits: Arc<Waits>,
    pub(super) asker: WatchAsker,
    /// The recording's clock minus the wall clock.
    pub(super) offset_ns: i64,
}

impl JvmWaitsOf {
    /// Adds the waits of the JVMs' last `last` to the dump at `path`; what
    /// to say of it.
    pub(super) fn add_to(&self, path: &Path, last: Duration) -> Result<String, String> {
        let started = Instant::now();
        let Some(watched) = self.asker.snapshot(WATCH_ANSWERS_WITHIN) else {
            return Ok("; no JVM waits (the JVM watcher did not answer)".into());
        };
        if watched.started.is_empty() && watched.notes.is_empty() {
            return Ok(String::new());
        }
        let (records, notes) = self.waits.window_waits(&watched, last, self.offset_ns);
        let jvms = records
            .iter()
            .filter(|r| matches!(r, idleflow_format::Record::JvmWaits(_)))
            .count();
        let waits = records.len() - jvms;
        idleflow_format::add_after_stream(path, &records, |s| s.java_notes.extend(notes)).map_err(
            |e| {
                format!(
                    "dump {}: adding the JVMs' waits: {}",
                    path.display(),
                    crate::one_line(&e)
                )
            },
        )?;
        Ok(format!(
            "; {waits} Java waits of {jvms} JVM{} added in {} ms",
            if jvms == 1 { "" } else { "s" },
            started.elapsed().as_millis()
        ))
    }
}

/// A window to write and complete, on a thread of its own: a dump, or a
/// heartbeat ([`heartbeat`]).
pub(super) struct Job {
    pub(super) window: Window,
    /// The dumps' directory, opened once, and the dump's path in it.
    pub(super) dir: Arc<idleflow_format::files::Dir>,
    pub(super) path: PathBuf,
    pub(super) info: RunInfo,
    pub(super) dump: FlightDump,
    pub(super) namer: KernelNamer,
    /// The JVMs' waits to add.
    pub(super) jvms: Option<JvmWaitsOf>,
    /// The JVMs whose perf maps name JIT frames.
    pub(super) perf_maps_of: Option<u32>,
    pub(super) resolve_stacks: bool,
    /// The file to write over, when there is one ([`spare`]).
    pub(super) spare: Option<Arc<spare::Spare>>,
}

/// A window written and completed.
pub(super) struct Written {
    pub(super) dumped: Dumped,
    pub(super) base_ns: u64,
    /// What the JVMs' waits added (a clause of the log line).
    pub(super) java: String,
    /// How long resolving the user stacks took, or why it failed.
    pub(super) resolved: Option<Result<Duration, String>>,
}

impl Job {
    /// Writes the window, adds the JVMs' waits and resolves the user
    /// stacks; `Err` (a line to say) when the file could not be written.
    pub(super) fn complete(self) -> Result<Written, String> {
        // From the trigger to a complete file the dump's thread runs before
        // the program's (SCHED_FIFO 1, below the drain's): on CPUs the
        // program saturates it would otherwise wait its turn among all of
        // its threads. What follows (Java waits, stacks) runs as usual.
        // Without CAP_SYS_NICE it runs as usual throughout.
        let raised = sys::set_fifo_priority(DUMP_FIFO_PRIORITY).is_ok();
        let spare = self.spare.as_deref();
        let name = self.path.file_name().unwrap_or_default();
        let written = self.window.write_reusing(
            &self.dir,
            name,
            &self.info,
            self.dump,
            &self.namer,
            |name| spare.and_then(|s| s.take(name)),
        );
        if raised {
            let _ = sys::set_normal_priority();
        }
        let d = written.map_err(|e| {
            format!(
                "dump {} failed: {}",
                self.path.display(),
                crate::one_line(&e)
            )
        })?;
        let java = match &self.jvms {
            Some(j) => j.add_to(
                &d.path,
                Duration::from_nanos(sys::monotonic_ns().saturating_sub(self.window.base_ns)),
            )?,
            None => String::new(),
        };
        // A dump whose stacks cannot be resolved (a full disk: the
        // resolver writes a copy) stays complete, without the user stacks'
        // names.
        let resolved = self.resolve_stacks.then(|| {
            let resolving = Instant::now();
            // The JVMs' JIT code of now names the window's frames (`--java
            // stacks`, attached JVMs).
            resolve::write_perf_maps(self.perf_maps_of, true, &mut ());
            resolve::resolve_stacks(&d.path, true, &mut ())
                .map(|()| resolving.elapsed())
                .map_err(|e| crate::one_line(&e))
        });
        Ok(Written {
            dumped: d,
            base_ns: self.window.base_ns,
            java,
            resolved,
        })
    }
}

impl Written {
    /// The log line of a dump (`ring_bytes`: what the ring held).
    pub(super) fn line(&self, ring_bytes: u64) -> String {
        let d = &self.dumped;
        let (resolved, unresolved) = match &self.resolved {
            Some(Ok(took)) => (
                format!(" (stacks resolved in {} ms more)", took.as_millis()),
                String::new(),
            ),
            Some(Err(why)) => (
                String::new(),
                format!(
                    "; its user stacks were not resolved ({why}): the dump reads without their names"
                ),
            ),
            None => (String::new(), String::new()),
        };
        format!(
            "flight: dump {} written: {:.1} s, {} dispatches, {:.1} MiB in {} ms{resolved}{}; \
             the ring held {:.1} MiB{unresolved}",
            d.path.display(),
            (d.summary.stop_ns.saturating_sub(self.base_ns)) as f64 / 1e9,
            d.summary.dispatches,
            d.bytes as f64 / (1 << 20) as f64,
            d.latency.as_millis(),
            self.java,
            ring_bytes as f64 / (1 << 20) as f64
        )
    }
}
