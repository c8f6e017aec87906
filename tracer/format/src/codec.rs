//! The bytes of a record's fields: unsigned LEB128 integers, zig-zag
//! signed ones, and the decoding cursor over one record's payload. Every
//! payload module ([`crate::stacks`], [`crate::tree`], [`crate::ustacks`],
//! [`crate::waits`]) and the [`crate::Reader`] / [`crate::Writer`] encode
//! through here, so the layout of a field is defined once.
//!
//! Invariant: [`put`] and [`Payload::uint`] are inverses for every `u64`,
//! as [`zigzag`] and [`unzigzag`] are for every `i64`; a payload too short
//! or an integer over 64 bits is a [`FormatError`], never a panic.

use crate::FormatError;

/// Largest CPU number accepted (Linux's `NR_CPUS` goes to 8192).
pub(crate) const MAX_CPU: u32 = 1 << 16;

/// Writes `v` as unsigned LEB128 at the start of `out` (at least 10
/// bytes); returns the bytes used. The recorder's hot path: every field of
/// every record goes through here (the `leb128` crate's writer goes byte by
/// byte through `io::Write`, which cost a tenth of the recorder's CPU).
#[inline]
pub(crate) fn leb128_into(out: &mut [u8], mut v: u64) -> usize {
    let mut i = 0;
    while v >= 0x80 {
        out[i] = (v as u8) | 0x80;
        v >>= 7;
        i += 1;
    }
    out[i] = v as u8;
    i + 1
}

/// Appends `v` as unsigned LEB128, byte by byte (no `memcpy` call for a
/// field of one to three bytes).
#[inline]
pub(crate) fn put(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

/// Maps signed to unsigned so that small magnitudes stay small.
pub(crate) fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Inverse of [`zigzag`].
pub(crate) fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Decoding cursor over one record's payload.
#[derive(Debug)]
pub(crate) struct Payload<'a> {
    pub(crate) data: &'a [u8],
    pub(crate) offset: u64,
}

impl<'a> Payload<'a> {
    pub(crate) fn corrupt(&self, what: String) -> FormatError {
        FormatError::Corrupt {
            offset: self.offset,
            what,
        }
    }

    #[inline(always)]
    pub(crate) fn uint(&mut self) -> Result<u64, FormatError> {
        // LEB128 straight from the slice: the hot path of every report.
        let mut value = 0u64;
        for (i, &byte) in self.data.iter().enumerate().take(10) {
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte < 0x80 {
                if i == 9 && byte > 1 {
                    break; // more than 64 bits
                }
                self.data = &self.data[i + 1..];
                return Ok(value);
            }
        }
        Err(self.bad_integer())
    }

    /// [`Payload::uint`]'s error, out of the hot path.
    #[cold]
    #[inline(never)]
    fn bad_integer(&self) -> FormatError {
        self.corrupt("bad or missing integer field".into())
    }

    #[inline(always)]
    /// A CPU number: readers index tables by it, so one beyond any
    /// machine's is corruption, not a reason to allocate.
    pub(crate) fn cpu(&mut self) -> Result<u32, FormatError> {
        let v = self.u32()?;
        if v > MAX_CPU {
            return Err(self.corrupt(format!("CPU number {v} is beyond any machine's")));
        }
        Ok(v)
    }

    #[inline(always)]
    pub(crate) fn u32(&mut self) -> Result<u32, FormatError> {
        let v = self.uint()?;
        u32::try_from(v).map_err(|_| self.out_of_range(v))
    }

    /// [`Payload::u32`]'s error, out of the hot path.
    #[cold]
    #[inline(never)]
    fn out_of_range(&self, v: u64) -> FormatError {
        self.corrupt(format!("field value {v} out of range"))
    }

    #[inline]
    pub(crate) fn byte(&mut self) -> Result<u8, FormatError> {
        let (&b, rest) = self
            .data
            .split_first()
            .ok_or_else(|| self.corrupt("record too short".into()))?;
        self.data = rest;
        Ok(b)
    }

    pub(crate) fn bytes(&mut self, n: usize) -> Result<&'a [u8], FormatError> {
        if self.data.len() < n {
            return Err(self.corrupt("record too short".into()));
        }
        let (head, rest) = self.data.split_at(n);
        self.data = rest;
        Ok(head)
    }

    #[inline(always)]
    pub(crate) fn time(&mut self, last: &mut u64) -> Result<u64, FormatError> {
        let delta = unzigzag(self.uint()?);
        *last = last.wrapping_add(delta as u64);
        Ok(*last)
    }
}
