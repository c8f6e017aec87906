//! Walking a thread's Java frames in its stack, from its frame anchor
//! (the last Java frame, [`crate::threads::Anchor`]): each pc is placed in
//! the interpreter's code or in a CodeBlob of the code cache (found
//! through its heap's segment map, as HotSpot's own `CodeHeap::find_start`
//! does), an interpreted frame is walked by its frame pointer and names
//! its method and bytecode index from its slots, a compiled frame by its
//! blob's frame size and names the methods inlined at its pc, innermost
//! first ([`crate::scopes`]; the nmethod's method alone where they cannot
//! be read).
//!
//! Assumes x86-64 and the template interpreter's frame layout (the method
//! three words below fp, the bcp eight: `frame_x86.hpp` since JDK 9; each
//! interpreted frame is checked — its bcp must lie in its method's
//! bytecodes — and a frame that fails ends the walk as
//! [`WalkEnd::Lost`]).
//!
//! Invariant: the walk only moves up the stack (each frame's sp above the
//! last), reads at most [`MAX_FRAMES`] frames, and ends — never guesses —
//! at anything it cannot place.

use rustc_hash::FxHashMap;

use crate::layout::{CodeLayout, DeoptHandler, Layout};
use crate::memory::{Memory, MemoryError};
use crate::names::bytecodes;
use crate::scopes::scopes_at;
use crate::threads::Anchor;

/// The deepest walk.
pub const MAX_FRAMES: usize = 1024;
/// The farthest a walk goes up the stack from its anchor.
pub const MAX_STACK: u64 = 64 << 20;
/// Interpreter frame slots below fp, in words (`frame_x86.hpp`).
const INTERPRETER_METHOD: u64 = 3;
const INTERPRETER_BCP: u64 = 8;
const INTERPRETER_SENDER_SP: u64 = 1;

/// How a frame's code runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    /// Interpreted bytecode.
    Interpreted,
    /// JIT-compiled code (an nmethod; a native method's wrapper too).
    Compiled,
    /// Inlined into the compiled frame that follows it.
    Inlined,
}

/// One Java frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JavaFrame {
    /// The `Method*`.
    pub method: u64,
    /// How it runs.
    pub kind: FrameKind,
    /// The bytecode index (interpreted frames but a native method's;
    /// compiled and inlined ones where the nmethod's scopes say).
    pub bci: Option<u32>,
    /// The frame's pc.
    pub pc: u64,
}

/// Why a walk ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WalkEnd {
    /// At a stub that is not Java code: the call stub into Java from the
    /// VM (a thread's first frame), or another.
    Stub(String),
    /// At a pc outside the code cache (native code calling Java).
    Native(u64),
    /// A frame could not be read or did not check out.
    Lost(String),
    /// [`MAX_FRAMES`] frames.
    Deep,
}

/// A thread's Java frames, innermost first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Walk {
    /// The frames.
    pub frames: Vec<JavaFrame>,
    /// How the walk ended.
    pub end: WalkEnd,
    /// Compiled frames the JVM had deoptimized while the thread was away
    /// (named from the pc they keep, as HotSpot names them).
    pub deoptimized: u32,
}

/// One code heap's reserved range and segment map.
#[derive(Debug, Clone, Copy)]
struct Heap {
    low: u64,
    high: u64,
    segmap: u64,
    log2: u32,
}

/// The code cache's heaps and the interpreter's code, read once per JVM
/// (their places are fixed when the JVM starts).
#[derive(Debug, Clone)]
pub struct CodeCache {
    heaps: Vec<Heap>,
    interpreter: (u64, u64),
}

impl CodeCache {
    /// Reads where the code is.
    pub fn read(mem: &impl Memory, l: &CodeLayout) -> Result<Self, MemoryError> {
        let array = mem.u64(l.heaps)?;
        let len = mem.u32(array.wrapping_add(l.array_len))?.min(16);
        let data = mem.u64(array.wrapping_add(l.array_data))?;
        let mut heaps = Vec::new();
        for i in 0..u64::from(len) {
            let heap = mem.u64(data.wrapping_add(i * 8))?;
            let memory = heap.wrapping_add(l.heap_memory);
            let log2 = mem.u32(heap.wrapping_add(l.heap_log2_segment))?;
            if log2 == 0 || log2 > 16 {
                continue;
            }
            heaps.push(Heap {
                low: mem.u64(memory.wrapping_add(l.space_low))?,
                high: mem.u64(memory.wrapping_add(l.space_high))?,
                segmap: mem.u64(heap.wrapping_add(l.heap_segmap).wrapping_add(l.space_low))?,
                log2,
            });
        }
        let queue = mem.u64(l.interpreter)?;
        let start = mem.u64(queue.wrapping_add(l.queue_buffer))?;
        let size = u64::from(mem.u32(queue.wrapping_add(l.queue_limit))?);
        Ok(Self {
            heaps,
            interpreter: (start, start.wrapping_add(size)),
        })
    }

    /// Whether `pc` is in the interpreter's code.
    pub fn in_interpreter(&self, pc: u64) -> bool {
        self.interpreter.0 <= pc && pc < self.interpreter.1
    }

    /// The CodeBlob whose code holds `pc`.
    pub fn blob_at(&self, mem: &impl Memory, l: &CodeLayout, pc: u64) -> Option<u64> {
        let h = self.heaps.iter().find(|h| h.low <= pc && pc < h.high)?;
        let mut i = (pc - h.low) >> h.log2;
        let mut b = read_u8(mem, h.segmap.wrapping_add(i))?;
        if b == 0xff {
            return None; // free
        }
        // Each byte says how many segments back the block starts (in hops
        // of at most 0xfe).
        for _ in 0..(1 << 16) {
            if b == 0 {
                let block = h.low + (i << h.log2);
                let used = read_u8(mem, block.wrapping_add(l.heap_block_used))?;
                return (used != 0).then(|| block + l.heap_block_size);
            }
            i = i.checked_sub(u64::from(b))?;
            b = read_u8(mem, h.segmap.wrapping_add(i))?;
        }
        None
    }
}

fn read_u8(mem: &impl Memory, addr: u64) -> Option<u8> {
    let mut b = [0u8];
    mem.read(addr, &mut b).ok()?;
    Some(b[0])
}

/// The stack bytes a walk reads at once (less where the stack ends
/// sooner).
pub const STACK_WINDOW: u64 = 8 << 10;

/// What the code at a pc is, as a walk needs it.
#[derive(Debug, Clone)]
enum Code {
    Interpreter,
    Compiled {
        blob: u64,
        compile_id: u32,
        frame_size: u32,
        /// Method, kind and bci of each frame at the pc, innermost first.
        frames: Vec<(u64, FrameKind, Option<u32>)>,
        /// The nmethod's deoptimization handler (0: not known), and where
        /// from a frame's sp it keeps its own pc: a frame whose pc is the
        /// handler was deoptimized.
        deopt: (u64, u64),
    },
    /// The VM's own code called from Java code (C1's and C2's runtime
    /// stubs: monitor enter, allocation, …): a frame of `frame_size` words
    /// with no Java method, stepped over as a compiled frame is.
    Runtime {
        frame_size: u32,
    },
    Stub(String),
    Native,
}

/// A thread's stack bytes read at once, other reads passed through.
struct Buffered<'a, M> {
    base: u64,
    bytes: Vec<u8>,
    mem: &'a M,
}

impl<'a, M: Memory> Buffered<'a, M> {
    /// Reads the stack from `sp` up: [`STACK_WINDOW`] bytes, or the most of
    /// them the stack has (its mapping ends above).
    fn read(mem: &'a M, sp: u64) -> Self {
        let base = sp.saturating_sub(16);
        let mut len = STACK_WINDOW;
        while len >= 4096 {
            let mut bytes = vec![0u8; len as usize];
            if mem.read(base, &mut bytes).is_ok() {
                return Self { base, bytes, mem };
            }
            len /= 2;
        }
        Self {
            base,
            bytes: Vec::new(),
            mem,
        }
    }
}

impl<M: Memory> Memory for Buffered<'_, M> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        if let Some(from) = addr.checked_sub(self.base) {
            let from = from as usize;
            if let Some(b) = self.bytes.get(from..from.saturating_add(buf.len())) {
                buf.copy_from_slice(b);
                return Ok(());
            }
        }
        self.mem.read(addr, buf)
    }
}

/// Walks Java frames, remembering what it learned of the code at each pc
/// (checked again, by the nmethod's compile id, at each use: a blob freed
/// and its space reused has another) and of each method's bytecodes.
#[derive(Debug)]
pub struct Walker {
    code: CodeCache,
    by_pc: FxHashMap<u64, Code>,
    bytecodes: FxHashMap<u64, (u64, u64)>,
}

/// The largest runtime stub frame stepped over, in words (HotSpot's are
/// tens of words; a larger one is not believed).
const MAX_STUB_FRAME: u32 = 4096;

/// The most pcs and methods a [`Walker`] remembers before it starts over.
pub const MAX_CACHED: usize = 1 << 16;

impl Walker {
    /// A walker of the code `code` describes.
    pub fn new(code: CodeCache) -> Self {
        Self {
            code,
            by_pc: FxHashMap::default(),
            bytecodes: FxHashMap::default(),
        }
    }

    fn code_at(&mut self, mem: &impl Memory, l: &Layout, pc: u64) -> Code {
        if self.code.in_interpreter(pc) {
            return Code::Interpreter;
        }
        if let Some(known) = self.by_pc.get(&pc) {
            match known {
                Code::Compiled {
                    blob, compile_id, ..
                } => {
                    if mem.u32(blob + l.code.nmethod_compile_id).ok() == Some(*compile_id) {
                        return known.clone();
                    }
                }
                _ => return known.clone(),
            }
        }
        let code = self.learn(mem, l, pc);
        if self.by_pc.len() >= MAX_CACHED {
            self.by_pc.clear();
        }
        self.by_pc.insert(pc, code.clone());
        code
    }

    fn learn(&self, mem: &impl Memory, l: &Layout, pc: u64) -> Code {
        let Some(blob) = self.code.blob_at(mem, &l.code, pc) else {
            return Code::Native;
        };
        let name = mem
            .u64(blob + l.code.blob_name)
            .and_then(|p| mem.c_string(p))
            .unwrap_or_default();
        if !name.contains("nmethod") {
            // The call stub (the thread's first frame) and the VM's buffers
            // end the walk; a runtime stub with a frame is stepped over.
            let frame_size = mem.u32(blob + l.code.blob_frame_size).unwrap_or(0);
            if frame_size == 0 || name.contains("StubRoutines") || frame_size > MAX_STUB_FRAME {
                return Code::Stub(name);
            }
            return Code::Runtime { frame_size };
        }
        let (Ok(method), Ok(frame_size), Ok(compile_id)) = (
            mem.u64(blob + l.code.nmethod_method),
            mem.u32(blob + l.code.blob_frame_size),
            mem.u32(blob + l.code.nmethod_compile_id),
        ) else {
            return Code::Stub(format!("unreadable nmethod at {blob:#x}"));
        };
        let excluded = l.methods.unsigned5_excluded;
        let frames = match scopes_at(mem, &l.scopes, excluded, blob, method, pc) {
            Some(chain) => {
                let outermost = chain.len() - 1;
                chain
                    .iter()
                    .enumerate()
                    .map(|(i, s)| {
                        let kind = if i == outermost {
                            FrameKind::Compiled
                        } else {
                            FrameKind::Inlined
                        };
                        (s.method, kind, s.bci)
                    })
                    .collect()
            }
            None => vec![(method, FrameKind::Compiled, None)],
        };
        let deopt = l.code.deopt.map_or((0, 0), |d| {
            let handler = match d.handler {
                DeoptHandler::Address(at) => mem.u64(blob + at).unwrap_or(0),
                DeoptHandler::Offset(at) => mem
                    .u32(blob + at)
                    .map_or(0, |o| blob.wrapping_add(u64::from(o))),
            };
            match mem.u32(blob + d.orig_pc_offset) {
                Ok(orig_pc) => (handler, u64::from(orig_pc)),
                Err(_) => (0, 0),
            }
        });
        Code::Compiled {
            blob,
            compile_id,
            frame_size,
            frames,
            deopt,
        }
    }

    fn bytecodes(&mut self, mem: &impl Memory, l: &Layout, method: u64) -> Option<(u64, u64)> {
        if let Some(&b) = self.bytecodes.get(&method) {
            return Some(b);
        }
        let b = bytecodes(mem, &l.methods, method).ok()?;
        if self.bytecodes.len() >= MAX_CACHED {
            self.bytecodes.clear();
        }
        self.bytecodes.insert(method, b);
        Some(b)
    }

    /// Walks the Java frames from `anchor`, innermost first. The stack is
    /// read once, from the anchor's sp up.
    pub fn walk(&mut self, mem: &impl Memory, l: &Layout, anchor: Anchor) -> Walk {
        let stack = Buffered::read(mem, anchor.sp);
        let mut frames = Vec::new();
        let mut deoptimized = 0;
        let lost = |frames: Vec<JavaFrame>, why: String, deoptimized| Walk {
            frames,
            end: WalkEnd::Lost(why),
            deoptimized,
        };
        let (mut sp, mut fp) = (anchor.sp, anchor.fp);
        let mut pc = anchor.pc;
        if pc == 0 {
            match stack.u64(sp.wrapping_sub(8)) {
                Ok(p) => pc = p,
                Err(e) => return lost(frames, e.to_string(), deoptimized),
            }
        }
        let top = anchor.sp.saturating_add(MAX_STACK);
        while frames.len() < MAX_FRAMES {
            let (sender_sp, sender_pc, sender_fp) = match self.code_at(mem, l, pc) {
                Code::Interpreter => {
                    let slot = |words: u64| stack.u64(fp.wrapping_sub(words * 8));
                    let (Ok(method), Ok(bcp)) = (slot(INTERPRETER_METHOD), slot(INTERPRETER_BCP))
                    else {
                        let why = format!("interpreted frame at fp {fp:#x} unreadable");
                        return lost(frames, why, deoptimized);
                    };
                    let bci = match self.bytecodes(mem, l, method) {
                        // A native method's interpreted frame keeps no bcp.
                        Some(_) if bcp == 0 => None,
                        Some((start, len)) if start <= bcp && bcp <= start + len => {
                            Some((bcp - start) as u32)
                        }
                        _ => {
                            let why = format!(
                                "interpreted frame at fp {fp:#x}: bcp {bcp:#x} not in method {method:#x}"
                            );
                            return lost(frames, why, deoptimized);
                        }
                    };
                    frames.push(JavaFrame {
                        method,
                        kind: FrameKind::Interpreted,
                        bci,
                        pc,
                    });
                    let (Ok(ssp), Ok(spc), Ok(sfp)) = (
                        slot(INTERPRETER_SENDER_SP),
                        stack.u64(fp.wrapping_add(8)),
                        stack.u64(fp),
                    ) else {
                        let why = format!("interpreted frame at fp {fp:#x}: no sender");
                        return lost(frames, why, deoptimized);
                    };
                    (ssp, spc, sfp)
                }
                Code::Compiled {
                    frame_size,
                    frames: at_pc,
                    deopt,
                    ..
                } => {
                    // Deoptimized while the thread was away: its own pc is
                    // kept in the frame, where HotSpot reads it back.
                    let at_pc = match deopt {
                        (handler, orig_pc) if handler != 0 && pc == handler => {
                            let kept = stack.u64(sp.wrapping_add(orig_pc));
                            match kept.map(|p| self.code_at(mem, l, p)) {
                                Ok(Code::Compiled { frames: kept, .. }) => {
                                    deoptimized += 1;
                                    kept
                                }
                                _ => at_pc,
                            }
                        }
                        _ => at_pc,
                    };
                    frames.extend(at_pc.iter().map(|&(method, kind, bci)| JavaFrame {
                        method,
                        kind,
                        bci,
                        pc,
                    }));
                    let ssp = sp.wrapping_add(u64::from(frame_size) * 8);
                    let (Ok(spc), Ok(sfp)) = (
                        stack.u64(ssp.wrapping_sub(8)),
                        stack.u64(ssp.wrapping_sub(16)),
                    ) else {
                        return lost(
                            frames,
                            format!("compiled frame at sp {sp:#x}: no sender"),
                            deoptimized,
                        );
                    };
                    (ssp, spc, sfp)
                }
                Code::Runtime { frame_size } => {
                    let ssp = sp.wrapping_add(u64::from(frame_size) * 8);
                    let (Ok(spc), Ok(sfp)) = (
                        stack.u64(ssp.wrapping_sub(8)),
                        stack.u64(ssp.wrapping_sub(16)),
                    ) else {
                        return lost(
                            frames,
                            format!("runtime stub frame at sp {sp:#x}: no sender"),
                            deoptimized,
                        );
                    };
                    (ssp, spc, sfp)
                }
                Code::Stub(name) => {
                    return Walk {
                        frames,
                        end: WalkEnd::Stub(name),
                        deoptimized,
                    }
                }
                Code::Native => {
                    return Walk {
                        frames,
                        end: WalkEnd::Native(pc),
                        deoptimized,
                    }
                }
            };
            if sender_sp <= sp || sender_sp > top {
                let why = format!("sender sp {sender_sp:#x} not above {sp:#x}");
                return lost(frames, why, deoptimized);
            }
            (sp, pc, fp) = (sender_sp, sender_pc, sender_fp);
        }
        Walk {
            frames,
            end: WalkEnd::Deep,
            deoptimized,
        }
    }
}

/// Walks the Java frames from `anchor` with nothing remembered (a
/// [`Walker`] used once).
pub fn walk(mem: &impl Memory, l: &Layout, code: &CodeCache, anchor: Anchor) -> Walk {
    Walker::new(code.clone()).walk(mem, l, anchor)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::tests::layout_from;
    use crate::memory::Snapshot;

    const BASE: u64 = 0x7f00_0000_0000;
    const LEN: u64 = 1 << 16;

    /// A region of arbitrary bytes (a xorshift stream, most words pointing
    /// back into it, as a hostile target's would), then the code cache's
    /// roots of layout `l` made to hold: two heaps over the upper half
    /// whose segment maps are noise, the interpreter over a quarter.
    fn noise(l: &Layout, mut seed: u64) -> Snapshot {
        let mut bytes = Vec::with_capacity(LEN as usize);
        while (bytes.len() as u64) < LEN {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let word = if !seed.is_multiple_of(16) {
                BASE + (seed >> 8) % LEN
            } else {
                seed
            };
            bytes.extend_from_slice(&word.to_le_bytes());
        }
        let mut put = |addr: u64, word: u64, width: usize| {
            let at = (addr - BASE) as usize;
            if at + width <= bytes.len() {
                bytes[at..at + width].copy_from_slice(&word.to_le_bytes()[..width]);
            }
        };
        let c = &l.code;
        // Roots at the region's start (the layout puts statics there too).
        let (array, data, heap0, heap1, queue) = (
            BASE + 0x100,
            BASE + 0x200,
            BASE + 0x400,
            BASE + 0x800,
            BASE + 0xc00,
        );
        put(c.heaps, array, 8);
        put(array + c.array_len, 2, 4);
        put(array + c.array_data, data, 8);
        for (k, heap) in [heap0, heap1].into_iter().enumerate() {
            put(data + k as u64 * 8, heap, 8);
            let low = BASE + LEN / 2 + k as u64 * LEN / 4;
            put(heap + c.heap_memory + c.space_low, low, 8);
            put(heap + c.heap_memory + c.space_high, low + LEN / 4, 8);
            put(heap + c.heap_segmap + c.space_low, BASE + 0x1000, 8);
            put(heap + c.heap_log2_segment, 4, 4);
        }
        put(c.interpreter, queue, 8);
        put(queue + c.queue_buffer, BASE + LEN / 4, 8);
        put(queue + c.queue_limit, LEN / 4, 4);
        let mut s = Snapshot::new();
        s.add(BASE, bytes);
        s
    }

    #[test]
    fn any_bytes_end_a_walk_never_a_panic_or_a_hang() {
        let (mut walks, mut frames) = (0, 0);
        for seed in 1..300u64 {
            let l = layout_from(seed);
            let mem = noise(&l, seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let Ok(code) = CodeCache::read(&mem, &l.code) else {
                continue;
            };
            for i in 0..8 {
                let at = BASE + (seed * 977 + i * 4099) % LEN;
                // Half the walks start in the interpreter, half in a heap.
                let pc = BASE + LEN / 4 + (seed * 7 + i * 131) % (LEN * 3 / 4);
                let anchor = Anchor {
                    sp: at,
                    fp: at + 64,
                    pc,
                };
                let w = walk(&mem, &l, &code, anchor);
                assert!(w.frames.len() <= MAX_FRAMES * MAX_SCOPES_PER_FRAME);
                walks += 1;
                frames += w.frames.len();
            }
        }
        // The noise reaches the walk and, now and then, frames.
        eprintln!("{walks} walks, {frames} frames");
        assert!(
            walks >= 1000 && frames > 0,
            "{walks} walks, {frames} frames"
        );
    }

    const MAX_SCOPES_PER_FRAME: usize = crate::scopes::MAX_SCOPES;
}
