//! User stacks at switch-outs: what a thread was running in user space when
//! its leaving made a CPU idle, for any program (native, JIT, interpreted),
//! with no instrumentation.
//!
//! The recorder cannot unwind in its hot path, so it keeps the raw
//! material, and `record` resolves it once the program's window closed:
//!
//! - `STACK_COPY` (11, timed): the outgoing thread's user registers (IP,
//!   SP, BP) and a copy of the top of its user stack, right after its
//!   dispatch (same time, CPU and thread). Only in a recording that was
//!   not resolved (the resolver replaces each with a `SWITCH_USER_STACK`).
//! - `STACK_COPY_DELTA` (14, timed): a `STACK_COPY` written as its
//!   difference from the same thread's previous copy (`CopyReferences`):
//!   a thread that blocks again where it blocked before has nearly the same
//!   bytes at the same addresses, so a copy of 8 KiB becomes tens of bytes
//!   on disk. Readers hand it out as a whole `STACK_COPY`.
//! - `MODULE_MAP` (12, timed): an executable mapping of a process (from the
//!   kernel's `MMAP2` records, and `/proc/PID/maps` for processes that ran
//!   before the window), so every address can be placed in a module.
//! - `SWITCH_USER_STACK` (13, timed): the interned user stack of the thread
//!   that left at the dispatch just before, as the resolver unwound it.
//! - `WAKE_STACK_COPY` (17), `WAKE_STACK_COPY_DELTA` (18) and
//!   `WAKE_USER_STACK` (16): the same, for the waker's stack at the wake-up
//!   just before (same time and CPU), sampled by the waker-stack event. A
//!   thread's copies at wake-ups and at switch-outs share its reference.
//! - `USER_STACK` (136, untimed): an interned user stack: frame ids,
//!   innermost first, and how the unwinding ended.
//! - `USER_SYMBOLS` (137, untimed, JSON): the modules and the named frames
//!   the stacks use, and what the resolver counted, so a recording reports
//!   the same after the binaries changed or vanished.
//!
//! Invariants: stack and frame ids are unique in a recording and never 0;
//! decoding what the encoders wrote gives the same values; decoding foreign
//! bytes never panics and never reserves more than the payload holds (or,
//! for a delta, than the copy limit, [`MAX_COPY_BYTES`]); a writer and a
//! reader keep the same references, record by record, in file order.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::codec::{put, Payload};
use crate::FormatError;

/// The outgoing thread's user registers and the top of its user stack at a
/// switch-out (kind `STACK_COPY`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackCopy {
    /// The dispatch's time, ns on the recording's clock.
    pub time: u64,
    /// Its CPU.
    pub cpu: u32,
    /// The thread that left.
    pub tid: u32,
    /// Its process.
    pub pid: u32,
    /// Instruction pointer.
    pub ip: u64,
    /// Stack pointer: `bytes[0]` is the byte at this address.
    pub sp: u64,
    /// Frame pointer.
    pub bp: u64,
    /// Bytes the recorder asked the kernel to copy; a copy this long may
    /// have been cut short of the stack's bottom.
    pub requested: u32,
    /// The copy (as many bytes as the kernel could read).
    #[serde(skip)]
    pub bytes: Vec<u8>,
    /// Taken at a wake-up (the waker's stack at the wake-up just before,
    /// kinds `WAKE_STACK_COPY*`), not at a switch-out.
    #[serde(default)]
    pub at_wakeup: bool,
}

/// An executable mapping of a process (kind `MODULE_MAP`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleMap {
    /// When it was mapped (the window's start for mappings read from
    /// `/proc`), ns on the recording's clock.
    pub time: u64,
    /// The process.
    pub pid: u32,
    /// First address.
    pub start: u64,
    /// Length, bytes.
    pub len: u64,
    /// Offset in the file of the first address.
    pub pgoff: u64,
    /// The file's inode (0: not known), to tell a file replaced since it
    /// was mapped (a rebuilt binary is a new file).
    pub ino: u64,
    /// The file (`/usr/lib/x86_64-linux-gnu/libc.so.6`), or a pseudo path
    /// (`[vdso]`, `//anon`).
    pub path: String,
}

/// How the unwinding of a [`UserStack`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum UnwindEnd {
    /// At the stack's bottom: the frames are the whole stack.
    Complete,
    /// A frame lay beyond the copied bytes: the outer frames are missing
    /// (raise `--stack-size`).
    Truncated,
    /// No rule and no frame pointer led further (code without unwind
    /// information, or a corrupt frame): the outer frames are missing.
    Stopped,
}

impl UnwindEnd {
    /// All ends, in code order.
    pub const ALL: [UnwindEnd; 3] = [
        UnwindEnd::Complete,
        UnwindEnd::Truncated,
        UnwindEnd::Stopped,
    ];

    /// The stored code.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The end for a stored code.
    pub fn from_code(code: u8) -> Option<Self> {
        Self::ALL.get(usize::from(code)).copied()
    }
}

/// An interned user stack (kind `USER_STACK`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserStack {
    /// Its id, from 1.
    pub id: u64,
    /// How the unwinding ended.
    pub end: UnwindEnd,
    /// [`UserFrame`] ids, innermost first.
    pub frames: Vec<u64>,
}

/// What ran at a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CodeKind {
    /// Machine code of a module (an ELF file).
    Native,
    /// Code a JIT compiler generated, named from the process's perf map.
    Jit,
    /// A JVM's interpreter.
    Interpreted,
    /// An address outside every known module and map.
    Unknown,
}

/// One named code location a stack passes (an item of
/// [`UserSymbols::frames`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserFrame {
    /// Its id, from 1.
    pub id: u64,
    /// What ran there.
    pub kind: CodeKind,
    /// The [`UserModule`] id (0: none).
    pub module: u64,
    /// The address in the module's own numbering (ELF virtual address), or
    /// the process's address where there is no module.
    pub addr: u64,
    /// The function, demangled; empty if none was found.
    pub name: String,
    /// Functions inlined at this address, outermost first (each a frame of
    /// its own in a path, after `name`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inlined: Vec<String>,
    /// Source file and line of the innermost function, where debug
    /// information exists.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub file: String,
    /// Line in `file` (0: unknown).
    #[serde(default)]
    pub line: u32,
}

/// A file the stacks' code came from (an item of [`UserSymbols::modules`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserModule {
    /// Its id, from 1.
    pub id: u64,
    /// Its path when recorded.
    pub path: String,
    /// Its GNU build id, hex (empty if it has none or it could not be read).
    pub build_id: String,
    /// What went wrong reading it (not found, build id differs), if anything.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
}

/// What the resolver made of the stack copies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct UserStackCounts {
    /// Stack copies in the recording.
    pub copies: u64,
    /// Unwound to at least one frame.
    pub resolved: u64,
    /// Of those, cut at the copy's end.
    pub truncated: u64,
    /// Of those, stopped without reaching the stack's bottom.
    pub stopped: u64,
    /// Frames in no module and no perf map.
    pub unknown_frames: u64,
    /// Copies of processes whose executable mappings were not recorded.
    pub no_maps: u64,
    /// Distinct stacks.
    pub stacks: u64,
    /// Bytes of stack copies read.
    pub copy_bytes: u64,
    /// Copies whose JIT frames were cut off: taken before their JVM threw
    /// its compiled code away (`idleflow_unwind::StaleJitBefore`).
    #[serde(skip_serializing_if = "no_copies")]
    pub stale_jit: u64,
    /// Copies whose Java frames came from their JVM's structures (walked
    /// by the recorder while the thread was blocked: `record --java vm`).
    #[serde(skip_serializing_if = "no_copies")]
    pub java_walked: u64,
}

fn no_copies(n: &u64) -> bool {
    *n == 0
}

/// The modules and named frames of a recording's user stacks (kind
/// `USER_SYMBOLS`, JSON, written when the stacks were resolved).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserSymbols {
    /// The files.
    pub modules: Vec<UserModule>,
    /// The frames.
    pub frames: Vec<UserFrame>,
    /// What the resolver counted.
    pub counts: UserStackCounts,
    /// What could not be done, once each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Appends the fields a `STACK_COPY` and a `STACK_COPY_DELTA` share, after
/// the time, up to and with the copy's length ([`decode_copy_head`]).
fn put_copy_head(c: &StackCopy, out: &mut Vec<u8>) {
    put(out, c.cpu.into());
    put(out, c.tid.into());
    put(out, c.pid.into());
    put(out, c.ip);
    put(out, c.sp);
    put(out, c.bp);
    put(out, c.requested.into());
    put(out, c.bytes.len() as u64);
}

/// Appends the payload of a `STACK_COPY` record after its time.
pub(crate) fn encode_copy(c: &StackCopy, out: &mut Vec<u8>) {
    put_copy_head(c, out);
    out.extend_from_slice(&c.bytes);
}

/// Decodes the fields of a `STACK_COPY` or `STACK_COPY_DELTA` payload
/// after its time, up to and with the copy's length: the copy without its
/// bytes, and their number.
pub(crate) fn decode_copy_head(
    time: u64,
    p: &mut Payload<'_>,
) -> Result<(StackCopy, usize), FormatError> {
    let cpu = p.cpu()?;
    let tid = p.u32()?;
    let pid = p.u32()?;
    let ip = p.uint()?;
    let sp = p.uint()?;
    let bp = p.uint()?;
    let requested = p.u32()?;
    let n = usize::try_from(p.uint()?).map_err(|_| p.corrupt("copy length".into()))?;
    let head = StackCopy {
        time,
        cpu,
        tid,
        pid,
        ip,
        sp,
        bp,
        requested,
        bytes: Vec::new(),
        at_wakeup: false,
    };
    Ok((head, n))
}

/// Threads whose last copy a writer and a reader keep as the reference of
/// their next one, at most: a copy of a thread beyond them is written
/// whole and not kept.
pub const MAX_COPY_REFERENCES: usize = 4096;

/// The longest stack copy a delta may rebuild (the kernel copies at most
/// 65528 bytes).
pub const MAX_COPY_BYTES: usize = 1 << 16;

/// The last stack copy of each thread, in file order: what a
/// `STACK_COPY_DELTA` of that thread is relative to. A copy (whole or
/// delta) replaces its thread's reference, or becomes one while fewer than
/// [`MAX_COPY_REFERENCES`] are kept; the thread's `EXIT` drops it. The
/// writer and the reader apply the same rule, so memory is bounded by the
/// threads, not by the recording.
#[derive(Debug, Default)]
pub(crate) struct CopyReferences {
    by_tid: HashMap<u32, Reference>,
}

/// One thread's last copy.
#[derive(Debug, Default)]
pub(crate) struct Reference {
    /// Its stack pointer: `bytes[0]` is at this address.
    pub(crate) sp: u64,
    pub(crate) bytes: Vec<u8>,
}

impl CopyReferences {
    pub(crate) fn get(&self, tid: u32) -> Option<&Reference> {
        self.by_tid.get(&tid)
    }

    /// Makes `bytes` at `sp` the thread's reference (copying them into the
    /// old reference's buffer), if it has one or there is room. Returns the
    /// kept bytes.
    pub(crate) fn keep(&mut self, tid: u32, sp: u64, bytes: &[u8]) -> Option<&[u8]> {
        let room = self.by_tid.len() < MAX_COPY_REFERENCES;
        match self.by_tid.entry(tid) {
            std::collections::hash_map::Entry::Occupied(e) => {
                let r = e.into_mut();
                r.sp = sp;
                r.bytes.clear();
                r.bytes.extend_from_slice(bytes);
                Some(&r.bytes)
            }
            std::collections::hash_map::Entry::Vacant(e) if room => {
                let r = e.insert(Reference {
                    sp,
                    bytes: bytes.to_vec(),
                });
                Some(&r.bytes)
            }
            std::collections::hash_map::Entry::Vacant(_) => None,
        }
    }

    /// As [`CopyReferences::keep`], taking the bytes' buffer: returns the
    /// replaced buffer (or `bytes` itself when not kept), for reuse.
    pub(crate) fn keep_owned(&mut self, tid: u32, sp: u64, bytes: Vec<u8>) -> Vec<u8> {
        if let Some(r) = self.by_tid.get_mut(&tid) {
            r.sp = sp;
            return std::mem::replace(&mut r.bytes, bytes);
        }
        if self.by_tid.len() < MAX_COPY_REFERENCES {
            self.by_tid.insert(tid, Reference { sp, bytes });
            return Vec::new();
        }
        bytes
    }

    /// The thread exited: its reference goes.
    pub(crate) fn exited(&mut self, tid: u32) {
        self.by_tid.remove(&tid);
    }

    pub(crate) fn clear(&mut self) {
        self.by_tid.clear();
    }
}

/// The `n` bytes of `new` from `i` equal the reference's bytes at the same
/// addresses; `shift` = new SP − reference SP.
#[inline]
fn same_at(new: &[u8], i: usize, n: usize, r: &Reference, shift: i64) -> bool {
    let Some(j) = (i as i64).checked_add(shift) else {
        return false;
    };
    let Ok(j) = usize::try_from(j) else {
        return false;
    };
    let Some(theirs) = r.bytes.get(j..j.saturating_add(n)) else {
        return false;
    };
    let ours = &new[i..i + n];
    match (<[u8; 8]>::try_from(ours), <[u8; 8]>::try_from(theirs)) {
        (Ok(a), Ok(b)) => u64::from_ne_bytes(a) == u64::from_ne_bytes(b),
        _ => ours == theirs,
    }
}

/// Appends the payload of a `STACK_COPY_DELTA` after its time: the fields
/// of a `STACK_COPY` up to the copy's length, then runs that rebuild the
/// copy from its start, alternately "same as the reference at these
/// addresses" (a length) and "literal" (a length, then the bytes),
/// beginning with a run of the first kind (perhaps empty); every literal
/// run is non-empty. Compared 64 bytes at a time where equal, else 8. Returns `false`, with `out`
/// as it was, when the delta would not be shorter than the copy.
pub(crate) fn encode_copy_delta(c: &StackCopy, r: &Reference, out: &mut Vec<u8>) -> bool {
    let start = out.len();
    put_copy_head(c, out);
    let new = &c.bytes;
    let len = new.len();
    let budget = out.len() - start + len;
    let shift = c.sp.wrapping_sub(r.sp) as i64;
    let step = |pos: usize| (len - pos).min(8);
    let mut pos = 0;
    while pos < len {
        let same = pos;
        loop {
            // Most of a copy is as before: 64 bytes at a time (one
            // vectorized compare), then 8 at a time where they differ.
            while pos + 64 <= len && same_at(new, pos, 64, r, shift) {
                pos += 64;
            }
            if pos < len && same_at(new, pos, step(pos), r, shift) {
                pos += step(pos);
            } else {
                break;
            }
        }
        put(out, (pos - same) as u64);
        if pos == len {
            break;
        }
        let literal = pos;
        while pos < len && !same_at(new, pos, step(pos), r, shift) {
            pos += step(pos);
        }
        put(out, (pos - literal) as u64);
        out.extend_from_slice(&new[literal..pos]);
        if out.len() - start >= budget {
            out.truncate(start);
            return false;
        }
    }
    true
}

/// Rebuilds the `n` bytes at `sp` of thread `tid`'s `STACK_COPY_DELTA`
/// from the runs left in `p`, and makes them the thread's reference.
/// A copy at the reference's SP and of its length (a thread that blocked
/// where it blocked before) is rebuilt in the reference itself: only its
/// literal runs are written. Others are rebuilt in `scratch`, which then
/// takes the reference's place. Returns the bytes, or `None` when the
/// thread has no reference.
pub(crate) fn rebuild_copy<'a>(
    p: &mut Payload<'_>,
    n: usize,
    sp: u64,
    tid: u32,
    refs: &'a mut CopyReferences,
    scratch: &'a mut Vec<u8>,
) -> Result<Option<&'a [u8]>, FormatError> {
    if n > MAX_COPY_BYTES {
        return Err(p.corrupt(format!("a stack copy of {n} bytes")));
    }
    let Some(r) = refs.by_tid.get_mut(&tid) else {
        return Ok(None);
    };
    if r.sp == sp && r.bytes.len() == n {
        walk_runs(p, n, |at, run| {
            if let Run::Literal(bytes) = run {
                r.bytes[at..at + bytes.len()].copy_from_slice(bytes);
            }
            Ok(())
        })?;
        return Ok(Some(&r.bytes));
    }
    scratch.clear();
    let shift = sp.wrapping_sub(r.sp) as i64;
    walk_runs(p, n, |at, run| {
        match run {
            Run::Same(len) => {
                let from = (at as i64)
                    .checked_add(shift)
                    .and_then(|j| usize::try_from(j).ok())
                    .and_then(|j| r.bytes.get(j..j.checked_add(len)?))
                    .ok_or("a delta run outside its reference")?;
                scratch.extend_from_slice(from);
            }
            Run::Literal(bytes) => scratch.extend_from_slice(bytes),
        }
        Ok(())
    })?;
    r.sp = sp;
    std::mem::swap(&mut r.bytes, scratch);
    Ok(Some(&r.bytes))
}

/// One run of a delta.
enum Run<'a> {
    /// This many bytes as in the reference, at the same addresses.
    Same(usize),
    /// These bytes.
    Literal(&'a [u8]),
}

/// Calls `f(offset in the copy, run)` for each run of a delta of `n`
/// bytes, checking that they cover the copy exactly; a same run of
/// length 0 is not passed on.
fn walk_runs<'a>(
    p: &mut Payload<'a>,
    n: usize,
    mut f: impl FnMut(usize, Run<'a>) -> Result<(), &'static str>,
) -> Result<(), FormatError> {
    let mut at = 0;
    while at < n {
        let same = usize::try_from(p.uint()?).unwrap_or(usize::MAX);
        if same > n - at {
            return Err(p.corrupt("a delta run past the copy's end".into()));
        }
        if same > 0 {
            f(at, Run::Same(same)).map_err(|e| p.corrupt(e.into()))?;
            at += same;
        }
        if at == n {
            break;
        }
        let literal = usize::try_from(p.uint()?).unwrap_or(usize::MAX);
        if literal == 0 || literal > n - at {
            return Err(p.corrupt(format!("a literal run of {literal} bytes in a delta")));
        }
        let bytes = p.bytes(literal)?;
        f(at, Run::Literal(bytes)).map_err(|e| p.corrupt(e.into()))?;
        at += literal;
    }
    if !p.data.is_empty() {
        return Err(p.corrupt("bytes after a delta's last run".into()));
    }
    Ok(())
}

/// Appends the payload of a `MODULE_MAP` record after its time.
pub(crate) fn encode_module_map(m: &ModuleMap, out: &mut Vec<u8>) {
    put(out, m.pid.into());
    put(out, m.start);
    put(out, m.len);
    put(out, m.pgoff);
    put(out, m.ino);
    put(out, m.path.len() as u64);
    out.extend_from_slice(m.path.as_bytes());
}

pub(crate) fn decode_module_map(time: u64, p: &mut Payload<'_>) -> Result<ModuleMap, FormatError> {
    let pid = p.u32()?;
    let start = p.uint()?;
    let len = p.uint()?;
    let pgoff = p.uint()?;
    let ino = p.uint()?;
    let n = usize::try_from(p.uint()?).map_err(|_| p.corrupt("path length".into()))?;
    let path = String::from_utf8_lossy(p.bytes(n)?).into_owned();
    Ok(ModuleMap {
        time,
        pid,
        start,
        len,
        pgoff,
        ino,
        path,
    })
}

/// Appends the payload of a `USER_STACK` record.
pub(crate) fn encode_user_stack(s: &UserStack, out: &mut Vec<u8>) {
    put(out, s.id);
    out.push(s.end.code());
    put(out, s.frames.len() as u64);
    for &f in &s.frames {
        put(out, f);
    }
}

pub(crate) fn decode_user_stack(p: &mut Payload<'_>) -> Result<UserStack, FormatError> {
    let id = p.uint()?;
    let code = p.byte()?;
    let end = UnwindEnd::from_code(code)
        .ok_or_else(|| p.corrupt(format!("unknown unwind end {code}")))?;
    let n = usize::try_from(p.uint()?).map_err(|_| p.corrupt("frame count".into()))?;
    // Each frame id takes at least one byte.
    if n > p.data.len() {
        return Err(p.corrupt(format!("a stack of {n} frames in a shorter record")));
    }
    let frames = (0..n).map(|_| p.uint()).collect::<Result<_, _>>()?;
    Ok(UserStack { id, end, frames })
}
