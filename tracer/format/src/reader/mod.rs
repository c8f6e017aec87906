//! Streaming reader of recordings: [`Reader`] hands out a recording's
//! records in the order written, with a fixed amount of memory.
//!
//! This module owns the reader's state and its main loop
//! ([`Reader::next_record`]); the pieces live beside it: [`input`] (the
//! buffer and the framing of records), [`decode`] (per-kind payloads),
//! [`copies`] (stack copies rebuilt from their deltas), [`raw`] (records
//! passed through undecoded) and [`seek`] (positions and second passes).
//!
//! Invariant: the reader never panics on bad input; every problem is a
//! [`FormatError`] that says where it is. The time-delta chain
//! (`last_time`) advances once per timed record read, skipped ones
//! included, so every time read is the one written.

mod copies;
mod decode;
mod input;
mod raw;
mod seek;

use std::io::Read;

use crate::codec::{Payload, MAX_CPU};
use std::collections::VecDeque;

use crate::record::{Dispatch, Record, RunInfo, RunSummary};
use crate::{kind, FormatError, MAGIC, VERSION};

use copies::Copies;
pub use raw::{RawOther, RawRecord};
pub use seek::{Position, WaitsAt};

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
    /// File offset of `buf[0]` (while no block's records are ahead in
    /// `buf`: see `splice`).
    base: u64,
    /// The records of a compressed block ([`kind::BLOCK`]), put in the
    /// buffer in place of the block.
    splice: Option<input::Splice>,
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
    copies: Copies,
    /// Compressed blocks opened so far.
    blocks_opened: u64,
    /// Dispatches read with their wake-ups ([`kind::WOKEN_DISPATCH`]) and
    /// not yet handed out, oldest first: each goes out before the first
    /// timed record newer than it, so records come out in time order.
    held: VecDeque<Dispatch>,
    /// The record read after a held dispatch was due, and where it
    /// starts: the next one out.
    stashed: Option<(Record, Position)>,
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
            splice: None,
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
                idle_stack_budget: 0,
                waker_sample_period: 0,
                waker_stack_budget: 0,
                event_source: String::new(),
                event_source_why: String::new(),
                java_frames: String::new(),
                java_frames_why: String::new(),
            },
            summary: None,
            unknown_records: 0,
            cut_short: None,
            pending: Vec::new(),
            trees_encoded: false,
            only_waits: false,
            copies: Copies::default(),
            held: VecDeque::new(),
            stashed: None,
            blocks_opened: 0,
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
        r.info = decode::json(&r.buf[payload.0..payload.1], offset, "run information")?;
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

    /// How many compressed blocks ([`crate::kind::BLOCK`]) were opened so
    /// far: a copy of the recording ([`crate::Writer::compress_blocks`])
    /// compresses its records from the first one on.
    pub fn blocks_opened(&self) -> u64 {
        self.blocks_opened
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
            // The dispatches read whole before the cut still go out.
            return Ok(self.held.pop_front().map(Record::Dispatch));
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
        Ok(self.held.pop_front().map(Record::Dispatch))
    }

    /// Set once [`Reader::next_complete_record`] met the end of a recording
    /// cut short.
    pub fn cut_short(&self) -> Option<&CutShort> {
        self.cut_short.as_ref()
    }

    /// The next record, or `None` after the end record. A file that ends
    /// before the end record is [`FormatError::Truncated`]. Timed records
    /// come out in time order: a dispatch read with its wake-up
    /// ([`kind::WOKEN_DISPATCH`]) is held until the records before it went
    /// out.
    #[inline]
    pub fn next_record(&mut self) -> Result<Option<Record>, FormatError> {
        if self.held.is_empty() {
            return match self.stashed.take() {
                Some((r, _)) => Ok(Some(r)),
                None => self.read_record(),
            };
        }
        let (next, at) = match self.stashed.take() {
            Some((r, at)) => (Some(r), at),
            None => {
                let at = self.here();
                (self.read_record()?, at)
            }
        };
        match next {
            Some(r) if !held_back_by(&r, self.held[0].time) => Ok(Some(r)),
            next => {
                self.stashed = next.map(|r| (r, at));
                Ok(self.held.pop_front().map(Record::Dispatch))
            }
        }
    }

    /// Holds dispatch `d` until the records before it went out.
    fn hold(&mut self, d: Dispatch) {
        let at = self.held.partition_point(|h| h.time <= d.time);
        self.held.insert(at, d);
    }

    /// The next record of the file (a wake-up read with its dispatch
    /// first, the dispatch held).
    #[inline]
    fn read_record(&mut self) -> Result<Option<Record>, FormatError> {
        if let Some(t) = self.pending.pop() {
            return Ok(Some(self.tree_thread(t)));
        }
        loop {
            if self.summary.is_some() {
                return Ok(None);
            }
            let (offset, k, (start, end)) = self.next_bounds()?;
            if self.only_waits && self.skipped_for_waits(k) {
                continue;
            }
            let mut p = Payload {
                data: &self.buf[start..end],
                offset,
            };
            let last_time = &mut self.last_time;
            let record = match k {
                kind::DISPATCH | kind::DISPATCH_TAGGED => {
                    Record::Dispatch(decode::dispatch(k, &mut p, last_time)?)
                }
                kind::WAKEUP => Record::Wakeup(decode::wakeup(&mut p, last_time)?),
                kind::WOKEN_DISPATCH => {
                    let (w, d) = decode::woken_dispatch(&mut p, last_time)?;
                    self.hold(d);
                    Record::Wakeup(w)
                }
                kind::THREAD => {
                    let time = p.time(last_time)?;
                    Record::Thread(decode::thread(time, &mut p)?)
                }
                kind::EXIT => {
                    let time = p.time(last_time)?;
                    let e = decode::exit(time, &mut p)?;
                    self.copies.exited(e.tid);
                    Record::Exit(e)
                }
                kind::LOST => Record::Lost(decode::lost(&mut p, last_time)?),
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
                    Record::JvmWaits(Box::new(decode::json(p.data, offset, "JVM waits record")?))
                }
                kind::JAVA_SYMBOL => {
                    Record::JavaSymbol(Box::new(crate::waits::decode_symbol(&mut p)?))
                }
                kind::JAVA_STACK => {
                    Record::JavaStack(Box::new(crate::waits::decode_stack(&mut p)?))
                }
                kind::JAVA_WAIT => Record::JavaWait(crate::waits::decode_wait(&mut p)?),
                kind::SWITCH_STACK => Record::SwitchStack(decode::stack_ref(&mut p, last_time)?),
                kind::KERNEL_STACK => {
                    Record::KernelStack(Box::new(crate::stacks::decode_kernel_stack(&mut p)?))
                }
                kind::STACK_COPY
                | kind::STACK_COPY_DELTA
                | kind::WAKE_STACK_COPY
                | kind::WAKE_STACK_COPY_DELTA => {
                    let time = p.time(last_time)?;
                    Record::StackCopy(Box::new(self.copies.read(k, time, &mut p)?))
                }
                kind::MODULE_MAP => {
                    let time = p.time(last_time)?;
                    Record::ModuleMap(Box::new(crate::ustacks::decode_module_map(time, &mut p)?))
                }
                kind::SWITCH_USER_STACK => {
                    Record::SwitchUserStack(decode::stack_ref(&mut p, last_time)?)
                }
                kind::WAKE_STACK => Record::WakeStack(decode::stack_ref(&mut p, last_time)?),
                kind::WAKE_USER_STACK => {
                    Record::WakeUserStack(decode::stack_ref(&mut p, last_time)?)
                }
                kind::SWITCH_JAVA_STACK => {
                    Record::SwitchJavaStack(decode::stack_ref(&mut p, last_time)?)
                }
                kind::WAKE_JAVA_STACK => {
                    Record::WakeJavaStack(decode::stack_ref(&mut p, last_time)?)
                }
                kind::WALKED_STACK => {
                    Record::WalkedStack(Box::new(crate::walked::decode_walked_stack(&mut p)?))
                }
                kind::SWITCH_ARG => Record::SwitchArg(decode::switch_arg(&mut p, last_time)?),
                kind::SWITCH_JAVA_STATE => {
                    Record::SwitchJavaState(decode::switch_java_state(&mut p, last_time, offset)?)
                }
                kind::USER_STACK => {
                    Record::UserStack(Box::new(crate::ustacks::decode_user_stack(&mut p)?))
                }
                kind::USER_SYMBOLS => Record::UserSymbols(Box::new(decode::json(
                    p.data,
                    offset,
                    "user symbols record",
                )?)),
                kind::KERNEL_SYMBOLS => Record::KernelSymbols(Box::new(decode::json(
                    p.data,
                    offset,
                    "kernel symbols record",
                )?)),
                kind::TREE => {
                    // Version 1's whole JSON dump: handed out as its head,
                    // then its threads one by one.
                    let dump: crate::TreeDump = decode::json(p.data, offset, "call-tree record")?;
                    let (head, threads) = dump.split();
                    self.pending = threads.into_iter().rev().collect();
                    Record::TreeHead(Box::new(head))
                }
                kind::END => {
                    self.summary = Some(decode::end_summary(p.data, offset)?);
                    return Ok(None);
                }
                kind::META => {
                    return Err(FormatError::Corrupt {
                        offset,
                        what: "a second run information record".into(),
                    })
                }
                0 => return Err(decode::zero_bytes(offset)),
                _ => {
                    // A timed kind of a later version (21–127): keep the
                    // time delta chain whole, skip the rest.
                    if (kind::FIRST_FUTURE_TIMED..kind::FIRST_UNTIMED).contains(&k) {
                        p.time(last_time)?;
                    }
                    self.unknown_records += 1;
                    continue;
                }
            };
            return Ok(Some(record));
        }
    }

    /// A thread of a version-1 call-tree dump, handed out as the reader
    /// was asked to ([`Reader::keep_trees_encoded`]).
    fn tree_thread(&self, t: crate::ThreadTree) -> Record {
        if self.trees_encoded {
            Record::TreeThreadEncoded(Box::new(crate::tree::EncodedThread::encode(&t)))
        } else {
            Record::TreeThread(Box::new(t))
        }
    }

    /// Whether a record of kind `k` is skipped in a pass over the JVM
    /// waits only ([`Reader::only_java_waits`]); skipping a stack copy or
    /// an exit leaves the copies' references incomplete.
    #[inline]
    fn skipped_for_waits(&mut self, k: u8) -> bool {
        if matches!(
            k,
            kind::END | kind::JVM_WAITS | kind::JAVA_SYMBOL | kind::JAVA_STACK | kind::JAVA_WAIT
        ) {
            return false;
        }
        if matches!(
            k,
            kind::STACK_COPY
                | kind::STACK_COPY_DELTA
                | kind::WAKE_STACK_COPY
                | kind::WAKE_STACK_COPY_DELTA
                | kind::EXIT
        ) {
            self.copies.lose();
        }
        true
    }
}

/// Whether record `r` goes out after a dispatch held at `time`: a timed
/// record newer than it, or a record of the end of the recording (call
/// trees, Java waits, symbols) — not the stacks interned before their first
/// use, which may come while it is held. A record of the same time goes
/// first: another CPU's dispatch of that time keeps its stack records
/// right after it.
fn held_back_by(r: &Record, time: u64) -> bool {
    match r {
        Record::KernelStack(_) | Record::UserStack(_) | Record::WalkedStack(_) => false,
        Record::Dispatch(_)
        | Record::Wakeup(_)
        | Record::Thread(_)
        | Record::Exit(_)
        | Record::Lost(_)
        | Record::SwitchStack(_)
        | Record::SwitchUserStack(_)
        | Record::WakeStack(_)
        | Record::WakeUserStack(_)
        | Record::SwitchArg(_)
        | Record::SwitchJavaState(_)
        | Record::SwitchJavaStack(_)
        | Record::WakeJavaStack(_)
        | Record::StackCopy(_)
        | Record::ModuleMap(_) => r.time() > time,
        _ => true,
    }
}
