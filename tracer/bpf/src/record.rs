//! The record the BPF programs write (`src/bpf/sched.bpf.c`), decoded into
//! a [`SchedEvent`].
//!
//! One record is [`RECORD_BYTES`] bytes, native-endian, the same layout for
//! every kind: `time u64 | kind u8 | flags u8 | aux u16 | tid_a u32 |
//! tgid_a u32 | tid_b u32 | tgid_b u32 | arg u32`. The programs copy what
//! the kernel hands the tracepoint; what it *means* (the `ps` state of the
//! thread that left, whether an interrupt raised a wake-up) is decided
//! here, in Rust, where it is tested: [`crate::state`] and
//! [`crate::context`].
//!
//! A record with [`FLAG_STACKS`] goes on: a [`STACK_HEAD_BYTES`]-byte head
//! (`kernel_bytes u32 | user_bytes u32 | user_asked u32 | has_regs u32 |
//! ip sp bp di u64 | runs u64 | anchor[3] u64 | monitor[3] u64 | blocker u64 | kernel[48] u64`) and `user_asked` bytes of room for
//! the user stack copy; [`stacks`] reads them as [`RecordStacks`].
//!
//! Records without stacks come in batches: one ring record of n × 32
//! bytes, which [`split`] cuts back into records.
//!
//! Invariant: decoding reads only the bytes it was given and never panics;
//! a record of a kind this version does not know, or of the wrong length,
//! is a [`DecodeError`] (the reader counts it, never guesses).

use idleflow_format::{Dispatch, JavaState, PrevState, WakeContext, Wakeup, IDLE_TID};

use crate::context::wake_context;
use crate::state::prev_state;

/// The size of one record.
pub const RECORD_BYTES: usize = 32;

/// `kind` of a context switch (`sched_switch`).
pub const KIND_SWITCH: u8 = 1;
/// `kind` of a waking (`sched_waking`, in the waker's context).
pub const KIND_WAKING: u8 = 2;
/// `kind` of a new task's first wake-up (`sched_wakeup_new`).
pub const KIND_WAKEUP_NEW: u8 = 3;

/// `flags` of a switch: the scheduler was entered by preemption.
pub const FLAG_PREEMPT: u8 = 1;
/// `flags` of a wake-up: `aux` holds the preempt count's context bits.
pub const FLAG_CONTEXT_KNOWN: u8 = 2;
/// `flags`: the record goes on with the stacks ([`stacks`]).
pub const FLAG_STACKS: u8 = 4;
/// `flags` of a switch to idle: the thread is a Java thread whose monitor
/// words the programs read ([`Switch::java`]).
pub const FLAG_JAVA: u8 = 8;
/// …and it was entering a contended monitor.
pub const FLAG_JAVA_PENDING: u8 = 16;
/// …and it was in `Object.wait`.
pub const FLAG_JAVA_WAITING: u8 = 32;

/// The most kernel frames a record holds.
pub const KERNEL_FRAMES: usize = 48;
/// The size of a record with stacks before its user stack copy.
pub const STACK_HEAD_BYTES: usize = KERNEL_AT + KERNEL_FRAMES * 8;

/// Where the kernel call chain begins in a record with stacks.
const KERNEL_AT: usize = 144;

/// One event, as read from the ring of the CPU it happened on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchedEvent {
    /// A context switch.
    Switch(Switch),
    /// A thread made runnable (`sched_waking`, in the waker's context).
    Waking(Wake),
    /// A new thread made runnable for the first time (`sched_wakeup_new`).
    WakeupNew(Wake),
}

impl SchedEvent {
    /// Nanoseconds on `CLOCK_MONOTONIC`, the clock of the perf path's
    /// events (`use_clockid`).
    pub fn time(&self) -> u64 {
        match self {
            SchedEvent::Switch(s) => s.time,
            SchedEvent::Waking(w) | SchedEvent::WakeupNew(w) => w.time,
        }
    }
}

/// A context switch: `prev` left the CPU, `next` got it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Switch {
    /// When the scheduler switched (in `prev`'s context, just before the
    /// switch), ns on `CLOCK_MONOTONIC`; a switch with stacks once they
    /// were taken (their time is `prev`'s on the CPU, not idle), so it may
    /// be newer than a waking of the same CPU behind it in the ring.
    pub time: u64,
    /// The thread that left ([`IDLE_TID`]: the CPU's idle task).
    pub prev_tid: u32,
    /// Its process (thread group).
    pub prev_tgid: u32,
    /// The thread that got the CPU.
    pub next_tid: u32,
    /// Its process.
    pub next_tgid: u32,
    /// Why `prev` left, as the perf path says it for the same switch:
    /// [`PrevState::Preempted`] when the scheduler was entered by
    /// preemption, [`PrevState::Unknown`] for the idle task, else from the
    /// state it was in.
    pub prev_state: PrevState,
    /// The scheduler's own `prev_state` (the task's `__state` bits).
    pub raw_state: u32,
    /// The scheduler was entered by preemption.
    pub preempt: bool,
    /// At a switch to idle of a Java thread the programs know: what its
    /// monitor words said it was blocked in.
    pub java: Option<JavaState>,
}

impl Switch {
    /// The recording's dispatch for this switch on `cpu`.
    pub fn to_dispatch(&self, cpu: u32) -> Dispatch {
        Dispatch {
            time: self.time,
            cpu,
            prev_tid: self.prev_tid,
            prev_state: self.prev_state,
            next_tid: self.next_tid,
            prev_node: Default::default(),
        }
    }
}

/// A wake-up, raised on the CPU whose ring it is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wake {
    /// ns on `CLOCK_MONOTONIC`.
    pub time: u64,
    /// The thread running when it was raised (0: idle): the waker when
    /// `context` is [`WakeContext::Task`]; in an interrupt only the thread
    /// it happened to hit.
    pub waker_tid: u32,
    /// Its process.
    pub waker_tgid: u32,
    /// The thread made runnable.
    pub wakee_tid: u32,
    /// Its process.
    pub wakee_tgid: u32,
    /// The CPU the wakee last ran on (the tracepoint's `target_cpu`).
    pub target_cpu: u32,
    /// A thread's code or an interrupt's; [`WakeContext::Unknown`] when the
    /// programs could not read it on this kernel.
    pub context: WakeContext,
}

impl Wake {
    /// The recording's wake-up for this event on `cpu`; `new_thread` for a
    /// [`SchedEvent::WakeupNew`].
    pub fn to_wakeup(&self, cpu: u32, new_thread: bool) -> Wakeup {
        Wakeup {
            time: self.time,
            cpu,
            waker_tid: self.waker_tid,
            wakee_tid: self.wakee_tid,
            target_cpu: self.target_cpu,
            new_thread,
            context: self.context,
        }
    }
}

/// Why a record could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The ring gave a record of another size.
    #[error("a record of {0} bytes (expected {RECORD_BYTES}, or at least {STACK_HEAD_BYTES} with stacks)")]
    Length(usize),
    /// A record with stacks whose sizes disagree with its length.
    #[error("a record with stacks whose sizes do not fit its {0} bytes")]
    Stacks(usize),
    /// A kind this version does not know.
    #[error("a record of unknown kind {0}")]
    Kind(u8),
}

/// What a switch's [`FLAG_JAVA`] bits say (`None`: not set).
fn java_state(flags: u8) -> Option<JavaState> {
    if flags & FLAG_JAVA == 0 {
        None
    } else if flags & FLAG_JAVA_PENDING != 0 {
        Some(JavaState::MonitorEnter)
    } else if flags & FLAG_JAVA_WAITING != 0 {
        Some(JavaState::MonitorWait)
    } else {
        Some(JavaState::Other)
    }
}

fn u32_at(b: &[u8; RECORD_BYTES], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[at..at + 8]);
    u64::from_ne_bytes(v)
}

/// The stacks a record with [`FLAG_STACKS`] carries, borrowed from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordStacks<'a> {
    /// The kernel call chain, innermost first, as the program took it: it
    /// starts in the tracing glue (the program, the tracepoint's
    /// trampoline), which the caller strips. Empty: none.
    kernel: &'a [u8],
    /// The thread's user registers and stack, if it has a user space and
    /// the program took them.
    pub user: Option<UserCopy<'a>>,
}

impl RecordStacks<'_> {
    /// The kernel call chain's addresses, innermost first.
    pub fn kernel(&self) -> impl ExactSizeIterator<Item = u64> + '_ {
        self.kernel.chunks_exact(8).map(|c| u64_at(c, 0))
    }
}

/// A thread's user registers at its entry into the kernel and the top of
/// its user stack, as perf's `REGS_USER` and `STACK_USER` give them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserCopy<'a> {
    /// Instruction pointer.
    pub ip: u64,
    /// Stack pointer: the address of `bytes[0]`.
    pub sp: u64,
    /// Frame pointer.
    pub bp: u64,
    /// DI (in a system call, its first argument).
    pub di: u64,
    /// The times the thread had come onto a CPU (`None`: the kernel does
    /// not count them).
    pub runs: Option<u64>,
    /// A Java thread's last Java frame at the switch (sp, fp, pc), where
    /// user space told the programs where its JVM keeps it.
    pub java_anchor: Option<[u64; 3]>,
    /// The Java thread's monitor words at the switch: the ObjectMonitor it
    /// blocked entering, the one it waited in (0: none), and the first
    /// one's owner word, where user space told the programs where its JVM
    /// keeps them.
    pub java_monitors: Option<[u64; 3]>,
    /// The compressed class word of the object its `Thread.parkBlocker`
    /// held at the switch (0: none), where the programs were told where
    /// to find it.
    pub java_blocker: Option<u64>,
    /// Bytes the copy asked for.
    pub asked: u32,
    /// The bytes copied (fewer than asked where the stack's mapping ends
    /// before; empty when nothing could be read).
    pub bytes: &'a [u8],
}

/// The stacks of record `bytes`: `None` for a record without
/// [`FLAG_STACKS`].
pub fn stacks(bytes: &[u8]) -> Result<Option<RecordStacks<'_>>, DecodeError> {
    if bytes.len() < RECORD_BYTES {
        return Err(DecodeError::Length(bytes.len()));
    }
    if bytes[9] & FLAG_STACKS == 0 {
        return Ok(None);
    }
    if bytes.len() < STACK_HEAD_BYTES {
        return Err(DecodeError::Length(bytes.len()));
    }
    let u32_at =
        |at: usize| u32::from_ne_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    let (kernel_bytes, user_bytes, asked, has_regs) = (
        u32_at(32) as usize,
        u32_at(36) as usize,
        u32_at(40) as usize,
        u32_at(44),
    );
    let room = bytes.len() - STACK_HEAD_BYTES;
    if kernel_bytes > KERNEL_FRAMES * 8
        || kernel_bytes % 8 != 0
        || user_bytes > asked
        || asked > room
    {
        return Err(DecodeError::Stacks(bytes.len()));
    }
    let kernel = &bytes[KERNEL_AT..KERNEL_AT + kernel_bytes];
    let user = (has_regs & 1 != 0).then(|| UserCopy {
        ip: u64_at(bytes, 48),
        sp: u64_at(bytes, 56),
        bp: u64_at(bytes, 64),
        di: u64_at(bytes, 72),
        runs: (has_regs & 2 != 0).then(|| u64_at(bytes, 80)),
        java_anchor: (has_regs & 4 != 0)
            .then(|| [u64_at(bytes, 88), u64_at(bytes, 96), u64_at(bytes, 104)]),
        java_monitors: (has_regs & 8 != 0)
            .then(|| [u64_at(bytes, 112), u64_at(bytes, 120), u64_at(bytes, 128)]),
        java_blocker: (has_regs & 16 != 0).then(|| u64_at(bytes, 136)),
        asked: asked as u32,
        bytes: &bytes[STACK_HEAD_BYTES..STACK_HEAD_BYTES + user_bytes],
    });
    Ok(Some(RecordStacks { kernel, user }))
}

/// The records of one ring record: a batch of records without stacks
/// (a multiple of [`RECORD_BYTES`], its first without [`FLAG_STACKS`]) cut
/// into them, anything else whole (for [`decode`] to judge).
pub fn split(ring_record: &[u8]) -> impl Iterator<Item = &[u8]> {
    // An empty record stays one (undecodable, so counted).
    let empty = ring_record.is_empty().then_some(ring_record);
    ring_record.chunks(split_size(ring_record)).chain(empty)
}

/// The size of each record [`split`] cuts `ring_record` into (the last
/// may be shorter; an empty ring record is one empty record).
pub fn split_size(ring_record: &[u8]) -> usize {
    let batch = ring_record.len() > RECORD_BYTES
        && ring_record.len().is_multiple_of(RECORD_BYTES)
        && ring_record[9] & FLAG_STACKS == 0;
    if batch {
        RECORD_BYTES
    } else {
        ring_record.len().max(1)
    }
}

/// Decodes one record (of a record with stacks, the event: [`stacks`]
/// reads the rest).
pub fn decode(bytes: &[u8]) -> Result<SchedEvent, DecodeError> {
    let ok_len = bytes.len() == RECORD_BYTES
        || (bytes.len() >= STACK_HEAD_BYTES && bytes[9] & FLAG_STACKS != 0);
    if !ok_len {
        return Err(DecodeError::Length(bytes.len()));
    }
    let b: &[u8; RECORD_BYTES] = bytes[..RECORD_BYTES]
        .try_into()
        .map_err(|_| DecodeError::Length(bytes.len()))?;
    let time = u64::from_ne_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
    let (kind, flags) = (b[8], b[9]);
    let aux = u16::from_ne_bytes([b[10], b[11]]);
    let (tid_a, tgid_a, tid_b, tgid_b, arg) = (
        u32_at(b, 12),
        u32_at(b, 16),
        u32_at(b, 20),
        u32_at(b, 24),
        u32_at(b, 28),
    );
    let wake = || Wake {
        time,
        waker_tid: tid_a,
        waker_tgid: tgid_a,
        wakee_tid: tid_b,
        wakee_tgid: tgid_b,
        target_cpu: arg,
        context: if flags & FLAG_CONTEXT_KNOWN != 0 {
            wake_context(aux)
        } else {
            WakeContext::Unknown
        },
    };
    match kind {
        KIND_SWITCH => {
            let preempt = flags & FLAG_PREEMPT != 0;
            Ok(SchedEvent::Switch(Switch {
                time,
                prev_tid: tid_a,
                prev_tgid: tgid_a,
                next_tid: tid_b,
                next_tgid: tgid_b,
                prev_state: if tid_a == IDLE_TID {
                    PrevState::Unknown
                } else {
                    prev_state(preempt, arg, u32::from(aux))
                },
                raw_state: arg,
                preempt,
                java: java_state(flags),
            }))
        }
        KIND_WAKING => Ok(SchedEvent::Waking(wake())),
        KIND_WAKEUP_NEW => Ok(SchedEvent::WakeupNew(wake())),
        k => Err(DecodeError::Kind(k)),
    }
}

/// A record's bytes, as the programs write them (tests and fakes).
#[allow(clippy::too_many_arguments)]
pub fn encode(
    time: u64,
    kind: u8,
    flags: u8,
    aux: u16,
    a: (u32, u32),
    b: (u32, u32),
    arg: u32,
) -> [u8; RECORD_BYTES] {
    let mut r = [0u8; RECORD_BYTES];
    r[0..8].copy_from_slice(&time.to_ne_bytes());
    r[8] = kind;
    r[9] = flags;
    r[10..12].copy_from_slice(&aux.to_ne_bytes());
    for (at, v) in [(12, a.0), (16, a.1), (20, b.0), (24, b.1), (28, arg)] {
        r[at..at + 4].copy_from_slice(&v.to_ne_bytes());
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_switch_to_sleep_is_read_field_by_field() {
        // Thread 1234 of process 1200 sleeps (S) and CPU goes to 77 of 70.
        let r = encode(5_000, KIND_SWITCH, 0, 0, (1234, 1200), (77, 70), 0x1);
        let SchedEvent::Switch(s) = decode(&r).unwrap() else {
            panic!("a switch")
        };
        assert_eq!(
            (s.time, s.prev_tid, s.prev_tgid, s.next_tid, s.next_tgid),
            (5_000, 1234, 1200, 77, 70)
        );
        assert_eq!(s.prev_state, PrevState::Sleeping);
        assert!(!s.preempt);
        let d = s.to_dispatch(3);
        assert_eq!(
            (d.cpu, d.prev_tid, d.next_tid, d.time),
            (3, 1234, 77, 5_000)
        );
        assert_eq!(d.prev_state, PrevState::Sleeping);
    }

    #[test]
    fn preemption_wins_over_the_state_and_idle_has_no_state() {
        // Preempted while it had set TASK_UNINTERRUPTIBLE (not yet asleep).
        let r = encode(1, KIND_SWITCH, FLAG_PREEMPT, 0, (9, 9), (8, 8), 0x2);
        let SchedEvent::Switch(s) = decode(&r).unwrap() else {
            panic!()
        };
        assert_eq!(s.prev_state, PrevState::Preempted);
        assert!(s.preempt);
        assert_eq!(s.raw_state, 2, "the raw state is kept");
        // The idle task leaving: the perf path knows nothing of why.
        let r = encode(2, KIND_SWITCH, 0, 0, (0, 0), (8, 8), 0);
        let SchedEvent::Switch(s) = decode(&r).unwrap() else {
            panic!()
        };
        assert_eq!(s.prev_state, PrevState::Unknown);
        // An exiting task: exit_state (aux) says dead.
        let r = encode(3, KIND_SWITCH, 0, 0x10, (9, 9), (0, 0), 0x80);
        let SchedEvent::Switch(s) = decode(&r).unwrap() else {
            panic!()
        };
        assert_eq!(s.prev_state, PrevState::Dead);
    }

    #[test]
    fn wakings_carry_their_context() {
        // A hard interrupt (hardirq count 1 = preempt_count 0x10000) on an
        // idle CPU wakes 55 of 50, which last ran on CPU 1.
        let r = encode(
            7,
            KIND_WAKING,
            FLAG_CONTEXT_KNOWN,
            0x0100,
            (0, 0),
            (55, 50),
            1,
        );
        let SchedEvent::Waking(w) = decode(&r).unwrap() else {
            panic!()
        };
        assert_eq!(
            (w.time, w.waker_tid, w.wakee_tid, w.wakee_tgid, w.target_cpu),
            (7, 0, 55, 50, 1)
        );
        assert_eq!(w.context, WakeContext::HardIrq);
        let u = w.to_wakeup(0, false);
        assert_eq!(
            (u.cpu, u.waker_tid, u.wakee_tid, u.target_cpu),
            (0, 0, 55, 1)
        );
        assert_eq!(u.context, WakeContext::HardIrq);
        // A thread's waking, preemption disabled once (count 1, no context bits).
        let r = encode(8, KIND_WAKING, FLAG_CONTEXT_KNOWN, 0, (12, 10), (55, 50), 0);
        assert!(matches!(
            decode(&r),
            Ok(SchedEvent::Waking(Wake {
                context: WakeContext::Task,
                ..
            }))
        ));
        // Without the flag, the context was not read: never guessed.
        let r = encode(9, KIND_WAKEUP_NEW, 0, 0x0100, (12, 10), (56, 10), 1);
        let SchedEvent::WakeupNew(w) = decode(&r).unwrap() else {
            panic!()
        };
        assert_eq!(w.context, WakeContext::Unknown);
        assert!(w.to_wakeup(1, true).new_thread);
    }

    #[test]
    fn a_batch_splits_into_its_records_and_a_record_with_stacks_stays_whole() {
        let mut batch = Vec::new();
        for t in 1..=3u64 {
            let mut r = [0u8; RECORD_BYTES];
            r[..8].copy_from_slice(&t.to_ne_bytes());
            r[8] = KIND_SWITCH;
            batch.extend_from_slice(&r);
        }
        let times: Vec<u64> = split(&batch)
            .map(|r| decode(r).expect("a record").time())
            .collect();
        assert_eq!(times, [1, 2, 3]);
        let mut stacked = vec![0u8; STACK_HEAD_BYTES + 16];
        stacked[8] = KIND_SWITCH;
        stacked[9] = FLAG_STACKS;
        assert_eq!(split(&stacked).count(), 1, "whole, though a multiple of 32");
        assert_eq!(
            split(&batch[..40]).count(),
            1,
            "not a batch: whole, for decode to refuse"
        );
        assert_eq!(
            split(&[]).count(),
            1,
            "an empty record is kept (and refused)"
        );
    }

    #[test]
    fn foreign_records_are_errors_not_panics() {
        let r = encode(1, 9, 0, 0, (1, 1), (2, 2), 0);
        assert_eq!(decode(&r), Err(DecodeError::Kind(9)));
        assert_eq!(decode(&r[..31]), Err(DecodeError::Length(31)));
        assert_eq!(decode(&[]), Err(DecodeError::Length(0)));
        let mut long = r.to_vec();
        long.push(0);
        assert_eq!(decode(&long), Err(DecodeError::Length(33)));
        // A long record without the flag, a flagged one too short for its
        // head, or whose sizes overflow it: errors.
        let mut long = vec![0u8; STACK_HEAD_BYTES + 16];
        long[..RECORD_BYTES].copy_from_slice(&encode(1, KIND_SWITCH, 0, 0, (1, 1), (0, 0), 1));
        assert_eq!(
            decode(&long),
            Err(DecodeError::Length(STACK_HEAD_BYTES + 16))
        );
        long[9] = FLAG_STACKS;
        assert!(decode(&long).is_ok());
        assert_eq!(
            decode(&long[..STACK_HEAD_BYTES - 1]),
            Err(DecodeError::Length(STACK_HEAD_BYTES - 1))
        );
        long[40..44].copy_from_slice(&17u32.to_ne_bytes()); // asks 17 > 16 of room
        assert_eq!(
            stacks(&long),
            Err(DecodeError::Stacks(STACK_HEAD_BYTES + 16))
        );
        long[40..44].copy_from_slice(&16u32.to_ne_bytes());
        long[32..36].copy_from_slice(&12u32.to_ne_bytes()); // not whole frames
        assert_eq!(
            stacks(&long),
            Err(DecodeError::Stacks(STACK_HEAD_BYTES + 16))
        );
    }

    #[test]
    fn a_record_with_stacks_gives_its_event_and_its_stacks() {
        let mut r = vec![0u8; STACK_HEAD_BYTES + 64];
        r[..RECORD_BYTES].copy_from_slice(&encode(
            42,
            KIND_SWITCH,
            FLAG_STACKS,
            0,
            (1234, 1200),
            (0, 0),
            0x1,
        ));
        let put32 =
            |r: &mut Vec<u8>, at: usize, v: u32| r[at..at + 4].copy_from_slice(&v.to_ne_bytes());
        put32(&mut r, 32, 16); // two kernel frames
        put32(&mut r, 36, 32); // 32 of 64 bytes copied
        put32(&mut r, 40, 64);
        put32(&mut r, 44, 1 | 2 | 4 | 8 | 16);
        for (at, v) in [
            (48, 0x401000u64),
            (56, 0x7ffd_0000),
            (64, 0x7ffd_0100),
            (72, 0xdead),
            (80, 77),
            (88, 0x7ffd_0400),
            (96, 0x7ffd_0500),
            (104, 0x7f00_1234),
            (112, 0x7f00_5000),
            (120, 0),
            (128, 0x7f00_6000),
            (136, 0x10_0040),
        ] {
            r[at..at + 8].copy_from_slice(&v.to_ne_bytes());
        }
        r[144..152].copy_from_slice(&0xffff_ffff_8100_0000u64.to_ne_bytes());
        r[152..160].copy_from_slice(&0xffff_ffff_8100_1000u64.to_ne_bytes());
        r[STACK_HEAD_BYTES] = 7;
        let SchedEvent::Switch(s) = decode(&r).unwrap() else {
            panic!("a switch")
        };
        assert_eq!((s.time, s.prev_tid, s.next_tid), (42, 1234, 0));
        let st = stacks(&r).unwrap().expect("stacks");
        assert_eq!(
            st.kernel().collect::<Vec<_>>(),
            [0xffff_ffff_8100_0000, 0xffff_ffff_8100_1000]
        );
        let u = st.user.expect("user registers");
        assert_eq!(
            (u.ip, u.sp, u.bp, u.di, u.runs, u.asked),
            (0x401000, 0x7ffd_0000, 0x7ffd_0100, 0xdead, Some(77), 64)
        );
        assert_eq!(u.java_anchor, Some([0x7ffd_0400, 0x7ffd_0500, 0x7f00_1234]));
        assert_eq!(u.java_monitors, Some([0x7f00_5000, 0, 0x7f00_6000]));
        assert_eq!(u.java_blocker, Some(0x10_0040));
        assert_eq!(u.bytes.len(), 32);
        assert_eq!(u.bytes[0], 7);
        // A kernel without run counts, a thread not a Java one's.
        put32(&mut r, 44, 1);
        let u = stacks(&r).unwrap().unwrap().user.unwrap();
        assert_eq!((u.runs, u.java_anchor, u.java_monitors), (None, None, None));
        // A kernel thread's: no user registers.
        put32(&mut r, 44, 0);
        assert_eq!(stacks(&r).unwrap().unwrap().user, None);
        // A plain record has none.
        assert_eq!(stacks(&r[..RECORD_BYTES]).unwrap_or(None), None);
    }
}
