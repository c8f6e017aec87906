//! Reading a recording again from a place in it: [`Position`]s between
//! records, the trailer that says where the Java waits begin
//! ([`crate::WAITS_TRAILER`]), and [`Reader::seek`].
//!
//! Invariant: a [`Position`] carries the time-delta chain's time at its
//! offset, so timed records read after a seek have their true times; the
//! stack-copy references are lost on a seek (deltas may then come without
//! bytes, see [`super::copies`]).

use std::io::{Read, Seek, SeekFrom};

use crate::FormatError;

use super::Reader;

/// A place between two records, to read from again ([`Reader::seek`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    offset: u64,
    last_time: u64,
}

impl Position {
    /// Byte offset in the file.
    pub fn offset(&self) -> u64 {
        self.offset
    }
}

/// Where a recording's Java wait records begin, as its trailer says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitsAt {
    /// The recording has none.
    Nowhere,
    /// From here on (all of them: none comes before).
    From(Position),
    /// No trailer (an older recording, or one cut short): scan it all.
    Unknown,
}

impl<R: Read + Seek> Reader<R> {
    /// Where the recording's Java wait records begin
    /// ([`crate::WAITS_TRAILER`]). Moves the input: [`Reader::seek`]
    /// before reading on.
    pub fn waits_at(&mut self) -> Result<WaitsAt, FormatError> {
        let len = self.input.seek(SeekFrom::End(0))?;
        let n = crate::WAITS_TRAILER_LEN as u64;
        if len < 12 + n {
            return Ok(WaitsAt::Unknown);
        }
        self.input.seek(SeekFrom::Start(len - n))?;
        let mut t = [0u8; crate::WAITS_TRAILER_LEN];
        self.input.read_exact(&mut t)?;
        let word = |i: usize| u64::from_le_bytes(t[i..i + 8].try_into().unwrap_or([0; 8]));
        if &t[..8] != crate::WAITS_TRAILER {
            return Ok(WaitsAt::Unknown);
        }
        Ok(match word(8) {
            u64::MAX => WaitsAt::Nowhere,
            offset if offset >= 12 && offset < len - n => WaitsAt::From(Position {
                offset,
                last_time: word(16),
            }),
            _ => WaitsAt::Unknown,
        })
    }

    /// Where the next record starts (between records only: call it before
    /// or after a whole record, never with a version-1 dump half handed out).
    /// Inside a compressed block it is the block's start: reading from there
    /// reads the block's records again from its first. (A record read
    /// ahead while a dispatch was held is not read yet: the position is
    /// before it.)
    pub fn position(&self) -> Position {
        match &self.stashed {
            Some((_, at)) => *at,
            None => self.here(),
        }
    }

    /// Reads on from `at`, a [`Reader::position`] of this recording: a
    /// second pass over part of it (the call trees, after the dispatches).
    /// The end record and a cut found before are forgotten, and met again.
    pub fn seek(&mut self, at: Position) -> Result<(), FormatError> {
        self.input.seek(SeekFrom::Start(at.offset))?;
        self.base = at.offset;
        self.splice = None;
        self.pos = 0;
        self.end = 0;
        self.last_time = at.last_time;
        self.summary = None;
        self.cut_short = None;
        self.pending.clear();
        self.held.clear();
        self.stashed = None;
        self.copies.lose();
        Ok(())
    }
}

impl<R: Read> Reader<R> {
    /// Where the next record of the file starts (see [`Reader::position`]).
    pub(super) fn here(&self) -> Position {
        match self.splice {
            Some(s) if self.pos < s.end => Position {
                offset: s.file_start,
                last_time: s.time_before,
            },
            _ => Position {
                offset: self.offset(),
                last_time: self.last_time,
            },
        }
    }
}
