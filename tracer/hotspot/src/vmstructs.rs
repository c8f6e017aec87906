//! HotSpot's introspection tables, read from a running JVM: the arrays
//! `gHotSpotVMStructs` (each field's offset in its type, or a static's
//! address), `gHotSpotVMTypes` (each type's size) and the int and long
//! constants that libjvm.so exports for its serviceability agent. The
//! layout of an entry is itself exported (`gHotSpotVMStructEntry*Offset`,
//! `…ArrayStride`), so nothing here depends on the JDK's version; the
//! version shows only in which names exist ([`crate::layout`]).
//!
//! The symbols' addresses come from libjvm.so's dynamic symbol table, read
//! from the very file the process mapped (`/proc/PID/map_files/…`, so a
//! container's JVM is read from its own root); the tables themselves, and
//! the entry offsets (set when the JVM starts), from the process's memory.
//!
//! Invariant: bounded — at most [`MAX_ENTRIES`] entries of at most
//! [`MAX_STRIDE`] bytes a table, names of at most
//! [`crate::memory::MAX_STRING`] bytes, a libjvm.so of at most
//! [`MAX_LIBJVM`] bytes; anything else is an error naming what was wrong.

use std::io::Read;
use std::path::PathBuf;

use object::{Object, ObjectSegment, ObjectSymbol};
use rustc_hash::FxHashMap;

use crate::memory::{Memory, MemoryError};

/// The most entries read of one table (real JVMs have a few thousand).
pub const MAX_ENTRIES: u64 = 1 << 17;
/// The largest entry (real ones are 48 bytes or less).
pub const MAX_STRIDE: u64 = 256;
/// The largest libjvm.so read (real ones are 20–30 MiB).
pub const MAX_LIBJVM: u64 = 512 << 20;

/// Why a JVM's tables could not be read.
#[derive(Debug, thiserror::Error)]
pub enum VmStructsError {
    /// The process maps no libjvm.so: not a HotSpot JVM (or not yet one).
    #[error("process {0} has no libjvm.so mapped (not a HotSpot JVM)")]
    NoLibjvm(u32),
    /// libjvm.so could not be read.
    #[error("cannot read {}: {why}", .path.display())]
    Libjvm {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// libjvm.so lacks a symbol the tables need.
    #[error("libjvm.so exports no {0} (a JVM without the serviceability tables)")]
    NoSymbol(&'static str),
    /// A table or entry layout value is out of bounds.
    #[error("the JVM's {what} is {value:#x}, not a table idleflow reads")]
    Bad {
        /// What.
        what: &'static str,
        /// Its value.
        value: u64,
    },
    /// The JVM has not filled in its tables yet (it is starting).
    #[error("the JVM has not set up its serviceability tables yet (starting?)")]
    NotYet,
    /// The process's memory could not be read.
    #[error(transparent)]
    Memory(#[from] MemoryError),
}

/// A field of a HotSpot type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// An instance field at this offset in its object.
    Offset(u64),
    /// A static field at this address in the process.
    Address(u64),
}

/// Where libjvm.so is in a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LibjvmMapping {
    /// The path the process mapped it from (as `/proc/PID/maps` shows it).
    pub path: String,
    /// The start of its first mapping (file offset 0).
    pub base: u64,
    /// `/proc/PID/map_files/…` of that mapping: the mapped file itself.
    pub map_file: PathBuf,
}

/// Finds libjvm.so in `/proc/PID/maps`'s text.
pub fn find_libjvm(pid: u32, maps: &str) -> Option<LibjvmMapping> {
    maps.lines().find_map(|line| {
        let mut cols = line.split_whitespace();
        let range = cols.next()?;
        let _perms = cols.next()?;
        let offset = u64::from_str_radix(cols.next()?, 16).ok()?;
        let _dev = cols.next()?;
        let _inode = cols.next()?;
        let path = cols.collect::<Vec<_>>().join(" ");
        if offset != 0 || !path.ends_with("/libjvm.so") {
            return None;
        }
        let (start, _) = range.split_once('-')?;
        Some(LibjvmMapping {
            base: u64::from_str_radix(start, 16).ok()?,
            map_file: PathBuf::from(format!("/proc/{pid}/map_files/{range}")),
            path,
        })
    })
}

/// The exported symbols the tables are found by, as libjvm.so's own
/// addresses (before relocation), and the address its first segment
/// (file offset 0) is linked at.
#[derive(Debug, Clone, Default)]
pub struct LibjvmSymbols {
    /// Symbol name → address.
    pub symbols: FxHashMap<String, u64>,
    /// The link-time address of file offset 0.
    pub first_vaddr: u64,
}

impl LibjvmSymbols {
    /// Reads the `gHotSpot*` symbols of the ELF file `bytes`.
    pub fn parse(bytes: &[u8]) -> Result<Self, String> {
        let elf = object::File::parse(bytes).map_err(|e| e.to_string())?;
        let symbols = elf
            .dynamic_symbols()
            .filter_map(|s| {
                let name = s.name().ok()?;
                name.starts_with("gHotSpot")
                    .then(|| (name.to_string(), s.address()))
            })
            .collect();
        let first_vaddr = elf
            .segments()
            .find(|s| s.file_range().0 == 0)
            .map_or(0, |s| s.address());
        Ok(Self {
            symbols,
            first_vaddr,
        })
    }

    /// Reads libjvm.so's symbols from the file mapped at `m`.
    pub fn read(m: &LibjvmMapping) -> Result<Self, VmStructsError> {
        let err = |why: String| VmStructsError::Libjvm {
            path: m.map_file.clone(),
            why,
        };
        // The magic link to the mapped file: not a path anyone can swap.
        let file = std::fs::File::open(&m.map_file).map_err(|e| err(e.to_string()))?;
        let mut bytes = Vec::new();
        file.take(MAX_LIBJVM + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| err(e.to_string()))?;
        if bytes.len() as u64 > MAX_LIBJVM {
            return Err(err(format!("over {MAX_LIBJVM} bytes")));
        }
        Self::parse(&bytes).map_err(err)
    }

    fn get(&self, name: &'static str) -> Result<u64, VmStructsError> {
        self.symbols
            .get(name)
            .copied()
            .ok_or(VmStructsError::NoSymbol(name))
    }
}

/// A JVM's introspection tables.
#[derive(Debug, Clone, Default)]
pub struct VmStructs {
    /// (type, field) → where.
    pub fields: FxHashMap<(String, String), Field>,
    /// type → size in bytes.
    pub types: FxHashMap<String, u64>,
    /// Integer constants by name.
    pub int_constants: FxHashMap<String, i64>,
    /// Long constants by name.
    pub long_constants: FxHashMap<String, u64>,
}

/// One table's entry layout: the entries' start and stride, and the named
/// members' offsets in an entry.
struct Table {
    base: u64,
    stride: u64,
}

impl VmStructs {
    /// Reads the tables of the JVM whose libjvm.so is mapped at `base`
    /// with `symbols`, from `mem`.
    pub fn read(
        mem: &impl Memory,
        symbols: &LibjvmSymbols,
        base: u64,
    ) -> Result<Self, VmStructsError> {
        let bias = base.wrapping_sub(symbols.first_vaddr);
        let at = |name: &'static str| -> Result<u64, VmStructsError> {
            Ok(symbols.get(name)?.wrapping_add(bias))
        };
        // The value of an exported u64 variable.
        let var = |name: &'static str| -> Result<u64, VmStructsError> { Ok(mem.u64(at(name)?)?) };
        let table = |array: &'static str, stride: &'static str| -> Result<Table, VmStructsError> {
            let base = var(array)?;
            let stride = var(stride)?;
            if base == 0 || stride == 0 {
                return Err(VmStructsError::NotYet);
            }
            if !(8..=MAX_STRIDE).contains(&stride) {
                return Err(VmStructsError::Bad {
                    what: "table entry size",
                    value: stride,
                });
            }
            Ok(Table { base, stride })
        };
        let member = |name: &'static str, stride: u64, width: u64| {
            let off = var(name)?;
            if off.checked_add(width).is_none_or(|end| end > stride) {
                return Err(VmStructsError::Bad {
                    what: name,
                    value: off,
                });
            }
            Ok(off as usize)
        };
        let mut out = VmStructs::default();

        // Types: name, size.
        let t = table("gHotSpotVMTypes", "gHotSpotVMTypeEntryArrayStride")?;
        let name_at = member("gHotSpotVMTypeEntryTypeNameOffset", t.stride, 8)?;
        let size_at = member("gHotSpotVMTypeEntrySizeOffset", t.stride, 8)?;
        for_each_entry(mem, &t, |e| {
            let name = word(e, name_at);
            if name == 0 {
                return Ok(false);
            }
            out.types.insert(mem.c_string(name)?, word(e, size_at));
            Ok(true)
        })?;

        // Structs: type, field, static?, offset, address.
        let t = table("gHotSpotVMStructs", "gHotSpotVMStructEntryArrayStride")?;
        let type_at = member("gHotSpotVMStructEntryTypeNameOffset", t.stride, 8)?;
        let field_at = member("gHotSpotVMStructEntryFieldNameOffset", t.stride, 8)?;
        let static_at = member("gHotSpotVMStructEntryIsStaticOffset", t.stride, 4)?;
        let offset_at = member("gHotSpotVMStructEntryOffsetOffset", t.stride, 8)?;
        let address_at = member("gHotSpotVMStructEntryAddressOffset", t.stride, 8)?;
        for_each_entry(mem, &t, |e| {
            let ty = word(e, type_at);
            if ty == 0 {
                return Ok(false);
            }
            let field = word(e, field_at);
            if field == 0 {
                return Ok(true);
            }
            let is_static = u32::from_le_bytes(e[static_at..static_at + 4].try_into().unwrap());
            let f = if is_static != 0 {
                Field::Address(word(e, address_at))
            } else {
                Field::Offset(word(e, offset_at))
            };
            out.fields
                .insert((mem.c_string(ty)?, mem.c_string(field)?), f);
            Ok(true)
        })?;

        // Constants: name, value (an int, a long).
        for (array, stride, name, value, long) in [
            (
                "gHotSpotVMIntConstants",
                "gHotSpotVMIntConstantEntryArrayStride",
                "gHotSpotVMIntConstantEntryNameOffset",
                "gHotSpotVMIntConstantEntryValueOffset",
                false,
            ),
            (
                "gHotSpotVMLongConstants",
                "gHotSpotVMLongConstantEntryArrayStride",
                "gHotSpotVMLongConstantEntryNameOffset",
                "gHotSpotVMLongConstantEntryValueOffset",
                true,
            ),
        ] {
            let t = table(array, stride)?;
            let name_at = member(name, t.stride, 8)?;
            let value_at = member(value, t.stride, if long { 8 } else { 4 })?;
            for_each_entry(mem, &t, |e| {
                let name = word(e, name_at);
                if name == 0 {
                    return Ok(false);
                }
                let name = mem.c_string(name)?;
                if long {
                    out.long_constants.insert(name, word(e, value_at));
                } else {
                    let v = i32::from_le_bytes(e[value_at..value_at + 4].try_into().unwrap());
                    out.int_constants.insert(name, i64::from(v));
                }
                Ok(true)
            })?;
        }
        Ok(out)
    }

    /// A field of `ty`.
    pub fn field(&self, ty: &str, field: &str) -> Option<Field> {
        self.fields
            .get(&(ty.to_string(), field.to_string()))
            .copied()
    }

    /// The offset of instance field `field` of `ty` (`None`: no such
    /// field, or a static one).
    pub fn offset(&self, ty: &str, field: &str) -> Option<u64> {
        match self.field(ty, field)? {
            Field::Offset(o) => Some(o),
            Field::Address(_) => None,
        }
    }

    /// The address of the first of the static fields `names` the tables
    /// have.
    pub fn address(&self, names: &[(&str, &str)]) -> Option<u64> {
        names.iter().find_map(|(t, f)| match self.field(t, f)? {
            Field::Address(a) => Some(a),
            Field::Offset(_) => None,
        })
    }
}

/// Calls `each` with every entry's bytes until it returns `false` (the
/// table's end, an entry with no name) or [`MAX_ENTRIES`] were read.
fn for_each_entry(
    mem: &impl Memory,
    t: &Table,
    mut each: impl FnMut(&[u8]) -> Result<bool, VmStructsError>,
) -> Result<(), VmStructsError> {
    let mut e = vec![0u8; t.stride as usize];
    for i in 0..MAX_ENTRIES {
        let addr = t
            .base
            .checked_add(i * t.stride)
            .ok_or(VmStructsError::Bad {
                what: "table address",
                value: t.base,
            })?;
        mem.read(addr, &mut e)?;
        if !each(&e)? {
            return Ok(());
        }
    }
    Err(VmStructsError::Bad {
        what: "table length",
        value: MAX_ENTRIES,
    })
}

fn word(e: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(e[at..at + 8].try_into().unwrap())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libjvm_is_found_at_its_first_mapping() {
        let maps = "\
5581a000-5581b000 r--p 00000000 fd:01 1 /usr/lib/jvm/x/bin/java
7f10000000-7f10200000 r--p 00000000 fd:01 2 /usr/lib/jvm/x/lib/server/libjvm.so
7f10200000-7f11000000 r-xp 00200000 fd:01 2 /usr/lib/jvm/x/lib/server/libjvm.so
";
        let m = find_libjvm(42, maps).unwrap();
        assert_eq!(m.base, 0x7f10000000);
        assert_eq!(m.path, "/usr/lib/jvm/x/lib/server/libjvm.so");
        assert_eq!(
            m.map_file,
            PathBuf::from("/proc/42/map_files/7f10000000-7f10200000")
        );
        assert_eq!(
            find_libjvm(42, "7f1-7f2 r-xp 00000000 fd:01 2 /lib/libc.so.6\n"),
            None
        );
    }
}
