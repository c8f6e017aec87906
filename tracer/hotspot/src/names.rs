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

/// Names by `Method*`, read once.
#[derive(Debug, Default)]
pub struct Names {
    by_method: FxHashMap<u64, Option<MethodName>>,
}

impl Names {
    /// The names of `method` (`None` where its metadata could not be read).
    pub fn get(&mut self, mem: &impl Memory, l: &MethodLayout, method: u64) -> Option<&MethodName> {
        self.by_method
            .entry(method)
            .or_insert_with(|| method_name(mem, l, method).ok())
            .as_ref()
    }
}
