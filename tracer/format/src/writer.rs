//! Streaming writer of recordings.

use std::io::Write;

use crate::record::{NodeTag, Record, RunInfo, RunSummary};
use crate::{kind, FormatError, MAGIC, VERSION};

/// Writes a recording record by record; memory use does not grow with the
/// recording. Call [`Writer::finish`] to write the end record: a recording
/// without it reads back as truncated.
#[derive(Debug)]
pub struct Writer<W: Write> {
    out: W,
    payload: Vec<u8>,
    last_time: u64,
    bytes: u64,
}

impl<W: Write> Writer<W> {
    /// Starts a recording: writes the header and the [`RunInfo`] record.
    /// `out` should be buffered.
    pub fn new(mut out: W, info: &RunInfo) -> Result<Self, FormatError> {
        out.write_all(MAGIC)?;
        out.write_all(&VERSION.to_le_bytes())?;
        let mut w = Writer {
            out,
            payload: Vec::with_capacity(64),
            last_time: info.start_ns,
            bytes: 12,
        };
        let json = serde_json::to_vec(info).map_err(|e| FormatError::Corrupt {
            offset: 12,
            what: e.to_string(),
        })?;
        w.payload = json;
        w.emit(kind::META)?;
        Ok(w)
    }

    /// Bytes written so far.
    pub fn bytes_written(&self) -> u64 {
        self.bytes
    }

    /// Appends one record. Timed records should come in time order; an
    /// earlier time is stored exactly all the same (as a negative delta).
    pub fn write(&mut self, record: &Record) -> Result<(), FormatError> {
        self.payload.clear();
        let k = match record {
            Record::Dispatch(d) => {
                self.put_time(d.time);
                put(&mut self.payload, d.cpu.into());
                put(&mut self.payload, d.prev_tid.into());
                self.payload.push(d.prev_state.code());
                put(&mut self.payload, d.next_tid.into());
                match d.prev_node {
                    NodeTag::Untraced => kind::DISPATCH,
                    tag => {
                        let (code, node) = match tag {
                            NodeTag::Current(n) => (1, n),
                            NodeTag::Ring(n) => (2, n),
                            _ => (3, 0),
                        };
                        self.payload.push(code);
                        put(&mut self.payload, node);
                        kind::DISPATCH_TAGGED
                    }
                }
            }
            Record::Wakeup(w) => {
                self.put_time(w.time);
                put(&mut self.payload, w.cpu.into());
                put(&mut self.payload, w.waker_tid.into());
                put(&mut self.payload, w.wakee_tid.into());
                put(&mut self.payload, w.target_cpu.into());
                self.payload.push(u8::from(w.new_thread));
                kind::WAKEUP
            }
            Record::Thread(t) => {
                self.put_time(t.time);
                put(&mut self.payload, t.tid.into());
                put(&mut self.payload, t.pid.into());
                put(&mut self.payload, t.ppid.into());
                put(&mut self.payload, t.comm.len() as u64);
                self.payload.extend_from_slice(t.comm.as_bytes());
                kind::THREAD
            }
            Record::Exit(e) => {
                self.put_time(e.time);
                put(&mut self.payload, e.tid.into());
                put(&mut self.payload, e.pid.into());
                kind::EXIT
            }
            Record::TreeHead(h) => {
                crate::tree::encode_head(h, &mut self.payload);
                kind::TREE_HEAD
            }
            Record::TreeThread(t) => {
                crate::tree::encode_thread(t, &mut self.payload);
                kind::TREE_THREAD
            }
            Record::TreeThreadEncoded(t) => {
                t.encode_payload(&mut self.payload);
                kind::TREE_THREAD
            }
            Record::JvmWaits(w) => {
                self.payload = serde_json::to_vec(w).map_err(|e| FormatError::Corrupt {
                    offset: self.bytes,
                    what: e.to_string(),
                })?;
                kind::JVM_WAITS
            }
            Record::JavaSymbol(s) => {
                crate::waits::encode_symbol(s, &mut self.payload);
                kind::JAVA_SYMBOL
            }
            Record::JavaStack(s) => {
                crate::waits::encode_stack(s, &mut self.payload);
                kind::JAVA_STACK
            }
            Record::JavaWait(w) => {
                crate::waits::encode_wait(w, &mut self.payload);
                kind::JAVA_WAIT
            }
            Record::Lost(l) => {
                self.put_time(l.time);
                put(&mut self.payload, l.cpu.into());
                put(&mut self.payload, l.count);
                kind::LOST
            }
        };
        self.emit(k)
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
        self.payload.clear();
        self.payload.extend_from_slice(frame.payload);
        self.emit(frame.kind)
    }

    /// Hands everything written so far to the output's own writer (for a
    /// file: to the kernel, so that it survives the writer being killed).
    pub fn flush(&mut self) -> Result<(), FormatError> {
        self.out.flush()?;
        Ok(())
    }

    /// Writes the end record, flushes, and returns the output.
    pub fn finish(mut self, summary: &RunSummary) -> Result<W, FormatError> {
        self.payload = serde_json::to_vec(summary).map_err(|e| FormatError::Corrupt {
            offset: self.bytes,
            what: e.to_string(),
        })?;
        self.emit(kind::END)?;
        self.out.flush()?;
        Ok(self.out)
    }

    fn put_time(&mut self, time: u64) {
        let delta = time.wrapping_sub(self.last_time) as i64;
        self.last_time = time;
        put(&mut self.payload, zigzag(delta));
    }

    fn emit(&mut self, k: u8) -> Result<(), FormatError> {
        let mut head = [0u8; 11];
        head[0] = k;
        let n = 1 + leb128_into(&mut head[1..], self.payload.len() as u64);
        self.out.write_all(&head[..n])?;
        self.out.write_all(&self.payload)?;
        self.bytes += (n + self.payload.len()) as u64;
        Ok(())
    }
}

/// Writes `v` as unsigned LEB128 at the start of `out` (at least 10
/// bytes); returns the bytes used. The recorder's hot path: every field of
/// every record goes through here (the `leb128` crate's writer goes byte by
/// byte through `io::Write`, which cost a tenth of the recorder's CPU).
#[inline]
fn leb128_into(out: &mut [u8], mut v: u64) -> usize {
    let mut i = 0;
    while v >= 0x80 {
        out[i] = (v as u8) | 0x80;
        v >>= 7;
        i += 1;
    }
    out[i] = v as u8;
    i + 1
}

/// Appends `v` as unsigned LEB128.
#[inline]
pub(crate) fn put(buf: &mut Vec<u8>, v: u64) {
    let mut b = [0u8; 10];
    let n = leb128_into(&mut b, v);
    buf.extend_from_slice(&b[..n]);
}

/// Maps signed to unsigned so that small magnitudes stay small.
pub(crate) fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Inverse of [`zigzag`].
pub(crate) fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
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
