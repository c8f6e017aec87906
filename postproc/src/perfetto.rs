//! A recording as a native Perfetto trace (`export --format perfetto`), for
//! ui.perfetto.dev and `trace_processor`: *when* each CPU was idle and
//! *what* made it so.
//!
//! Written while the pass reads the recording ([`PerfettoWriter`] is a
//! [`PassObserver`]): every dispatch of the window as a `sched_switch`
//! ftrace event on its CPU (idle shows as the gaps of the CPU tracks; the
//! leaving thread's state as Perfetto reads it), every wake-up as
//! `sched_waking` (threads turn runnable), in bundles per CPU. Each
//! idle-causing dispatch becomes a perf sample of its thread at the
//! switch-out whose call stack is its merged path ([`crate::idlepaths`]):
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

use idleflow_export::perfetto::{
    ftrace_event, trace_packet, Callstack, FtraceEvent, FtraceEventBundle, InternedData,
    InternedString, Mapping, PerfSample, ProcessTree, SchedSwitchFtraceEvent,
    SchedWakingFtraceEvent, TracePacket,
};
use idleflow_export::Message;
use idleflow_format::{Dispatch, PrevState, Wakeup, IDLE_TID};
use rustc_hash::FxHashMap;

use crate::analysis::{Analysis, Charged, PassObserver, PathKey};
use crate::path::FrameKind;

/// Events per CPU bundle before it is written.
const BUNDLE_EVENTS: usize = 2048;
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

/// Writes one packet of a `Trace`: field 1, length-delimited.
fn write_packet(out: &mut impl Write, p: &TracePacket) -> std::io::Result<()> {
    out.write_all(&[0x0a])?;
    out.write_all(&p.encode_length_delimited_to_vec())
}

/// The perfetto export, fed by the pass (see the module documentation).
#[derive(Debug)]
pub struct PerfettoWriter<W: Write> {
    out: BufWriter<W>,
    /// Per CPU, its open bundle.
    bundles: FxHashMap<u32, Vec<FtraceEvent>>,
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

impl<W: Write> PerfettoWriter<W> {
    /// A writer into `out`; the samples spill into an anonymous temporary
    /// file until [`PerfettoWriter::finish`].
    pub fn new(out: W) -> std::io::Result<Self> {
        Ok(PerfettoWriter {
            out: BufWriter::with_capacity(1 << 16, out),
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
        let Some(events) = self.bundles.get_mut(&cpu) else {
            return;
        };
        if events.is_empty() || self.error.is_some() {
            return;
        }
        let packet = TracePacket {
            data: Some(trace_packet::Data::FtraceEvents(FtraceEventBundle {
                cpu: Some(cpu),
                event: std::mem::take(events),
            })),
            ..Default::default()
        };
        if let Err(e) = write_packet(&mut self.out, &packet) {
            self.error = Some(e);
        }
    }

    fn push(&mut self, cpu: u32, e: FtraceEvent) {
        let events = self.bundles.entry(cpu).or_default();
        events.push(e);
        if events.len() >= BUNDLE_EVENTS {
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
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        // The process tree: every thread named in the recording.
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
        write_packet(
            &mut self.out,
            &TracePacket {
                timestamp: Some(a.window.0),
                data: Some(trace_packet::Data::ProcessTree(tree)),
                ..Default::default()
            },
        )?;
        // The paths, interned: a name per function, a mapping per module
        // (or per kind of code outside modules), a frame per (function,
        // mapping), a call stack per path, root first.
        let mut interned = InternedData::default();
        let mut strings: FxHashMap<String, u64> = FxHashMap::default();
        let mut mappings: FxHashMap<String, u64> = FxHashMap::default();
        let mut frames: FxHashMap<(u64, u64), u64> = FxHashMap::default();
        for (i, key) in self.key_list.iter().enumerate() {
            let row = a.resolve_path(key);
            let mut ids = Vec::with_capacity(row.frames.len() + 1);
            let path = row.frames.iter().map(|f| {
                let module = match f.frame.kind {
                    FrameKind::Kernel => "[kernel.kallsyms]".to_string(),
                    _ if !f.module.is_empty() => f.module.clone(),
                    FrameKind::Java
                    | FrameKind::Jit
                    | FrameKind::Inlined
                    | FrameKind::Interpreted => "[java]".to_string(),
                    _ => "[unknown]".to_string(),
                };
                let name = if f.frame.line > 0 {
                    format!("{}:{}", f.frame.name, f.frame.line)
                } else {
                    f.frame.name.clone()
                };
                (module, name)
            });
            let path: Vec<(String, String)> = if row.frames.is_empty() {
                vec![("[unknown]".into(), format!("[no stack] {}", row.reason))]
            } else {
                path.collect()
            };
            for (module, name) in path.into_iter().rev() {
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
        write_packet(
            &mut self.out,
            &TracePacket {
                timestamp: Some(a.window.0),
                optional_trusted_packet_sequence_id: Some(
                    trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(
                        SEQUENCE,
                    ),
                ),
                sequence_flags: Some(SEQ_INCREMENTAL_STATE_CLEARED),
                interned_data: Some(interned),
                ..Default::default()
            },
        )?;
        // The samples, from the spill.
        let mut spill = self.spill.into_inner().map_err(|e| e.into_error())?;
        spill.rewind()?;
        let mut spill = BufReader::new(spill);
        let mut rec = [0u8; 20];
        let pid_of = |tid: u32| a.names.get(&tid).map_or(tid, |n| n.0);
        for _ in 0..self.samples {
            spill.read_exact(&mut rec)?;
            let time = u64::from_le_bytes(rec[0..8].try_into().expect("8 bytes"));
            let cpu = u32::from_le_bytes(rec[8..12].try_into().expect("4 bytes"));
            let tid = u32::from_le_bytes(rec[12..16].try_into().expect("4 bytes"));
            let path = u32::from_le_bytes(rec[16..20].try_into().expect("4 bytes"));
            write_packet(
                &mut self.out,
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
            )?;
        }
        self.out.flush()?;
        self.out.into_inner().map_err(|e| e.into_error())
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

impl<W: Write> PassObserver for PerfettoWriter<W> {
    fn dispatch(&mut self, d: &Dispatch, names: &FxHashMap<u32, (u32, String)>) {
        self.switches += 1;
        let e = FtraceEvent {
            timestamp: Some(d.time),
            pid: Some(d.prev_tid),
            event: Some(ftrace_event::Event::SchedSwitch(SchedSwitchFtraceEvent {
                prev_comm: Some(comm(names, d.prev_tid)),
                prev_pid: Some(d.prev_tid as i32),
                prev_prio: Some(120),
                prev_state: Some(task_state(d.prev_state)),
                next_comm: Some(comm(names, d.next_tid)),
                next_pid: Some(d.next_tid as i32),
                next_prio: Some(120),
            })),
        };
        self.push(d.cpu, e);
    }

    fn wakeup(&mut self, w: &Wakeup, names: &FxHashMap<u32, (u32, String)>) {
        self.wakeups += 1;
        let e = FtraceEvent {
            timestamp: Some(w.time),
            pid: Some(w.waker_tid),
            event: Some(ftrace_event::Event::SchedWaking(SchedWakingFtraceEvent {
                comm: Some(comm(names, w.wakee_tid)),
                pid: Some(w.wakee_tid as i32),
                prio: Some(120),
                success: Some(1),
                target_cpu: Some(w.target_cpu as i32),
            })),
        };
        self.push(w.cpu, e);
    }

    fn charged(&mut self, c: &Charged) {
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
