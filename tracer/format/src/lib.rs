//! The idleflow recording format: what the tracer writes and postproc reads.
//!
//! This crate owns the byte layout of a recording and nothing else: no
//! analysis, no kernel access, no I/O beyond the reader and writer it is
//! handed. What the recorder and the JVM agent share while a recording runs
//! (the thread work area, the hand-off socket, the clock) is the JVM wire,
//! `idleflow-wire`. A recording is one file:
//!
//! ```text
//! magic "IDLEFLOW" | version u32 LE | record*
//! record = kind u8 | payload length (LEB128) | payload
//! ```
//!
//! The first record is always [`RunInfo`] (kind `META`), the last one
//! [`RunSummary`] (kind `END`); a file without `END` is truncated. Timed
//! records store their time as a zig-zag delta from the previous timed record
//! (the first from [`RunInfo::start_ns`]), which keeps a dispatch at about
//! 13 bytes. Record kinds this version does not know are skipped and counted,
//! so later kinds (trees, trace records, wait reasons) need no format break.
//! The full description is in `docs/format.md`.
//!
//! Invariant: every record the [`Writer`] emits is read back unchanged by the
//! [`Reader`] (see the round-trip tests), and the reader never panics on
//! foreign or damaged input: it returns a [`FormatError`].

mod amend;
mod codec;
mod error;
pub mod files;
pub mod names;
mod reader;
mod record;
pub mod signatures;
pub mod stacks;
pub mod tree;
pub mod ustacks;
pub mod waits;
pub mod walked;
mod writer;

pub use amend::add_after_stream;
pub use error::FormatError;
pub use reader::{CutShort, Position, RawOther, RawRecord, Reader, WaitsAt};
pub use record::{
    DeferredMerge, Dispatch, FlightDump, KernelCost, Lost, NodeTag, PrevState, ProcStatCpu, Record,
    RunInfo, RunSummary, ThreadExit, ThreadInfo, WakeContext, Wakeup, IDLE_TID,
};
pub use stacks::{KernelStack, KernelSymbol, KernelSymbols, SwitchArg, SwitchStack};
pub use tree::{EncodedThread, ThreadTree, TreeDump, TreeHead, TreeNode};
pub use ustacks::{
    CodeKind, ModuleMap, StackCopy, UnwindEnd, UserFrame, UserModule, UserStack, UserStackCounts,
    UserSymbols,
};
pub use waits::{FrameKind, JavaFrame, JavaStack, JavaSymbol, JavaWait, JvmWaits, WaitReason};
pub use walked::{JavaState, JavaWalkCounts, SwitchJavaState, WalkedFrame, WalkedStack};
pub use writer::Writer;

/// The eight bytes every recording starts with.
pub const MAGIC: &[u8; 8] = b"IDLEFLOW";
/// The format version this crate writes and reads.
pub const VERSION: u32 = 1;

/// The eight bytes that begin the trailer [`Writer::finish`] writes after
/// the end record: then the file offset of the first of the JVMs' wait
/// records (`u64::MAX`: none) and the time-delta chain's time there, each
/// 8 bytes little-endian. A report reads the waits first from there
/// instead of scanning the whole recording; readers stop at the end
/// record, so a recording without the trailer (or a reader that does not
/// know it) reads as before.
pub const WAITS_TRAILER: &[u8; 8] = b"IFWAITS1";
/// The trailer's length in bytes.
pub const WAITS_TRAILER_LEN: usize = 24;

/// Record kinds (the first byte of each record).
pub mod kind {
    /// [`crate::RunInfo`], JSON payload; always the first record.
    pub const META: u8 = 1;
    /// [`crate::Dispatch`].
    pub const DISPATCH: u8 = 2;
    /// [`crate::Wakeup`].
    pub const WAKEUP: u8 = 3;
    /// [`crate::ThreadInfo`]: a thread's process and name.
    pub const THREAD: u8 = 4;
    /// [`crate::ThreadExit`].
    pub const EXIT: u8 = 5;
    /// [`crate::Lost`]: records the kernel dropped on one CPU.
    pub const LOST: u8 = 6;
    /// [`crate::RunSummary`], JSON payload; always the last record.
    pub const END: u8 = 7;
    /// [`crate::Dispatch`] whose `prev_node` is not `Untraced`: the DISPATCH
    /// fields, then a tag byte (1 current, 2 ring, 3 unknown) and the node.
    pub const DISPATCH_TAGGED: u8 = 8;
    /// [`crate::TreeDump`], JSON payload: one JVM's call trees, whole (the
    /// first form of the trees; still read, no longer written).
    pub const TREE: u8 = 9;
    /// Kinds `FIRST_FUTURE_TIMED..FIRST_UNTIMED` (24–127) are reserved for
    /// timed records of later versions: their payload starts with the time
    /// delta, which a reader that does not know the kind still applies.
    pub const FIRST_FUTURE_TIMED: u8 = 24;
    /// [`crate::SwitchStack`]: the kernel stack of the thread that left at
    /// the dispatch just before (timed: delta, cpu, tid, stack id).
    pub const SWITCH_STACK: u8 = 10;
    /// [`crate::StackCopy`]: the user registers and stack bytes of the
    /// thread that left at the dispatch just before (timed).
    pub const STACK_COPY: u8 = 11;
    /// [`crate::ModuleMap`]: an executable mapping of a process (timed).
    pub const MODULE_MAP: u8 = 12;
    /// [`crate::SwitchStack`] naming a [`crate::UserStack`]: the user stack
    /// of the thread that left at the dispatch just before (timed).
    pub const SWITCH_USER_STACK: u8 = 13;
    /// A [`crate::StackCopy`] written as its difference from the same
    /// thread's previous copy ([`crate::ustacks`]); read as a `STACK_COPY`.
    pub const STACK_COPY_DELTA: u8 = 14;
    /// [`crate::SwitchStack`] at a wake-up: the kernel stack taken at the
    /// wake-up just before (same time and CPU; `tid` its `waker_tid`): the
    /// waker's release site, or the interrupt's path (timed).
    pub const WAKE_STACK: u8 = 15;
    /// [`crate::SwitchStack`] naming a [`crate::UserStack`]: the waker's
    /// user stack at the wake-up just before (timed).
    pub const WAKE_USER_STACK: u8 = 16;
    /// A [`crate::StackCopy`] taken at the wake-up just before (the
    /// waker's; `at_wakeup`), as `STACK_COPY` (timed).
    pub const WAKE_STACK_COPY: u8 = 17;
    /// The same written as a delta, as `STACK_COPY_DELTA` (timed).
    pub const WAKE_STACK_COPY_DELTA: u8 = 18;
    /// [`crate::SwitchArg`]: the first system-call argument of the thread
    /// that left at the dispatch just before (timed: delta, cpu, tid, arg).
    pub const SWITCH_ARG: u8 = 19;
    /// A wake-up and the dispatch that came next on the CPU that raised
    /// it, nothing of that CPU between, whose leaving thread is the one
    /// that ran when the wake-up was raised (its waker, or the thread an
    /// interrupt hit): one record for the two (the recorder's fold). Timed
    /// by the wake-up; read as the [`crate::Wakeup`] and, at its own time,
    /// the [`crate::Dispatch`] (format 1.18).
    pub const WOKEN_DISPATCH: u8 = 20;
    /// [`crate::SwitchStack`] naming a [`crate::WalkedStack`]: the Java
    /// frames of the thread that left at the dispatch just before, read
    /// from its JVM's structures (timed; written just before that
    /// switch-out's stack copy).
    pub const SWITCH_JAVA_STACK: u8 = 21;
    /// [`crate::SwitchStack`] naming a [`crate::WalkedStack`]: the waker's
    /// Java frames at the wake-up just before (`tid` its `waker_tid`),
    /// read from its JVM's structures (timed; written just before that
    /// wake-up's stack copy).
    pub const WAKE_JAVA_STACK: u8 = 22;
    /// [`crate::SwitchJavaState`]: what the Java thread that left a CPU
    /// idle at the dispatch just before was blocked in, as the eBPF
    /// programs read its monitor words at that switch-out, with or without
    /// stacks (timed: delta, cpu, tid, state).
    pub const SWITCH_JAVA_STATE: u8 = 23;
    /// Kinds 128–255 are reserved for untimed records of later versions: a
    /// reader that does not know them skips them whole.
    pub const FIRST_UNTIMED: u8 = 128;
    /// [`crate::TreeHead`], binary: the head of one JVM's call-tree dump
    /// (written when the recording ends, not part of the time-delta chain).
    pub const TREE_HEAD: u8 = 128;
    /// [`crate::ThreadTree`], binary: one thread's call tree, after its
    /// JVM's `TREE_HEAD`.
    pub const TREE_THREAD: u8 = 129;
    /// [`crate::JvmWaits`], JSON: what was read of one JVM's waits, after
    /// its other wait records ([`crate::waits`]).
    pub const JVM_WAITS: u8 = 130;
    /// [`crate::JavaSymbol`], binary: an interned text of one JVM.
    pub const JAVA_SYMBOL: u8 = 131;
    /// [`crate::JavaStack`], binary: an interned Java stack.
    pub const JAVA_STACK: u8 = 132;
    /// [`crate::JavaWait`], binary: one wait of one Java thread.
    pub const JAVA_WAIT: u8 = 133;

    /// The kinds of a JVM's waits ([`crate::waits`]): what a report reads
    /// in its first pass, from the offset the trailer gives.
    pub fn is_java_wait(k: u8) -> bool {
        matches!(k, JVM_WAITS | JAVA_SYMBOL | JAVA_STACK | JAVA_WAIT)
    }
    /// [`crate::KernelStack`], binary: an interned kernel stack.
    pub const KERNEL_STACK: u8 = 134;
    /// [`crate::KernelSymbols`], JSON: the names of the stacks' addresses.
    pub const KERNEL_SYMBOLS: u8 = 135;
    /// [`crate::UserStack`], binary: an interned user stack.
    pub const USER_STACK: u8 = 136;
    /// [`crate::UserSymbols`], JSON: the user stacks' modules and frames.
    pub const USER_SYMBOLS: u8 = 137;
    /// A compressed block: a run of whole records (never META, END or
    /// another BLOCK) as a writer encoded them, compressed: their length
    /// (u32, little-endian), then the LZ4 block format. A reader reads
    /// the records inside as if they stood in its place; the delta chain
    /// runs through them. A flight recorder's dump keeps its segments so
    /// ([`crate::Writer::append_compressed`]).
    pub const BLOCK: u8 = 138;
    /// [`crate::WalkedStack`], binary: an interned stack of Java frames
    /// read from a JVM's structures.
    pub const WALKED_STACK: u8 = 139;
}
