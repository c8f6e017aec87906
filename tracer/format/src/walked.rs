//! Java frames read from a JVM's own structures at a switch-out (`record
//! --java vm`, `idleflow-hotspot`): no agent, no flight recorder, no JVM
//! flag. The recorder walks a thread that left a CPU idle while it is
//! still blocked, and writes what it found beside the switch-out's stack
//! copy; the resolver puts those frames in place of the copy's JIT and
//! interpreter frames when it unwinds the copy.
//!
//! - `SWITCH_JAVA_STACK` (21, timed): the Java frames of the thread that
//!   left at the dispatch just before (a [`crate::SwitchStack`] naming a
//!   [`WalkedStack`]), written just before that switch-out's stack copy.
//! - `WALKED_STACK` (139, untimed): an interned walked stack, written
//!   before its first use.
//!
//! Invariants: stack ids are unique in a recording and never 0; decoding
//! what [`encode_walked_stack`] wrote gives the same value; decoding
//! foreign bytes never panics and never reserves more than the payload
//! holds.

use crate::codec::{put, Payload};
use crate::waits::FrameKind;
use crate::FormatError;

/// The longest method text kept (a Java method with its parameters is far
/// shorter).
pub const MAX_METHOD_TEXT: usize = 4096;

/// What a Java thread that left a CPU idle was blocked in, as its JVM's
/// monitor words said at the switch-out (kind `SWITCH_JAVA_STATE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JavaState {
    /// Entering a contended monitor (`_current_pending_monitor` set).
    MonitorEnter,
    /// In `Object.wait` (`_current_waiting_monitor` set).
    MonitorWait,
    /// Neither: a park, a sleep, I/O, or the JVM's own code.
    Other,
}

impl JavaState {
    /// Its byte in the recording.
    pub fn code(self) -> u8 {
        match self {
            JavaState::MonitorEnter => 1,
            JavaState::MonitorWait => 2,
            JavaState::Other => 3,
        }
    }

    /// The state of byte `b` (`None`: a code this version does not know).
    pub fn from_code(b: u8) -> Option<Self> {
        match b {
            1 => Some(JavaState::MonitorEnter),
            2 => Some(JavaState::MonitorWait),
            3 => Some(JavaState::Other),
            _ => None,
        }
    }
}

/// What the Java thread that left at the dispatch just before was blocked
/// in (kind `SWITCH_JAVA_STATE`): the thread's previous stacks are carried
/// to a switch-out without its own only from one in the same state
/// (`postproc`'s `previous_stacks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SwitchJavaState {
    /// The dispatch's time, ns on the recording's clock.
    pub time: u64,
    /// Its CPU.
    pub cpu: u32,
    /// The thread that left.
    pub tid: u32,
    /// What it was blocked in.
    pub state: JavaState,
}

/// One Java frame of a walked stack.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WalkedFrame {
    /// How it ran: interpreted, JIT-compiled (its physical frame), inlined
    /// into the compiled frame after it, or a native method.
    pub kind: FrameKind,
    /// `pkg.Class.method(param, types)`, as HotSpot's perf map names
    /// methods.
    pub method: String,
    /// The source line of its bytecode index (0: not known).
    pub line: u32,
}

/// An interned stack of Java frames (kind `WALKED_STACK`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalkedStack {
    /// Its id, from 1.
    pub id: u64,
    /// The walk reached the thread's first Java frame (the call stub that
    /// started it); otherwise the outer frames are missing.
    pub complete: bool,
    /// The frames, innermost first.
    pub frames: Vec<WalkedFrame>,
}

/// What the recorder's walks of blocked Java threads found (in the run's
/// summary, `RunSummary::java_walks`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct JavaWalkCounts {
    /// Switch-out stack copies of threads of the JVMs read.
    pub copies: u64,
    /// Of those, walked: the thread was still blocked where it left.
    pub walked: u64,
    /// Of those, the thread had run again before the walk (its frames
    /// were not taken: today's way names them where it can).
    pub ran_first: u64,
    /// Of those, threads the JVM had no Java frames for (its own threads,
    /// a thread blocked before its first Java call).
    pub no_java_frames: u64,
    /// Of those, walks that failed (memory unreadable, a frame that did
    /// not check out).
    pub failed: u64,
    /// Wakers' stack copies walked (at wake-ups with stacks, from the
    /// anchor the programs read then).
    pub wakers: u64,
    /// Distinct walked stacks.
    pub stacks: u64,
    /// Compiled frames walked that the JVM had deoptimized while their
    /// thread was blocked (named from the pc they keep).
    pub deoptimized: u64,
    /// Time spent walking and naming, ns.
    pub walk_ns: u64,
    /// Per JVM: `PID: HotSpot 17.0.15+6-Debian-1deb12u1`, or
    /// why its structures could not be read.
    pub jvms: Vec<String>,
}

impl JavaWalkCounts {
    /// The walks since `earlier` (counts of the same recorder then): a
    /// flight recorder's dump says its window's. The JVMs are all those
    /// read so far.
    pub fn since(&self, earlier: &JavaWalkCounts) -> JavaWalkCounts {
        JavaWalkCounts {
            copies: self.copies.saturating_sub(earlier.copies),
            walked: self.walked.saturating_sub(earlier.walked),
            ran_first: self.ran_first.saturating_sub(earlier.ran_first),
            no_java_frames: self.no_java_frames.saturating_sub(earlier.no_java_frames),
            failed: self.failed.saturating_sub(earlier.failed),
            wakers: self.wakers.saturating_sub(earlier.wakers),
            stacks: self.stacks.saturating_sub(earlier.stacks),
            deoptimized: self.deoptimized.saturating_sub(earlier.deoptimized),
            walk_ns: self.walk_ns.saturating_sub(earlier.walk_ns),
            jvms: self.jvms.clone(),
        }
    }
}

/// Appends the payload of a `WALKED_STACK` record.
pub fn encode_walked_stack(s: &WalkedStack, out: &mut Vec<u8>) {
    put(out, s.id);
    out.push(u8::from(s.complete));
    put(out, s.frames.len() as u64);
    for f in &s.frames {
        out.push(f.kind.code());
        put(out, f.line.into());
        let text = &f.method.as_bytes()[..f.method.len().min(MAX_METHOD_TEXT)];
        put(out, text.len() as u64);
        out.extend_from_slice(text);
    }
}

/// The smallest encoded frame (kind, line, text length): bounds how many
/// frames a payload of a given length can hold.
const MIN_FRAME_BYTES: usize = 3;

pub(crate) fn decode_walked_stack(p: &mut Payload<'_>) -> Result<WalkedStack, FormatError> {
    let id = p.uint()?;
    let complete = p.byte()? != 0;
    let n = usize::try_from(p.uint()?).map_err(|_| p.corrupt("frame count".into()))?;
    if n > p.data.len() / MIN_FRAME_BYTES {
        return Err(p.corrupt(format!("a walked stack of {n} frames in a shorter record")));
    }
    let mut frames = Vec::with_capacity(n);
    for _ in 0..n {
        let code = p.byte()?;
        let kind = FrameKind::from_code(code)
            .ok_or_else(|| p.corrupt(format!("unknown frame kind code {code}")))?;
        let line = p.u32()?;
        let len = usize::try_from(p.uint()?).map_err(|_| p.corrupt("text length".into()))?;
        if len > MAX_METHOD_TEXT {
            return Err(p.corrupt(format!("a method text of {len} bytes")));
        }
        let method = String::from_utf8_lossy(p.bytes(len)?).into_owned();
        frames.push(WalkedFrame { kind, method, line });
    }
    Ok(WalkedStack {
        id,
        complete,
        frames,
    })
}
