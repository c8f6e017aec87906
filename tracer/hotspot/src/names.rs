//! Naming a method from the JVM's metadata: a `Method*` → its
//! `ConstMethod` → its `ConstantPool` → the holder class's name and the
//! method's name and signature (Symbols, the pool's entries). Metadata
//! lives outside the Java heap and stays where it is for as long as its
//! class is loaded, so a name is cached per `Method*` ([`Names`]).
//!
//! Invariant: a name is only what the target's memory says, bounded: a
//! Symbol of at most [`MAX_SYMBOL`] bytes, a pool index inside the pool.

use rustc_hash::FxHashMap;

use crate::layout::MethodLayout;
use crate::memory::{Memory, MemoryError};

/// The most methods a [`Names`] remembers before it starts over.
pub const MAX_NAMES: usize = 1 << 16;

/// The longest Symbol read (Java names are far shorter).
pub const MAX_SYMBOL: u64 = 65535;

/// A Java method's names, as the JVM spells them (`java/lang/Thread`,
/// `sleep`, `(J)V`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MethodName {
    /// Its class, internal form (`a/b/C`, `a/b/C$D`).
    pub class: String,
    /// Its name.
    pub name: String,
    /// Its signature.
    pub signature: String,
}

impl MethodName {
    /// `a.b.C.name`: the class in Java's dotted form, and the method.
    pub fn dotted(&self) -> String {
        format!("{}.{}", self.class.replace('/', "."), self.name)
    }

    /// `a.b.C.name(int, java.lang.String)`: as HotSpot's perf map and
    /// idleflow's agent name a method (a hidden class without its
    /// address: `idleflow_format::names::class`).
    pub fn perf_map_name(&self) -> String {
        format!(
            "{}.{}{}",
            idleflow_format::names::class(&self.class),
            self.name,
            idleflow_format::signatures::java_parameters(&self.signature)
        )
    }
}

/// Reads the Symbol at `sym`.
pub fn symbol(mem: &impl Memory, l: &MethodLayout, sym: u64) -> Result<String, MemoryError> {
    let len = u64::from(mem.u16(sym.wrapping_add(l.symbol_length))?).min(MAX_SYMBOL);
    let mut bytes = vec![0u8; len as usize];
    mem.read(sym.wrapping_add(l.symbol_body), &mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Reads the names of the method at `method`.
pub fn method_name(
    mem: &impl Memory,
    l: &MethodLayout,
    method: u64,
) -> Result<MethodName, MemoryError> {
    let cm = mem.u64(method.wrapping_add(l.const_method))?;
    let cp = mem.u64(cm.wrapping_add(l.constants))?;
    let holder = mem.u64(cp.wrapping_add(l.pool_holder))?;
    let class = symbol(mem, l, mem.u64(holder.wrapping_add(l.klass_name))?)?;
    let pool_len = mem.u32(cp.wrapping_add(l.pool_length))?;
    let entry = |index: u64| -> Result<String, MemoryError> {
        let i = u64::from(mem.u16(cm.wrapping_add(index))?);
        if i == 0 || i >= u64::from(pool_len) {
            return Err(MemoryError::Unmapped { addr: cm, len: 0 });
        }
        let sym = mem.u64(cp.wrapping_add(l.pool_size).wrapping_add(i * 8))?;
        symbol(mem, l, sym)
    };
    Ok(MethodName {
        class,
        name: entry(l.name_index)?,
        signature: entry(l.signature_index)?,
    })
}

/// The bytecodes of the method at `method`: their start and length (a
/// frame's bcp lies in them).
pub fn bytecodes(
    mem: &impl Memory,
    l: &MethodLayout,
    method: u64,
) -> Result<(u64, u64), MemoryError> {
    let cm = mem.u64(method.wrapping_add(l.const_method))?;
    let size = mem.u16(cm.wrapping_add(l.code_size))?;
    Ok((cm.wrapping_add(l.const_method_size), u64::from(size)))
}

/// The longest line number table read (entries).
pub const MAX_LINE_ENTRIES: usize = 1 << 16;

/// HotSpot's UNSIGNED5 reader of compressed streams: bytes below
/// `excluded` never occur; a byte of 192 or more says another follows.
pub(crate) struct Unsigned5<'a> {
    bytes: &'a [u8],
    at: usize,
    excluded: u8,
}

impl<'a> Unsigned5<'a> {
    /// A reader of `bytes` from their start.
    pub(crate) fn new(bytes: &'a [u8], excluded: u8) -> Self {
        Self {
            bytes,
            at: 0,
            excluded,
        }
    }

    fn byte(&mut self) -> Option<u8> {
        let b = *self.bytes.get(self.at)?;
        self.at += 1;
        Some(b)
    }

    pub(crate) fn uint(&mut self) -> Option<u32> {
        let mut b = self.byte()?;
        let mut sum = u32::from(b.checked_sub(self.excluded)?);
        let mut shift = 6;
        while b >= 192 && shift < 30 {
            b = self.byte()?;
            sum = sum.wrapping_add(u32::from(b.checked_sub(self.excluded)?) << shift);
            shift += 6;
        }
        Some(sum)
    }

    fn int(&mut self) -> Option<i32> {
        let v = self.uint()?;
        Some((v >> 1) as i32 ^ -((v & 1) as i32))
    }
}

/// The line of `bci` in a compressed line number table (`bytes`, read
/// from its start): the last entry at or before `bci`.
pub fn line_in_table(bytes: &[u8], excluded: u8, bci: u32) -> Option<u32> {
    let mut s = Unsigned5 {
        bytes,
        at: 0,
        excluded,
    };
    let (mut at_bci, mut line) = (0i64, 0i64);
    let mut best: Option<(i64, i64)> = None;
    for _ in 0..MAX_LINE_ENTRIES {
        match s.byte()? {
            0 => break,
            0xff => {
                at_bci += i64::from(s.int()?);
                line += i64::from(s.int()?);
            }
            b => {
                at_bci += i64::from(b >> 3);
                line += i64::from(b & 7);
            }
        }
        if at_bci <= i64::from(bci) && best.is_none_or(|(b, _)| at_bci >= b) {
            best = Some((at_bci, line));
        }
    }
    best.and_then(|(_, l)| u32::try_from(l).ok())
}

/// The source line of `bci` in the method at `method`.
pub fn line(mem: &impl Memory, l: &MethodLayout, method: u64, bci: u32) -> Option<u32> {
    let cm = mem.u64(method.wrapping_add(l.const_method)).ok()?;
    let flags = mem.u16(cm.wrapping_add(l.const_method_flags)).ok()?;
    if u32::from(flags) & l.has_line_numbers == 0 {
        return None;
    }
    let size = u64::from(mem.u16(cm.wrapping_add(l.code_size)).ok()?);
    let table = cm.wrapping_add(l.const_method_size).wrapping_add(size);
    // Read in pieces until the table's end (a 0 byte outside an escape);
    // tables are short, a few bytes a line.
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 64];
    while bytes.len() < 4 * MAX_LINE_ENTRIES {
        let at = table.wrapping_add(bytes.len() as u64);
        let n = 64 - (at % 64) as usize;
        mem.read(at, &mut chunk[..n]).ok()?;
        bytes.extend_from_slice(&chunk[..n]);
        if let found @ Some(_) = complete_line(&bytes, l.unsigned5_excluded, bci) {
            return found.flatten();
        }
    }
    None
}

/// The line if `bytes` holds the whole table (`Some(None)`: whole, no
/// line), `None` if more bytes are needed.
fn complete_line(bytes: &[u8], excluded: u8, bci: u32) -> Option<Option<u32>> {
    let mut s = Unsigned5 {
        bytes,
        at: 0,
        excluded,
    };
    loop {
        match s.byte()? {
            0 => return Some(line_in_table(bytes, excluded, bci)),
            0xff => {
                s.int()?;
                s.int()?;
            }
            _ => {}
        }
    }
}

/// Names by `Method*`, read once.
#[derive(Debug, Default)]
pub struct Names {
    by_method: FxHashMap<u64, Option<MethodName>>,
}

impl Names {
    /// The names of `method` (`None` where its metadata could not be read).
    pub fn get(&mut self, mem: &impl Memory, l: &MethodLayout, method: u64) -> Option<&MethodName> {
        if self.by_method.len() >= MAX_NAMES && !self.by_method.contains_key(&method) {
            self.by_method.clear();
        }
        self.by_method
            .entry(method)
            .or_insert_with(|| method_name(mem, l, method).ok())
            .as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_table_gives_the_last_line_at_or_before_a_bci() {
        // (bci 0, line 12) by escape: zigzag 0 and 24, each +1 (excluded
        // byte 0 since JDK 20.0.15); (bci 5, line 13) in one byte; (bci
        // 40, line 11): an escape again (back one line is -2 → 3).
        let new = [0xff, 1, 25, (5 << 3) | 1, 0xff, 71, 4, 0];
        assert_eq!(line_in_table(&new, 1, 0), Some(12));
        assert_eq!(line_in_table(&new, 1, 4), Some(12));
        assert_eq!(line_in_table(&new, 1, 5), Some(13));
        assert_eq!(line_in_table(&new, 1, 39), Some(13));
        assert_eq!(line_in_table(&new, 1, 41), Some(11));
        // The same table before JDK 20.0.15.
        let old = [0xff, 0, 24, (5 << 3) | 1, 0xff, 70, 3, 0];
        assert_eq!(line_in_table(&old, 0, 6), Some(13));
        assert_eq!(line_in_table(&old, 0, 40), Some(11));
        assert_eq!(complete_line(&old[..5], 0, 6), None, "more bytes needed");
        // An excluded byte is an error, not a line.
        assert_eq!(line_in_table(&[0xff, 0, 24, 0], 1, 0), None);
    }
}
