//! Where the recording goes: the output file (created new and private under
//! `<path>.RANDOM.partial` beside `<path>` until [`Recorder::finish`]
//! renames it: `idleflow_format::files`) or the flight recorder's ring of
//! segments (`record --flight`), the run information that heads either,
//! and the threads and mappings that existed before the window.
//!
//! Invariant: every record written goes through [`Output::write`], so the
//! flight recorder's ring and policy see each one the file would hold.

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;

use idleflow_format::files::{self, Staged};
use idleflow_format::{Dispatch, ModuleMap, Record, RunInfo, ThreadInfo, Wakeup, Writer};

use super::{Recorder, RecorderError};
use crate::flight::policy::{Fired, Policy, Trigger};
use crate::flight::{FlightLimits, FlightRing, SegmentSink, Window};
use crate::procfs;
use crate::sys;

pub(super) struct Output {
    pub(super) writer: Writer<Sink>,
    /// The recording's file until it is renamed into place; None for the
    /// flight recorder.
    pub(super) staged: Option<Staged>,
    /// When the writer was last flushed, ns.
    pub(super) flushed_at: u64,
    /// `record --flight`: the ring the writer writes into, and its policy.
    pub(super) flight: Option<Box<Flight>>,
}

impl Output {
    /// Writes one record; the flight recorder's ring and policy see it.
    pub(super) fn write(&mut self, r: &Record) -> Result<(), RecorderError> {
        self.writer.write(r)?;
        if let Some(f) = self.flight.as_mut() {
            f.ring.observe(r);
            f.policy.observe(r);
        }
        Ok(())
    }

    /// Writes wake-up `w` and the dispatch `d` after it on its CPU, as one
    /// record where they make one (never with a flight recorder: its
    /// policies look at each record in time order).
    pub(super) fn write_woken_dispatch(
        &mut self,
        w: &Wakeup,
        d: &Dispatch,
    ) -> Result<(), RecorderError> {
        if self.flight.is_some() {
            self.write(&Record::Wakeup(*w))?;
            return self.write(&Record::Dispatch(*d));
        }
        Ok(self.writer.write_woken_dispatch(w, d)?)
    }

    /// Cuts the flight recorder's open segment at `now` (monotonic ns).
    pub(super) fn cut(&mut self, now: u64) -> Result<(), RecorderError> {
        let Some(f) = self.flight.as_mut() else {
            return Ok(());
        };
        self.writer.flush()?;
        let bytes = match self.writer.get_mut() {
            Sink::Flight(sink) => sink.take(),
            Sink::File(_) => Vec::new(),
        };
        let last = self.writer.last_time();
        f.ring.cut(
            bytes,
            last,
            f.released_to.max(last),
            now,
            procfs::proc_stat().unwrap_or_default(),
        );
        f.cut_at_bytes = self.writer.bytes_written();
        self.writer.forget_copies();
        Ok(())
    }
}

/// Where the writer's bytes go: the recording's file, or the flight
/// recorder's open segment.
#[derive(Debug)]
pub(super) enum Sink {
    File(BufWriter<File>),
    Flight(SegmentSink),
}

impl std::io::Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Sink::File(f) => f.write(buf),
            Sink::Flight(s) => s.write(buf),
        }
    }
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        match self {
            Sink::File(f) => f.write_all(buf),
            Sink::Flight(s) => s.write_all(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Sink::File(f) => f.flush(),
            Sink::Flight(s) => s.flush(),
        }
    }
}

/// The flight recorder's state ([`crate::flight`]).
#[derive(Debug)]
pub(super) struct Flight {
    pub(super) ring: FlightRing,
    pub(super) policy: Policy,
    pub(super) info: RunInfo,
    /// Bytes the writer had written at the last cut.
    pub(super) cut_at_bytes: u64,
    /// Triggers that fired and were not taken yet.
    pub(super) fired: Vec<Fired>,
    /// The stream is complete up to here (the last release's watermark).
    pub(super) released_to: u64,
}

impl Recorder {
    /// Creates `<path>.RANDOM.partial` and writes the run information and the
    /// threads that exist now. `target_pids` are the processes the report
    /// will show threads of (empty: all).
    pub fn begin(
        &mut self,
        path: &Path,
        command: &[String],
        target_pids: &[u32],
    ) -> Result<(), RecorderError> {
        let (file, staged) = files::stage(path).map_err(RecorderError::Files)?;
        let info = self.run_info(command, target_pids);
        let writer = Writer::new(Sink::File(BufWriter::with_capacity(1 << 20, file)), &info);
        let output = Output {
            writer: match writer {
                Ok(w) => w,
                Err(e) => {
                    staged.discard();
                    return Err(e.into());
                }
            },
            staged: Some(staged),
            flushed_at: self.start_ns,
            flight: None,
        };
        if super::spool::Spool::asked() && self.bpf.is_some() && self.work_area.is_none() {
            if let Some(staged) = &output.staged {
                self.spool = Some(super::spool::Spool::create(staged)?);
            }
        }
        self.output = Some(output);
        self.write_existing()
    }

    /// Starts the flight recorder instead of a file (`record --flight`):
    /// the recording goes into a ring bounded by `limits`, judged by
    /// `triggers` after every drain batch ([`Recorder::flight_fired`]), and
    /// dumped on request ([`Recorder::flight_window`]).
    pub fn begin_flight(
        &mut self,
        limits: FlightLimits,
        triggers: Vec<Trigger>,
        command: &[String],
        target_pids: &[u32],
    ) -> Result<(), RecorderError> {
        let info = self.run_info(command, target_pids);
        let writer = Writer::new(Sink::Flight(SegmentSink::default()), &info)?;
        let ring = FlightRing::new(
            limits,
            &self.cpus,
            self.start_ns,
            self.proc_stat_start.clone(),
        );
        let policy = Policy::new(triggers, self.cpus.len(), target_pids);
        self.output = Some(Output {
            writer,
            staged: None,
            flushed_at: self.start_ns,
            flight: Some(Box::new(Flight {
                ring,
                policy,
                info,
                cut_at_bytes: 0,
                fired: Vec::new(),
                released_to: self.start_ns,
            })),
        });
        self.write_existing()?;
        // The header and what came before the window are not a segment's:
        // the directory keeps them for every dump.
        let out = self.output.as_mut().expect("begun");
        out.writer.flush()?;
        if let Sink::Flight(sink) = out.writer.get_mut() {
            sink.open();
        }
        if let Some(f) = out.flight.as_mut() {
            f.cut_at_bytes = out.writer.bytes_written();
        }
        Ok(())
    }

    fn run_info(&self, command: &[String], target_pids: &[u32]) -> RunInfo {
        let (kernel_release, hostname) = procfs::uname();
        RunInfo {
            tool_version: env!("CARGO_PKG_VERSION").to_string(),
            kernel_release,
            hostname,
            cpus: self.cpus.clone(),
            clock: "CLOCK_MONOTONIC".into(),
            command: command.to_vec(),
            target_pids: target_pids.to_vec(),
            start_ns: self.start_ns,
            start_unix_ns: self.start_unix_ns,
            proc_stat_start: self.proc_stat_start.clone(),
            user_hz: procfs::user_hz(),
            ring_bytes: self.ring_bytes as u64,
            tool_pid: std::process::id(),
            java_waits: self.java_waits,
            stacks: self.stacks.to_string(),
            wait_sample_period: if self.stacks == "waits" {
                self.wait_sample_period
            } else {
                0
            },
            idle_stack_budget: self.idle_stack_budget,
            waker_sample_period: self.waker_sampling.0,
            waker_stack_budget: self.waker_sampling.1,
            event_source: self.event_source.source.name().into(),
            event_source_why: self.event_source.why.clone(),
            java_frames: self.java_frames.0.clone(),
            java_frames_why: self.java_frames.1.clone(),
        }
    }

    /// Writes the threads that exist now and, with user stacks, the
    /// executable mappings of their processes (the kernel reports only
    /// those made from now on).
    fn write_existing(&mut self) -> Result<(), RecorderError> {
        let Some(output) = self.output.as_mut() else {
            return Ok(());
        };
        for t in procfs::threads() {
            let t = ThreadInfo {
                time: self.start_ns,
                tid: t.tid,
                pid: t.pid,
                ppid: t.ppid,
                comm: t.comm,
            };
            output.write(&Record::Thread(t.clone()))?;
            self.names.existing(&t);
            if self.user_stacks && t.tid == t.pid {
                for m in procfs::exec_maps(t.pid) {
                    output.write(&Record::ModuleMap(Box::new(ModuleMap {
                        time: self.start_ns,
                        pid: t.pid,
                        start: m.start,
                        len: m.end.saturating_sub(m.start),
                        pgoff: m.pgoff,
                        ino: m.ino,
                        path: m.path,
                    })))?;
                }
            }
        }
        Ok(())
    }

    /// Triggers that fired since the last call (`record --flight`).
    pub fn flight_fired(&mut self) -> Vec<Fired> {
        self.output
            .as_mut()
            .and_then(|o| o.flight.as_mut())
            .map(|f| std::mem::take(&mut f.fired))
            .unwrap_or_default()
    }

    /// The flight recorder's window from `from_ns` up to the last record
    /// written (the open segment is cut first), with the run information
    /// a dump of it carries; None without `record --flight`.
    pub fn flight_window(
        &mut self,
        from_ns: u64,
    ) -> Result<Option<(Window, RunInfo)>, RecorderError> {
        let Some(out) = self.output.as_mut() else {
            return Ok(None);
        };
        if out.flight.is_none() {
            return Ok(None);
        }
        out.cut(sys::monotonic_ns())?;
        self.after_flight_cut();
        let out = self.output.as_ref().expect("begun");
        let f = out.flight.as_ref().expect("flight");
        let mut window = f.ring.window(from_ns);
        if let Some(j) = &self.java {
            // The waits the walks showed in the window, and its walks.
            let end = window.end_ns();
            let waits = j.waits.window(window.base_ns, end);
            let walks = window
                .java_walks_before()
                .map_or_else(|| j.counts.clone(), |before| j.counts.since(before));
            window.follow_with(waits, Some(walks));
        }
        Ok(Some((window, f.info.clone())))
    }

    /// The flight recorder's ring: bytes held and segments dropped so far.
    pub fn flight_ring(&self) -> Option<(u64, u64)> {
        let f = self.output.as_ref()?.flight.as_ref()?;
        Some((f.ring.bytes(), f.ring.dropped()))
    }

    /// The policy's triggers, as given (`record --flight`).
    pub fn flight_policy(&self) -> Option<String> {
        let f = self.output.as_ref()?.flight.as_ref()?;
        Some(f.policy.describe())
    }

    /// Bytes written so far.
    pub fn bytes_written(&self) -> u64 {
        self.output.as_ref().map_or(0, |o| o.writer.bytes_written())
            + self.spool.as_ref().map_or(0, |s| s.bytes())
    }
}
