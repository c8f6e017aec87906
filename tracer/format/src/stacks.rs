//! Kernel call chains at switch-outs: the kernel's stack of a thread that
//! left a CPU idle (or blocked uninterruptibly), interned, tied to its
//! dispatch, and the names of its addresses.
//!
//! Three records: `KERNEL_STACK` (untimed, binary) defines an interned
//! stack once, before the first `SWITCH_STACK` that uses it;
//! `SWITCH_STACK` (timed) follows its dispatch at the same time and CPU and
//! names the stack; `KERNEL_SYMBOLS` (untimed, JSON), written when the
//! recording ends, names every address the stacks use, so a recording
//! reports the same on another machine.
//!
//! Invariant: stack ids are unique in a recording and never 0.

use serde::{Deserialize, Serialize};

use crate::codec::{put, Payload};
use crate::FormatError;

/// An interned kernel stack (kind `KERNEL_STACK`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelStack {
    /// Its id, from 1.
    pub id: u64,
    /// Return addresses, innermost first.
    pub ips: Vec<u64>,
}

/// The kernel stack of the thread that left a CPU at a dispatch (kind
/// `SWITCH_STACK`, written right after that dispatch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwitchStack {
    /// The dispatch's time, ns on the recording's clock.
    pub time: u64,
    /// Its CPU.
    pub cpu: u32,
    /// The thread that left.
    pub tid: u32,
    /// A [`KernelStack`] id.
    pub stack: u64,
}

/// The first argument of the system call the thread that left a CPU at a
/// dispatch was in, as the call was entered (x86-64's DI; kind
/// `SWITCH_ARG`, right after that dispatch, where its user stack was
/// copied): for a futex wait, the futex's address — which lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwitchArg {
    /// The dispatch's time, ns on the recording's clock.
    pub time: u64,
    /// Its CPU.
    pub cpu: u32,
    /// The thread that left.
    pub tid: u32,
    /// The argument (meaningful only where the thread's kernel stack says
    /// which call it was in).
    pub arg: u64,
}

/// One kernel function an address lies in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelSymbol {
    /// The address, as in the stacks.
    pub addr: u64,
    /// The function (`pipe_read`), or empty if none was found.
    pub name: String,
    /// The address's offset in it.
    pub offset: u64,
}

/// The names of the stacks' addresses (kind `KERNEL_SYMBOLS`, JSON).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelSymbols {
    /// Where they came from (`/proc/kallsyms`).
    pub source: String,
    /// One per distinct address.
    pub symbols: Vec<KernelSymbol>,
    /// Why some or all could not be named.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Appends the payload of a `KERNEL_STACK` record.
pub fn encode_kernel_stack(s: &KernelStack, out: &mut Vec<u8>) {
    put(out, s.id);
    put(out, s.ips.len() as u64);
    for ip in &s.ips {
        out.extend_from_slice(&ip.to_le_bytes());
    }
}

pub(crate) fn decode_kernel_stack(p: &mut Payload<'_>) -> Result<KernelStack, FormatError> {
    let id = p.uint()?;
    let n = p.uint()? as usize;
    if n > p.data.len() / 8 {
        return Err(p.corrupt(format!("a stack of {n} frames in a shorter record")));
    }
    let ips = (0..n)
        .map(|_| {
            p.bytes(8)
                .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
        })
        .collect::<Result<_, _>>()?;
    Ok(KernelStack { id, ips })
}
