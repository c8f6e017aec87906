//! The offsets and addresses idleflow uses, taken by name from a JVM's
//! [`VmStructs`]: one typed [`Layout`] per JVM, built once. Where HotSpot
//! renamed or moved a field between versions, each name it had is tried in
//! turn (newest first); a name none of them finds makes the whole layout an
//! error that lists every missing name, so a new JDK says at once what it
//! changed (docs/JAVA.md: adding a version).
//!
//! Invariant: a `Layout` holds only values read from the JVM's own tables;
//! nothing here is a constant of a JDK version.

use crate::vmstructs::{Field, VmStructs};

/// Names a layout needed and the JVM's tables lack.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the JVM's tables lack {}", .0.join(", "))]
pub struct MissingNames(pub Vec<String>);

/// Where a JavaThread's frame anchor and identity are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadLayout {
    /// Address of the static `ThreadsSMRSupport::_java_thread_list`.
    pub java_thread_list: u64,
    /// `ThreadsList::_length` (u32).
    pub list_length: u64,
    /// `ThreadsList::_threads` (JavaThread**).
    pub list_threads: u64,
    /// `Thread::_osthread` (OSThread*).
    pub osthread: u64,
    /// `OSThread::_thread_id` (pid_t).
    pub os_thread_id: u64,
    /// `JavaThread::_thread_state` (u32 enum).
    pub thread_state: u64,
    /// `JavaThread::_anchor` + `JavaFrameAnchor::_last_Java_sp`.
    pub last_java_sp: u64,
    /// `JavaThread::_anchor` + `JavaFrameAnchor::_last_Java_pc`.
    pub last_java_pc: u64,
    /// `JavaThread::_anchor` + `JavaFrameAnchor::_last_Java_fp`.
    pub last_java_fp: u64,
}

/// What idleflow reads of one JVM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Address of the static `Abstract_VM_Version::_s_vm_release` (a
    /// `const char*`).
    pub vm_release: u64,
    /// The Java threads.
    pub threads: ThreadLayout,
}

/// Looks names up, remembering the ones missing.
struct Lookup<'a> {
    vm: &'a VmStructs,
    missing: Vec<String>,
}

impl Lookup<'_> {
    /// The offset of the first of `names` the tables have (0 if none,
    /// remembered as missing).
    fn offset(&mut self, names: &[(&str, &str)]) -> u64 {
        match self.find(names) {
            Some(Field::Offset(o)) => o,
            Some(Field::Address(_)) => {
                self.miss(names, " (static, an instance field expected)");
                0
            }
            None => 0,
        }
    }

    /// The address of the first of `names` (static fields).
    fn address(&mut self, names: &[(&str, &str)]) -> u64 {
        match self.find(names) {
            Some(Field::Address(a)) => a,
            Some(Field::Offset(_)) => {
                self.miss(names, " (an instance field, static expected)");
                0
            }
            None => 0,
        }
    }

    fn find(&mut self, names: &[(&str, &str)]) -> Option<Field> {
        let found = names.iter().find_map(|(t, f)| self.vm.field(t, f));
        if found.is_none() {
            self.miss(names, "");
        }
        found
    }

    fn miss(&mut self, names: &[(&str, &str)], why: &str) {
        let alternatives: Vec<String> = names.iter().map(|(t, f)| format!("{t}::{f}")).collect();
        self.missing
            .push(format!("{}{why}", alternatives.join(" or ")));
    }
}

impl Layout {
    /// The layout of the JVM whose tables are `vm`.
    pub fn new(vm: &VmStructs) -> Result<Self, MissingNames> {
        let mut l = Lookup {
            vm,
            missing: Vec::new(),
        };
        let anchor = l.offset(&[("JavaThread", "_anchor")]);
        let threads = ThreadLayout {
            java_thread_list: l.address(&[("ThreadsSMRSupport", "_java_thread_list")]),
            list_length: l.offset(&[("ThreadsList", "_length")]),
            list_threads: l.offset(&[("ThreadsList", "_threads")]),
            osthread: l.offset(&[("JavaThread", "_osthread"), ("Thread", "_osthread")]),
            os_thread_id: l.offset(&[("OSThread", "_thread_id")]),
            thread_state: l.offset(&[("JavaThread", "_thread_state")]),
            last_java_sp: anchor + l.offset(&[("JavaFrameAnchor", "_last_Java_sp")]),
            last_java_pc: anchor + l.offset(&[("JavaFrameAnchor", "_last_Java_pc")]),
            last_java_fp: anchor + l.offset(&[("JavaFrameAnchor", "_last_Java_fp")]),
        };
        let vm_release = l.address(&[("Abstract_VM_Version", "_s_vm_release")]);
        if !l.missing.is_empty() {
            return Err(MissingNames(l.missing));
        }
        Ok(Layout {
            vm_release,
            threads,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vm(fields: &[(&str, &str, Field)]) -> VmStructs {
        let mut vm = VmStructs::default();
        for (t, f, v) in fields {
            vm.fields.insert((t.to_string(), f.to_string()), *v);
        }
        vm
    }

    #[test]
    fn every_missing_name_is_listed_and_old_names_are_tried() {
        let v = vm(&[
            ("Thread", "_osthread", Field::Offset(0x40)),
            ("JavaThread", "_anchor", Field::Offset(0x300)),
            ("JavaFrameAnchor", "_last_Java_sp", Field::Offset(0)),
            ("JavaFrameAnchor", "_last_Java_pc", Field::Offset(16)),
            ("JavaFrameAnchor", "_last_Java_fp", Field::Offset(8)),
            ("ThreadsSMRSupport", "_java_thread_list", Field::Offset(8)),
        ]);
        let err = Layout::new(&v).unwrap_err();
        assert_eq!(
            err.0,
            vec![
                "ThreadsSMRSupport::_java_thread_list (an instance field, static expected)",
                "ThreadsList::_length",
                "ThreadsList::_threads",
                "OSThread::_thread_id",
                "JavaThread::_thread_state",
                "Abstract_VM_Version::_s_vm_release",
            ]
        );
        let mut v = v;
        for (t, f, x) in [
            (
                "ThreadsSMRSupport",
                "_java_thread_list",
                Field::Address(0x7000),
            ),
            ("ThreadsList", "_length", Field::Offset(4)),
            ("ThreadsList", "_threads", Field::Offset(8)),
            ("OSThread", "_thread_id", Field::Offset(0x10)),
            ("JavaThread", "_thread_state", Field::Offset(0x350)),
            (
                "Abstract_VM_Version",
                "_s_vm_release",
                Field::Address(0x9000),
            ),
        ] {
            v.fields.insert((t.into(), f.into()), x);
        }
        let l = Layout::new(&v).unwrap();
        assert_eq!(
            l.threads.osthread, 0x40,
            "the older name, Thread::_osthread"
        );
        assert_eq!(
            (
                l.threads.last_java_sp,
                l.threads.last_java_fp,
                l.threads.last_java_pc
            ),
            (0x300, 0x308, 0x310)
        );
    }
}
