//! The monitors Java threads block on, read from outside: the object a
//! thread blocked entering (`synchronized`) or waits in (`Object.wait`),
//! named by its class, and the thread that owned it — what the flight
//! recorder's monitor events say, without the flight recorder.
//!
//! What it reads of the JVM (all by name from its tables, [`MonitorLayout`]):
//! - `JavaThread::_current_pending_monitor` and `_current_waiting_monitor`
//!   (`ObjectMonitor*`): the recorder's eBPF programs read them at the
//!   switch-out, with the monitor's owner word, so they are the
//!   switch-out's however late they are named;
//! - `ObjectMonitor::_object`, a weak handle: the address of a slot that
//!   holds the object's (uncompressed) address;
//! - the object's class word (`oopDesc::_metadata._compressed_klass`),
//!   decoded with `CompressedKlassPointers`' base and shift, or a whole
//!   `Klass*` where the JVM runs without compressed class pointers;
//!   then `Klass::_name`;
//! - the owner word (`ObjectMonitor::_owner`): the owning `JavaThread*`,
//!   or a `BasicLock*` on the owner's stack (a stack lock the contention
//!   inflated) on JDK 17; the owner's `JavaThread::_monitor_owner_id`
//!   where the JVM has that field (JDK 24 and later).
//!
//! What it assumes: the class word follows the mark word (no compact object
//! headers; a JVM run with `-XX:+UseCompactObjectHeaders` gets no class,
//! never a wrong one: a class name is checked before it is believed).
//!
//! Invariant: the target's memory is untrusted; every read is bounded and
//! a failure is `None`, never a panic or a guess.

use crate::layout::MethodLayout;
use crate::memory::Memory;
use crate::names::symbol;
use crate::vmstructs::VmStructs;

/// Where a JVM keeps its threads' monitors, and what a monitor holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MonitorLayout {
    /// `JavaThread::_current_pending_monitor` (ObjectMonitor*).
    pub pending: u64,
    /// `JavaThread::_current_waiting_monitor` (ObjectMonitor*).
    pub waiting: u64,
    /// `ObjectMonitor::_object` (a WeakHandle: OopStorage slot address).
    pub object: u64,
    /// `ObjectMonitor::_owner`.
    pub owner: u64,
    /// `oopDesc::_metadata._compressed_klass`: the class word's offset.
    pub klass_word: u64,
    /// Address of the static `CompressedKlassPointers` base (a pointer).
    pub narrow_base: u64,
    /// Address of the static `CompressedKlassPointers` shift (an int).
    pub narrow_shift: u64,
    /// `JavaThread::_monitor_owner_id`, where the owner word holds it.
    pub owner_id: Option<u64>,
    /// `JavaThread::_stack_base` and `_stack_size`: a stack lock's owner.
    pub stack: Option<(u64, u64)>,
    /// `JavaThread::_threadObj` (an OopHandle: the address of a slot that
    /// holds its `java.lang.Thread`).
    pub thread_obj: Option<u64>,
    /// Address of the static that holds `java.lang.Thread`'s Klass*.
    pub thread_klass: Option<u64>,
    /// Address of the static that holds `java.lang.String`'s Klass*.
    pub string_klass: Option<u64>,
}

impl MonitorLayout {
    /// The layout of the JVM whose tables are `vm` (`None`: they lack a
    /// name it needs; the frames are read all the same).
    pub fn new(vm: &VmStructs) -> Option<Self> {
        let offset = |t: &str, f: &str| vm.offset(t, f);
        let address = |names: &[(&str, &str)]| vm.address(names);
        Some(Self {
            pending: offset("JavaThread", "_current_pending_monitor")?,
            waiting: offset("JavaThread", "_current_waiting_monitor")?,
            object: offset("ObjectMonitor", "_object")?,
            owner: offset("ObjectMonitor", "_owner")?,
            klass_word: offset("oopDesc", "_metadata._compressed_klass")?,
            narrow_base: address(&[
                ("CompressedKlassPointers", "_base"),
                ("CompressedKlassPointers", "_narrow_klass._base"),
            ])?,
            narrow_shift: address(&[
                ("CompressedKlassPointers", "_shift"),
                ("CompressedKlassPointers", "_narrow_klass._shift"),
            ])?,
            owner_id: offset("JavaThread", "_monitor_owner_id"),
            stack: offset("JavaThread", "_stack_base")
                .zip(offset("JavaThread", "_stack_size"))
                .or_else(|| offset("Thread", "_stack_base").zip(offset("Thread", "_stack_size"))),
            thread_obj: offset("JavaThread", "_threadObj"),
            thread_klass: address(&[(
                "vmClasses",
                "_klasses[static_cast<int>(vmClassID::Thread_klass_knum)]",
            )]),
            string_klass: address(&[(
                "vmClasses",
                "_klasses[static_cast<int>(vmClassID::String_klass_knum)]",
            )]),
        })
    }

    /// Where thread `thread` (a `JavaThread*`) keeps its pending and
    /// waiting monitors, and the owner word's offset in a monitor: what the
    /// eBPF programs read at a switch-out.
    pub fn words_at(&self, thread: u64) -> Option<[u64; 3]> {
        Some([
            thread.checked_add(self.pending)?,
            thread.checked_add(self.waiting)?,
            self.owner,
        ])
    }
}

/// The longest class name believed (HotSpot's own limit is 65535, but a
/// real one is far shorter; longer is a misread).
const MAX_CLASS_NAME: usize = 1024;

/// The class of the object monitor `monitor` belongs to, in Java's dotted
/// form (`java.lang.Object`, `Waits$Ledger`): `None` where it cannot be
/// read or does not look like a class name.
pub fn object_class(
    mem: &impl Memory,
    l: &MonitorLayout,
    methods: &MethodLayout,
    monitor: u64,
) -> Option<String> {
    let narrow = narrow_klass(mem, l)?;
    klasses_at(mem, l, narrow, monitor_object(mem, l, monitor)?)?
        .into_iter()
        .flatten()
        .find_map(|klass| klass_name(mem, methods, klass))
}

/// The JVM's compressed class pointers' base and shift (fixed once it
/// runs).
pub fn narrow_klass(mem: &impl Memory, l: &MonitorLayout) -> Option<(u64, u32)> {
    let base = mem.u64(l.narrow_base).ok()?;
    let shift = mem.u32(l.narrow_shift).ok()?;
    (shift < 32).then_some((base, shift))
}

/// The object monitor `monitor` belongs to (`None`: none, or unreadable).
pub fn monitor_object(mem: &impl Memory, l: &MonitorLayout, monitor: u64) -> Option<u64> {
    if monitor == 0 {
        return None;
    }
    let slot = mem.u64(monitor.checked_add(l.object)?).ok()?;
    if slot == 0 {
        return None;
    }
    mem.u64(slot).ok().filter(|&o| o != 0)
}

/// Where the class of the object at `object` may be: its class word
/// decoded with `narrow` (base, shift), then read whole (a JVM without
/// compressed class pointers); the first that names a class
/// ([`klass_name`]) is it.
pub fn klasses_at(
    mem: &impl Memory,
    l: &MonitorLayout,
    (base, shift): (u64, u32),
    object: u64,
) -> Option<[Option<u64>; 2]> {
    let word = mem.u64(object.checked_add(l.klass_word)?).ok()?;
    let n = word & 0xffff_ffff;
    Some([
        (n != 0).then(|| base.wrapping_add(n << shift)),
        (word != 0).then_some(word),
    ])
}

/// The name of the class at `klass`, if it reads as one.
pub fn klass_name(mem: &impl Memory, methods: &MethodLayout, klass: u64) -> Option<String> {
    let sym = mem.u64(klass.checked_add(methods.klass_name)?).ok()?;
    if sym == 0 {
        return None;
    }
    let name = symbol(mem, methods, sym).ok()?;
    let plausible = !name.is_empty()
        && name.len() <= MAX_CLASS_NAME
        && name
            .chars()
            .all(|c| !c.is_control() && !c.is_whitespace() && c != '.' && c != ';');
    plausible.then(|| idleflow_format::names::class(&name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::tests::layout_from;
    use crate::memory::Snapshot;

    fn monitors() -> MonitorLayout {
        MonitorLayout {
            pending: 0x308,
            waiting: 0x318,
            object: 0x8,
            owner: 0x40,
            klass_word: 0x8,
            narrow_base: 0x9000,
            narrow_shift: 0x9008,
            owner_id: None,
            stack: None,
            thread_obj: None,
            thread_klass: None,
            string_klass: None,
        }
    }

    fn methods() -> MethodLayout {
        MethodLayout {
            klass_name: 0x10,
            symbol_length: 0x4,
            symbol_body: 0x6,
            ..layout_from(0x100).methods
        }
    }

    /// A monitor at 0x1000 whose weak handle's slot (0x2000) holds an
    /// object at 0x3000 whose narrow class word decodes to a klass named
    /// `name`.
    fn captured(methods: &MethodLayout, name: &[u8], shift: u32) -> Snapshot {
        let mut mem = Snapshot::new();
        mem.add(0x1008, 0x2000u64.to_le_bytes().to_vec());
        mem.add(0x2000, 0x3000u64.to_le_bytes().to_vec());
        // base 0x40000, klass 0x40000 + (0x10 << shift).
        let klass = 0x40000u64 + (0x10u64 << shift);
        // The narrow class word, then the first field's bytes.
        mem.add(0x3008, 0xdead_0000_0000_0010u64.to_le_bytes().to_vec());
        mem.add(0x9000, 0x40000u64.to_le_bytes().to_vec());
        mem.add(0x9008, shift.to_le_bytes().to_vec());
        mem.add(klass + methods.klass_name, 0x5000u64.to_le_bytes().to_vec());
        let mut sym = vec![0u8; methods.symbol_body as usize + name.len()];
        sym[methods.symbol_length as usize..methods.symbol_length as usize + 2]
            .copy_from_slice(&(name.len() as u16).to_le_bytes());
        sym[methods.symbol_body as usize..].copy_from_slice(name);
        mem.add(0x5000, sym);
        mem
    }

    #[test]
    fn a_monitors_object_is_named_by_its_class() {
        let methods = methods();
        for shift in [0, 3] {
            let mem = captured(&methods, b"app/Waits$Ledger", shift);
            assert_eq!(
                object_class(&mem, &monitors(), &methods, 0x1000).as_deref(),
                Some("app.Waits$Ledger"),
                "shift {shift}"
            );
        }
        assert_eq!(
            object_class(&Snapshot::new(), &monitors(), &methods, 0x1000),
            None
        );
        assert_eq!(
            object_class(&captured(&methods, b"x", 0), &monitors(), &methods, 0),
            None
        );
    }

    #[test]
    fn what_does_not_read_as_a_class_name_is_none() {
        let methods = methods();
        for bad in [&b""[..], b"two words", b"ctl\x01", b"a.b"] {
            let mem = captured(&methods, bad, 3);
            assert_eq!(
                object_class(&mem, &monitors(), &methods, 0x1000),
                None,
                "{bad:?}"
            );
        }
    }
}
