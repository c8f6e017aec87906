//! The reader's input buffer: the bytes of the file read in chunks, and
//! the framing of records in them (kind, LEB128 length, payload).
//!
//! A compressed block ([`kind::BLOCK`]) is opened where it is met: its
//! records, decompressed, take its place in the buffer ([`Splice`]), so
//! the framing and every pass above it read them as if the file held them
//! there.
//!
//! Invariant: `buf[pos..end]` holds the file's bytes from offset
//! `base + pos` on, not yet consumed — or, while a block's records are
//! ahead in `buf[..splice.end]`, those records, then the file's bytes from
//! `splice.file_end` on; a record's payload is handed out as a `buf` range
//! valid until the next read. The buffer grows only as far as a record's
//! bytes actually arrive (never from a length alone; a block only to the
//! length it declares, at most [`MAX_BLOCK`]), and shrinks back to
//! [`BUF_LEN`] after a large record or block.

use std::io::{self, Read};

use crate::{kind, FormatError};

use super::{Reader, BUF_LEN};

/// A compressed block's records in the buffer: `buf[..end]` (shrinking as
/// the buffer moves on) in place of the block at `file_start..file_end`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Splice {
    /// Where the block's records end in `buf`.
    pub end: usize,
    /// The block record's offset in the file.
    pub file_start: u64,
    /// The file offset after it.
    pub file_end: u64,
    /// The delta chain's time before the block.
    pub time_before: u64,
}

/// Largest block accepted once decompressed (a flight recorder's segment
/// is at most 8 MiB and a second); anything larger is corruption.
pub const MAX_BLOCK: usize = 256 << 20;

/// A record's kind and the `buf` range of its payload.
type RecordBounds = (u8, (usize, usize));

/// Largest payload accepted (1 TiB); anything larger is corruption, not
/// data. Memory is not reserved from a record's length but as its bytes
/// arrive, so a damaged length costs no more than the file holds, while a
/// large TREE record (a JVM with millions of call-tree nodes) still reads.
const MAX_PAYLOAD: u64 = 1 << 40;

impl<R: Read> Reader<R> {
    /// The next record's offset, kind and payload bounds; a file that ends
    /// before its end record is [`FormatError::Truncated`].
    pub(super) fn next_bounds(&mut self) -> Result<(u64, u8, (usize, usize)), FormatError> {
        let offset = self.offset();
        match self.raw_record()? {
            Some((k, bounds)) => Ok((offset, k, bounds)),
            None => Err(FormatError::Truncated {
                offset,
                what: "no end record",
            }),
        }
    }

    /// Bytes of the file consumed so far (for progress displays); inside a
    /// compressed block, the block's offset.
    #[inline]
    pub fn offset(&self) -> u64 {
        match self.splice {
            None => self.base + self.pos as u64,
            Some(s) if self.pos < s.end => s.file_start,
            Some(s) => s.file_end + (self.pos - s.end) as u64,
        }
    }

    /// Accounts for the first `n` bytes of `buf` leaving it (the caller
    /// moves the rest to the front).
    fn shift_out(&mut self, n: usize) {
        match &mut self.splice {
            None => self.base += n as u64,
            Some(s) if n < s.end => s.end -= n,
            Some(s) => {
                self.base = s.file_end + (n - s.end) as u64;
                self.splice = None;
            }
        }
    }

    /// Makes at least `n` bytes available at `pos`; `false` at end of input.
    #[inline]
    pub(super) fn fill(&mut self, n: usize) -> Result<bool, FormatError> {
        if self.end - self.pos >= n {
            return Ok(true);
        }
        if self.pos > 0 {
            self.buf.copy_within(self.pos..self.end, 0);
            self.shift_out(self.pos);
            self.end -= self.pos;
            self.pos = 0;
        }
        if n <= BUF_LEN && self.buf.len() > BUF_LEN && self.end <= BUF_LEN {
            // Back to the usual size after a large record.
            self.buf.truncate(BUF_LEN);
            self.buf.shrink_to_fit();
        }
        while self.end < n {
            if self.end == self.buf.len() {
                // Grow by doubling, never past `n`: only as far as data came.
                let len = self.buf.len();
                self.buf
                    .resize(n.min(len.saturating_mul(2)).max(len + 1), 0);
            }
            match self.input.read(&mut self.buf[self.end..]) {
                Ok(0) => return Ok(false),
                Ok(k) => self.end += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(true)
    }

    /// `buf[start..end]` of the record just read, as an owned vector. A
    /// large one (a big thread's call tree) is not copied: the grown buffer
    /// itself is handed over and reading goes on in a fresh one.
    pub(super) fn take_payload(&mut self, start: usize, end: usize) -> Vec<u8> {
        if end - start <= BUF_LEN {
            return self.buf[start..end].to_vec();
        }
        let keep = self.end - self.pos;
        let mut fresh = vec![0; BUF_LEN.max(keep)];
        fresh[..keep].copy_from_slice(&self.buf[self.pos..self.end]);
        let mut big = std::mem::replace(&mut self.buf, fresh);
        self.shift_out(self.pos);
        self.pos = 0;
        self.end = keep;
        big.truncate(end);
        big.drain(..start);
        big
    }

    /// Reads one record's kind and payload; the payload is `buf[start..end]`.
    /// `None` at a clean end of input (between records). A compressed block
    /// is opened, and its first record read.
    #[inline]
    pub(super) fn raw_record(&mut self) -> Result<Option<RecordBounds>, FormatError> {
        loop {
            let offset = self.offset();
            // Taken before framing, which may move the buffer's bytes.
            let in_block = matches!(self.splice, Some(s) if self.pos < s.end);
            match self.framed(offset)? {
                Some((kind::BLOCK, (start, end))) => {
                    self.open_block(offset, in_block, start, end)?
                }
                other => return Ok(other),
            }
        }
    }

    /// Puts the records of the compressed block just framed (payload
    /// `buf[start..end]`, the record at `offset`; `in_block`: it was itself
    /// one of a block's records) in its place.
    #[cold]
    fn open_block(
        &mut self,
        offset: u64,
        in_block: bool,
        start: usize,
        end: usize,
    ) -> Result<(), FormatError> {
        let corrupt = |what: String| FormatError::Corrupt { offset, what };
        if in_block {
            return Err(corrupt(
                "a compressed block inside a compressed block".into(),
            ));
        }
        let data = &self.buf[start..end];
        let Some((len, lz4)) = data.split_first_chunk::<4>() else {
            return Err(corrupt("a compressed block without its length".into()));
        };
        let len = u32::from_le_bytes(*len) as usize;
        // LZ4 expands at most 255-fold.
        if len > MAX_BLOCK || len > lz4.len().saturating_mul(255) + 16 {
            return Err(corrupt(format!(
                "a compressed block of {len} bytes is implausible"
            )));
        }
        let rest = self.end - self.pos;
        let mut fresh = vec![0u8; (len + rest).max(BUF_LEN)];
        match lz4_flex::block::decompress_into(lz4, &mut fresh[..len]) {
            Ok(n) if n == len => {}
            Ok(n) => {
                return Err(corrupt(format!(
                    "a compressed block holds {n} bytes, not the {len} it says"
                )))
            }
            Err(e) => {
                return Err(corrupt(format!(
                    "a compressed block does not decompress: {e}"
                )))
            }
        }
        fresh[len..len + rest].copy_from_slice(&self.buf[self.pos..self.end]);
        self.splice = Some(Splice {
            end: len,
            file_start: offset,
            file_end: self.offset(),
            time_before: self.last_time,
        });
        self.buf = fresh;
        self.pos = 0;
        self.end = len + rest;
        self.blocks_opened += 1;
        Ok(())
    }

    /// [`Reader::raw_record`]'s framing of one record (at `offset`), blocks
    /// included.
    #[inline]
    fn framed(&mut self, offset: u64) -> Result<Option<RecordBounds>, FormatError> {
        // kind (1) + length (at most 10 bytes of LEB128); a short read here
        // is fine as long as the record itself is complete.
        if self.end - self.pos < 11 {
            if !self.fill(1)? {
                return Ok(None);
            }
            let _ = self.fill(11)?;
        }
        let avail = &self.buf[self.pos..self.end];
        let k = avail[0];
        // Fast path: a payload under 128 bytes (every binary record).
        if let Some(&len) = avail.get(1) {
            if len < 0x80 {
                let total = 2 + len as usize;
                if avail.len() >= total {
                    let start = self.pos + 2;
                    self.pos += total;
                    return Ok(Some((k, (start, self.pos))));
                }
            }
        }
        let mut rest = &avail[1..];
        let before = rest.len();
        let len = match leb128::read::unsigned(&mut rest) {
            Ok(len) => len,
            Err(leb128::read::Error::IoError(_)) => {
                return Err(FormatError::Truncated {
                    offset,
                    what: "a record length",
                })
            }
            Err(leb128::read::Error::Overflow) => {
                return Err(FormatError::Corrupt {
                    offset,
                    what: "record length overflows".into(),
                })
            }
        };
        if len > MAX_PAYLOAD {
            return Err(FormatError::Corrupt {
                offset,
                what: format!("record length {len} is implausible"),
            });
        }
        let head = 1 + before - rest.len();
        let total = head + len as usize;
        if !self.fill(total)? {
            return Err(FormatError::Truncated {
                offset,
                what: "a record's payload",
            });
        }
        let start = self.pos + head;
        self.pos += total;
        Ok(Some((k, (start, self.pos))))
    }
}
