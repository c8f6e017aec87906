//! The methods inlined at a pc of compiled code: the nmethod's PcDesc for
//! that pc (PcDescs are recorded at call return addresses, which is what a
//! frame's pc is below the innermost frame and at a blocked thread's
//! anchor), then its chain of scopes in the scope data (each: the
//! sender's offset, the method's index in the nmethod's metadata, the bci;
//! UNSIGNED5-compressed), innermost first — as HotSpot's own `ScopeDesc`
//! decodes them.
//!
//! Invariant: the chain is bounded ([`MAX_SCOPES`]), and it is kept only
//! if its outermost scope is the nmethod's own method; anything else is
//! `None` (the caller then names the nmethod's method alone).

use crate::layout::{DebugInfo, ScopeLayout};
use crate::memory::Memory;
use crate::names::Unsigned5;

/// The deepest inlining chain read.
pub const MAX_SCOPES: usize = 64;
/// The most PcDesc bytes read of one nmethod.
pub const MAX_PC_DESCS: u64 = 4 << 20;

/// One method of an inlining chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scope {
    /// The `Method*`.
    pub method: u64,
    /// The bytecode index (none at a method's entry).
    pub bci: Option<u32>,
}

/// Where an nmethod's code, PcDescs, scopes and metadata are.
struct Places {
    code: u64,
    pcs: u64,
    pcs_end: u64,
    scopes: u64,
    metadata: u64,
}

fn places(mem: &impl Memory, l: &ScopeLayout, nm: u64) -> Option<Places> {
    let int = |off: u64| mem.u32(nm.wrapping_add(off)).ok().map(u64::from);
    let ptr = |off: u64| mem.u64(nm.wrapping_add(off)).ok();
    Some(match l.info {
        DebugInfo::Inline {
            code_begin,
            pcs,
            pcs_end,
            scopes,
            metadata,
        } => Places {
            code: ptr(code_begin)?,
            pcs: nm.wrapping_add(int(pcs)?),
            pcs_end: nm.wrapping_add(int(pcs_end)?),
            scopes: ptr(scopes)?,
            metadata: nm.wrapping_add(int(metadata)?),
        },
        DebugInfo::Immutable {
            code_offset,
            data,
            pcs,
            scopes,
            mutable,
            relocation_size,
        } => {
            let data = ptr(data)?;
            let scopes = data.wrapping_add(int(scopes)?);
            Places {
                code: nm.wrapping_add(int(code_offset)?),
                pcs: data.wrapping_add(int(pcs)?),
                pcs_end: scopes,
                scopes,
                metadata: ptr(mutable)?.wrapping_add(int(relocation_size)?),
            }
        }
    })
}

/// The methods at `pc` in the nmethod `nm` whose own method is `method`,
/// innermost first.
pub fn scopes_at(
    mem: &impl Memory,
    l: &ScopeLayout,
    excluded: u8,
    nm: u64,
    method: u64,
    pc: u64,
) -> Option<Vec<Scope>> {
    let p = places(mem, l, nm)?;
    let pc_offset = u32::try_from(pc.checked_sub(p.code)?).ok()?;
    let len = p.pcs_end.checked_sub(p.pcs)?;
    if len > MAX_PC_DESCS || l.pc_desc_size < 8 {
        return None;
    }
    let mut pcs = vec![0u8; len as usize];
    mem.read(p.pcs, &mut pcs).ok()?;
    let field = |d: &[u8], off: u64| {
        let off = off as usize;
        d.get(off..off + 4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
    };
    let desc = pcs
        .chunks_exact(l.pc_desc_size as usize)
        .find(|d| field(d, l.pc_offset) == Some(pc_offset))?;
    let mut offset = field(desc, l.decode_offset)?;
    let mut chain = Vec::new();
    // 0 is the serialized null: no (further) scope.
    while offset != 0 {
        if chain.len() == MAX_SCOPES {
            return None;
        }
        // Three UNSIGNED5 ints: at most 15 bytes.
        let mut bytes = [0u8; 15];
        let at = p.scopes.checked_add(u64::from(offset))?;
        let n = (0..=15)
            .rev()
            .find(|&n| n == 0 || mem.read(at, &mut bytes[..n]).is_ok())?;
        let mut s = Unsigned5::new(&bytes[..n], excluded);
        let sender = s.uint()?;
        let index = u64::from(s.uint()?);
        let bci = i64::from(s.uint()?) - 1; // InvocationEntryBci is -1
        if index == 0 {
            return None;
        }
        let m = mem.u64(p.metadata.checked_add((index - 1) * 8)?).ok()?;
        chain.push(Scope {
            method: m,
            bci: u32::try_from(bci).ok(),
        });
        if sender >= offset {
            return None; // senders come first in the data
        }
        offset = sender;
    }
    (chain.last()?.method == method).then_some(chain)
}
