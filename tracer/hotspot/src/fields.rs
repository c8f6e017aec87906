//! Java objects' fields, read from outside: where an instance field of a
//! loaded class lies in its objects (its offset, from the class's own field
//! table), and the object a reference field holds.
//!
//! What it reads of the JVM (by name from its tables, [`FieldLayout`]):
//! - the class's field table: JDK 17's `InstanceKlass::_fields` (an
//!   `Array<u2>`, `FieldInfo::field_slots` u2 per field: access flags, name
//!   index, …, the offset packed in two slots above two tag bits), or
//!   JDK 21's and later `InstanceKlass::_fieldinfo_stream` (an
//!   `Array<u1>` of UNSIGNED5 numbers: the Java fields' count, the
//!   injected fields' count, then per field its name index, signature
//!   index, offset, access flags, field flags and the optional numbers
//!   those flags announce);
//! - a field's name: the class's constant pool entry at its name index;
//! - a reference field's value: a compressed oop (`CompressedOops`' base
//!   and shift) where the JVM compresses them, else a whole address.
//!
//! Invariant: the target's memory is untrusted; a table that does not
//! decode is `None`, never a guess: a name is only ever compared, and an
//! offset only believed if its field's name matched.

use crate::layout::MethodLayout;
use crate::memory::Memory;
use crate::names::{symbol, Unsigned5};
use crate::vmstructs::VmStructs;

/// How a class keeps its field table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldTable {
    /// JDK 17–20: `InstanceKlass::_fields`, slots of u2.
    Slots {
        /// `InstanceKlass::_fields` (Array<u2>*).
        fields: u64,
        /// `InstanceKlass::_java_fields_count` (u16).
        count: u64,
        /// u2 slots per field.
        slots: u64,
        /// Which slot holds the name index, the offset's low and high half.
        name: u64,
        low: u64,
        high: u64,
    },
    /// JDK 21 and later: `InstanceKlass::_fieldinfo_stream` (Array<u1>*).
    Stream {
        /// Its offset in the InstanceKlass.
        stream: u64,
        /// The flag bits that announce optional numbers, in stream order:
        /// initialized (initval index), generic (signature), contended
        /// (group).
        optional: [u32; 3],
    },
}

/// Where a JVM keeps classes' fields and reference fields' values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldLayout {
    /// The field table.
    pub table: FieldTable,
    /// `InstanceKlass::_constants` (ConstantPool*).
    pub constants: u64,
    /// `Array<u2>::_data` / `Array<u1>::_data`: the elements' offset.
    pub array_data: u64,
    /// Addresses of the statics `CompressedOops` base and shift.
    pub narrow_oop: (u64, u64),
}

impl FieldLayout {
    /// The layout of the JVM whose tables are `vm` (`None`: a name it
    /// needs is missing).
    pub fn new(vm: &VmStructs) -> Option<Self> {
        let offset = |t: &str, f: &str| vm.offset(t, f);
        let address = |names: &[(&str, &str)]| vm.address(names);
        let int = |n: &str| vm.int_constants.get(n).copied();
        let table = match offset("InstanceKlass", "_fieldinfo_stream") {
            Some(stream) => {
                let bit = |n: &str| {
                    int(n)
                        .and_then(|b| u32::try_from(b).ok())
                        .filter(|&b| b < 32)
                };
                FieldTable::Stream {
                    stream,
                    optional: [
                        bit("FieldInfo::FieldFlags::_ff_initialized")?,
                        bit("FieldInfo::FieldFlags::_ff_generic")?,
                        bit("FieldInfo::FieldFlags::_ff_contended")?,
                    ],
                }
            }
            None => FieldTable::Slots {
                fields: offset("InstanceKlass", "_fields")?,
                count: offset("InstanceKlass", "_java_fields_count")?,
                slots: u64::try_from(int("FieldInfo::field_slots")?).ok()?,
                name: u64::try_from(int("FieldInfo::name_index_offset")?).ok()?,
                low: u64::try_from(int("FieldInfo::low_packed_offset")?).ok()?,
                high: u64::try_from(int("FieldInfo::high_packed_offset")?).ok()?,
            },
        };
        Some(Self {
            table,
            constants: offset("InstanceKlass", "_constants")?,
            array_data: offset("Array<u2>", "_data")
                .or_else(|| offset("Array<u1>", "_data"))
                .unwrap_or(4),
            narrow_oop: (
                address(&[
                    ("CompressedOops", "_base"),
                    ("CompressedOops", "_narrow_oop._base"),
                ])?,
                address(&[
                    ("CompressedOops", "_shift"),
                    ("CompressedOops", "_narrow_oop._shift"),
                ])?,
            ),
        })
    }
}

/// The most fields a class's table is read for.
const MAX_FIELDS: u32 = 4096;
/// The longest field stream read, bytes.
const MAX_STREAM: u32 = 1 << 16;
/// The two tag bits below a JDK 17 packed offset, and the tag that says
/// the offset is set.
const OFFSET_TAG_BITS: u32 = 2;
const OFFSET_TAG: u32 = 1;

/// The offset in its objects of the instance field `name` that class
/// `klass` declares (`None`: not found, or the table did not read).
pub fn field_offset(
    mem: &impl Memory,
    l: &FieldLayout,
    methods: &MethodLayout,
    klass: u64,
    name: &str,
    excluded: u8,
) -> Option<u64> {
    let pool = mem.u64(klass.checked_add(l.constants)?).ok()?;
    let pool_len = mem.u32(pool.checked_add(methods.pool_length)?).ok()?;
    let named = |index: u32| -> bool {
        if index == 0 || index >= pool_len {
            return false;
        }
        let at = pool
            .wrapping_add(methods.pool_size)
            .wrapping_add(u64::from(index) * 8);
        mem.u64(at)
            .ok()
            .and_then(|sym| symbol(mem, methods, sym).ok())
            .is_some_and(|s| s == name)
    };
    match l.table {
        FieldTable::Slots {
            fields,
            count,
            slots,
            name: name_slot,
            low,
            high,
        } => {
            let array = mem.u64(klass.checked_add(fields)?).ok()?;
            let n = u32::from(mem.u16(klass.checked_add(count)?).ok()?).min(MAX_FIELDS);
            let data = array.checked_add(l.array_data)?;
            for i in 0..u64::from(n) {
                let slot = |k: u64| mem.u16(data.wrapping_add((i * slots + k) * 2)).ok();
                if !named(u32::from(slot(name_slot)?)) {
                    continue;
                }
                let packed = (u32::from(slot(high)?) << 16) | u32::from(slot(low)?);
                let tag = packed & ((1 << OFFSET_TAG_BITS) - 1);
                return (tag == OFFSET_TAG).then_some(u64::from(packed >> OFFSET_TAG_BITS));
            }
            None
        }
        FieldTable::Stream { stream, optional } => {
            let array = mem.u64(klass.checked_add(stream)?).ok()?;
            let len = mem.u32(array).ok()?.min(MAX_STREAM);
            let mut bytes = vec![0u8; len as usize];
            mem.read(array.checked_add(l.array_data)?, &mut bytes)
                .ok()?;
            let mut s = Unsigned5::new(&bytes, excluded);
            let java_fields = s.uint()?.min(MAX_FIELDS);
            let _injected = s.uint()?;
            for _ in 0..java_fields {
                let name_index = s.uint()?;
                let _signature = s.uint()?;
                let offset = s.uint()?;
                let _access = s.uint()?;
                let flags = s.uint()?;
                for bit in optional {
                    if flags & (1 << bit) != 0 {
                        s.uint()?;
                    }
                }
                if named(name_index) {
                    return Some(u64::from(offset));
                }
            }
            None
        }
    }
}

/// The object the reference field at `at` holds (`None`: null or
/// unreadable): a compressed oop decoded with `narrow` (base, shift),
/// where the JVM compresses them.
pub fn reference(mem: &impl Memory, at: u64, narrow: Option<(u64, u32)>) -> Option<u64> {
    let v = match narrow {
        Some((base, shift)) => {
            let n = u64::from(mem.u32(at).ok()?);
            (n != 0).then(|| base.wrapping_add(n << shift))?
        }
        None => mem.u64(at).ok()?,
    };
    (v != 0).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::tests::layout_from;
    use crate::memory::Snapshot;

    fn methods() -> MethodLayout {
        MethodLayout {
            pool_length: 0x10,
            pool_size: 0x20,
            symbol_length: 0x4,
            symbol_body: 0x6,
            ..layout_from(0x100).methods
        }
    }

    /// A class at 0x1000 whose constant pool (0x2000) holds `names` at
    /// indices 1, 2, …, each a Symbol at 0x3000 + 0x100·i.
    fn class(methods: &MethodLayout, names: &[&str]) -> Snapshot {
        let mut mem = Snapshot::new();
        mem.add(0x1000 + 0x40, 0x2000u64.to_le_bytes().to_vec());
        mem.add(
            0x2000 + methods.pool_length,
            (names.len() as u32 + 1).to_le_bytes().to_vec(),
        );
        for (i, n) in names.iter().enumerate() {
            let sym = 0x3000 + 0x100 * (i as u64 + 1);
            mem.add(
                0x2000 + methods.pool_size + 8 * (i as u64 + 1),
                sym.to_le_bytes().to_vec(),
            );
            let mut b = vec![0u8; methods.symbol_body as usize + n.len()];
            b[4..6].copy_from_slice(&(n.len() as u16).to_le_bytes());
            b[6..].copy_from_slice(n.as_bytes());
            mem.add(sym, b);
        }
        mem
    }

    #[test]
    fn a_jdk_17_slot_table_gives_the_named_fields_offset() {
        let methods = methods();
        let mut mem = class(&methods, &["tid", "parkBlocker"]);
        let l = FieldLayout {
            table: FieldTable::Slots {
                fields: 0x48,
                count: 0x50,
                slots: 6,
                name: 1,
                low: 4,
                high: 5,
            },
            constants: 0x40,
            array_data: 4,
            narrow_oop: (0, 0),
        };
        mem.add(0x1048, 0x5000u64.to_le_bytes().to_vec());
        mem.add(0x1050, 2u16.to_le_bytes().to_vec());
        // tid at 0x10, parkBlocker at 0x44 (packed: offset << 2 | 1).
        let mut slots = vec![0u8; 4];
        for (name, off) in [(1u16, 0x10u32), (2, 0x44)] {
            let packed = (off << 2) | 1;
            for v in [0u16, name, 0, 0, packed as u16, (packed >> 16) as u16] {
                slots.extend_from_slice(&v.to_le_bytes());
            }
        }
        mem.add(0x5000, slots);
        assert_eq!(
            field_offset(&mem, &l, &methods, 0x1000, "parkBlocker", 0),
            Some(0x44)
        );
        assert_eq!(
            field_offset(&mem, &l, &methods, 0x1000, "tid", 0),
            Some(0x10)
        );
        assert_eq!(field_offset(&mem, &l, &methods, 0x1000, "name", 0), None);
    }

    #[test]
    fn a_field_stream_gives_the_named_fields_offset_past_optional_numbers() {
        let methods = methods();
        let mut mem = class(&methods, &["tid", "parkBlocker"]);
        let l = FieldLayout {
            table: FieldTable::Stream {
                stream: 0x48,
                optional: [0, 2, 4],
            },
            constants: 0x40,
            array_data: 4,
            narrow_oop: (0, 0),
        };
        mem.add(0x1048, 0x5000u64.to_le_bytes().to_vec());
        // Excluded byte 1 (JDK 21+): each small number n is the byte n + 1.
        // 2 Java fields, 0 injected; tid: name 1, sig 9, offset 0x10,
        // access 0, flags initialized|generic (two optional numbers);
        // parkBlocker: name 2, sig 9, offset 0x44, access 0, flags 0.
        let nums = [2u8, 0, 1, 9, 0x10, 0, 0b101, 7, 8, 2, 9, 0x44, 0, 0];
        let body: Vec<u8> = nums.iter().map(|n| n + 1).collect();
        let mut array = (body.len() as u32).to_le_bytes().to_vec();
        array.extend_from_slice(&body);
        mem.add(0x5000, array);
        assert_eq!(
            field_offset(&mem, &l, &methods, 0x1000, "parkBlocker", 1),
            Some(0x44)
        );
        assert_eq!(
            field_offset(&mem, &l, &methods, 0x1000, "tid", 1),
            Some(0x10)
        );
        assert_eq!(field_offset(&mem, &l, &methods, 0x1000, "other", 1), None);
    }

    #[test]
    fn a_compressed_reference_is_decoded() {
        let mut mem = Snapshot::new();
        mem.add(0x100, 0x20u32.to_le_bytes().to_vec());
        mem.add(0x200, 0u32.to_le_bytes().to_vec());
        assert_eq!(
            reference(&mem, 0x100, Some((0x8_0000_0000, 3))),
            Some(0x8_0000_0100)
        );
        assert_eq!(reference(&mem, 0x200, Some((0x8_0000_0000, 3))), None);
        assert_eq!(reference(&mem, 0x300, Some((0, 3))), None);
    }
}
