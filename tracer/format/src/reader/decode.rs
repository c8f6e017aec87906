//! Per-kind payload decoding for the [`super::Reader`]: one function per
//! record kind whose payload the reader itself lays out (dispatches,
//! wake-ups, threads, stack references, JSON records). The kinds with a
//! module of their own ([`crate::stacks`], [`crate::tree`],
//! [`crate::ustacks`], [`crate::waits`]) are decoded there.
//!
//! Invariant: each function reads its fields in the order the
//! [`crate::Writer`] wrote them, advances the time-delta chain (`last_time`)
//! exactly once for a timed kind, and turns every bad byte into a
//! [`FormatError`] carrying the record's offset — never a panic.
//!
//! The decoders of the frequent binary kinds are `#[inline(always)]`: they
//! were one body with [`super::Reader::next_record`], the hot path of every
//! report, and stay so once compiled.

use serde::de::DeserializeOwned;

use crate::codec::Payload;
use crate::record::{
    Dispatch, Lost, NodeTag, PrevState, RunSummary, ThreadExit, ThreadInfo, WakeContext, Wakeup,
};
use crate::{kind, FormatError};

/// Decodes a `DISPATCH` or `DISPATCH_TAGGED` (kind `k`) payload.
#[inline(always)]
pub(super) fn dispatch(
    k: u8,
    p: &mut Payload<'_>,
    last_time: &mut u64,
) -> Result<Dispatch, FormatError> {
    let time = p.time(last_time)?;
    let cpu = p.cpu()?;
    let prev_tid = p.u32()?;
    let code = p.byte()?;
    let prev_state = PrevState::from_code(code)
        .ok_or_else(|| p.corrupt(format!("unknown thread state code {code}")))?;
    let next_tid = p.u32()?;
    let prev_node = if k == kind::DISPATCH {
        NodeTag::Untraced
    } else {
        let code = p.byte()?;
        let node = p.uint()?;
        match code {
            1 => NodeTag::Current(node),
            2 => NodeTag::Ring(node),
            3 => NodeTag::Unknown,
            _ => return Err(p.corrupt(format!("unknown node tag code {code}"))),
        }
    };
    Ok(Dispatch {
        time,
        cpu,
        prev_tid,
        prev_state,
        next_tid,
        prev_node,
    })
}

/// Decodes a `WAKEUP` payload.
#[inline(always)]
pub(super) fn wakeup(p: &mut Payload<'_>, last_time: &mut u64) -> Result<Wakeup, FormatError> {
    Ok(Wakeup {
        time: p.time(last_time)?,
        cpu: p.cpu()?,
        waker_tid: p.u32()?,
        wakee_tid: p.u32()?,
        target_cpu: p.u32()?,
        new_thread: p.byte()? != 0,
        // Absent before format 2.16.
        context: if p.data.is_empty() {
            WakeContext::Unknown
        } else {
            let code = p.byte()?;
            WakeContext::from_code(code)
                .ok_or_else(|| p.corrupt(format!("unknown wake-up context code {code}")))?
        },
    })
}

/// Decodes a `WOKEN_DISPATCH` payload: the wake-up and the dispatch that
/// came next on its CPU (its leaving thread the wake-up's `waker_tid`).
#[inline(always)]
pub(super) fn woken_dispatch(
    p: &mut Payload<'_>,
    last_time: &mut u64,
) -> Result<(Wakeup, Dispatch), FormatError> {
    let time = p.time(last_time)?;
    let cpu = p.cpu()?;
    let waker_tid = p.u32()?;
    let wakee_tid = p.u32()?;
    let target_cpu = p.u32()?;
    let code = p.byte()?;
    let context = WakeContext::from_code(code)
        .ok_or_else(|| p.corrupt(format!("unknown wake-up context code {code}")))?;
    let delay = p.uint()?;
    let code = p.byte()?;
    let prev_state = PrevState::from_code(code)
        .ok_or_else(|| p.corrupt(format!("unknown thread state code {code}")))?;
    let next_tid = p.u32()?;
    let dispatch_time = time
        .checked_add(delay)
        .ok_or_else(|| p.corrupt(format!("a dispatch {delay} ns after its wake-up")))?;
    Ok((
        Wakeup {
            time,
            cpu,
            waker_tid,
            wakee_tid,
            target_cpu,
            new_thread: false,
            context,
        },
        Dispatch {
            time: dispatch_time,
            cpu,
            prev_tid: waker_tid,
            prev_state,
            next_tid,
            prev_node: NodeTag::Untraced,
        },
    ))
}

/// Decodes a `THREAD` payload after its time.
pub(super) fn thread(time: u64, p: &mut Payload<'_>) -> Result<ThreadInfo, FormatError> {
    let tid = p.u32()?;
    let pid = p.u32()?;
    let ppid = p.u32()?;
    let len = p.uint()? as usize;
    let comm = String::from_utf8_lossy(p.bytes(len)?).into_owned();
    Ok(ThreadInfo {
        time,
        tid,
        pid,
        ppid,
        comm,
    })
}

/// Decodes an `EXIT` payload after its time.
#[inline(always)]
pub(super) fn exit(time: u64, p: &mut Payload<'_>) -> Result<ThreadExit, FormatError> {
    Ok(ThreadExit {
        time,
        tid: p.u32()?,
        pid: p.u32()?,
    })
}

/// Decodes a `LOST` payload.
#[inline(always)]
pub(super) fn lost(p: &mut Payload<'_>, last_time: &mut u64) -> Result<Lost, FormatError> {
    Ok(Lost {
        time: p.time(last_time)?,
        cpu: p.cpu()?,
        count: p.uint()?,
    })
}

/// Decodes the payload of a record naming a stack (`SWITCH_STACK`,
/// `SWITCH_USER_STACK`, `WAKE_STACK`, `WAKE_USER_STACK`).
pub(super) fn stack_ref(
    p: &mut Payload<'_>,
    last_time: &mut u64,
) -> Result<crate::SwitchStack, FormatError> {
    Ok(crate::SwitchStack {
        time: p.time(last_time)?,
        cpu: p.cpu()?,
        tid: p.u32()?,
        stack: p.uint()?,
    })
}

/// Decodes a `SWITCH_ARG` payload.
#[inline(always)]
pub(super) fn switch_arg(
    p: &mut Payload<'_>,
    last_time: &mut u64,
) -> Result<crate::SwitchArg, FormatError> {
    Ok(crate::SwitchArg {
        time: p.time(last_time)?,
        cpu: p.cpu()?,
        tid: p.u32()?,
        arg: p.uint()?,
    })
}

/// Decodes a `SWITCH_JAVA_STATE` payload (the record at `offset`).
#[inline(always)]
pub(super) fn switch_java_state(
    p: &mut Payload<'_>,
    last_time: &mut u64,
    offset: u64,
) -> Result<crate::SwitchJavaState, FormatError> {
    let time = p.time(last_time)?;
    let cpu = p.cpu()?;
    let tid = p.u32()?;
    let code = p.uint()?;
    let state = u8::try_from(code)
        .ok()
        .and_then(crate::JavaState::from_code)
        .ok_or_else(|| FormatError::Corrupt {
            offset,
            what: format!("a Java thread state {code} this version does not know"),
        })?;
    Ok(crate::SwitchJavaState {
        time,
        cpu,
        tid,
        state,
    })
}

/// Decodes a JSON payload; `what` names the record in the error.
pub(super) fn json<T: DeserializeOwned>(
    data: &[u8],
    offset: u64,
    what: &str,
) -> Result<T, FormatError> {
    serde_json::from_slice(data).map_err(|e| FormatError::Corrupt {
        offset,
        what: format!("{what}: {e}"),
    })
}

/// The END record's summary.
pub(super) fn end_summary(data: &[u8], offset: u64) -> Result<RunSummary, FormatError> {
    json(data, offset, "end record")
}

/// The error for a zero kind byte where a record should start.
#[cold]
pub(super) fn zero_bytes(offset: u64) -> FormatError {
    FormatError::Corrupt {
        offset,
        what: "zero bytes where a record should be (the machine stopped before \
               the file's data reached the disk?)"
            .into(),
    }
}

/// Whether kind `k`'s payload starts with a time: the kinds below
/// [`kind::FIRST_UNTIMED`] but `META`, `END` and `TREE`.
pub(super) fn is_timed(k: u8) -> bool {
    k < kind::FIRST_UNTIMED && !matches!(k, kind::META | kind::END | kind::TREE)
}
