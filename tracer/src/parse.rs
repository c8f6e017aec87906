//! Decoding the raw records of an idleflow ring into [`PerfRecord`]s.
//!
//! Every event in a ring shares [`crate::sys::SAMPLE_TYPE`], so a sample is
//! `header | pid tid | time | cpu res | size raw[size]` and every other
//! record ends in the `sample_id_all` trailer `pid tid | time | cpu res`.
//! Decoding is bounds-checked: a short or foreign record gives `None`.

use perf_event_open_sys::bindings::{
    PERF_RECORD_COMM, PERF_RECORD_EXIT, PERF_RECORD_FORK, PERF_RECORD_LOST,
    PERF_RECORD_MISC_MMAP_BUILD_ID, PERF_RECORD_MISC_SWITCH_OUT,
    PERF_RECORD_MISC_SWITCH_OUT_PREEMPT, PERF_RECORD_MMAP2, PERF_RECORD_SAMPLE,
    PERF_RECORD_SWITCH_CPU_WIDE,
};

use crate::tracefs::{Field, TracefsError, Tracepoint};
use idleflow_format::{ModuleMap, WakeContext};

/// Where the fields we use sit in the tracepoints' raw data.
#[derive(Debug, Clone)]
pub struct Layout {
    /// `sched:sched_switch` id.
    pub switch_id: u64,
    prev_pid: Field,
    prev_state: Field,
    next_pid: Field,
    /// `sched:sched_waking` id (raised in the waker's context).
    pub wakeup_id: u64,
    /// `sched:sched_wakeup_new` id.
    pub wakeup_new_id: u64,
    wakeup_pid: Field,
    wakeup_target_cpu: Field,
    /// `common_flags` (the same place in both wake-up tracepoints): whether
    /// it was raised in an interrupt.
    wakeup_flags: Field,
    new_pid: Field,
    new_target_cpu: Field,
    /// `sched_switch` samples carry user registers and a stack copy
    /// ([`crate::sys::EventSpec::user_stack_bytes`]).
    pub user_stacks: bool,
}

impl Layout {
    /// The layout of a recording that opens no tracepoint with perf (the
    /// eBPF source without `--stacks waits`: perf brings only the task and
    /// mapping records): no sample matches its ids.
    pub fn side_band() -> Self {
        let none = Field { offset: 0, size: 0 };
        Layout {
            switch_id: u64::MAX,
            prev_pid: none,
            prev_state: none,
            next_pid: none,
            wakeup_id: u64::MAX,
            wakeup_new_id: u64::MAX,
            wakeup_pid: none,
            wakeup_target_cpu: none,
            wakeup_flags: none,
            new_pid: none,
            new_target_cpu: none,
            user_stacks: false,
        }
    }

    /// Builds the layout from the three tracepoints' format files.
    pub fn new(
        switch: &Tracepoint,
        wakeup: &Tracepoint,
        wakeup_new: &Tracepoint,
    ) -> Result<Self, TracefsError> {
        Ok(Layout {
            switch_id: switch.id,
            prev_pid: switch.int_field("prev_pid")?,
            prev_state: switch.int_field("prev_state")?,
            next_pid: switch.int_field("next_pid")?,
            wakeup_id: wakeup.id,
            wakeup_new_id: wakeup_new.id,
            wakeup_pid: wakeup.int_field("pid")?,
            wakeup_target_cpu: wakeup.int_field("target_cpu")?,
            wakeup_flags: wakeup.int_field("common_flags")?,
            new_pid: wakeup_new.int_field("pid")?,
            new_target_cpu: wakeup_new.int_field("target_cpu")?,
            user_stacks: false,
        })
    }
}

/// The context every record carries: the task running when it was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleId {
    /// Process of the running task.
    pub pid: u32,
    /// Thread of the running task.
    pub tid: u32,
    /// Timestamp, ns on `CLOCK_MONOTONIC`.
    pub time: u64,
    /// CPU.
    pub cpu: u32,
}

/// A decoded ring record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PerfRecord {
    /// A `sched_switch` tracepoint sample.
    SchedSwitch {
        /// Context (the task leaving).
        id: SampleId,
        /// Thread leaving.
        prev_tid: u32,
        /// Its raw `prev_state`.
        prev_state: u64,
        /// Thread coming.
        next_tid: u32,
        /// The kernel's call chain at the switch, innermost first (samples
        /// of switches that leave the CPU idle, when asked for).
        kernel_stack: Option<Box<[u64]>>,
        /// The leaving thread's user registers and stack copy (samples
        /// with user stacks, of threads that have a user space).
        user_stack: Option<Box<UserStackCopy>>,
    },
    /// `PERF_RECORD_MMAP2`: an executable mapping, as the recording
    /// stores it (its time is the record's).
    Mmap(Box<ModuleMap>),
    /// A `sched_waking` or `sched_wakeup_new` sample.
    Wakeup {
        /// Context (the waker).
        id: SampleId,
        /// Thread made runnable.
        wakee_tid: u32,
        /// CPU it will run on.
        target_cpu: u32,
        /// `sched_wakeup_new`.
        new_thread: bool,
        /// A thread's or an interrupt's.
        context: WakeContext,
        /// The kernel's call chain at the wake-up, innermost first: the
        /// waker's (the release site) or the interrupt's (its device), for
        /// the events that ask for it.
        kernel_stack: Option<Box<[u64]>>,
        /// The waker's user registers and stack copy (the waker-stack
        /// event's samples of thread-context wake-ups).
        user_stack: Option<Box<UserStackCopy>>,
    },
    /// `PERF_RECORD_SWITCH_CPU_WIDE`.
    Switch {
        /// Context: the task leaving (`out`) or coming (`!out`).
        id: SampleId,
        /// Switch-out record (written by the task leaving).
        out: bool,
        /// Switch-out while runnable.
        preempt: bool,
        /// The other task: next for a switch-out, previous for a switch-in.
        other_tid: u32,
    },
    /// `PERF_RECORD_COMM`.
    Comm {
        /// Context.
        id: SampleId,
        /// Process.
        pid: u32,
        /// Thread.
        tid: u32,
        /// New name.
        comm: String,
    },
    /// `PERF_RECORD_FORK`.
    Fork {
        /// Context.
        id: SampleId,
        /// New thread's process.
        pid: u32,
        /// Parent process.
        ppid: u32,
        /// New thread.
        tid: u32,
        /// Parent thread.
        ptid: u32,
    },
    /// `PERF_RECORD_EXIT`.
    Exit {
        /// Context.
        id: SampleId,
        /// Process.
        pid: u32,
        /// Thread.
        tid: u32,
    },
    /// `PERF_RECORD_LOST`.
    Lost {
        /// Context (time and CPU of the loss report).
        id: SampleId,
        /// Records lost.
        count: u64,
    },
    /// A sample of another tracepoint or a record kind we do not use.
    Other,
}

/// A thread's user registers and the top of its user stack, as a sample
/// carries them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserStackCopy {
    /// Instruction pointer.
    pub ip: u64,
    /// Stack pointer (the address of `bytes[0]`).
    pub sp: u64,
    /// Frame pointer.
    pub bp: u64,
    /// DI: inside a system call, its first argument (a futex's address).
    pub di: u64,
    /// The times the thread had come onto a CPU (eBPF only; `None` where
    /// not counted).
    pub runs: Option<u64>,
    /// A Java thread's last Java frame (sp, fp, pc) at the switch (eBPF,
    /// for the threads `recorder/java.rs` told the programs of).
    pub java_anchor: Option<[u64; 3]>,
    /// Its monitor words at the switch (pending, waiting, the pending
    /// one's owner; eBPF, as `java_anchor`).
    pub java_monitors: Option<[u64; 3]>,
    /// The compressed class word of its park blocker at the switch (eBPF,
    /// as `java_anchor`; 0: none).
    pub java_blocker: Option<u64>,
    /// Bytes asked for.
    pub requested: u32,
    /// The bytes the kernel could copy.
    pub bytes: Vec<u8>,
}

/// Decodes `abi | regs[4] | size | data[size] | dyn_size` at the start of
/// `b`: `Some(None)` for a task without a user space (abi 0, size 0).
fn user_stack(b: &[u8]) -> Option<Option<Box<UserStackCopy>>> {
    let abi = u64_at(b, 0)?;
    if abi == 0 {
        return Some(None);
    }
    // Registers in mask order: DI, BP, SP, IP.
    let di = u64_at(b, 8)?;
    let bp = u64_at(b, 16)?;
    let sp = u64_at(b, 24)?;
    let ip = u64_at(b, 32)?;
    let size = usize::try_from(u64_at(b, 40)?).ok()?;
    if size == 0 {
        return Some(None);
    }
    let data = b.get(48..48usize.checked_add(size)?)?;
    let dyn_size = usize::try_from(u64_at(b, 48 + size)?).ok()?.min(size);
    Some(Some(Box::new(UserStackCopy {
        ip,
        sp,
        bp,
        di,
        runs: None,
        java_anchor: None,
        java_monitors: None,
        java_blocker: None,
        requested: size as u32,
        bytes: data[..dyn_size].to_vec(),
    })))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

fn sample_id(b: &[u8], at: usize) -> Option<SampleId> {
    Some(SampleId {
        pid: u32_at(b, at)?,
        tid: u32_at(b, at + 4)?,
        time: u64_at(b, at + 8)?,
        cpu: u32_at(b, at + 16)?,
    })
}

const TRAILER: usize = 24;

/// Call-chain entries at or above this are context markers
/// (`PERF_CONTEXT_KERNEL`, `PERF_CONTEXT_USER`, …), not addresses.
const PERF_CONTEXT_MAX: u64 = -4095i64 as u64;

/// The kernel addresses of a sample's call chain (`nr` u64s), innermost
/// first, without the context markers; `None` if there are none.
fn kernel_frames(chain: &[u8]) -> Option<Box<[u64]>> {
    let ips: Box<[u64]> = chain
        .chunks_exact(8)
        .map(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes")))
        .filter(|&ip| ip < PERF_CONTEXT_MAX)
        .collect();
    (!ips.is_empty()).then_some(ips)
}

/// Decodes one record (starting with its `perf_event_header`).
pub fn parse(rec: &[u8], layout: &Layout) -> Option<PerfRecord> {
    let kind = u32_at(rec, 0)?;
    let misc = u32::from(u16::from_ne_bytes(rec.get(4..6)?.try_into().ok()?));
    let trailer = || sample_id(rec, rec.len().checked_sub(TRAILER)?);
    Some(match kind {
        PERF_RECORD_SAMPLE => {
            let id = sample_id(rec, 8)?;
            let nr = usize::try_from(u64_at(rec, 32)?).ok()?;
            let chain = rec.get(40..40usize.checked_add(nr.checked_mul(8)?)?)?;
            let at = 40 + chain.len();
            let size = u32_at(rec, at)? as usize;
            let raw = rec.get(at + 4..at + 4 + size)?;
            let tp = u64::from(u16::from_ne_bytes(raw.get(0..2)?.try_into().ok()?));
            if tp == layout.switch_id {
                let user_stack = if layout.user_stacks {
                    user_stack(rec.get(at + 4 + size..)?)?
                } else {
                    None
                };
                PerfRecord::SchedSwitch {
                    id,
                    prev_tid: layout.prev_pid.read(raw)? as u32,
                    prev_state: layout.prev_state.read(raw)?,
                    next_tid: layout.next_pid.read(raw)? as u32,
                    kernel_stack: kernel_frames(chain),
                    user_stack,
                }
            } else if tp == layout.wakeup_id {
                // Only the waker-stack event asks for user registers: they
                // follow the raw data, which otherwise ends the sample.
                let rest = rec.get(at + 4 + size..)?;
                PerfRecord::Wakeup {
                    id,
                    wakee_tid: layout.wakeup_pid.read(raw)? as u32,
                    target_cpu: layout.wakeup_target_cpu.read(raw)? as u32,
                    new_thread: false,
                    context: WakeContext::from_trace_flags(layout.wakeup_flags.read(raw)? as u8),
                    kernel_stack: kernel_frames(chain),
                    user_stack: if rest.is_empty() {
                        None
                    } else {
                        user_stack(rest)?
                    },
                }
            } else if tp == layout.wakeup_new_id {
                PerfRecord::Wakeup {
                    id,
                    wakee_tid: layout.new_pid.read(raw)? as u32,
                    target_cpu: layout.new_target_cpu.read(raw)? as u32,
                    new_thread: true,
                    context: WakeContext::from_trace_flags(layout.wakeup_flags.read(raw)? as u8),
                    kernel_stack: None,
                    user_stack: None,
                }
            } else {
                PerfRecord::Other
            }
        }
        PERF_RECORD_SWITCH_CPU_WIDE => PerfRecord::Switch {
            id: trailer()?,
            out: misc & PERF_RECORD_MISC_SWITCH_OUT != 0,
            preempt: misc & PERF_RECORD_MISC_SWITCH_OUT_PREEMPT != 0,
            other_tid: u32_at(rec, 12)?,
        },
        PERF_RECORD_COMM => {
            let end = rec.len().checked_sub(TRAILER)?;
            let name = rec.get(16..end)?;
            let n = name.iter().position(|&c| c == 0).unwrap_or(name.len());
            PerfRecord::Comm {
                id: trailer()?,
                pid: u32_at(rec, 8)?,
                tid: u32_at(rec, 12)?,
                comm: String::from_utf8_lossy(&name[..n]).into_owned(),
            }
        }
        PERF_RECORD_FORK => PerfRecord::Fork {
            id: trailer()?,
            pid: u32_at(rec, 8)?,
            ppid: u32_at(rec, 12)?,
            tid: u32_at(rec, 16)?,
            ptid: u32_at(rec, 20)?,
        },
        PERF_RECORD_EXIT => PerfRecord::Exit {
            id: trailer()?,
            pid: u32_at(rec, 8)?,
            tid: u32_at(rec, 16)?,
        },
        PERF_RECORD_MMAP2 => {
            // pid tid | addr len pgoff | maj min ino ino_gen (or a build
            // id, which we never ask for) | prot flags | filename | trailer
            let end = rec.len().checked_sub(TRAILER)?;
            let ino = if misc & PERF_RECORD_MISC_MMAP_BUILD_ID != 0 {
                0
            } else {
                u64_at(rec, 48)?
            };
            let name = rec.get(72..end)?;
            let n = name.iter().position(|&c| c == 0).unwrap_or(name.len());
            PerfRecord::Mmap(Box::new(ModuleMap {
                time: trailer()?.time,
                pid: u32_at(rec, 8)?,
                start: u64_at(rec, 16)?,
                len: u64_at(rec, 24)?,
                pgoff: u64_at(rec, 32)?,
                ino,
                path: String::from_utf8_lossy(&name[..n]).into_owned(),
            }))
        }
        PERF_RECORD_LOST => PerfRecord::Lost {
            id: trailer()?,
            count: u64_at(rec, 16)?,
        },
        _ => PerfRecord::Other,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(w: &[u64]) -> Vec<u8> {
        w.iter().flat_map(|x| x.to_ne_bytes()).collect()
    }

    #[test]
    fn a_user_stack_is_read_as_the_kernel_lays_it_out() {
        // abi 64, DI BP SP IP, size 16, 16 bytes, dyn_size 12.
        let mut b = words(&[2, 0x7f00_dead_0010, 0xb0, 0x5000, 0x401000, 16]);
        b.extend_from_slice(&[7u8; 16]);
        b.extend(words(&[12]));
        let u = user_stack(&b).unwrap().unwrap();
        assert_eq!((u.ip, u.sp, u.bp), (0x401000, 0x5000, 0xb0));
        assert_eq!(u.di, 0x7f00_dead_0010, "the system call's first argument");
        assert_eq!(u.requested, 16);
        assert_eq!(u.bytes, vec![7u8; 12], "only the bytes the kernel copied");
        // A kernel thread: abi 0, then only the stack size 0.
        assert_eq!(user_stack(&words(&[0, 0])), Some(None));
        // A record cut short is refused, not read past.
        assert_eq!(user_stack(&b[..58]), None);
        // A dyn_size beyond the size is held to the size.
        let mut big = words(&[2, 9, 1, 2, 3, 8]);
        big.extend_from_slice(&[1u8; 8]);
        big.extend(words(&[999]));
        assert_eq!(user_stack(&big).unwrap().unwrap().bytes.len(), 8);
    }
}
