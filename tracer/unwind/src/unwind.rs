//! Unwinding one stack copy with framehop: CFI from each module's
//! `.eh_frame`/`.debug_frame` (parsed by gimli inside framehop), frame
//! pointers where no module covers the code (JIT code, stripped stubs).
//! One unwinder per address space, rebuilt only when its mappings changed;
//! one rule cache for all.
//!
//! Invariant: reads never leave the copy; a frame that needs a byte beyond
//! it ends the stack as [`UnwindEnd::Truncated`], keeping the frames found.

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{Error, ExplicitModuleSectionInfo, Module, Unwinder};
use idleflow_format::UnwindEnd;
use rustc_hash::FxHashMap;

use crate::elf::{Bytes, ElfCache};
use crate::maps::Space;

/// The deepest stack kept.
pub const MAX_FRAMES: usize = 256;

/// A stack's addresses for lookup (a return address minus one, so that it
/// lies in the call), innermost first, and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unwound {
    /// Addresses.
    pub addrs: Vec<u64>,
    /// How it ended.
    pub end: UnwindEnd,
}

/// Unwinders per address space.
#[derive(Default)]
pub struct Unwinders {
    per_space: FxHashMap<u32, (u64, UnwinderX86_64<Bytes>)>,
    cache: CacheX86_64,
    /// The stack words the last unwind read: (address, value or `None`
    /// where it was outside the copy).
    reads: Vec<(u64, Option<u64>)>,
}

impl std::fmt::Debug for Unwinders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unwinders")
            .field("spaces", &self.per_space.len())
            .finish_non_exhaustive()
    }
}

impl Unwinders {
    /// Unwinds the copy of `bytes` taken at `sp` with registers `ip`, `bp`,
    /// in address space `owner` whose mappings are `space`.
    #[allow(clippy::too_many_arguments)]
    pub fn unwind(
        &mut self,
        owner: u32,
        space: &Space,
        elves: &mut ElfCache,
        ip: u64,
        sp: u64,
        bp: u64,
        bytes: &[u8],
    ) -> Unwound {
        let stale = self
            .per_space
            .get(&owner)
            .is_none_or(|(g, _)| *g != space.generation);
        if stale {
            let u = build(owner, space, elves);
            self.per_space.insert(owner, (space.generation, u));
        }
        let (_, unwinder) = &self.per_space[&owner];
        let reads = &mut self.reads;
        reads.clear();
        let mut read = |addr: u64| -> Result<u64, ()> {
            let v = stack_word(bytes, sp, addr);
            reads.push((addr, v));
            v.ok_or(())
        };
        let mut it = unwinder.iter_frames(
            ip,
            UnwindRegsX86_64::new(ip, sp, bp),
            &mut self.cache,
            &mut read,
        );
        let mut addrs = Vec::new();
        let end = loop {
            if addrs.len() >= MAX_FRAMES {
                break UnwindEnd::Truncated;
            }
            match it.next() {
                Ok(Some(f)) => addrs.push(f.address_for_lookup()),
                Ok(None) => break UnwindEnd::Complete,
                Err(Error::CouldNotReadStack(a))
                    if a >= sp.saturating_add(bytes.len() as u64).saturating_sub(8) =>
                {
                    break UnwindEnd::Truncated
                }
                Err(_) => break UnwindEnd::Stopped,
            }
        };
        Unwound { addrs, end }
    }

    /// The stack words the last [`Unwinders::unwind`] read, in order:
    /// another copy with the same registers, address space and words
    /// unwinds to the same frames.
    pub fn reads(&self) -> &[(u64, Option<u64>)] {
        &self.reads
    }
}

/// The 8 bytes at `addr` of a copy of the stack from `sp`, if it holds them.
pub fn stack_word(bytes: &[u8], sp: u64, addr: u64) -> Option<u64> {
    let off = usize::try_from(addr.checked_sub(sp)?).ok()?;
    let b = bytes.get(off..off.checked_add(8)?)?;
    Some(u64::from_le_bytes(b.try_into().ok()?))
}

/// An unwinder with every file module of `space` whose file could be read.
fn build(pid: u32, space: &Space, elves: &mut ElfCache) -> UnwinderX86_64<Bytes> {
    let mut u = UnwinderX86_64::new();
    for m in space.maps.iter().filter(|m| m.is_file()) {
        let Ok(elf) = elves.get(&m.path, pid, m.start..m.end) else {
            continue;
        };
        // A file replaced since it was mapped (rebuilt) has other rules.
        if m.ino != 0 && elf.ino != m.ino {
            continue;
        }
        let Some(bias) = elf.bias(m.start, m.pgoff) else {
            continue;
        };
        let info = ExplicitModuleSectionInfo::<Bytes> {
            base_svma: 0,
            text_svma: elf.text_svma.clone(),
            got_svma: elf.got_svma.clone(),
            eh_frame_svma: elf.eh_frame.as_ref().map(|e| e.0.clone()),
            eh_frame: elf.eh_frame.as_ref().map(|e| e.1.clone()),
            eh_frame_hdr_svma: elf.eh_frame_hdr.as_ref().map(|e| e.0.clone()),
            eh_frame_hdr: elf.eh_frame_hdr.as_ref().map(|e| e.1.clone()),
            debug_frame: elf.debug_frame.clone(),
            ..Default::default()
        };
        u.add_module(Module::new(m.path.to_string(), m.start..m.end, bias, info));
    }
    u
}
