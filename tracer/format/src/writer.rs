//! Streaming writer of recordings.
//!
//! Records are encoded straight into one output buffer, header and all, and
//! handed to the output in blocks of [`BLOCK`] bytes: the recorder's hot path
//! (a dispatch or wake-up a record) copies nothing and calls no `memcpy`.
//! Invariant: the buffer holds whole records only, so whatever reached the
//! output ends at a record boundary.

use std::io::Write;

use crate::codec::{leb128_into, put, zigzag};
use crate::record::{Dispatch, NodeTag, Record, RunInfo, RunSummary, Wakeup};
use crate::{kind, FormatError, MAGIC, VERSION};

/// Writes a recording record by record; memory use does not grow with the
/// recording. Call [`Writer::finish`] to write the end record: a recording
/// without it reads back as truncated.
#[derive(Debug)]
pub struct Writer<W: Write> {
    out: W,
    /// Whole records not yet handed to `out`.
    buf: Vec<u8>,
    last_time: u64,
    bytes: u64,
    /// What the next stack copy of each thread is written against.
    refs: crate::ustacks::CopyReferences,
    /// The offset of the first Java wait record and the time then.
    waits_from: Option<(u64, u64)>,
    /// Records gathered into compressed blocks ([`Writer::compress_blocks`]).
    blocks: Option<Blocks>,
}

/// Records not yet written, to be one compressed block.
#[derive(Debug)]
struct Blocks {
    /// Whole records, encoded.
    pending: Vec<u8>,
    /// The delta chain's time before them.
    from_time: u64,
}

/// Bytes of records the writer gathers before handing them to its output.
const BLOCK: usize = 64 << 10;

/// Bytes of records a compressed block holds (before compression), when
/// the writer makes them ([`Writer::compress_blocks`]).
pub const COMPRESSED_BLOCK: usize = 4 << 20;

impl<W: Write> Writer<W> {
    /// Starts a recording: writes the header and the [`RunInfo`] record.
    /// `out` should be buffered.
    pub fn new(mut out: W, info: &RunInfo) -> Result<Self, FormatError> {
        out.write_all(MAGIC)?;
        out.write_all(&VERSION.to_le_bytes())?;
        let mut w = Writer {
            out,
            buf: Vec::with_capacity(BLOCK + 4096),
            last_time: info.start_ns,
            bytes: 12,
            refs: Default::default(),
            waits_from: None,
            blocks: None,
        };
        w.write_json(kind::META, info)?;
        Ok(w)
    }

    /// Bytes written so far.
    pub fn bytes_written(&self) -> u64 {
        self.bytes
    }

    /// Appends one record. Timed records should come in time order; an
    /// earlier time is stored exactly all the same (as a negative delta).
    pub fn write(&mut self, record: &Record) -> Result<(), FormatError> {
        let start = self.begin();
        let k = match record {
            Record::Dispatch(d) => {
                self.put_time(d.time);
                put(&mut self.buf, d.cpu.into());
                put(&mut self.buf, d.prev_tid.into());
                self.buf.push(d.prev_state.code());
                put(&mut self.buf, d.next_tid.into());
                match d.prev_node {
                    NodeTag::Untraced => kind::DISPATCH,
                    tag => {
                        let (code, node) = match tag {
                            NodeTag::Current(n) => (1, n),
                            NodeTag::Ring(n) => (2, n),
                            _ => (3, 0),
                        };
                        self.buf.push(code);
                        put(&mut self.buf, node);
                        kind::DISPATCH_TAGGED
                    }
                }
            }
            Record::Wakeup(w) => {
                self.put_time(w.time);
                put(&mut self.buf, w.cpu.into());
                put(&mut self.buf, w.waker_tid.into());
                put(&mut self.buf, w.wakee_tid.into());
                put(&mut self.buf, w.target_cpu.into());
                self.buf.push(u8::from(w.new_thread));
                self.buf.push(w.context.code());
                kind::WAKEUP
            }
            Record::Thread(t) => {
                self.put_time(t.time);
                put(&mut self.buf, t.tid.into());
                put(&mut self.buf, t.pid.into());
                put(&mut self.buf, t.ppid.into());
                put(&mut self.buf, t.comm.len() as u64);
                self.buf.extend_from_slice(t.comm.as_bytes());
                kind::THREAD
            }
            Record::Exit(e) => {
                self.refs.exited(e.tid);
                self.put_time(e.time);
                put(&mut self.buf, e.tid.into());
                put(&mut self.buf, e.pid.into());
                kind::EXIT
            }
            Record::TreeHead(h) => {
                crate::tree::encode_head(h, &mut self.buf);
                kind::TREE_HEAD
            }
            Record::TreeThread(t) => {
                crate::tree::encode_thread(t, &mut self.buf);
                kind::TREE_THREAD
            }
            Record::TreeThreadEncoded(t) => {
                t.encode_payload(&mut self.buf);
                kind::TREE_THREAD
            }
            Record::JvmWaits(w) => {
                self.buf.truncate(start);
                return self.write_json(kind::JVM_WAITS, w);
            }
            Record::JavaSymbol(s) => {
                crate::waits::encode_symbol(s, &mut self.buf);
                kind::JAVA_SYMBOL
            }
            Record::JavaStack(s) => {
                crate::waits::encode_stack(s, &mut self.buf);
                kind::JAVA_STACK
            }
            Record::JavaWait(w) => {
                crate::waits::encode_wait(w, &mut self.buf);
                kind::JAVA_WAIT
            }
            Record::SwitchStack(st) => {
                self.put_stack_ref(st);
                kind::SWITCH_STACK
            }
            Record::WakeStack(st) => {
                self.put_stack_ref(st);
                kind::WAKE_STACK
            }
            Record::WakeUserStack(st) => {
                self.put_stack_ref(st);
                kind::WAKE_USER_STACK
            }
            Record::SwitchArg(a) => {
                self.put_time(a.time);
                put(&mut self.buf, a.cpu.into());
                put(&mut self.buf, a.tid.into());
                put(&mut self.buf, a.arg);
                kind::SWITCH_ARG
            }
            Record::SwitchJavaState(j) => {
                self.put_time(j.time);
                put(&mut self.buf, j.cpu.into());
                put(&mut self.buf, j.tid.into());
                put(&mut self.buf, j.state.code().into());
                kind::SWITCH_JAVA_STATE
            }
            Record::KernelStack(st) => {
                crate::stacks::encode_kernel_stack(st, &mut self.buf);
                kind::KERNEL_STACK
            }
            Record::KernelSymbols(k) => {
                self.buf.truncate(start);
                return self.write_json(kind::KERNEL_SYMBOLS, k);
            }
            Record::StackCopy(c) => {
                let k = self.put_copy(c);
                self.refs.keep(c.tid, c.sp, &c.bytes);
                k
            }
            Record::ModuleMap(m) => {
                self.put_time(m.time);
                crate::ustacks::encode_module_map(m, &mut self.buf);
                kind::MODULE_MAP
            }
            Record::SwitchUserStack(st) => {
                self.put_stack_ref(st);
                kind::SWITCH_USER_STACK
            }
            Record::UserStack(st) => {
                crate::ustacks::encode_user_stack(st, &mut self.buf);
                kind::USER_STACK
            }
            Record::SwitchJavaStack(st) => {
                self.put_stack_ref(st);
                kind::SWITCH_JAVA_STACK
            }
            Record::WakeJavaStack(st) => {
                self.put_stack_ref(st);
                kind::WAKE_JAVA_STACK
            }
            Record::WalkedStack(st) => {
                crate::walked::encode_walked_stack(st, &mut self.buf);
                kind::WALKED_STACK
            }
            Record::UserSymbols(u) => {
                self.buf.truncate(start);
                return self.write_json(kind::USER_SYMBOLS, u);
            }
            Record::Lost(l) => {
                self.put_time(l.time);
                put(&mut self.buf, l.cpu.into());
                put(&mut self.buf, l.count);
                kind::LOST
            }
        };
        self.end(start, k)
    }

    /// Writes wake-up `w` and dispatch `d` as one record
    /// ([`kind::WOKEN_DISPATCH`]) when they make one — the same CPU, `d`
    /// no older than `w` (at most `u32::MAX` ns after), `d`'s leaving
    /// thread the one that ran when `w` was raised, `d` untagged, `w` not
    /// a new thread's — and as the two records otherwise. The caller
    /// vouches that nothing of that CPU happened between them; a reader
    /// hands out `d` at its own time ([`crate::Reader::next_record`]).
    pub fn write_woken_dispatch(&mut self, w: &Wakeup, d: &Dispatch) -> Result<(), FormatError> {
        let folds = w.cpu == d.cpu
            && w.waker_tid == d.prev_tid
            && d.time >= w.time
            && d.time - w.time <= u64::from(u32::MAX)
            && d.prev_node == NodeTag::Untraced
            && !w.new_thread;
        if !folds {
            self.write(&Record::Wakeup(*w))?;
            return self.write(&Record::Dispatch(*d));
        }
        let start = self.begin();
        self.put_time(w.time);
        put(&mut self.buf, w.cpu.into());
        put(&mut self.buf, w.waker_tid.into());
        put(&mut self.buf, w.wakee_tid.into());
        put(&mut self.buf, w.target_cpu.into());
        self.buf.push(w.context.code());
        put(&mut self.buf, d.time - w.time);
        self.buf.push(d.prev_state.code());
        put(&mut self.buf, d.next_tid.into());
        self.end(start, kind::WOKEN_DISPATCH)
    }

    /// Writes a record read by [`crate::Reader::next_raw`] as it was: a
    /// timed record gets its time delta from this writer's previous record
    /// (so a pass may replace records, at the same times, on the way).
    pub fn write_raw(&mut self, raw: &crate::RawRecord<'_>) -> Result<(), FormatError> {
        match raw {
            crate::RawRecord::StackCopy(c, bytes) => {
                let mut c = c.clone();
                c.bytes = bytes.to_vec();
                self.write(&Record::StackCopy(Box::new(c)))
            }
            crate::RawRecord::Other(o) => {
                if o.kind == kind::EXIT {
                    if let Some(Record::Exit(e)) = o.decode()? {
                        self.refs.exited(e.tid);
                    }
                }
                let start = self.begin();
                if let Some(time) = o.time {
                    self.put_time(time);
                }
                self.buf.extend_from_slice(o.body);
                self.end(start, o.kind)
            }
        }
    }

    /// Writes a stack copy as [`Writer::write`] does, keeping its bytes'
    /// buffer as the thread's reference instead of copying them.
    pub fn write_stack_copy(&mut self, mut c: Box<crate::StackCopy>) -> Result<(), FormatError> {
        let start = self.begin();
        let k = self.put_copy(&c);
        let bytes = std::mem::take(&mut c.bytes);
        self.refs.keep_owned(c.tid, c.sp, bytes);
        self.end(start, k)
    }

    /// Appends the time and fields of a record naming a stack
    /// (`SWITCH_STACK`, `SWITCH_USER_STACK`, `WAKE_STACK`, `WAKE_USER_STACK`).
    fn put_stack_ref(&mut self, st: &crate::SwitchStack) {
        self.put_time(st.time);
        put(&mut self.buf, st.cpu.into());
        put(&mut self.buf, st.tid.into());
        put(&mut self.buf, st.stack);
    }

    /// Appends a stack copy's time and payload: as a delta from the
    /// thread's reference when that is shorter. Returns the kind.
    fn put_copy(&mut self, c: &crate::StackCopy) -> u8 {
        self.put_time(c.time);
        let delta = match self.refs.get(c.tid) {
            Some(r) => crate::ustacks::encode_copy_delta(c, r, &mut self.buf),
            None => false,
        };
        if !delta {
            crate::ustacks::encode_copy(c, &mut self.buf);
        }
        match (delta, c.at_wakeup) {
            (true, false) => kind::STACK_COPY_DELTA,
            (false, false) => kind::STACK_COPY,
            (true, true) => kind::WAKE_STACK_COPY_DELTA,
            (false, true) => kind::WAKE_STACK_COPY,
        }
    }

    /// Writes a JVM's whole call-tree dump: its head, then one record per thread.
    pub fn write_tree_dump(&mut self, dump: &crate::TreeDump) -> Result<(), FormatError> {
        let (head, threads) = dump.clone().split();
        self.write(&Record::TreeHead(Box::new(head)))?;
        for t in threads {
            self.write(&Record::TreeThread(Box::new(t)))?;
        }
        Ok(())
    }

    /// Copies a call-tree record of an agent's dump file, checked by
    /// [`crate::tree::dump_frames`], as it is.
    pub fn write_tree_frame(&mut self, frame: crate::tree::Frame<'_>) -> Result<(), FormatError> {
        let start = self.begin();
        self.buf.extend_from_slice(frame.payload);
        self.end(start, frame.kind)
    }

    /// The output (records written are there after [`Writer::flush`]).
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.out
    }

    /// The time of the last timed record (the delta chain's previous time).
    pub fn last_time(&self) -> u64 {
        self.last_time
    }

    /// Forgets every thread's reference stack copy: the next copy of each
    /// thread is written whole. A flight recorder's segment starts so, to
    /// be readable without the segments before it.
    pub fn forget_copies(&mut self) {
        self.refs = Default::default();
    }

    /// Appends records another writer encoded, whose delta chain starts at
    /// this writer's [`Writer::last_time`] and ends at `last_time`, as
    /// they are (a flight recorder's segments, into a dump).
    pub fn append_encoded(&mut self, records: &[u8], last_time: u64) -> Result<(), FormatError> {
        self.hand_over()?;
        self.emit_block()?;
        self.out.write_all(records)?;
        self.bytes += records.len() as u64;
        self.last_time = last_time;
        Ok(())
    }

    /// Appends records another writer encoded, as
    /// [`Writer::append_encoded`] does, kept compressed: `block` is their
    /// bytes as `lz4_flex::compress_prepend_size` gives them (their length,
    /// u32 little-endian, then the LZ4 block), written as one
    /// [`kind::BLOCK`] record. Stack copies written after it by this
    /// writer are whole or deltas against its own earlier copies only.
    pub fn append_compressed(&mut self, block: &[u8], last_time: u64) -> Result<(), FormatError> {
        self.hand_over()?;
        self.emit_block()?;
        self.put_block(block)?;
        self.last_time = last_time;
        Ok(())
    }

    /// Writes `records` as one compressed block ([`kind::BLOCK`]), as a
    /// flight recorder's dump holds its segments. Stack copies in it are
    /// whole or deltas against its own earlier ones.
    pub fn write_block(&mut self, records: &[Record]) -> Result<(), FormatError> {
        let mut inner = Writer {
            out: Vec::new(),
            buf: Vec::with_capacity(BLOCK + 4096),
            last_time: self.last_time,
            bytes: 0,
            refs: Default::default(),
            waits_from: None,
            blocks: None,
        };
        for r in records {
            inner.write(r)?;
        }
        inner.hand_over()?;
        if inner.waits_from.is_some() && self.waits_from.is_none() {
            // The trailer points at the block: a reader opens it there.
            self.waits_from = Some((self.bytes, self.last_time));
        }
        let block = lz4_flex::compress_prepend_size(&inner.out);
        self.append_compressed(&block, inner.last_time)
    }

    /// From here on, gathers the records into compressed blocks
    /// ([`kind::BLOCK`]) of about [`COMPRESSED_BLOCK`] bytes each, as a
    /// flight recorder's dump holds its segments: what a copy of a dump
    /// (its stacks resolved, its Java waits added) writes, so that it stays
    /// as small as the dump. The end record is written as it is.
    pub fn compress_blocks(&mut self) -> Result<(), FormatError> {
        self.hand_over()?;
        self.blocks = Some(Blocks {
            pending: Vec::with_capacity(COMPRESSED_BLOCK + BLOCK),
            from_time: self.last_time,
        });
        Ok(())
    }

    /// Whether the records go into compressed blocks.
    pub fn compressing(&self) -> bool {
        self.blocks.is_some()
    }

    /// Hands everything written so far to the output's own writer (for a
    /// file: to the kernel, so that it survives the writer being killed).
    pub fn flush(&mut self) -> Result<(), FormatError> {
        self.hand_over()?;
        self.emit_block()?;
        self.out.flush()?;
        Ok(())
    }

    /// Writes the end record and the trailer ([`crate::WAITS_TRAILER`]),
    /// flushes, and returns the output.
    pub fn finish(mut self, summary: &RunSummary) -> Result<W, FormatError> {
        self.hand_over()?;
        self.emit_block()?;
        self.blocks = None;
        self.write_json(kind::END, summary)?;
        let (offset, time) = self.waits_from.unwrap_or((u64::MAX, 0));
        self.buf.extend_from_slice(crate::WAITS_TRAILER);
        self.buf.extend_from_slice(&offset.to_le_bytes());
        self.buf.extend_from_slice(&time.to_le_bytes());
        self.bytes += crate::WAITS_TRAILER_LEN as u64;
        self.flush()?;
        Ok(self.out)
    }

    fn put_time(&mut self, time: u64) {
        let delta = time.wrapping_sub(self.last_time) as i64;
        self.last_time = time;
        put(&mut self.buf, zigzag(delta));
    }

    /// Starts a record: room for its kind and a one-byte length.
    #[inline]
    fn begin(&mut self) -> usize {
        let start = self.buf.len();
        self.buf.push(0);
        self.buf.push(0);
        start
    }

    /// Completes the record begun at `start` with its kind and payload
    /// length, and hands full blocks to the output.
    #[inline]
    fn end(&mut self, start: usize, k: u8) -> Result<(), FormatError> {
        if self.waits_from.is_none() && kind::is_java_wait(k) {
            // Untimed: the chain's time is the same before and after it.
            // In a compressed block: the block's offset and time before it
            // (a reader opens the block there).
            self.waits_from = Some(match &self.blocks {
                Some(b) => (self.bytes, b.from_time),
                None => (self.bytes, self.last_time),
            });
        }
        let len = self.buf.len() - start - 2;
        self.buf[start] = k;
        if len < 0x80 {
            self.buf[start + 1] = len as u8;
        } else {
            // Rare (JSON, trees, long names): a longer length field.
            let mut head = [0u8; 10];
            let n = leb128_into(&mut head, len as u64);
            self.buf
                .splice(start + 1..start + 2, head[..n].iter().copied());
        }
        if self.blocks.is_none() {
            self.bytes += (self.buf.len() - start) as u64;
        }
        if self.buf.len() >= BLOCK {
            self.hand_over()?;
        }
        Ok(())
    }

    fn write_json<T: serde::Serialize>(&mut self, k: u8, value: &T) -> Result<(), FormatError> {
        let start = self.begin();
        if let Err(e) = serde_json::to_writer(&mut self.buf, value) {
            self.buf.truncate(start);
            return Err(FormatError::Corrupt {
                offset: self.bytes,
                what: e.to_string(),
            });
        }
        self.end(start, k)
    }

    /// Hands the gathered records to the output; a buffer grown by a big
    /// record shrinks back.
    fn hand_over(&mut self) -> Result<(), FormatError> {
        if let Some(b) = &mut self.blocks {
            b.pending.extend_from_slice(&self.buf);
            self.buf.clear();
            if b.pending.len() >= COMPRESSED_BLOCK {
                self.emit_block()?;
            }
            return Ok(());
        }
        let result = self.out.write_all(&self.buf);
        self.buf.clear();
        if self.buf.capacity() > 4 * BLOCK {
            self.buf.shrink_to(BLOCK + 4096);
        }
        result.map_err(FormatError::from)
    }
}

impl<W: Write> Writer<W> {
    /// Writes the records gathered for a compressed block as one
    /// [`kind::BLOCK`] record (nothing when none are).
    fn emit_block(&mut self) -> Result<(), FormatError> {
        let Some(b) = &mut self.blocks else {
            return Ok(());
        };
        if b.pending.is_empty() {
            return Ok(());
        }
        let block = lz4_flex::compress_prepend_size(&b.pending);
        b.pending.clear();
        b.from_time = self.last_time;
        self.put_block(&block)
    }

    /// Writes `block` (compressed records) as a [`kind::BLOCK`] record.
    fn put_block(&mut self, block: &[u8]) -> Result<(), FormatError> {
        let mut head = [0u8; 11];
        head[0] = kind::BLOCK;
        let n = leb128_into(&mut head[1..], block.len() as u64);
        self.out.write_all(&head[..1 + n])?;
        self.out.write_all(block)?;
        self.bytes += (1 + n + block.len()) as u64;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leb128_matches_the_reference_encoder() {
        for v in [0, 1, 127, 128, 4242, 1 << 32, (1 << 63) + 5, u64::MAX] {
            let mut ours = Vec::new();
            put(&mut ours, v);
            let mut reference = Vec::new();
            leb128::write::unsigned(&mut reference, v).unwrap();
            assert_eq!(ours, reference, "{v}");
        }
    }
}
