//! Streaming reader of recordings.

use std::io::{self, Read, Seek, SeekFrom};

use crate::codec::{Payload, MAX_CPU};
use crate::record::{
    Dispatch, Lost, NodeTag, PrevState, Record, RunInfo, RunSummary, ThreadExit, ThreadInfo,
    WakeContext, Wakeup,
};
use crate::ustacks::{decode_copy_head, rebuild_copy, CopyReferences, StackCopy};
use crate::{kind, FormatError, MAGIC, VERSION};

/// A record's kind and the `buf` range of its payload.
type RecordBounds = (u8, (usize, usize));

/// Largest payload accepted (1 TiB); anything larger is corruption, not
/// data. Memory is not reserved from a record's length but as its bytes
/// arrive, so a damaged length costs no more than the file holds, while a
/// large TREE record (a JVM with millions of call-tree nodes) still reads.
const MAX_PAYLOAD: u64 = 1 << 40;

/// The buffer's usual size; it grows for a larger record and shrinks back
/// after it.
const BUF_LEN: usize = 1 << 20;

/// Where and why a recording ends without its end record: the recorder was
/// killed, the disk filled up or the machine stopped. Everything before
/// `offset` was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CutShort {
    /// Byte offset of the first record that could not be read whole.
    pub offset: u64,
    /// Time of the last record read (ns on the recording's clock): the
    /// recording is complete up to here.
    pub last_time: u64,
    /// Why reading stopped at `offset`.
    pub reason: String,
}

/// Reads a recording record by record, in the order written, with a fixed
/// amount of memory. Never panics on bad input: every problem is a
/// [`FormatError`] that says where it is.
#[derive(Debug)]
pub struct Reader<R: Read> {
    input: R,
    buf: Vec<u8>,
    pos: usize,
    end: usize,
    /// File offset of `buf[0]`.
    base: u64,
    last_time: u64,
    info: RunInfo,
    summary: Option<RunSummary>,
    unknown_records: u64,
    cut_short: Option<CutShort>,
    /// Thread trees of a version-1 JSON dump still to hand out, last first.
    pending: Vec<crate::ThreadTree>,
    /// Hand out thread trees as [`Record::TreeThreadEncoded`].
    trees_encoded: bool,
    /// Skip every record but the JVM waits ([`Reader::only_java_waits`]).
    only_waits: bool,
    /// The stack copies deltas are read against.
    refs: CopyReferences,
    /// Set when records were skipped or a seek made `refs` incomplete: a
    /// delta without its reference is then handed out without bytes.
    refs_broken: bool,
    /// A delta's bytes, rebuilt before they become the reference.
    scratch: Vec<u8>,
}

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
    /// (`THREAD`, `EXIT`, `MODULE_MAP`); `None` for the others.
    pub fn decode(&self) -> Result<Option<Record>, FormatError> {
        let Some(time) = self.time else {
            return Ok(None);
        };
        let mut p = Payload {
            data: self.body,
            offset: self.offset,
        };
        Ok(Some(match self.kind {
            kind::THREAD => Record::Thread(decode_thread(time, &mut p)?),
            kind::EXIT => Record::Exit(ThreadExit {
                time,
                tid: p.u32()?,
                pid: p.u32()?,
            }),
            kind::MODULE_MAP => {
                Record::ModuleMap(Box::new(crate::ustacks::decode_module_map(time, &mut p)?))
            }
            _ => return Ok(None),
        }))
    }
}

/// Decodes a `THREAD` payload after its time.
fn decode_thread(time: u64, p: &mut Payload<'_>) -> Result<ThreadInfo, FormatError> {
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

/// The END record's summary.
fn end_summary(data: &[u8], offset: u64) -> Result<RunSummary, FormatError> {
    serde_json::from_slice(data).map_err(|e| FormatError::Corrupt {
        offset,
        what: format!("end record: {e}"),
    })
}

/// Kinds below [`kind::FIRST_UNTIMED`] whose payload has no time.
/// Decodes the payload of a record naming a stack (`SWITCH_STACK`,
/// `SWITCH_USER_STACK`, `WAKE_STACK`, `WAKE_USER_STACK`).
fn stack_ref(p: &mut Payload<'_>, last_time: &mut u64) -> Result<crate::SwitchStack, FormatError> {
    Ok(crate::SwitchStack {
        time: p.time(last_time)?,
        cpu: p.cpu()?,
        tid: p.u32()?,
        stack: p.uint()?,
    })
}

fn is_timed(k: u8) -> bool {
    k < kind::FIRST_UNTIMED && !matches!(k, kind::META | kind::END | kind::TREE)
}

impl<R: Read> Reader<R> {
    /// Opens a recording: checks the magic and version and reads the
    /// [`RunInfo`] record.
    pub fn new(input: R) -> Result<Self, FormatError> {
        let mut r = Reader {
            input,
            buf: vec![0; BUF_LEN],
            pos: 0,
            end: 0,
            base: 0,
            last_time: 0,
            info: RunInfo {
                tool_version: String::new(),
                kernel_release: String::new(),
                hostname: String::new(),
                cpus: Vec::new(),
                clock: String::new(),
                command: Vec::new(),
                target_pids: Vec::new(),
                start_ns: 0,
                start_unix_ns: 0,
                proc_stat_start: Vec::new(),
                user_hz: 0,
                ring_bytes: 0,
                tool_pid: 0,
                java_waits: false,
                stacks: String::new(),
                wait_sample_period: 0,
            },
            summary: None,
            unknown_records: 0,
            cut_short: None,
            pending: Vec::new(),
            trees_encoded: false,
            only_waits: false,
            refs: CopyReferences::default(),
            refs_broken: false,
            scratch: Vec::new(),
        };
        if !r.fill(12)? || r.buf[..8] != MAGIC[..] {
            return Err(FormatError::NotARecording);
        }
        let version = u32::from_le_bytes([r.buf[8], r.buf[9], r.buf[10], r.buf[11]]);
        if version != VERSION {
            return Err(FormatError::UnsupportedVersion {
                found: version,
                supported: VERSION,
            });
        }
        r.pos = 12;
        let offset = r.offset();
        let (k, payload) = r.raw_record()?.ok_or(FormatError::Truncated {
            offset,
            what: "the run information record",
        })?;
        if k != kind::META {
            return Err(FormatError::Corrupt {
                offset,
                what: format!("the first record is of kind {k}, not run information"),
            });
        }
        r.info = serde_json::from_slice(&r.buf[payload.0..payload.1]).map_err(|e| {
            FormatError::Corrupt {
                offset,
                what: format!("run information: {e}"),
            }
        })?;
        if let Some(&c) = r.info.cpus.iter().find(|&&c| c > MAX_CPU) {
            return Err(FormatError::Corrupt {
                offset,
                what: format!("run information: CPU number {c} is beyond any machine's"),
            });
        }
        r.last_time = r.info.start_ns;
        Ok(r)
    }

    /// From now on, skip every record but the JVM waits
    /// ([`crate::waits`]) and the end record, without decoding them: the
    /// pass that finds the waits, which a recording holds after its
    /// dispatches. Times of timed records read afterwards are wrong until a
    /// [`Reader::seek`] back to a [`Reader::position`] taken before.
    pub fn only_java_waits(&mut self, on: bool) {
        self.only_waits = on;
    }

    /// From now on, hand out call-tree threads as
    /// [`Record::TreeThreadEncoded`] (nodes decoded as they are walked)
    /// instead of [`Record::TreeThread`]: for big trees read in passes.
    pub fn keep_trees_encoded(&mut self, on: bool) {
        self.trees_encoded = on;
    }

    /// What the recording is of.
    pub fn info(&self) -> &RunInfo {
        &self.info
    }

    /// How the recording ended; known once [`Reader::next_record`] returned `None`.
    pub fn summary(&self) -> Option<&RunSummary> {
        self.summary.as_ref()
    }

    /// Records of kinds this version does not know, skipped so far.
    pub fn unknown_records(&self) -> u64 {
        self.unknown_records
    }

    /// Like [`Reader::next_record`], but a recording cut short (it ends
    /// before its end record, in the middle of a record, or in bytes that
    /// are not a record, as a crash leaves them) ends after its last complete
    /// record: `None`, and [`Reader::cut_short`] says where and why. Errors
    /// of the input itself (a failing read) are still errors.
    pub fn next_complete_record(&mut self) -> Result<Option<Record>, FormatError> {
        if self.cut_short.is_some() {
            return Ok(None);
        }
        let last_time = self.last_time;
        match self.next_record() {
            Err(FormatError::Truncated { offset, what }) => {
                self.cut(offset, last_time, format!("truncated: {what}"))
            }
            Err(FormatError::Corrupt { offset, what }) => self.cut(offset, last_time, what),
            other => other,
        }
    }

    fn cut(
        &mut self,
        offset: u64,
        last_time: u64,
        reason: String,
    ) -> Result<Option<Record>, FormatError> {
        self.last_time = last_time;
        self.cut_short = Some(CutShort {
            offset,
            last_time,
            reason,
        });
        Ok(None)
    }

    /// Set once [`Reader::next_complete_record`] met the end of a recording
    /// cut short.
    pub fn cut_short(&self) -> Option<&CutShort> {
        self.cut_short.as_ref()
    }

    /// The next record, or `None` after the end record. A file that ends
    /// before the end record is [`FormatError::Truncated`].
    #[inline]
    pub fn next_record(&mut self) -> Result<Option<Record>, FormatError> {
        if let Some(t) = self.pending.pop() {
            return Ok(Some(if self.trees_encoded {
                Record::TreeThreadEncoded(Box::new(crate::tree::EncodedThread::encode(&t)))
            } else {
                Record::TreeThread(Box::new(t))
            }));
        }
        loop {
            if self.summary.is_some() {
                return Ok(None);
            }
            let (offset, k, (start, end)) = self.next_bounds()?;
            if self.only_waits
                && !matches!(
                    k,
                    kind::END
                        | kind::JVM_WAITS
                        | kind::JAVA_SYMBOL
                        | kind::JAVA_STACK
                        | kind::JAVA_WAIT
                )
            {
                if matches!(
                    k,
                    kind::STACK_COPY
                        | kind::STACK_COPY_DELTA
                        | kind::WAKE_STACK_COPY
                        | kind::WAKE_STACK_COPY_DELTA
                        | kind::EXIT
                ) {
                    self.refs.clear();
                    self.refs_broken = true;
                }
                continue;
            }
            let mut p = Payload {
                data: &self.buf[start..end],
                offset,
            };
            let record = match k {
                kind::DISPATCH | kind::DISPATCH_TAGGED => {
                    let time = p.time(&mut self.last_time)?;
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
                    Record::Dispatch(Dispatch {
                        time,
                        cpu,
                        prev_tid,
                        prev_state,
                        next_tid,
                        prev_node,
                    })
                }
                kind::WAKEUP => Record::Wakeup(Wakeup {
                    time: p.time(&mut self.last_time)?,
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
                        WakeContext::from_code(code).ok_or_else(|| {
                            p.corrupt(format!("unknown wake-up context code {code}"))
                        })?
                    },
                }),
                kind::THREAD => {
                    let time = p.time(&mut self.last_time)?;
                    Record::Thread(decode_thread(time, &mut p)?)
                }
                kind::EXIT => {
                    let e = ThreadExit {
                        time: p.time(&mut self.last_time)?,
                        tid: p.u32()?,
                        pid: p.u32()?,
                    };
                    self.refs.exited(e.tid);
                    Record::Exit(e)
                }
                kind::LOST => Record::Lost(Lost {
                    time: p.time(&mut self.last_time)?,
                    cpu: p.cpu()?,
                    count: p.uint()?,
                }),
                kind::TREE_HEAD => Record::TreeHead(Box::new(crate::tree::decode_head(&mut p)?)),
                kind::TREE_THREAD if self.trees_encoded => {
                    let mut t = crate::tree::decode_thread_header(&mut p)?;
                    let nodes_at = end - p.data.len();
                    t.set_node_bytes(self.take_payload(nodes_at, end));
                    Record::TreeThreadEncoded(Box::new(t))
                }
                kind::TREE_THREAD => {
                    Record::TreeThread(Box::new(crate::tree::decode_thread(&mut p)?))
                }
                kind::JVM_WAITS => {
                    Record::JvmWaits(Box::new(serde_json::from_slice(p.data).map_err(|e| {
                        FormatError::Corrupt {
                            offset,
                            what: format!("JVM waits record: {e}"),
                        }
                    })?))
                }
                kind::JAVA_SYMBOL => {
                    Record::JavaSymbol(Box::new(crate::waits::decode_symbol(&mut p)?))
                }
                kind::JAVA_STACK => {
                    Record::JavaStack(Box::new(crate::waits::decode_stack(&mut p)?))
                }
                kind::JAVA_WAIT => Record::JavaWait(crate::waits::decode_wait(&mut p)?),
                kind::SWITCH_STACK => Record::SwitchStack(stack_ref(&mut p, &mut self.last_time)?),
                kind::KERNEL_STACK => {
                    Record::KernelStack(Box::new(crate::stacks::decode_kernel_stack(&mut p)?))
                }
                kind::STACK_COPY
                | kind::STACK_COPY_DELTA
                | kind::WAKE_STACK_COPY
                | kind::WAKE_STACK_COPY_DELTA => {
                    let time = p.time(&mut self.last_time)?;
                    let (mut c, n) = decode_copy_head(time, &mut p)?;
                    c.at_wakeup = matches!(k, kind::WAKE_STACK_COPY | kind::WAKE_STACK_COPY_DELTA);
                    if matches!(k, kind::STACK_COPY | kind::WAKE_STACK_COPY) {
                        c.bytes = p.bytes(n)?.to_vec();
                        self.refs.keep(c.tid, c.sp, &c.bytes);
                    } else if let Some(b) =
                        rebuild_copy(&mut p, n, c.sp, c.tid, &mut self.refs, &mut self.scratch)?
                    {
                        c.bytes = b.to_vec();
                    } else if !self.refs_broken {
                        return Err(p.corrupt(
                            "a stack copy delta without an earlier copy of its thread".into(),
                        ));
                    }
                    Record::StackCopy(Box::new(c))
                }
                kind::MODULE_MAP => {
                    let time = p.time(&mut self.last_time)?;
                    Record::ModuleMap(Box::new(crate::ustacks::decode_module_map(time, &mut p)?))
                }
                kind::SWITCH_USER_STACK => {
                    Record::SwitchUserStack(stack_ref(&mut p, &mut self.last_time)?)
                }
                kind::WAKE_STACK => Record::WakeStack(stack_ref(&mut p, &mut self.last_time)?),
                kind::WAKE_USER_STACK => {
                    Record::WakeUserStack(stack_ref(&mut p, &mut self.last_time)?)
                }
                kind::SWITCH_ARG => Record::SwitchArg(crate::SwitchArg {
                    time: p.time(&mut self.last_time)?,
                    cpu: p.cpu()?,
                    tid: p.u32()?,
                    arg: p.uint()?,
                }),
                kind::USER_STACK => {
                    Record::UserStack(Box::new(crate::ustacks::decode_user_stack(&mut p)?))
                }
                kind::USER_SYMBOLS => {
                    Record::UserSymbols(Box::new(serde_json::from_slice(p.data).map_err(|e| {
                        FormatError::Corrupt {
                            offset,
                            what: format!("user symbols record: {e}"),
                        }
                    })?))
                }
                kind::KERNEL_SYMBOLS => Record::KernelSymbols(Box::new(
                    serde_json::from_slice(p.data).map_err(|e| FormatError::Corrupt {
                        offset,
                        what: format!("kernel symbols record: {e}"),
                    })?,
                )),
                kind::TREE => {
                    // Version 1's whole JSON dump: handed out as its head,
                    // then its threads one by one.
                    let dump: crate::TreeDump =
                        serde_json::from_slice(p.data).map_err(|e| FormatError::Corrupt {
                            offset,
                            what: format!("call-tree record: {e}"),
                        })?;
                    let (head, threads) = dump.split();
                    self.pending = threads.into_iter().rev().collect();
                    Record::TreeHead(Box::new(head))
                }
                kind::END => {
                    self.summary = Some(end_summary(p.data, offset)?);
                    return Ok(None);
                }
                kind::META => {
                    return Err(FormatError::Corrupt {
                        offset,
                        what: "a second run information record".into(),
                    })
                }
                0 => {
                    return Err(FormatError::Corrupt {
                        offset,
                        what: "zero bytes where a record should be (the machine stopped before \
                               the file's data reached the disk?)"
                            .into(),
                    })
                }
                _ => {
                    // A timed kind of a later version (15–127): keep the
                    // time delta chain whole, skip the rest.
                    if (kind::FIRST_FUTURE_TIMED..kind::FIRST_UNTIMED).contains(&k) {
                        p.time(&mut self.last_time)?;
                    }
                    self.unknown_records += 1;
                    continue;
                }
            };
            return Ok(Some(record));
        }
    }

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
            kind::STACK_COPY | kind::WAKE_STACK_COPY => {
                let (mut c, n) = decode_copy_head(time.unwrap_or_default(), &mut p)?;
                c.at_wakeup = k == kind::WAKE_STACK_COPY;
                let bytes = p.bytes(n)?;
                let kept = self.refs.keep(c.tid, c.sp, bytes);
                Ok(Some(RawRecord::StackCopy(c, kept.unwrap_or(bytes))))
            }
            kind::STACK_COPY_DELTA | kind::WAKE_STACK_COPY_DELTA => {
                let (mut c, n) = decode_copy_head(time.unwrap_or_default(), &mut p)?;
                c.at_wakeup = k == kind::WAKE_STACK_COPY_DELTA;
                match rebuild_copy(&mut p, n, c.sp, c.tid, &mut self.refs, &mut self.scratch)? {
                    Some(b) => Ok(Some(RawRecord::StackCopy(c, b))),
                    None if self.refs_broken => Ok(Some(RawRecord::StackCopy(c, &[]))),
                    None => Err(p.corrupt(
                        "a stack copy delta without an earlier copy of its thread".into(),
                    )),
                }
            }
            _ => {
                let other = RawOther {
                    kind: k,
                    time,
                    body: p.data,
                    offset,
                };
                if k == kind::EXIT {
                    if let Some(Record::Exit(e)) = other.decode()? {
                        self.refs.exited(e.tid);
                    }
                }
                Ok(Some(RawRecord::Other(other)))
            }
        }
    }

    /// The next record's offset, kind and payload bounds; a file that ends
    /// before its end record is [`FormatError::Truncated`].
    fn next_bounds(&mut self) -> Result<(u64, u8, (usize, usize)), FormatError> {
        let offset = self.offset();
        match self.raw_record()? {
            Some((k, bounds)) => Ok((offset, k, bounds)),
            None => Err(FormatError::Truncated {
                offset,
                what: "no end record",
            }),
        }
    }

    /// Bytes of the file consumed so far (for progress displays).
    #[inline]
    pub fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// Makes at least `n` bytes available at `pos`; `false` at end of input.
    #[inline]
    fn fill(&mut self, n: usize) -> Result<bool, FormatError> {
        if self.end - self.pos >= n {
            return Ok(true);
        }
        if self.pos > 0 {
            self.buf.copy_within(self.pos..self.end, 0);
            self.base += self.pos as u64;
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
    fn take_payload(&mut self, start: usize, end: usize) -> Vec<u8> {
        if end - start <= BUF_LEN {
            return self.buf[start..end].to_vec();
        }
        let keep = self.end - self.pos;
        let mut fresh = vec![0; BUF_LEN.max(keep)];
        fresh[..keep].copy_from_slice(&self.buf[self.pos..self.end]);
        let mut big = std::mem::replace(&mut self.buf, fresh);
        self.base += self.pos as u64;
        self.pos = 0;
        self.end = keep;
        big.truncate(end);
        big.drain(..start);
        big
    }

    /// Reads one record's kind and payload; the payload is `buf[start..end]`.
    /// `None` at a clean end of input (between records).
    #[inline]
    fn raw_record(&mut self) -> Result<Option<RecordBounds>, FormatError> {
        let offset = self.offset();
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
    pub fn position(&self) -> Position {
        Position {
            offset: self.offset(),
            last_time: self.last_time,
        }
    }

    /// Reads on from `at`, a [`Reader::position`] of this recording: a
    /// second pass over part of it (the call trees, after the dispatches).
    /// The end record and a cut found before are forgotten, and met again.
    pub fn seek(&mut self, at: Position) -> Result<(), FormatError> {
        self.input.seek(SeekFrom::Start(at.offset))?;
        self.base = at.offset;
        self.pos = 0;
        self.end = 0;
        self.last_time = at.last_time;
        self.summary = None;
        self.cut_short = None;
        self.pending.clear();
        self.refs.clear();
        self.refs_broken = true;
        Ok(())
    }
}
