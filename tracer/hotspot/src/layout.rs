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
    /// `JavaThread::_stack_base` (its stack's highest address; `None`: the
    /// tables lack it).
    pub stack_base: Option<u64>,
}

/// Where a method's names are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MethodLayout {
    /// `Method::_constMethod`.
    pub const_method: u64,
    /// `ConstMethod::_constants` (ConstantPool*).
    pub constants: u64,
    /// `ConstMethod::_code_size` (u16).
    pub code_size: u64,
    /// `ConstMethod::_name_index` (u16).
    pub name_index: u64,
    /// `ConstMethod::_signature_index` (u16).
    pub signature_index: u64,
    /// The size of a ConstMethod: its bytecodes follow it.
    pub const_method_size: u64,
    /// `ConstantPool::_pool_holder` (InstanceKlass*).
    pub pool_holder: u64,
    /// `ConstantPool::_length` (i32).
    pub pool_length: u64,
    /// The size of a ConstantPool: its entries follow it.
    pub pool_size: u64,
    /// `Klass::_name` (Symbol*).
    pub klass_name: u64,
    /// `Symbol::_length` (u16).
    pub symbol_length: u64,
    /// `Symbol::_body` (its bytes).
    pub symbol_body: u64,
    /// `ConstMethod::_flags` (its low 16 bits hold the table flags).
    pub const_method_flags: u64,
    /// `Method::_access_flags` (its low 16 bits are the class file's).
    pub access_flags: u64,
    /// The flag bit saying a ConstMethod has a line number table.
    pub has_line_numbers: u32,
    /// UNSIGNED5's excluded low bytes in the JVM's compressed streams: 0
    /// before JDK 20.0.15, 1 since (JDK-8301959 changed the encoding, not
    /// any table, so this one value follows the JVM's version).
    pub unsigned5_excluded: u8,
}

/// Where compiled code and the interpreter are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodeLayout {
    /// Address of the static `CodeCache::_heaps` (GrowableArray<CodeHeap*>*).
    pub heaps: u64,
    /// `GrowableArrayBase::_len` (i32).
    pub array_len: u64,
    /// `GrowableArray<int>::_data` (the elements).
    pub array_data: u64,
    /// `CodeHeap::_memory` (a VirtualSpace).
    pub heap_memory: u64,
    /// `CodeHeap::_segmap` (a VirtualSpace).
    pub heap_segmap: u64,
    /// `CodeHeap::_log2_segment_size` (i32).
    pub heap_log2_segment: u64,
    /// `VirtualSpace::_low_boundary`.
    pub space_low: u64,
    /// `VirtualSpace::_high` (committed).
    pub space_high: u64,
    /// The size of a HeapBlock: a CodeBlob follows it.
    pub heap_block_size: u64,
    /// `HeapBlock::_header` + `HeapBlock::Header::_used` (bool).
    pub heap_block_used: u64,
    /// `CodeBlob::_name` (const char*).
    pub blob_name: u64,
    /// `CodeBlob::_frame_size` (i32, words).
    pub blob_frame_size: u64,
    /// `CodeBlob::_size` (i32, bytes).
    pub blob_size: u64,
    /// `nmethod::_method` (or `CompiledMethod::_method` before JDK 19).
    pub nmethod_method: u64,
    /// `nmethod::_compile_id` (i32).
    pub nmethod_compile_id: u64,
    /// Address of the static `AbstractInterpreter::_code` (StubQueue*).
    pub interpreter: u64,
    /// `StubQueue::_stub_buffer`.
    pub queue_buffer: u64,
    /// `StubQueue::_buffer_limit` (i32).
    pub queue_limit: u64,
    /// Where a compiled frame the JVM deoptimized returns to, and where
    /// its original pc is kept (`None`: the tables lack a name: such a
    /// frame is named by its method alone).
    pub deopt: Option<DeoptLayout>,
}

/// Where an nmethod's deoptimization handler is: a frame deoptimized
/// while its thread was away (lazily: its callee's return address patched
/// to the handler) keeps its original pc at `sp + nmethod::_orig_pc_offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeoptLayout {
    /// The handler's address in the nmethod.
    pub handler: DeoptHandler,
    /// `nmethod::_orig_pc_offset` (an i32 field: the original pc's offset
    /// from the frame's sp).
    pub orig_pc_offset: u64,
}

/// How an nmethod says where its deoptimization handler is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeoptHandler {
    /// `CompiledMethod::_deopt_handler_begin` (an address; before JDK 23).
    Address(u64),
    /// `nmethod::_deopt_handler_offset` (i32, from the nmethod's start;
    /// JDK 23+).
    Offset(u64),
}

/// Where an nmethod keeps its debug information, in the two layouts
/// HotSpot has had: JDK 17's (offsets from the nmethod, a pointer to the
/// scope data) and JDK 23's and later (an immutable data block for the
/// PcDescs and scopes, the metadata after the relocations in the mutable
/// data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DebugInfo {
    /// JDK 17–22.
    Inline {
        /// `CodeBlob::_code_begin` (a pointer).
        code_begin: u64,
        /// `nmethod::_scopes_pcs_offset` (i32, from the nmethod).
        pcs: u64,
        /// `nmethod::_dependencies_offset` (i32): the PcDescs' end.
        pcs_end: u64,
        /// `CompiledMethod::_scopes_data_begin` (a pointer).
        scopes: u64,
        /// `nmethod::_metadata_offset` (i32, from the nmethod).
        metadata: u64,
    },
    /// JDK 23 and later.
    Immutable {
        /// `CodeBlob::_code_offset` (i32, from the blob).
        code_offset: u64,
        /// `nmethod::_immutable_data` (a pointer).
        data: u64,
        /// `nmethod::_scopes_pcs_offset` (i32, in the immutable data).
        pcs: u64,
        /// `nmethod::_scopes_data_offset` (i32): the PcDescs' end and the
        /// scopes' start.
        scopes: u64,
        /// `CodeBlob::_mutable_data` (a pointer): relocations, then the
        /// metadata.
        mutable: u64,
        /// `CodeBlob::_relocation_size` (i32).
        relocation_size: u64,
    },
}

/// An nmethod's debug information and the PcDesc's layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScopeLayout {
    /// Where the nmethod keeps it.
    pub info: DebugInfo,
    /// The size of a PcDesc.
    pub pc_desc_size: u64,
    /// `PcDesc::_pc_offset` (i32, from the code's start).
    pub pc_offset: u64,
    /// `PcDesc::_scope_decode_offset` (i32, in the scope data).
    pub decode_offset: u64,
}

/// What idleflow reads of one JVM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Address of the static `Abstract_VM_Version::_s_vm_release` (a
    /// `const char*`).
    pub vm_release: u64,
    /// Address of the static `Abstract_VM_Version::_vm_major_version`.
    pub vm_major: u64,
    /// Address of the static `Abstract_VM_Version::_vm_security_version`.
    pub vm_security: u64,
    /// The Java threads.
    pub threads: ThreadLayout,
    /// Methods' names.
    pub methods: MethodLayout,
    /// Compiled code and the interpreter.
    pub code: CodeLayout,
    /// Compiled code's scopes (inlined methods).
    pub scopes: ScopeLayout,
}

/// Looks names up, remembering the ones missing.
struct Lookup<'a> {
    vm: &'a VmStructs,
    missing: Vec<String>,
}

/// Where deoptimized frames keep their pc, if the tables say.
fn deopt_layout(vm: &VmStructs) -> Option<DeoptLayout> {
    let orig_pc_offset = vm.offset("nmethod", "_orig_pc_offset")?;
    let handler = match vm.offset("CompiledMethod", "_deopt_handler_begin") {
        Some(o) => DeoptHandler::Address(o),
        None => DeoptHandler::Offset(vm.offset("nmethod", "_deopt_handler_offset")?),
    };
    Some(DeoptLayout {
        handler,
        orig_pc_offset,
    })
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

    /// The first of the int constants `names` the tables have.
    fn int(&mut self, names: &[&str]) -> i64 {
        let found = names
            .iter()
            .find_map(|n| self.vm.int_constants.get(*n).copied());
        if found.is_none() {
            self.missing
                .push(format!("the constant {}", names.join(" or ")));
        }
        found.unwrap_or(0)
    }

    /// The size of the first of `types` the tables have.
    fn size(&mut self, types: &[&str]) -> u64 {
        let found = types.iter().find_map(|t| self.vm.types.get(*t).copied());
        if found.is_none() {
            self.missing
                .push(format!("the size of {}", types.join(" or ")));
        }
        found.unwrap_or(0)
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
            stack_base: vm
                .offset("JavaThread", "_stack_base")
                .or_else(|| vm.offset("Thread", "_stack_base")),
        };
        let vm_release = l.address(&[("Abstract_VM_Version", "_s_vm_release")]);
        let vm_major = l.address(&[("Abstract_VM_Version", "_vm_major_version")]);
        let vm_security = l.address(&[("Abstract_VM_Version", "_vm_security_version")]);
        let methods = MethodLayout {
            const_method: l.offset(&[("Method", "_constMethod")]),
            constants: l.offset(&[("ConstMethod", "_constants")]),
            code_size: l.offset(&[("ConstMethod", "_code_size")]),
            name_index: l.offset(&[("ConstMethod", "_name_index")]),
            signature_index: l.offset(&[("ConstMethod", "_signature_index")]),
            const_method_size: l.size(&["ConstMethod"]),
            pool_holder: l.offset(&[("ConstantPool", "_pool_holder")]),
            pool_length: l.offset(&[("ConstantPool", "_length")]),
            pool_size: l.size(&["ConstantPool"]),
            klass_name: l.offset(&[("Klass", "_name")]),
            symbol_length: l.offset(&[("Symbol", "_length")]),
            symbol_body: l.offset(&[("Symbol", "_body")]),
            access_flags: l.offset(&[("Method", "_access_flags")]),
            const_method_flags: l
                .offset(&[("ConstMethod", "_flags._flags"), ("ConstMethod", "_flags")]),
            has_line_numbers: l.int(&[
                "ConstMethodFlags::_misc_has_linenumber_table",
                "ConstMethod::_has_linenumber_table",
            ]) as u32,
            // Set by `Layout::read_version` from the JVM's memory.
            unsigned5_excluded: 0,
        };
        let code = CodeLayout {
            heaps: l.address(&[("CodeCache", "_heaps")]),
            array_len: l.offset(&[
                ("GrowableArrayBase", "_len"),
                ("GenericGrowableArray", "_len"),
            ]),
            array_data: l.offset(&[("GrowableArray<int>", "_data")]),
            heap_memory: l.offset(&[("CodeHeap", "_memory")]),
            heap_segmap: l.offset(&[("CodeHeap", "_segmap")]),
            heap_log2_segment: l.offset(&[("CodeHeap", "_log2_segment_size")]),
            space_low: l.offset(&[("VirtualSpace", "_low_boundary")]),
            space_high: l.offset(&[("VirtualSpace", "_high")]),
            heap_block_size: l.size(&["HeapBlock"]),
            heap_block_used: l.offset(&[("HeapBlock", "_header")])
                + l.offset(&[("HeapBlock::Header", "_used")]),
            blob_name: l.offset(&[("CodeBlob", "_name")]),
            blob_frame_size: l.offset(&[("CodeBlob", "_frame_size")]),
            blob_size: l.offset(&[("CodeBlob", "_size")]),
            nmethod_method: l.offset(&[("nmethod", "_method"), ("CompiledMethod", "_method")]),
            nmethod_compile_id: l.offset(&[("nmethod", "_compile_id")]),
            interpreter: l.address(&[("AbstractInterpreter", "_code")]),
            queue_buffer: l.offset(&[("StubQueue", "_stub_buffer")]),
            queue_limit: l.offset(&[("StubQueue", "_buffer_limit")]),
            deopt: deopt_layout(vm),
        };
        let info = if vm.field("nmethod", "_immutable_data").is_some() {
            DebugInfo::Immutable {
                code_offset: l.offset(&[("CodeBlob", "_code_offset")]),
                data: l.offset(&[("nmethod", "_immutable_data")]),
                pcs: l.offset(&[("nmethod", "_scopes_pcs_offset")]),
                scopes: l.offset(&[("nmethod", "_scopes_data_offset")]),
                mutable: l.offset(&[("CodeBlob", "_mutable_data")]),
                relocation_size: l.offset(&[("CodeBlob", "_relocation_size")]),
            }
        } else {
            DebugInfo::Inline {
                code_begin: l.offset(&[("CodeBlob", "_code_begin")]),
                pcs: l.offset(&[("nmethod", "_scopes_pcs_offset")]),
                pcs_end: l.offset(&[("nmethod", "_dependencies_offset")]),
                scopes: l.offset(&[
                    ("nmethod", "_scopes_data_begin"),
                    ("CompiledMethod", "_scopes_data_begin"),
                ]),
                metadata: l.offset(&[("nmethod", "_metadata_offset")]),
            }
        };
        let scopes = ScopeLayout {
            info,
            pc_desc_size: l.size(&["PcDesc"]),
            pc_offset: l.offset(&[("PcDesc", "_pc_offset")]),
            decode_offset: l.offset(&[("PcDesc", "_scope_decode_offset")]),
        };
        if !l.missing.is_empty() {
            return Err(MissingNames(l.missing));
        }
        Ok(Layout {
            scopes,
            vm_release,
            vm_major,
            vm_security,
            threads,
            methods,
            code,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn vm(fields: &[(&str, &str, Field)]) -> VmStructs {
        let mut vm = VmStructs::default();
        for (t, f, v) in fields {
            vm.fields.insert((t.to_string(), f.to_string()), *v);
        }
        vm
    }

    /// A complete layout whose offsets are small and whose statics lie in
    /// a 64 KiB region at 0x7f00_0000_0000, varied by `seed`.
    pub(crate) fn layout_from(seed: u64) -> Layout {
        let mut v = complete(VmStructs::default());
        for (i, f) in v.fields.values_mut().enumerate() {
            let k = (seed.wrapping_mul(31) + i as u64 * 7) % 64;
            *f = match f {
                Field::Address(_) => Field::Address(0x7f00_0000_0000 + k * 1024),
                Field::Offset(_) => Field::Offset(k * 8),
            };
        }
        for size in v.types.values_mut() {
            *size = 8 + seed % 64;
        }
        Layout::new(&v).unwrap()
    }

    /// Fills every name an empty table lacks: the first alternative of
    /// each, statics at addresses, the rest at offsets 8 apart.
    fn complete(mut v: VmStructs) -> VmStructs {
        let statics = [
            "_java_thread_list",
            "_s_vm_release",
            "_heaps",
            "_code",
            "_vm_major_version",
            "_vm_security_version",
        ];
        let Err(MissingNames(missing)) = Layout::new(&v) else {
            return v;
        };
        for (i, m) in missing.iter().enumerate() {
            let first = m.split(" or ").next().unwrap();
            if let Some(c) = first.strip_prefix("the constant ") {
                v.int_constants.insert(c.to_string(), 1);
                continue;
            }
            if let Some(ty) = first.strip_prefix("the size of ") {
                v.types.insert(ty.to_string(), 64);
                continue;
            }
            let (t, f) = first.rsplit_once("::").unwrap();
            let x = if statics.contains(&f) {
                Field::Address(0x1000 + i as u64 * 8)
            } else {
                Field::Offset(i as u64 * 8)
            };
            v.fields.entry((t.to_string(), f.to_string())).or_insert(x);
        }
        v
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
            ("CompiledMethod", "_method", Field::Offset(0x70)),
        ]);
        let err = Layout::new(&v).unwrap_err();
        for name in [
            "ThreadsSMRSupport::_java_thread_list (an instance field, static expected)",
            "ThreadsList::_length",
            "OSThread::_thread_id",
            "Abstract_VM_Version::_s_vm_release",
            "GrowableArrayBase::_len or GenericGrowableArray::_len",
            "the size of ConstMethod",
        ] {
            assert!(err.0.iter().any(|m| m == name), "{name} not in {:?}", err.0);
        }
        assert!(!err
            .0
            .iter()
            .any(|m| m.contains("_osthread") || m.contains("_method ")));
        let mut v = v;
        v.fields.insert(
            ("ThreadsSMRSupport".into(), "_java_thread_list".into()),
            Field::Address(0x7000),
        );
        let l = Layout::new(&complete(v)).unwrap();
        assert_eq!(
            l.threads.osthread, 0x40,
            "the older name, Thread::_osthread"
        );
        assert_eq!(
            l.code.nmethod_method, 0x70,
            "the older CompiledMethod::_method"
        );
        assert_eq!(l.threads.java_thread_list, 0x7000);
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
