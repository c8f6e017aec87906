//! A JVM's Java threads, read from its thread list
//! (`ThreadsSMRSupport::_java_thread_list`): each one's OS thread id, its
//! state (in Java, in native code, blocked, …) and its frame anchor — the
//! last Java frame's stack pointer, frame pointer and pc, which HotSpot
//! keeps while the thread is outside Java code (in native code, in the VM,
//! blocked). At a switch-out that is where its Java frames begin.
//!
//! Invariant: a list read while the JVM runs may be stale by the time it
//! is used (threads start and end); every value is bounded, and a thread
//! whose memory cannot be read is left out, never guessed.

use crate::layout::ThreadLayout;
use crate::memory::{Memory, MemoryError};
use crate::vmstructs::VmStructs;

/// The most threads read of one list.
pub const MAX_THREADS: u32 = 1 << 20;

/// A Java thread's state, named by the JVM's own constants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadState {
    /// The raw `JavaThreadState` value.
    pub value: u32,
    /// Its name in the JVM's constants (`_thread_blocked`, …), if any.
    pub name: Option<String>,
}

/// The last Java frame of a thread outside Java code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Anchor {
    /// Its stack pointer.
    pub sp: u64,
    /// Its frame pointer (0 where the JVM did not keep it).
    pub fp: u64,
    /// Its pc (0: the return address just below `sp`).
    pub pc: u64,
}

/// One Java thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JavaThread {
    /// The `JavaThread*`.
    pub addr: u64,
    /// The OS thread id.
    pub tid: u32,
    /// Its state.
    pub state: ThreadState,
    /// Its last Java frame, when it is outside Java code and has one.
    pub anchor: Option<Anchor>,
}

/// Names the JVM gives its thread states (`_thread_*` int constants).
pub fn state_names(vm: &VmStructs) -> Vec<(u32, String)> {
    let mut names: Vec<(u32, String)> = vm
        .int_constants
        .iter()
        .filter(|(n, _)| n.starts_with("_thread_"))
        .filter_map(|(n, &v)| Some((u32::try_from(v).ok()?, n.clone())))
        .collect();
    names.sort();
    names
}

/// Reads the JVM's Java threads.
pub fn java_threads(
    mem: &impl Memory,
    l: &ThreadLayout,
    states: &[(u32, String)],
) -> Result<Vec<JavaThread>, MemoryError> {
    let list = mem.u64(l.java_thread_list)?;
    if list == 0 {
        return Ok(Vec::new());
    }
    let len = mem.u32(list + l.list_length)?.min(MAX_THREADS);
    let array = mem.u64(list + l.list_threads)?;
    let mut out = Vec::with_capacity(len as usize);
    for i in 0..u64::from(len) {
        let Some(slot) = array.checked_add(i * 8) else {
            break;
        };
        let Ok(addr) = mem.u64(slot) else { break };
        if let Some(t) = read_thread(mem, l, states, addr) {
            out.push(t);
        }
    }
    Ok(out)
}

/// Reads the Java thread at `addr` (`None`: unreadable).
pub fn read_thread(
    mem: &impl Memory,
    l: &ThreadLayout,
    states: &[(u32, String)],
    addr: u64,
) -> Option<JavaThread> {
    let at = |off: u64| addr.checked_add(off);
    let os = mem.u64(at(l.osthread)?).ok()?;
    let tid = if os == 0 {
        0
    } else {
        mem.u32(os.checked_add(l.os_thread_id)?).ok()?
    };
    let value = mem.u32(at(l.thread_state)?).ok()?;
    let sp = mem.u64(at(l.last_java_sp)?).ok()?;
    let anchor = (sp != 0).then(|| Anchor {
        sp,
        fp: at(l.last_java_fp)
            .and_then(|a| mem.u64(a).ok())
            .unwrap_or(0),
        pc: at(l.last_java_pc)
            .and_then(|a| mem.u64(a).ok())
            .unwrap_or(0),
    });
    Some(JavaThread {
        addr,
        tid,
        state: ThreadState {
            value,
            name: states
                .iter()
                .find(|(v, _)| *v == value)
                .map(|(_, n)| n.clone()),
        },
        anchor,
    })
}
