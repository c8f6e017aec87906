//! Records as read, for a pass that copies most of them through unchanged
//! ([`Reader::next_raw`], [`crate::Writer::write_raw`]): only stack copies
//! are rebuilt, and a few kinds decoded on demand ([`RawOther::decode`]).
//!
//! Invariant: the time-delta chain and the stack-copy references advance
//! as in [`Reader::next_record`] (every timed kind's time read, a thread's
//! reference dropped at its exit), so every record's time and bytes come
//! out as the decoding reader would give them.

use std::io::Read;

use crate::codec::Payload;
use crate::record::Record;
use crate::ustacks::StackCopy;
use crate::{kind, FormatError};

use super::decode::{self, end_summary, is_timed};
use super::Reader;

/// A record as read, for a pass that copies most records through as they
/// are ([`Reader::next_raw`], [`crate::Writer::write_raw`]).
#[derive(Debug)]
pub enum RawRecord<'a> {
    /// A stack copy (written whole or as a delta), rebuilt: its fields
    /// (with `bytes` empty) and its bytes, borrowed from the reader.
    StackCopy(StackCopy, &'a [u8]),
    /// Any other record, undecoded.
    Other(RawOther<'a>),
}

/// A record other than a stack copy, as read.
#[derive(Debug)]
pub struct RawOther<'a> {
    /// Its kind.
    pub kind: u8,
    /// Its time, for a timed kind.
    pub time: Option<u64>,
    /// Its payload after the time.
    pub(crate) body: &'a [u8],
    offset: u64,
}

impl RawOther<'_> {
    /// The record, for the kinds a pass over raw records needs decoded
    /// (`THREAD`, `EXIT`, `MODULE_MAP`, `SWITCH_JAVA_STACK`,
    /// `WAKE_JAVA_STACK`, `WALKED_STACK`); `None` for the others.
    pub fn decode(&self) -> Result<Option<Record>, FormatError> {
        let mut p = Payload {
            data: self.body,
            offset: self.offset,
        };
        let Some(time) = self.time else {
            return Ok(match self.kind {
                kind::WALKED_STACK => Some(Record::WalkedStack(Box::new(
                    crate::walked::decode_walked_stack(&mut p)?,
                ))),
                _ => None,
            });
        };
        Ok(Some(match self.kind {
            kind::SWITCH_JAVA_STACK => Record::SwitchJavaStack(crate::SwitchStack {
                time,
                cpu: p.cpu()?,
                tid: p.u32()?,
                stack: p.uint()?,
            }),
            kind::WAKE_JAVA_STACK => Record::WakeJavaStack(crate::SwitchStack {
                time,
                cpu: p.cpu()?,
                tid: p.u32()?,
                stack: p.uint()?,
            }),
            kind::THREAD => Record::Thread(decode::thread(time, &mut p)?),
            kind::EXIT => Record::Exit(decode::exit(time, &mut p)?),
            kind::MODULE_MAP => {
                Record::ModuleMap(Box::new(crate::ustacks::decode_module_map(time, &mut p)?))
            }
            _ => return Ok(None),
        }))
    }
}

impl<R: Read> Reader<R> {
    /// The next record as read, or `None` after the end record: for a
    /// pass that rewrites a few kinds and copies the others through
    /// ([`crate::Writer::write_raw`]) without decoding them. Stack copies
    /// come rebuilt, whole; a version-1 call-tree dump comes as one record.
    /// Not to be mixed with [`Reader::next_record`] on one reader.
    pub fn next_raw(&mut self) -> Result<Option<RawRecord<'_>>, FormatError> {
        if self.summary.is_some() {
            return Ok(None);
        }
        let (offset, k, (start, end)) = self.next_bounds()?;
        let mut p = Payload {
            data: &self.buf[start..end],
            offset,
        };
        match k {
            kind::END => {
                self.summary = Some(end_summary(p.data, offset)?);
                return Ok(None);
            }
            kind::META | 0 => {
                return Err(p.corrupt(format!("a record of kind {k} inside the recording")));
            }
            _ => {}
        }
        let time = if is_timed(k) {
            Some(p.time(&mut self.last_time)?)
        } else {
            None
        };
        match k {
            kind::STACK_COPY
            | kind::WAKE_STACK_COPY
            | kind::STACK_COPY_DELTA
            | kind::WAKE_STACK_COPY_DELTA => self
                .copies
                .read_raw(k, time.unwrap_or_default(), &mut p)
                .map(Some),
            _ => {
                let other = RawOther {
                    kind: k,
                    time,
                    body: p.data,
                    offset,
                };
                if k == kind::EXIT {
                    if let Some(Record::Exit(e)) = other.decode()? {
                        self.copies.exited(e.tid);
                    }
                }
                Ok(Some(RawRecord::Other(other)))
            }
        }
    }
}
