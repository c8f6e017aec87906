//! A recording as a native Perfetto trace (`export --format perfetto`), for
//! ui.perfetto.dev and `trace_processor`: *when* each CPU was idle and
//! *what* made it so.
//!
//! Written while the pass reads the recording ([`PerfettoWriter`] is a
//! pass [`Handler`]): every dispatch of the window as a `sched_switch` on
//! its CPU (idle shows as the gaps of the CPU tracks; the leaving thread's
//! state as Perfetto reads it), every wake-up as `sched_waking` (threads
//! turn runnable), in bundles per CPU, in Perfetto's compact form (the
//! columns `traced_probes` itself writes: delta times, interned comms; a
//! switch whose leaving thread is not the one the CPU's last switch brought
//! in, or out of time order, is written as a full event instead). Each
//! idle-causing dispatch becomes a perf sample of its thread at the
//! switch-out whose call stack is its merged path ([`crate::sections::idle_paths`]):
//! the paths are known only when the pass is over, so the samples wait in
//! a spill file (time, CPU, thread, path number) and are written after one
//! packet that interns every path's frames, followed by the process tree.
//!
//! Invariants: the output is a `Trace` (field 1, one length-delimited
//! `TracePacket` after another); interned data comes before the samples
//! that use it, on one packet sequence that starts by clearing its state;
//! memory is the CPUs' open bundles and the distinct paths, never the
//! dispatches.

use std::io::{BufReader, BufWriter, Read, Seek, Write};
use std::sync::mpsc::{self, SyncSender};
use std::thread::JoinHandle;

use idleflow_export::perfetto::{
    ftrace_event, ftrace_event_bundle::CompactSched, trace_packet, Callstack, FtraceEvent,
    FtraceEventBundle, InternedData, InternedString, Mapping, PerfSample, ProcessTree,
    SchedSwitchFtraceEvent, SchedWakingFtraceEvent, TracePacket,
};
use idleflow_export::Message;
use idleflow_format::{PrevState, Wakeup, IDLE_TID};
use rustc_hash::FxHashMap;

use crate::pass::handler::{Context, Credit, DispatchEvent, Handler};
use crate::pass::{Analysis, PathKey};
use crate::path::FrameKind;

/// Events per CPU bundle before it is written.
const BUNDLE_EVENTS: usize = 8192;
/// The priority written for every thread (the recording has none).
const PRIO: i32 = 120;
/// The packet sequence of the interned paths and their samples.
const SEQUENCE: u32 = 1;
/// `TracePacket.SequenceFlags`.
const SEQ_INCREMENTAL_STATE_CLEARED: u32 = 1;
const SEQ_NEEDS_INCREMENTAL_STATE: u32 = 2;

/// Task states as Perfetto decodes `prev_state` when the trace names no
/// kernel version (the 4.4 layout): runnable, preempted, sleeping, …
fn task_state(s: PrevState) -> i64 {
    match s {
        PrevState::Preempted => 0x800,
        PrevState::Sleeping | PrevState::Blocked => 1,
        PrevState::DiskSleep => 2,
        PrevState::Stopped => 4,
        PrevState::Dead => 16,
        PrevState::Parked => 0x200,
        PrevState::IdleWait => 0x402,
        PrevState::Unknown => 0,
    }
}

/// Writes one packet of a `Trace`: field 1, length-delimited, encoded in
/// `buf` (reused from packet to packet).
fn write_packet(out: &mut impl Write, p: &TracePacket, buf: &mut Vec<u8>) -> std::io::Result<()> {
    buf.clear();
    buf.push(0x0a);
    p.encode_length_delimited(buf)
        .expect("a Vec grows to any length");
    out.write_all(buf)
}

/// Bundles waiting for the encoder thread, at most.
const BUNDLES_QUEUED: usize = 16;

/// The thread that encodes and writes the bundles, so that the pass's
/// thread only fills columns: it hands the output back when the channel
/// closes.
#[derive(Debug)]
struct Encoder<W: Write> {
    tx: Option<SyncSender<FtraceEventBundle>>,
    thread: Option<JoinHandle<std::io::Result<BufWriter<W>>>>,
}

impl<W: Write + Send + 'static> Encoder<W> {
    fn start(out: W) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::sync_channel::<FtraceEventBundle>(BUNDLES_QUEUED);
        let thread = std::thread::Builder::new()
            .name("perfetto-encode".into())
            .spawn(move || {
                let mut out = BufWriter::with_capacity(1 << 16, out);
                let mut buf = Vec::new();
                for bundle in rx {
                    let packet = TracePacket {
                        data: Some(trace_packet::Data::FtraceEvents(bundle)),
                        ..Default::default()
                    };
                    write_packet(&mut out, &packet, &mut buf)?;
                }
                Ok(out)
            })?;
        Ok(Encoder {
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    /// Queues a bundle; false once the thread stopped (an I/O error, which
    /// [`Encoder::finish`] returns).
    fn send(&self, b: FtraceEventBundle) -> bool {
        self.tx.as_ref().is_some_and(|tx| tx.send(b).is_ok())
    }

    /// Waits for every queued bundle to be written; the output back.
    fn finish(&mut self) -> std::io::Result<BufWriter<W>> {
        drop(self.tx.take());
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(std::io::Error::other(
                "the Perfetto encoder thread panicked",
            )),
            None => Err(std::io::Error::other(
                "the Perfetto output was finished twice",
            )),
        }
    }
}

/// The perfetto export, fed by the pass (see the module documentation).
#[derive(Debug)]
pub struct PerfettoWriter<W: Write> {
    encoder: Encoder<W>,
    /// Per CPU, its open bundle.
    bundles: FxHashMap<u32, Bundle>,
    /// The samples waiting for their paths: time, CPU, tid, path number.
    spill: BufWriter<std::fs::File>,
    samples: u64,
    /// Path number of each key, in first-seen order.
    keys: FxHashMap<PathKey, u32>,
    key_list: Vec<PathKey>,
    /// The first I/O error; later writes are skipped.
    error: Option<std::io::Error>,
    /// Events written: switches and wake-ups.
    pub switches: u64,
    /// See `switches`.
    pub wakeups: u64,
}

impl<W: Write + Send + 'static> PerfettoWriter<W> {
    /// A writer into `out` (bundles are encoded and written by a thread of
    /// their own); the samples spill into an anonymous temporary file until
    /// [`PerfettoWriter::finish`].
    pub fn new(out: W) -> std::io::Result<Self> {
        Ok(PerfettoWriter {
            encoder: Encoder::start(out)?,
            bundles: FxHashMap::default(),
            spill: BufWriter::new(tempfile::tempfile()?),
            samples: 0,
            keys: FxHashMap::default(),
            key_list: Vec::new(),
            error: None,
            switches: 0,
            wakeups: 0,
        })
    }

    fn flush_bundle(&mut self, cpu: u32) {
        let Some(b) = self.bundles.get_mut(&cpu) else {
            return;
        };
        if b.events == 0 || self.error.is_some() {
            return;
        }
        if !self.encoder.send(b.take(cpu)) {
            self.error = Some(std::io::Error::other("the Perfetto output stopped"));
        }
    }

    fn bundle(&mut self, cpu: u32) -> &mut Bundle {
        self.bundles.entry(cpu).or_default()
    }

    fn counted(&mut self, cpu: u32) {
        if self.bundle(cpu).events >= BUNDLE_EVENTS {
            self.flush_bundle(cpu);
        }
    }

    /// Writes what waited for the pass's end: the open bundles, the process
    /// tree, the interned paths and their samples. `a` is the finished
    /// analysis the writer observed.
    pub fn finish(mut self, a: &Analysis) -> std::io::Result<W> {
        let cpus: Vec<u32> = self.bundles.keys().copied().collect();
        for cpu in cpus {
            self.flush_bundle(cpu);
        }
        // The encoder's own error (the first write that failed) says more
        // than "stopped".
        let mut out = self.encoder.finish()?;
        let mut buf = Vec::new();
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        write_packet(
            &mut out,
            &TracePacket {
                timestamp: Some(a.window.0),
                data: Some(trace_packet::Data::ProcessTree(process_tree(a))),
                ..Default::default()
            },
            &mut buf,
        )?;
        write_packet(
            &mut out,
            &TracePacket {
                timestamp: Some(a.window.0),
                optional_trusted_packet_sequence_id: Some(
                    trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(
                        SEQUENCE,
                    ),
                ),
                sequence_flags: Some(SEQ_INCREMENTAL_STATE_CLEARED),
                interned_data: Some(interned_paths(a, &self.key_list)),
                ..Default::default()
            },
            &mut buf,
        )?;
        // The samples, from the spill.
        let mut spill = self.spill.into_inner().map_err(|e| e.into_error())?;
        spill.rewind()?;
        write_samples(&mut out, BufReader::new(spill), self.samples, a, &mut buf)?;
        out.flush()?;
        out.into_inner().map_err(|e| e.into_error())
    }
}

/// The process tree: every thread named in the recording.
fn process_tree(a: &Analysis) -> ProcessTree {
    let mut tree = ProcessTree::default();
    let mut pids: Vec<u32> = a.names.values().map(|(pid, _)| *pid).collect();
    pids.sort_unstable();
    pids.dedup();
    for pid in pids.into_iter().filter(|&p| p != 0) {
        tree.processes
            .push(idleflow_export::perfetto::process_tree::Process {
                pid: Some(pid as i32),
                cmdline: vec![a.process_name(pid)],
                cmdline_is_comm: Some(true),
                ..Default::default()
            });
    }
    let mut threads: Vec<(&u32, &(u32, String))> = a.names.iter().collect();
    threads.sort_unstable_by_key(|(tid, _)| **tid);
    for (tid, (pid, name)) in threads {
        tree.threads
            .push(idleflow_export::perfetto::process_tree::Thread {
                tid: Some(*tid as i32),
                tgid: Some(*pid as i32),
                name: Some(name.clone()),
            });
    }
    tree
}

/// The paths, interned: a name per function, a mapping per module (or per
/// kind of code outside modules), a frame per (function, mapping), a call
/// stack per path (its number + 1), root first.
fn interned_paths(a: &Analysis, key_list: &[PathKey]) -> InternedData {
    let mut interned = InternedData::default();
    let mut strings: FxHashMap<String, u64> = FxHashMap::default();
    let mut mappings: FxHashMap<String, u64> = FxHashMap::default();
    let mut frames: FxHashMap<(u64, u64), u64> = FxHashMap::default();
    for (i, key) in key_list.iter().enumerate() {
        let row = crate::sections::idle_paths::resolve_path(a, key);
        let mut ids = Vec::with_capacity(row.frames.len() + 1);
        for (module, name) in path_frames(&row).into_iter().rev() {
            let next = strings.len() as u64 + 1;
            let name_id = *strings.entry(name.clone()).or_insert_with(|| {
                interned.function_names.push(InternedString {
                    iid: Some(next),
                    str: Some(name.into_bytes()),
                });
                next
            });
            let next = mappings.len() as u64 + 1;
            let mapping_id = *mappings.entry(module.clone()).or_insert_with(|| {
                interned.mapping_paths.push(InternedString {
                    iid: Some(next),
                    str: Some(module.into_bytes()),
                });
                interned.mappings.push(Mapping {
                    iid: Some(next),
                    path_string_ids: vec![next],
                    ..Default::default()
                });
                next
            });
            let next = frames.len() as u64 + 1;
            let frame_id = *frames.entry((name_id, mapping_id)).or_insert_with(|| {
                interned.frames.push(idleflow_export::perfetto::Frame {
                    iid: Some(next),
                    function_name_id: Some(name_id),
                    mapping_id: Some(mapping_id),
                    rel_pc: Some(0),
                });
                next
            });
            ids.push(frame_id);
        }
        interned.callstacks.push(Callstack {
            iid: Some(i as u64 + 1),
            frame_ids: ids,
        });
    }
    interned
}

/// A path's frames as (module, function) pairs, innermost first: the
/// kernel's, a module's, Java's or `[unknown]`; a path without frames is
/// one `[no stack]` frame naming its reason.
fn path_frames(row: &crate::sections::idle_paths::ResolvedRow) -> Vec<(String, String)> {
    let path = row.frames.iter().map(|f| {
        let module = match f.frame.kind {
            FrameKind::Kernel => "[kernel.kallsyms]".to_string(),
            _ if !f.module.is_empty() => f.module.clone(),
            FrameKind::Java | FrameKind::Jit | FrameKind::Inlined | FrameKind::Interpreted => {
                "[java]".to_string()
            }
            _ => "[unknown]".to_string(),
        };
        let name = if f.frame.line > 0 {
            format!("{}:{}", f.frame.name, f.frame.line)
        } else {
            f.frame.name.clone()
        };
        (module, name)
    });
    if row.frames.is_empty() {
        vec![("[unknown]".into(), format!("[no stack] {}", row.reason))]
    } else {
        path.collect()
    }
}

/// The samples from the spill (`samples` records of time, CPU, thread and
/// path number), each a perf sample of its thread whose call stack is its
/// path.
fn write_samples(
    out: &mut impl Write,
    mut spill: impl Read,
    samples: u64,
    a: &Analysis,
    buf: &mut Vec<u8>,
) -> std::io::Result<()> {
    let mut rec = [0u8; 20];
    let pid_of = |tid: u32| a.names.get(&tid).map_or(tid, |n| n.0);
    for _ in 0..samples {
        spill.read_exact(&mut rec)?;
        let time = u64::from_le_bytes(rec[0..8].try_into().expect("8 bytes"));
        let cpu = u32::from_le_bytes(rec[8..12].try_into().expect("4 bytes"));
        let tid = u32::from_le_bytes(rec[12..16].try_into().expect("4 bytes"));
        let path = u32::from_le_bytes(rec[16..20].try_into().expect("4 bytes"));
        write_packet(
            out,
            &TracePacket {
                timestamp: Some(time),
                optional_trusted_packet_sequence_id: Some(
                    trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(
                        SEQUENCE,
                    ),
                ),
                sequence_flags: Some(SEQ_NEEDS_INCREMENTAL_STATE),
                data: Some(trace_packet::Data::PerfSample(PerfSample {
                    cpu: Some(cpu),
                    pid: Some(pid_of(tid)),
                    tid: Some(tid),
                    callstack_iid: Some(u64::from(path) + 1),
                    ..Default::default()
                })),
                ..Default::default()
            },
            buf,
        )?;
    }
    Ok(())
}

/// One CPU's open bundle: compact columns, and the few events that need
/// the full form.
#[derive(Debug, Default)]
struct Bundle {
    compact: CompactSched,
    /// Each thread's index in `compact.intern_table`.
    comm_index: FxHashMap<u32, u32>,
    full: Vec<FtraceEvent>,
    /// The times the deltas count from (0 at a bundle's start).
    last_switch: u64,
    last_waking: u64,
    events: usize,
    /// The thread the CPU's last switch brought in (kept across bundles,
    /// as Perfetto keeps it).
    running: Option<u32>,
}

impl Bundle {
    /// `tid`'s index in the bundle's intern table.
    fn comm(&mut self, tid: u32, names: &FxHashMap<u32, (u32, String)>) -> u32 {
        let table = &mut self.compact.intern_table;
        *self.comm_index.entry(tid).or_insert_with(|| {
            table.push(comm(names, tid));
            table.len() as u32 - 1
        })
    }

    /// The bundle to write; this one starts over (the CPU's running
    /// thread stays).
    fn take(&mut self, cpu: u32) -> FtraceEventBundle {
        self.comm_index.clear();
        self.last_switch = 0;
        self.last_waking = 0;
        self.events = 0;
        let compact = std::mem::take(&mut self.compact);
        let has_compact =
            !compact.switch_timestamp.is_empty() || !compact.waking_timestamp.is_empty();
        FtraceEventBundle {
            cpu: Some(cpu),
            event: std::mem::take(&mut self.full),
            compact_sched: has_compact.then_some(compact),
            ..Default::default()
        }
    }
}

/// A thread's name for the events (`tid N` where none is known yet).
fn comm(names: &FxHashMap<u32, (u32, String)>, tid: u32) -> String {
    if tid == IDLE_TID {
        return "swapper".into();
    }
    names
        .get(&tid)
        .map_or_else(|| format!("tid {tid}"), |n| n.1.clone())
}

/// An idle-causing dispatch as a sample: where, who, when, which path.
struct Charged {
    cpu: u32,
    tid: u32,
    time: u64,
    key: PathKey,
}

impl<W: Write + Send + 'static> Handler for PerfettoWriter<W> {
    fn dispatch(&mut self, e: &DispatchEvent<'_>, ctx: &Context<'_>) {
        let (d, names) = (e.dispatch, ctx.names);
        self.switches += 1;
        let b = self.bundle(d.cpu);
        if b.running == Some(d.prev_tid) && d.time >= b.last_switch {
            let comm = b.comm(d.next_tid, names);
            let c = &mut b.compact;
            c.switch_timestamp.push(d.time - b.last_switch);
            c.switch_prev_state.push(task_state(d.prev_state));
            c.switch_next_pid.push(d.next_tid as i32);
            c.switch_next_prio.push(PRIO);
            c.switch_next_comm_index.push(comm);
            b.last_switch = d.time;
        } else {
            b.full.push(FtraceEvent {
                timestamp: Some(d.time),
                pid: Some(d.prev_tid),
                event: Some(ftrace_event::Event::SchedSwitch(SchedSwitchFtraceEvent {
                    prev_comm: Some(comm(names, d.prev_tid)),
                    prev_pid: Some(d.prev_tid as i32),
                    prev_prio: Some(PRIO),
                    prev_state: Some(task_state(d.prev_state)),
                    next_comm: Some(comm(names, d.next_tid)),
                    next_pid: Some(d.next_tid as i32),
                    next_prio: Some(PRIO),
                })),
            });
        }
        b.running = Some(d.next_tid);
        b.events += 1;
        self.counted(d.cpu);
    }

    fn wakeup(&mut self, w: &Wakeup, ctx: &Context<'_>) {
        let names = ctx.names;
        self.wakeups += 1;
        let b = self.bundle(w.cpu);
        if w.time >= b.last_waking {
            let comm = b.comm(w.wakee_tid, names);
            let c = &mut b.compact;
            c.waking_timestamp.push(w.time - b.last_waking);
            c.waking_pid.push(w.wakee_tid as i32);
            c.waking_target_cpu.push(w.target_cpu as i32);
            c.waking_prio.push(PRIO);
            c.waking_comm_index.push(comm);
            c.waking_common_flags.push(0);
            b.last_waking = w.time;
        } else {
            b.full.push(FtraceEvent {
                timestamp: Some(w.time),
                pid: Some(w.waker_tid),
                event: Some(ftrace_event::Event::SchedWaking(SchedWakingFtraceEvent {
                    comm: Some(comm(names, w.wakee_tid)),
                    pid: Some(w.wakee_tid as i32),
                    prio: Some(PRIO),
                    success: Some(1),
                    target_cpu: Some(w.target_cpu as i32),
                })),
            });
        }
        b.events += 1;
        self.counted(w.cpu);
    }

    /// Each idle-causing dispatch once, when its idle interval ended
    /// (never idleflow's own threads').
    fn idle(&mut self, credit: &Credit, ctx: &Context<'_>) {
        if credit.dispatches == 0 || ctx.is_own(credit.charge.tid) {
            return;
        }
        let c = Charged {
            cpu: credit.cpu,
            tid: credit.charge.tid,
            time: credit.charge.time,
            key: credit.key,
        };
        let next = self.key_list.len() as u32;
        let path = *self.keys.entry(c.key).or_insert(next);
        if path == next {
            self.key_list.push(c.key);
        }
        let mut rec = [0u8; 20];
        rec[0..8].copy_from_slice(&c.time.to_le_bytes());
        rec[8..12].copy_from_slice(&c.cpu.to_le_bytes());
        rec[12..16].copy_from_slice(&c.tid.to_le_bytes());
        rec[16..20].copy_from_slice(&path.to_le_bytes());
        match self.spill.write_all(&rec) {
            Ok(()) => self.samples += 1,
            Err(e) => {
                self.error.get_or_insert(e);
            }
        }
    }
}
