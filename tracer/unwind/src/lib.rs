//! Resolves the user stacks of a recording, once, when `record` ends (never
//! in the recorder's hot path, and before the binaries can change or go):
//! every `STACK_COPY` (registers + the top of a thread's user stack, taken
//! at an idle-causing switch-out) is unwound ([`unwind`]: framehop on
//! gimli's CFI, frame pointers outside modules), its addresses are placed
//! in the modules the process had mapped then ([`maps`], [`elf`]) or in a
//! JIT's perf map ([`perfmap`]), and named ([`symbols`]: blazesym). The
//! recording is rewritten with an interned `USER_STACK` and a
//! `SWITCH_USER_STACK` in place of each copy, and one `USER_SYMBOLS` table
//! before its end, so it reports the same on another machine, after a
//! rebuild, or after a JIT's perf map is gone.
//!
//! Invariant: the rewrite streams (memory grows with distinct stacks and
//! frames, and the threads' last copies, not with the recording), copies
//! every other record through undecoded, and replaces the file only once
//! the new one is complete.

pub mod elf;
pub mod java;
pub mod maps;
pub mod perfmap;
pub mod symbols;
pub mod unwind;

use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};

use idleflow_format::{
    FormatError, RawRecord, Reader, Record, SwitchStack, UserStack, UserStackCounts, Writer,
};
use rustc_hash::FxHashMap;

use crate::elf::ElfCache;
use crate::maps::{AddressSpaces, Space};
use crate::symbols::Frames;
use crate::unwind::Unwinders;

/// Why a recording's stacks could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// A file could not be opened, written or renamed.
    #[error("{what} {path}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The recording could not be read or written.
    #[error(transparent)]
    Format(#[from] FormatError),
}

/// What [`resolve`] did.
#[derive(Debug, Clone, Default)]
pub struct Resolved {
    /// The counts written into the recording.
    pub counts: UserStackCounts,
    /// Modules that could not be read, and the like.
    pub notes: Vec<String>,
    /// Frames named.
    pub frames: usize,
}

/// Per process: copies taken before this time (ns, the recording's clock)
/// keep no frame in code outside a file mapping (JIT code, stubs, the
/// interpreter). A perf map is written when the window closes and names
/// the code of that moment; where a JVM threw its compiled code away
/// during the window (a flight recording started in a JVM attached late
/// redefines classes, which drops their compiled code and the native
/// wrappers with it), an earlier copy's return addresses lie in space that
/// later code reused, and would be named after it.
pub type StaleJitBefore = FxHashMap<u32, u64>;

/// Resolves the stack copies of the recording at `path` in place.
/// `progress(bytes read, bytes in all)` is called now and then.
pub fn resolve(path: &Path, progress: &mut dyn FnMut(u64, u64)) -> Result<Resolved, ResolveError> {
    resolve_with(path, &StaleJitBefore::default(), progress)
}

/// [`resolve`], with the JIT frames of the copies `stale` names cut off.
pub fn resolve_with(
    path: &Path,
    stale: &StaleJitBefore,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Resolved, ResolveError> {
    let io = |what, path: &Path| {
        let path = path.to_path_buf();
        move |source| ResolveError::Io { what, path, source }
    };
    let input = File::open(path).map_err(io("cannot open", path))?;
    let total = input.metadata().map(|m| m.len()).unwrap_or(0);
    let mut reader = Reader::new(BufReader::with_capacity(1 << 20, input))?;
    // The resolved copy: new and private beside it, renamed over it.
    let (out, staged) = idleflow_format::files::stage(path)
        .map_err(|e| io("cannot create a copy of", path)(e.into()))?;
    let tmp = staged.temp_path();
    let result = (|| {
        let mut writer = Writer::new(BufWriter::with_capacity(1 << 20, out), reader.info())?;
        let tool_pid = reader.info().tool_pid;
        let mut state = State {
            frames: Frames::new(reader.info().start_unix_ns),
            stale_jit_before: stale.clone(),
            ..State::default()
        };
        let mut n = 0u64;
        loop {
            n += 1;
            if n.is_multiple_of(1 << 14) {
                progress(reader.offset(), total);
            }
            // A flight recorder's dump stays compressed (from the record
            // after its first block's first).
            if reader.blocks_opened() > 0 && !writer.compressing() {
                writer.compress_blocks()?;
            }
            let Some(raw) = reader.next_raw()? else {
                break;
            };
            match &raw {
                // idleflow's own threads are never a cause: not unwound.
                RawRecord::StackCopy(c, _) if c.pid == tool_pid => {}
                RawRecord::StackCopy(c, bytes) => state.copy(c, bytes, &mut writer)?,
                RawRecord::Other(o) => {
                    match o.decode()? {
                        Some(Record::ModuleMap(m)) => state.spaces.map(&m),
                        Some(Record::Thread(t)) if t.tid == t.pid => {
                            state.spaces.forked(t.pid, t.ppid)
                        }
                        Some(Record::WalkedStack(s)) => {
                            state.walked.insert(s.id, *s);
                        }
                        Some(Record::SwitchJavaStack(st)) => state.java_at = Some((st, false)),
                        Some(Record::WakeJavaStack(st)) => state.java_at = Some((st, true)),
                        _ => {}
                    }
                    writer.write_raw(&raw)?;
                }
            }
        }
        progress(total, total);
        let summary = reader.summary().cloned().unwrap_or_default();
        let mut notes = Vec::new();
        if reader.unknown_records() > 0 {
            notes.push(format!(
                "{} records of kinds this version does not know were left out",
                reader.unknown_records()
            ));
        }
        let mut counts = state.counts;
        counts.unknown_frames = state.frames.unknown;
        counts.stacks = state.stacks.len() as u64;
        let mut symbols = state.frames.finish(&mut notes);
        symbols.counts = counts;
        symbols.notes = notes.clone();
        let frames = symbols.frames.len();
        writer.write(&Record::UserSymbols(Box::new(symbols)))?;
        let out = writer.finish(&summary)?;
        out.into_inner()
            .map_err(|e| e.into_error())
            .and_then(|f| f.sync_all())
            .map_err(io("cannot write", &tmp))?;
        Ok(Resolved {
            counts,
            notes,
            frames,
        })
    })();
    match result {
        Ok(r) => {
            staged.commit().map_err(io("cannot replace", path))?;
            Ok(r)
        }
        Err(e) => {
            staged.discard();
            Err(e)
        }
    }
}

/// The resolver's state through one pass.
#[derive(Debug, Default)]
struct State {
    spaces: AddressSpaces,
    elves: ElfCache,
    unwinders: Unwinders,
    frames: Frames,
    stacks: FxHashMap<(Vec<u64>, idleflow_format::UnwindEnd), u64>,
    unwound: FxHashMap<UnwindKey, CachedUnwind>,
    counts: UserStackCounts,
    stale_jit_before: StaleJitBefore,
    /// The walked Java stacks met so far, by id.
    walked: FxHashMap<u64, idleflow_format::WalkedStack>,
    /// The last `SWITCH_JAVA_STACK` (or `WAKE_JAVA_STACK`: `true`): the
    /// Java frames of the switch-out (the wake-up) whose copy comes next.
    java_at: Option<(SwitchStack, bool)>,
}

impl State {
    /// Unwinds one copy and writes its `SWITCH_USER_STACK` (and the stack's
    /// `USER_STACK` the first time).
    fn copy<W: std::io::Write>(
        &mut self,
        c: &idleflow_format::StackCopy,
        bytes: &[u8],
        writer: &mut Writer<W>,
    ) -> Result<(), FormatError> {
        self.counts.copies += 1;
        self.counts.copy_bytes += bytes.len() as u64;
        let empty = Space::default();
        let (owner, space) = match self.spaces.space(c.pid) {
            Some(s) => s,
            None => {
                self.counts.no_maps += 1;
                (c.pid, &empty)
            }
        };
        let stale_jit = self
            .stale_jit_before
            .get(&c.pid)
            .is_some_and(|&t| c.time < t);
        // A thread that blocks where it blocked before: the same
        // registers, and the same words where the last unwind read them,
        // give the same stack without unwinding again.
        let key = UnwindKey {
            pid: c.pid,
            owner,
            generation: space.generation,
            ip: c.ip,
            sp: c.sp,
            bp: c.bp,
            stale_jit,
        };
        // The Java frames walked at this switch-out (wake-up), if any.
        let java = self
            .java_at
            .take()
            .filter(|(j, wake)| {
                *wake == c.at_wakeup && (j.time, j.cpu, j.tid) == (c.time, c.cpu, c.tid)
            })
            .and_then(|(j, _)| self.walked.get(&j.stack));
        let hit = self.unwound.get(&key).filter(|u| {
            u.reads
                .iter()
                .all(|&(addr, v)| unwind::stack_word(bytes, c.sp, addr) == v)
        });
        let (mut frames, mut end, native) = match hit {
            Some(hit) => (hit.frames.clone(), hit.end, hit.native),
            None => {
                let mut unwound =
                    self.unwinders
                        .unwind(owner, space, &mut self.elves, c.ip, c.sp, c.bp, bytes);
                // Where the stack leaves the files: JIT code, the
                // interpreter, the JVM's stubs.
                let native = unwound
                    .addrs
                    .iter()
                    .position(|&a| space.find(a).is_none_or(|m| !m.is_file()))
                    .unwrap_or(unwound.addrs.len());
                if stale_jit && native < unwound.addrs.len() {
                    // The stack ends before its first frame outside the files.
                    unwound.addrs.truncate(native);
                    unwound.end = idleflow_format::UnwindEnd::Stopped;
                    self.counts.stale_jit += 1;
                }
                let frames: Vec<u64> = unwound
                    .addrs
                    .iter()
                    .map(|&a| self.frames.frame(c.pid, space, &mut self.elves, a))
                    .collect();
                if self.unwound.len() >= MAX_CACHED_UNWINDS {
                    self.unwound.clear();
                }
                self.unwound.insert(
                    key,
                    CachedUnwind {
                        reads: self.unwinders.reads().to_vec(),
                        frames: frames.clone(),
                        end: unwound.end,
                        native,
                    },
                );
                (frames, unwound.end, native)
            }
        };
        if let Some(walked) = java {
            // The native frames down to the first outside the files, then
            // the Java frames as the JVM's structures name them.
            frames.truncate(native);
            frames.extend(java::user_frames(&mut self.frames, walked));
            end = if walked.complete {
                idleflow_format::UnwindEnd::Complete
            } else {
                idleflow_format::UnwindEnd::Stopped
            };
            self.counts.java_walked += 1;
        }
        if frames.is_empty() {
            return Ok(());
        }
        let next = self.stacks.len() as u64 + 1;
        let stack_key = (frames, end);
        let id = match self.stacks.get(&stack_key) {
            Some(&id) => id,
            None => {
                writer.write(&Record::UserStack(Box::new(UserStack {
                    id: next,
                    end,
                    frames: stack_key.0.clone(),
                })))?;
                self.stacks.insert(stack_key, next);
                next
            }
        };
        self.write_switch(c, id, end, writer)
    }

    /// Counts a copy unwound to stack `id` and writes its `SWITCH_USER_STACK`
    /// (`WAKE_USER_STACK` for a copy taken at a wake-up).
    fn write_switch<W: std::io::Write>(
        &mut self,
        c: &idleflow_format::StackCopy,
        id: u64,
        end: idleflow_format::UnwindEnd,
        writer: &mut Writer<W>,
    ) -> Result<(), FormatError> {
        self.counts.resolved += 1;
        match end {
            idleflow_format::UnwindEnd::Truncated => self.counts.truncated += 1,
            idleflow_format::UnwindEnd::Stopped => self.counts.stopped += 1,
            idleflow_format::UnwindEnd::Complete => {}
        }
        let st = SwitchStack {
            time: c.time,
            cpu: c.cpu,
            tid: c.tid,
            stack: id,
        };
        writer.write(&if c.at_wakeup {
            Record::WakeUserStack(st)
        } else {
            Record::SwitchUserStack(st)
        })
    }
}

/// Unwinds remembered at most (then forgotten all at once).
const MAX_CACHED_UNWINDS: usize = 1 << 16;

/// What an unwind depended on besides the stack words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct UnwindKey {
    pid: u32,
    owner: u32,
    generation: u64,
    ip: u64,
    sp: u64,
    bp: u64,
    /// Its JIT frames are cut off ([`StaleJitBefore`]).
    stale_jit: bool,
}

/// An unwind remembered: the words it read, and the frames it gave, how
/// it ended, and how many of its frames lie in files (before the first in
/// JIT code, the interpreter or a stub).
#[derive(Debug)]
struct CachedUnwind {
    reads: Vec<(u64, Option<u64>)>,
    frames: Vec<u64>,
    end: idleflow_format::UnwindEnd,
    native: usize,
}
