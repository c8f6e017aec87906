//! JVM waits: what a JVM's own flight recorder (JFR) said about the waits
//! of its threads, stored in the recording so that reports need neither the
//! JVM nor its `.jfr` file. Record kinds (untimed, after the timed records):
//!
//! - `JAVA_SYMBOL` (131): a text of one JVM (a method `pkg.Class.method`, a
//!   monitor's or parked-on class, a thread's name, an address, a path),
//!   interned: written once, before anything refers to its id;
//! - `JAVA_STACK` (132): a Java stack (top frame first), interned likewise;
//! - `JAVA_WAIT` (133): one wait of one thread: when, how long, why (a
//!   [`WaitReason`] and its object and other thread), and its stack;
//! - `JVM_WAITS` (130, JSON): after a JVM's other records, what was read
//!   and how its clock was mapped to the recording's.
//!
//! Invariants: ids are per JVM (`pid`), never 0 (0 means none), and a
//! symbol or stack is written before the first record that uses it;
//! decoding what the encoders wrote gives the same values; decoding foreign
//! bytes never panics and never reserves more than the payload can fill.

use serde::{Deserialize, Serialize};

use crate::codec::{put, Payload};
use crate::FormatError;

/// Why a thread waited, as the JVM's event type says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum WaitReason {
    /// `jdk.JavaMonitorEnter`: blocked entering a `synchronized` block or
    /// method; object = the monitor's class, other = the previous owner.
    MonitorEnter,
    /// `jdk.JavaMonitorWait`: in `Object.wait`; object = the monitor's
    /// class, other = the thread that notified it.
    MonitorWait,
    /// `jdk.ThreadPark`: in `LockSupport.park` (locks, queues, pools);
    /// object = the class parked on.
    Park,
    /// `jdk.ThreadSleep`: in `Thread.sleep`.
    Sleep,
    /// `jdk.SocketRead`; object = the peer's address.
    SocketRead,
    /// `jdk.SocketWrite`; object = the peer's address.
    SocketWrite,
    /// `jdk.FileRead`; object = the path.
    FileRead,
    /// `jdk.FileWrite`; object = the path.
    FileWrite,
    /// `jdk.FileForce` (`fsync`); object = the path.
    FileForce,
}

impl WaitReason {
    /// All reasons, in code order (code = index + 1).
    pub const ALL: [WaitReason; 9] = [
        WaitReason::MonitorEnter,
        WaitReason::MonitorWait,
        WaitReason::Park,
        WaitReason::Sleep,
        WaitReason::SocketRead,
        WaitReason::SocketWrite,
        WaitReason::FileRead,
        WaitReason::FileWrite,
        WaitReason::FileForce,
    ];

    /// The byte stored in a recording.
    pub fn code(self) -> u8 {
        self as u8 + 1
    }

    /// The reason for a stored code, if known.
    pub fn from_code(code: u8) -> Option<Self> {
        Self::ALL.get(usize::from(code).checked_sub(1)?).copied()
    }

    /// The JFR event type that reports it.
    pub fn jfr_event(self) -> &'static str {
        match self {
            WaitReason::MonitorEnter => "jdk.JavaMonitorEnter",
            WaitReason::MonitorWait => "jdk.JavaMonitorWait",
            WaitReason::Park => "jdk.ThreadPark",
            WaitReason::Sleep => "jdk.ThreadSleep",
            WaitReason::SocketRead => "jdk.SocketRead",
            WaitReason::SocketWrite => "jdk.SocketWrite",
            WaitReason::FileRead => "jdk.FileRead",
            WaitReason::FileWrite => "jdk.FileWrite",
            WaitReason::FileForce => "jdk.FileForce",
        }
    }

    /// The reason of a JFR event type, if it is a wait idleflow reads.
    pub fn from_jfr_event(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.jfr_event() == name)
    }

    /// Short words for reports: `monitor enter`, `park`, …
    pub fn words(self) -> &'static str {
        match self {
            WaitReason::MonitorEnter => "monitor enter",
            WaitReason::MonitorWait => "monitor wait",
            WaitReason::Park => "park",
            WaitReason::Sleep => "sleep",
            WaitReason::SocketRead => "socket read",
            WaitReason::SocketWrite => "socket write",
            WaitReason::FileRead => "file read",
            WaitReason::FileWrite => "file write",
            WaitReason::FileForce => "file force",
        }
    }
}

/// How a Java frame was executing (JFR's `jdk.types.FrameType`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, Default,
)]
pub enum FrameKind {
    /// Not said.
    #[default]
    Unknown,
    /// Run by the interpreter.
    Interpreted,
    /// JIT-compiled code.
    Jit,
    /// Inlined into the JIT-compiled frame below it.
    Inlined,
    /// A native method.
    Native,
}

impl FrameKind {
    /// All kinds, in code order.
    pub const ALL: [FrameKind; 5] = [
        FrameKind::Unknown,
        FrameKind::Interpreted,
        FrameKind::Jit,
        FrameKind::Inlined,
        FrameKind::Native,
    ];

    /// The byte stored in a recording.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The kind of a stored code, if known.
    pub fn from_code(code: u8) -> Option<Self> {
        Self::ALL.get(usize::from(code)).copied()
    }

    /// The kind JFR names (`Interpreted`, `JIT compiled`, `Inlined`, `Native`).
    pub fn from_jfr(name: &str) -> Self {
        match name {
            "Interpreted" => FrameKind::Interpreted,
            "JIT compiled" => FrameKind::Jit,
            "Inlined" => FrameKind::Inlined,
            "Native" => FrameKind::Native,
            _ => FrameKind::Unknown,
        }
    }

    /// A short name for reports and flame graphs.
    pub fn name(self) -> &'static str {
        match self {
            FrameKind::Unknown => "java",
            FrameKind::Interpreted => "interpreted",
            FrameKind::Jit => "jit",
            FrameKind::Inlined => "inlined",
            FrameKind::Native => "native",
        }
    }
}

/// An interned text of one JVM (kind `JAVA_SYMBOL`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JavaSymbol {
    /// The JVM.
    pub pid: u32,
    /// Its id (never 0) in that JVM.
    pub id: u64,
    /// The text.
    pub text: String,
}

/// One frame of a [`JavaStack`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct JavaFrame {
    /// The method: a [`JavaSymbol`] id (`pkg.Class.method`).
    pub method: u64,
    /// Source line, 0 where not known.
    pub line: u32,
    /// How it was executing.
    pub kind: FrameKind,
}

/// An interned Java stack of one JVM (kind `JAVA_STACK`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JavaStack {
    /// The JVM.
    pub pid: u32,
    /// Its id (never 0) in that JVM.
    pub id: u64,
    /// Whether the JVM cut the stack at its depth limit.
    pub truncated: bool,
    /// Frames, top (the waiting method) first.
    pub frames: Vec<JavaFrame>,
}

/// One wait of one Java thread (kind `JAVA_WAIT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JavaWait {
    /// The JVM.
    pub pid: u32,
    /// The waiting thread (kernel tid).
    pub tid: u32,
    /// When the wait began, ns on the recording's clock.
    pub start: u64,
    /// How long it lasted, ns.
    pub duration: u64,
    /// Why.
    pub reason: WaitReason,
    /// Its stack: a [`JavaStack`] id, 0 if the JVM gave none.
    pub stack: u64,
    /// What it waited on (class, address, path): a symbol id, 0 if none.
    pub object: u64,
    /// The other thread involved (previous owner, notifier), kernel tid; 0 if none.
    pub other_tid: u32,
    /// That thread's Java name: a symbol id, 0 if none.
    pub other: u64,
}

impl JavaWait {
    /// When the wait ended, ns on the recording's clock.
    pub fn end(&self) -> u64 {
        self.start.saturating_add(self.duration)
    }
}

/// What was read of one JVM's waits (kind `JVM_WAITS`, JSON), written after
/// its other wait records.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct JvmWaits {
    /// The JVM.
    pub pid: u32,
    /// Where from: `jfr`.
    pub source: String,
    /// The file read (a path on the recording machine).
    pub file: String,
    /// Its size, bytes.
    pub file_bytes: u64,
    /// Chunks read.
    pub chunks: u64,
    /// Events read, of any type.
    pub events: u64,
    /// Wait events stored as `JAVA_WAIT`.
    pub waits: u64,
    /// Of those, without a stack.
    pub waits_without_stack: u64,
    /// The wait threshold the JVM recorded with, ns (0: every wait).
    pub threshold_ns: u64,
    /// The threshold of its contended monitor enters, ns, where it differs
    /// from `threshold_ns` (recordings before it was set apart: absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub monitor_enter_threshold_ns: Option<u64>,
    /// What was added to JFR's wall-clock ns to get the recording's clock.
    pub clock_offset_ns: i64,
    /// When the JVM's flight recording began and ended, ns on the
    /// recording's clock (its first chunk's start, its last chunk's end):
    /// the JVM's waits are known in this span only.
    pub recorded_from_ns: u64,
    /// See `recorded_from_ns`.
    pub recorded_to_ns: u64,
    /// The JVM's threads: (kernel tid, Java name).
    pub threads: Vec<(u32, String)>,
    /// More of its threads' names, from the flight recorder's thread dump
    /// (kernel tid, name): threads that ran before it started and had no
    /// event of their own, the JVM's internal threads among them. Names
    /// only: unlike `threads`, they do not make a thread one of the
    /// program's Java threads.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dumped_names: Vec<(u32, String)>,
    /// When every wait was recorded whatever its length, ns on the
    /// recording's clock, `[from, to)` in time order: idleflow's policy
    /// lowered the thresholds to 0 while the JVM's threads blocked rarely
    /// (`record --all-waits-below`). Absent: the thresholds held throughout.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub all_waits: Vec<(u64, u64)>,
    /// The JVM's threads that worked for idleflow (its flight recorder's,
    /// the attach listener), by kernel tid, as the recorder saw them: never
    /// a cause.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub own_tids: Vec<u32>,
    /// When idleflow first attached to the JVM, ns on the recording's
    /// clock: the threads it named `JFR …` from then on are its flight
    /// recorder's, started for idleflow (0: not noted).
    #[serde(default)]
    pub attached_ns: u64,
    /// What went wrong or was left out (a cut file, an unreadable chunk).
    pub notes: Vec<String>,
}

/// Appends the payload of a `JAVA_SYMBOL` record.
pub fn encode_symbol(s: &JavaSymbol, out: &mut Vec<u8>) {
    put(out, s.pid.into());
    put(out, s.id);
    put(out, s.text.len() as u64);
    out.extend_from_slice(s.text.as_bytes());
}

/// Appends the payload of a `JAVA_STACK` record.
pub fn encode_stack(s: &JavaStack, out: &mut Vec<u8>) {
    put(out, s.pid.into());
    put(out, s.id);
    out.push(u8::from(s.truncated));
    put(out, s.frames.len() as u64);
    for f in &s.frames {
        put(out, f.method);
        put(out, f.line.into());
        out.push(f.kind.code());
    }
}

/// Appends the payload of a `JAVA_WAIT` record.
pub fn encode_wait(w: &JavaWait, out: &mut Vec<u8>) {
    put(out, w.pid.into());
    put(out, w.tid.into());
    put(out, w.start);
    put(out, w.duration);
    out.push(w.reason.code());
    put(out, w.stack);
    put(out, w.object);
    put(out, w.other_tid.into());
    put(out, w.other);
}

/// The smallest encoded frame (three one-byte fields): bounds how many
/// frames a payload of a given length can hold.
const MIN_FRAME_BYTES: usize = 3;

pub(crate) fn decode_symbol(p: &mut Payload<'_>) -> Result<JavaSymbol, FormatError> {
    let pid = p.u32()?;
    let id = p.uint()?;
    let len = p.uint()? as usize;
    let text = String::from_utf8_lossy(p.bytes(len)?).into_owned();
    Ok(JavaSymbol { pid, id, text })
}

pub(crate) fn decode_stack(p: &mut Payload<'_>) -> Result<JavaStack, FormatError> {
    let pid = p.u32()?;
    let id = p.uint()?;
    let truncated = p.byte()? != 0;
    let n = p.uint()? as usize;
    if n > p.data.len() / MIN_FRAME_BYTES {
        return Err(p.corrupt(format!("a stack of {n} frames in a shorter record")));
    }
    let mut frames = Vec::with_capacity(n);
    for _ in 0..n {
        let method = p.uint()?;
        let line = p.u32()?;
        let code = p.byte()?;
        let kind = FrameKind::from_code(code)
            .ok_or_else(|| p.corrupt(format!("unknown frame kind code {code}")))?;
        frames.push(JavaFrame { method, line, kind });
    }
    Ok(JavaStack {
        pid,
        id,
        truncated,
        frames,
    })
}

pub(crate) fn decode_wait(p: &mut Payload<'_>) -> Result<JavaWait, FormatError> {
    let pid = p.u32()?;
    let tid = p.u32()?;
    let start = p.uint()?;
    let duration = p.uint()?;
    let code = p.byte()?;
    let reason = WaitReason::from_code(code)
        .ok_or_else(|| p.corrupt(format!("unknown wait reason code {code}")))?;
    Ok(JavaWait {
        pid,
        tid,
        start,
        duration,
        reason,
        stack: p.uint()?,
        object: p.uint()?,
        other_tid: p.u32()?,
        other: p.uint()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for r in WaitReason::ALL {
            assert_eq!(WaitReason::from_code(r.code()), Some(r));
            assert_eq!(WaitReason::from_jfr_event(r.jfr_event()), Some(r));
        }
        assert_eq!(WaitReason::from_code(0), None);
        assert_eq!(WaitReason::from_code(10), None);
        for k in FrameKind::ALL {
            assert_eq!(FrameKind::from_code(k.code()), Some(k));
        }
        assert_eq!(FrameKind::from_jfr("JIT compiled"), FrameKind::Jit);
    }
}
