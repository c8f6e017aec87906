//! The user stack copies of a recording, rebuilt as the [`super::Reader`]
//! reads them: the writer stores a thread's copy whole, or as a delta
//! against that thread's previous copy ([`crate::ustacks`]).
//!
//! Invariant: the references hold, per thread, the last copy read in file
//! order, so a delta is rebuilt against the copy the writer diffed it
//! against. Once records were skipped or the reader moved
//! ([`Copies::lose`]), the references are incomplete: a delta whose
//! reference is missing is then handed out without bytes rather than
//! failing; before that, it is corruption.

use crate::codec::Payload;
use crate::ustacks::{decode_copy_head, rebuild_copy, CopyReferences, StackCopy};
use crate::{kind, FormatError};

use super::RawRecord;

/// The stack copies deltas are read against.
#[derive(Debug, Default)]
pub(super) struct Copies {
    /// Each thread's last copy.
    refs: CopyReferences,
    /// Set when records were skipped or a seek made `refs` incomplete: a
    /// delta without its reference is then handed out without bytes.
    broken: bool,
    /// A delta's bytes, rebuilt before they become the reference.
    scratch: Vec<u8>,
}

impl Copies {
    /// Forgets every reference: records were skipped or the reader moved.
    pub(super) fn lose(&mut self) {
        self.refs.clear();
        self.broken = true;
    }

    /// Thread `tid` exited: its reference is dropped, as the writer drops
    /// its own.
    #[inline]
    pub(super) fn exited(&mut self, tid: u32) {
        self.refs.exited(tid);
    }

    /// Decodes a stack copy of kind `k` (`STACK_COPY`, `STACK_COPY_DELTA`,
    /// `WAKE_STACK_COPY`, `WAKE_STACK_COPY_DELTA`) after its time, with its
    /// bytes rebuilt and owned.
    #[inline(always)]
    pub(super) fn read(
        &mut self,
        k: u8,
        time: u64,
        p: &mut Payload<'_>,
    ) -> Result<StackCopy, FormatError> {
        let (mut c, n) = decode_copy_head(time, p)?;
        c.at_wakeup = matches!(k, kind::WAKE_STACK_COPY | kind::WAKE_STACK_COPY_DELTA);
        if matches!(k, kind::STACK_COPY | kind::WAKE_STACK_COPY) {
            c.bytes = p.bytes(n)?.to_vec();
            self.refs.keep(c.tid, c.sp, &c.bytes);
        } else if let Some(b) = rebuild_copy(p, n, c.sp, c.tid, &mut self.refs, &mut self.scratch)?
        {
            c.bytes = b.to_vec();
        } else if !self.broken {
            return Err(
                p.corrupt("a stack copy delta without an earlier copy of its thread".into())
            );
        }
        Ok(c)
    }

    /// Like [`Copies::read`] for [`super::Reader::next_raw`]: the bytes are
    /// borrowed (from the payload or the references), not copied.
    pub(super) fn read_raw<'a>(
        &'a mut self,
        k: u8,
        time: u64,
        p: &mut Payload<'a>,
    ) -> Result<RawRecord<'a>, FormatError> {
        let (mut c, n) = decode_copy_head(time, p)?;
        if matches!(k, kind::STACK_COPY | kind::WAKE_STACK_COPY) {
            c.at_wakeup = k == kind::WAKE_STACK_COPY;
            let bytes = p.bytes(n)?;
            let kept = self.refs.keep(c.tid, c.sp, bytes);
            return Ok(RawRecord::StackCopy(c, kept.unwrap_or(bytes)));
        }
        c.at_wakeup = k == kind::WAKE_STACK_COPY_DELTA;
        match rebuild_copy(p, n, c.sp, c.tid, &mut self.refs, &mut self.scratch)? {
            Some(b) => Ok(RawRecord::StackCopy(c, b)),
            None if self.broken => Ok(RawRecord::StackCopy(c, &[])),
            None => {
                Err(p.corrupt("a stack copy delta without an earlier copy of its thread".into()))
            }
        }
    }
}
