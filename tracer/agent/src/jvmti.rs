//! Raw JVMTI bindings: the few types, constants and function-table slots of
//! `jvmti.h` that an entry/exit profiler needs, written by hand (no bindgen).
//!
//! This module owns the C ABI of JVMTI and nothing else: no ownership rules,
//! no strings, no errors-as-values. [`crate::env`] builds the safe API on top.
//!
//! Invariant: every slot index, capability bit, callback field position and
//! enum value here equals the one in `jvmti.h` of OpenJDK 17 and of JDK 25.
//! `tests/jvmti_header.rs` parses both headers and checks each one, so a
//! number here is never trusted on its own. Where the headers differ (JDK 21+
//! appends two virtual-thread callbacks and one capability), we follow the
//! JDK 17 layout, which is a prefix of the newer one (see
//! [`jvmtiEventCallbacks`]).
//!
//! Types follow C: `jvmtiError`, `jvmtiEvent` and `jvmtiEventMode` are C enums
//! (an `int`-sized value), kept as `u32` because the JVM may return values a
//! Rust `enum` would not cover. A `jboolean` written by the JVM is read as
//! [`JvmtiBool`] (`u8`) rather than `jni_sys::jboolean` (`bool`), so a byte
//! other than 0 or 1 can never be undefined behaviour on our side.
#![allow(non_camel_case_types, non_snake_case)]

use std::ffi::{c_char, c_uchar, c_void};

use jni_sys::{jclass, jint, jlong, jmethodID, jobject, jvalue, JNIEnv};

/// `jthread` (`jvmti.h`: `typedef jobject jthread;`): a JNI reference to a
/// `java.lang.Thread`. `NULL` means "the current thread" where JVMTI allows it.
pub type jthread = jobject;
/// `jthreadGroup` (`typedef jobject jthreadGroup;`).
pub type jthreadGroup = jobject;
/// A `jboolean` as the JVM writes it: 0 is false, anything else is true.
pub type JvmtiBool = u8;

/// `jvmtiError`: 0 is success, see [`ERROR_NAMES`].
pub type jvmtiError = u32;
/// `jvmtiEvent`: the `JVMTI_EVENT_…` numbers, see [`EVENT_NAMES`].
pub type jvmtiEvent = u32;
/// `jvmtiEventMode`: [`JVMTI_ENABLE`] or [`JVMTI_DISABLE`].
pub type jvmtiEventMode = u32;

/// `jvmtiEnv` (`typedef const struct jvmtiInterface_1_ *jvmtiEnv;`): a pointer
/// to the function table. JVMTI functions take a `jvmtiEnv*`, i.e. a
/// `*mut jvmtiEnv`, which is what `GetEnv` hands out.
pub type jvmtiEnv = *const jvmtiInterface_1_;

/// The version we ask `GetEnv` for. Every function and event used here exists
/// in 1.2, and both JDK 17 and JDK 25 grant it.
pub const JVMTI_VERSION_1_2: jint = 0x3001_0200;

/// `jvmtiEventMode` values for `SetEventNotificationMode`.
pub const JVMTI_ENABLE: jvmtiEventMode = 1;
/// See [`JVMTI_ENABLE`].
pub const JVMTI_DISABLE: jvmtiEventMode = 0;

/// Number of slots in `struct jvmtiInterface_1_`, the same (156) in the JDK 17
/// and JDK 25 headers. We only ever read the slots named in [`slot`]; the
/// array length only documents the shape and is checked against the headers.
pub const JVMTI_FUNCTION_COUNT: usize = 156;

/// `struct jvmtiInterface_1_`: the JVMTI function table, as an array of
/// untyped slots. Slot `i` holds the function the header numbers `i + 1`.
/// Typed access goes through [`function`].
#[repr(C)]
#[derive(Debug)]
pub struct jvmtiInterface_1_ {
    /// The function pointers (null for reserved slots).
    pub slots: [*const c_void; JVMTI_FUNCTION_COUNT],
}

/// Reads slot `index` of `env`'s function table.
///
/// # Safety
/// `env` must be a valid JVMTI environment pointer (as returned by `GetEnv`
/// or passed to an event callback) and `index < JVMTI_FUNCTION_COUNT`.
unsafe fn load_slot(env: *mut jvmtiEnv, index: usize) -> *const c_void {
    // SAFETY: the caller guarantees `env` points to a live `jvmtiEnv`, whose
    // value is a pointer to the JVM's function table of
    // `JVMTI_FUNCTION_COUNT` slots; `index` is in range (checked by the
    // indexing itself, which panics rather than reading out of bounds).
    unsafe { (**env).slots[index] }
}

/// Declares, from one list, the slot index ([`slot`]), the C signature
/// ([`sig`]) and a typed loader ([`function`]) of each JVMTI function we call,
/// plus the [`FUNCTION_SLOTS`] table the header tests walk.
macro_rules! jvmti_functions {
    ($( $(#[doc = $doc:literal])* $name:ident = $index:literal : $sig:ty; )*) => {
        /// Index in [`jvmtiInterface_1_::slots`] of each function we call:
        /// the number `jvmti.h` gives it in a comment, minus one.
        #[allow(non_upper_case_globals)]
        pub mod slot {
            $( $(#[doc = $doc])* pub const $name: usize = $index; )*
        }

        /// The C signature of each function in [`slot`], from `jvmti.h`.
        pub mod sig {
            use super::*;
            $( $(#[doc = $doc])* pub type $name = $sig; )*
        }

        /// Typed loaders: `function::GetTime(env)` is the `GetTime` pointer
        /// of `env`'s table, or `None` if that slot is null.
        pub mod function {
            use super::*;
            $(
                $(#[doc = $doc])*
                ///
                /// # Safety
                /// `env` must be a valid JVMTI environment pointer.
                pub unsafe fn $name(env: *mut jvmtiEnv) -> Option<sig::$name> {
                    // SAFETY: the caller guarantees `env` is valid; the index
                    // is a constant below `JVMTI_FUNCTION_COUNT`.
                    let raw = unsafe { load_slot(env, slot::$name) };
                    if raw.is_null() {
                        return None;
                    }
                    // SAFETY: the JVM stores at this slot a function with the
                    // signature of `jvmti.h`, which `sig` reproduces; the slot
                    // index is checked against the header by the tests.
                    // Function and data pointers have the same size here.
                    Some(unsafe { std::mem::transmute::<*const c_void, sig::$name>(raw) })
                }
            )*
        }

        /// `(name in jvmti.h, slot index)` of every function in [`slot`].
        pub const FUNCTION_SLOTS: &[(&str, usize)] = &[$((stringify!($name), $index)),*];
    };
}

jvmti_functions! {
    /// `SetEventNotificationMode(env, mode, event_type, event_thread, ...)`
    /// (header number 2). Variadic in C, hence `extern "C"` with `...`.
    SetEventNotificationMode = 1: unsafe extern "C" fn(
        env: *mut jvmtiEnv,
        mode: jvmtiEventMode,
        event_type: jvmtiEvent,
        event_thread: jthread,
        ...
    ) -> jvmtiError;
    /// `GetThreadInfo(env, thread, info_ptr)` (header number 9).
    GetThreadInfo = 8: unsafe extern "system" fn(
        env: *mut jvmtiEnv,
        thread: jthread,
        info_ptr: *mut jvmtiThreadInfo,
    ) -> jvmtiError;
    /// `SetHeapSamplingInterval(env, sampling_interval)` (header number 156).
    SetHeapSamplingInterval = 155: unsafe extern "system" fn(
        env: *mut jvmtiEnv,
        sampling_interval: jint,
    ) -> jvmtiError;
    /// `GetFrameCount(env, thread, count_ptr)` (header number 16).
    GetFrameCount = 15: unsafe extern "system" fn(
        env: *mut jvmtiEnv,
        thread: jthread,
        count_ptr: *mut jint,
    ) -> jvmtiError;
    /// `GetCurrentThread(env, thread_ptr)` (header number 18).
    GetCurrentThread = 17: unsafe extern "system" fn(
        env: *mut jvmtiEnv,
        thread_ptr: *mut jthread,
    ) -> jvmtiError;
    /// `Deallocate(env, mem)` (header number 47).
    Deallocate = 46: unsafe extern "system" fn(
        env: *mut jvmtiEnv,
        mem: *mut c_uchar,
    ) -> jvmtiError;
    /// `GetClassSignature(env, klass, signature_ptr, generic_ptr)` (header number 48).
    GetClassSignature = 47: unsafe extern "system" fn(
        env: *mut jvmtiEnv,
        klass: jclass,
        signature_ptr: *mut *mut c_char,
        generic_ptr: *mut *mut c_char,
    ) -> jvmtiError;
    /// `GetMethodName(env, method, name_ptr, signature_ptr, generic_ptr)` (header number 64).
    GetMethodName = 63: unsafe extern "system" fn(
        env: *mut jvmtiEnv,
        method: jmethodID,
        name_ptr: *mut *mut c_char,
        signature_ptr: *mut *mut c_char,
        generic_ptr: *mut *mut c_char,
    ) -> jvmtiError;
    /// `GetMethodDeclaringClass(env, method, declaring_class_ptr)` (header number 65).
    GetMethodDeclaringClass = 64: unsafe extern "system" fn(
        env: *mut jvmtiEnv,
        method: jmethodID,
        declaring_class_ptr: *mut jclass,
    ) -> jvmtiError;
    /// `GetThreadLocalStorage(env, thread, data_ptr)` (header number 102).
    GetThreadLocalStorage = 101: unsafe extern "system" fn(
        env: *mut jvmtiEnv,
        thread: jthread,
        data_ptr: *mut *mut c_void,
    ) -> jvmtiError;
    /// `SetThreadLocalStorage(env, thread, data)` (header number 103).
    SetThreadLocalStorage = 102: unsafe extern "system" fn(
        env: *mut jvmtiEnv,
        thread: jthread,
        data: *const c_void,
    ) -> jvmtiError;
    /// `SetEventCallbacks(env, callbacks, size_of_callbacks)` (header number 122).
    SetEventCallbacks = 121: unsafe extern "system" fn(
        env: *mut jvmtiEnv,
        callbacks: *const jvmtiEventCallbacks,
        size_of_callbacks: jint,
    ) -> jvmtiError;
    /// `GetErrorName(env, error, name_ptr)` (header number 128).
    GetErrorName = 127: unsafe extern "system" fn(
        env: *mut jvmtiEnv,
        error: jvmtiError,
        name_ptr: *mut *mut c_char,
    ) -> jvmtiError;
    /// `GetTime(env, nanos_ptr)` (header number 139).
    GetTime = 138: unsafe extern "system" fn(
        env: *mut jvmtiEnv,
        nanos_ptr: *mut jlong,
    ) -> jvmtiError;
    /// `GetPotentialCapabilities(env, capabilities_ptr)` (header number 140).
    GetPotentialCapabilities = 139: unsafe extern "system" fn(
        env: *mut jvmtiEnv,
        capabilities_ptr: *mut jvmtiCapabilities,
    ) -> jvmtiError;
    /// `AddCapabilities(env, capabilities_ptr)` (header number 142).
    AddCapabilities = 141: unsafe extern "system" fn(
        env: *mut jvmtiEnv,
        capabilities_ptr: *const jvmtiCapabilities,
    ) -> jvmtiError;
}

/// `JVMTI_CMLR_INLINE_INFO` (`jvmticmlr.h`): a record of
/// `CompiledMethodLoad`'s `compile_info` list that is a
/// [`jvmtiCompiledMethodLoadInlineRecord`].
pub const JVMTI_CMLR_INLINE_INFO: u32 = 2;

/// `jvmtiCompiledMethodLoadRecordHeader` (`jvmticmlr.h`): the head of each
/// record in `CompiledMethodLoad`'s `compile_info` list; `kind` tells what
/// the record is (a C enum, [`JVMTI_CMLR_INLINE_INFO`] or the dummy 1).
#[repr(C)]
#[derive(Debug)]
pub struct jvmtiCompiledMethodLoadRecordHeader {
    pub kind: u32,
    pub majorinfoversion: jint,
    pub minorinfoversion: jint,
    /// The next record, or null.
    pub next: *const jvmtiCompiledMethodLoadRecordHeader,
}

/// `PCStackInfo` (`jvmticmlr.h`): the methods on the compile-time stack at
/// one address of a compiled method, the innermost (inlined deepest) first
/// and the compiled method last, each with its bytecode index.
#[repr(C)]
#[derive(Debug)]
pub struct PCStackInfo {
    pub pc: *const c_void,
    pub numstackframes: jint,
    pub methods: *const jmethodID,
    pub bcis: *const jint,
}

/// `jvmtiCompiledMethodLoadInlineRecord` (`jvmticmlr.h`): one
/// [`PCStackInfo`] per address the compiled code keeps debug information
/// for (its call sites and safepoints).
#[repr(C)]
#[derive(Debug)]
pub struct jvmtiCompiledMethodLoadInlineRecord {
    pub header: jvmtiCompiledMethodLoadRecordHeader,
    pub numpcs: jint,
    pub pcinfo: *const PCStackInfo,
}

/// `struct jvmtiThreadInfo`, filled by `GetThreadInfo`. `name` is allocated by
/// JVMTI (free it with `Deallocate`); `thread_group` and
/// `context_class_loader` are JNI local references.
#[repr(C)]
#[derive(Debug)]
pub struct jvmtiThreadInfo {
    /// Thread name, modified UTF-8, NUL-terminated; JVMTI-allocated.
    pub name: *mut c_char,
    /// `Thread.getPriority()`.
    pub priority: jint,
    /// `Thread.isDaemon()`.
    pub is_daemon: JvmtiBool,
    /// Local reference to the thread group (may be null once terminated).
    pub thread_group: jthreadGroup,
    /// Local reference to the context class loader (may be null).
    pub context_class_loader: jobject,
}

/// `jvmtiCapabilities`: 128 one-bit fields packed into four `unsigned int`s,
/// the first field in the least significant bit (GCC's layout on x86-64 and
/// aarch64 Linux). Bit numbers are the `CAN_…` constants.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct jvmtiCapabilities {
    /// The raw words; bit `n` is `words[n / 32] & (1 << (n % 32))`.
    pub words: [u32; 4],
}

/// Bit of `can_generate_method_entry_events`.
pub const CAN_GENERATE_METHOD_ENTRY_EVENTS: u32 = 24;
/// Bit of `can_generate_method_exit_events`.
pub const CAN_GENERATE_METHOD_EXIT_EVENTS: u32 = 25;
/// Bit of `can_generate_compiled_method_load_events`.
pub const CAN_GENERATE_COMPILED_METHOD_LOAD_EVENTS: u32 = 27;
/// Bit of `can_generate_monitor_events`.
pub const CAN_GENERATE_MONITOR_EVENTS: u32 = 28;
/// Bit of `can_generate_sampled_object_alloc_events` (JDK 11+, present in
/// both headers we support).
pub const CAN_GENERATE_SAMPLED_OBJECT_ALLOC_EVENTS: u32 = 43;

/// `(field name in jvmti.h, bit)` of every capability we can set.
pub const CAPABILITY_BITS: &[(&str, u32)] = &[
    (
        "can_generate_method_entry_events",
        CAN_GENERATE_METHOD_ENTRY_EVENTS,
    ),
    (
        "can_generate_method_exit_events",
        CAN_GENERATE_METHOD_EXIT_EVENTS,
    ),
    (
        "can_generate_compiled_method_load_events",
        CAN_GENERATE_COMPILED_METHOD_LOAD_EVENTS,
    ),
    ("can_generate_monitor_events", CAN_GENERATE_MONITOR_EVENTS),
    (
        "can_generate_sampled_object_alloc_events",
        CAN_GENERATE_SAMPLED_OBJECT_ALLOC_EVENTS,
    ),
];

impl jvmtiCapabilities {
    /// Sets capability bit `bit` (one of the `CAN_…` constants).
    pub fn set_bit(&mut self, bit: u32) -> &mut Self {
        self.words[(bit / 32) as usize] |= 1 << (bit % 32);
        self
    }

    /// Whether capability bit `bit` is set.
    pub fn has_bit(&self, bit: u32) -> bool {
        self.words[(bit / 32) as usize] & (1 << (bit % 32)) != 0
    }

    /// `can_generate_method_entry_events = 1`.
    pub fn set_can_generate_method_entry_events(&mut self) -> &mut Self {
        self.set_bit(CAN_GENERATE_METHOD_ENTRY_EVENTS)
    }

    /// `can_generate_method_exit_events = 1`.
    pub fn set_can_generate_method_exit_events(&mut self) -> &mut Self {
        self.set_bit(CAN_GENERATE_METHOD_EXIT_EVENTS)
    }

    /// `can_generate_compiled_method_load_events = 1`.
    pub fn set_can_generate_compiled_method_load_events(&mut self) -> &mut Self {
        self.set_bit(CAN_GENERATE_COMPILED_METHOD_LOAD_EVENTS)
    }

    /// `can_generate_monitor_events = 1`.
    pub fn set_can_generate_monitor_events(&mut self) -> &mut Self {
        self.set_bit(CAN_GENERATE_MONITOR_EVENTS)
    }

    /// `can_generate_sampled_object_alloc_events = 1`.
    pub fn set_can_generate_sampled_object_alloc_events(&mut self) -> &mut Self {
        self.set_bit(CAN_GENERATE_SAMPLED_OBJECT_ALLOC_EVENTS)
    }
}

/// A callback slot we do not use: only its size and position matter.
pub type UnusedCallback = Option<unsafe extern "system" fn()>;

/// `jvmtiEventVMInit`.
pub type VmInitFn =
    unsafe extern "system" fn(jvmti_env: *mut jvmtiEnv, jni_env: *mut JNIEnv, thread: jthread);
/// `jvmtiEventVMDeath`.
pub type VmDeathFn = unsafe extern "system" fn(jvmti_env: *mut jvmtiEnv, jni_env: *mut JNIEnv);
/// `jvmtiEventThreadStart` and `jvmtiEventThreadEnd`.
pub type ThreadFn =
    unsafe extern "system" fn(jvmti_env: *mut jvmtiEnv, jni_env: *mut JNIEnv, thread: jthread);
/// `jvmtiEventMethodEntry`.
pub type MethodEntryFn = unsafe extern "system" fn(
    jvmti_env: *mut jvmtiEnv,
    jni_env: *mut JNIEnv,
    thread: jthread,
    method: jmethodID,
);
/// `jvmtiEventMethodExit`. `return_value` is a `jvalue` passed by value (an
/// 8-byte union, passed in an integer register on x86-64).
pub type MethodExitFn = unsafe extern "system" fn(
    jvmti_env: *mut jvmtiEnv,
    jni_env: *mut JNIEnv,
    thread: jthread,
    method: jmethodID,
    was_popped_by_exception: JvmtiBool,
    return_value: jvalue,
);
/// `jvmtiEventSampledObjectAlloc`.
pub type SampledObjectAllocFn = unsafe extern "system" fn(
    jvmti_env: *mut jvmtiEnv,
    jni_env: *mut JNIEnv,
    thread: jthread,
    object: jobject,
    object_klass: jclass,
    size: jlong,
);
/// `jvmtiEventCompiledMethodLoad`: `method` was compiled to `code_size`
/// bytes at `code_addr`; `compile_info` lists the inlining records
/// ([`jvmtiCompiledMethodLoadRecordHeader`]). The address-location map is
/// not used.
pub type CompiledMethodLoadFn = unsafe extern "system" fn(
    jvmti_env: *mut jvmtiEnv,
    method: jmethodID,
    code_size: jint,
    code_addr: *const c_void,
    map_length: jint,
    map: *const c_void,
    compile_info: *const c_void,
);
/// `jvmtiEventDynamicCodeGenerated`: the VM generated `length` bytes of
/// code named `name` (modified UTF-8, valid for the call) at `address`
/// (the interpreter, stubs, adapters).
pub type DynamicCodeGeneratedFn = unsafe extern "system" fn(
    jvmti_env: *mut jvmtiEnv,
    name: *const c_char,
    address: *const c_void,
    length: jint,
);
/// `jvmtiEventMonitorContendedEnter` and `jvmtiEventMonitorContendedEntered`.
pub type MonitorContendedFn = unsafe extern "system" fn(
    jvmti_env: *mut jvmtiEnv,
    jni_env: *mut JNIEnv,
    thread: jthread,
    object: jobject,
);
/// `jvmtiEventMonitorWait`.
pub type MonitorWaitFn = unsafe extern "system" fn(
    jvmti_env: *mut jvmtiEnv,
    jni_env: *mut JNIEnv,
    thread: jthread,
    object: jobject,
    timeout: jlong,
);
/// `jvmtiEventMonitorWaited`.
pub type MonitorWaitedFn = unsafe extern "system" fn(
    jvmti_env: *mut jvmtiEnv,
    jni_env: *mut JNIEnv,
    thread: jthread,
    object: jobject,
    timed_out: JvmtiBool,
);

/// `jvmtiEventCallbacks`: one nullable function pointer per event number
/// from 50 (`VMInit`) to 86 (`SampledObjectAlloc`), reserved numbers
/// included, in the order of `jvmti.h` — 37 fields, the JDK 17 layout.
///
/// JDK 21+ headers append `VirtualThreadStart` (87) and `VirtualThreadEnd`
/// (88). Using the shorter JDK 17 struct on those JVMs is fine:
/// `SetEventCallbacks` takes the struct's size, copies only that many bytes
/// and zeroes the rest. Fields we do not use are [`UnusedCallback`]s.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct jvmtiEventCallbacks {
    /// 50
    pub VMInit: Option<VmInitFn>,
    /// 51
    pub VMDeath: Option<VmDeathFn>,
    /// 52
    pub ThreadStart: Option<ThreadFn>,
    /// 53
    pub ThreadEnd: Option<ThreadFn>,
    /// 54
    pub ClassFileLoadHook: UnusedCallback,
    /// 55
    pub ClassLoad: UnusedCallback,
    /// 56
    pub ClassPrepare: UnusedCallback,
    /// 57
    pub VMStart: UnusedCallback,
    /// 58
    pub Exception: UnusedCallback,
    /// 59
    pub ExceptionCatch: UnusedCallback,
    /// 60
    pub SingleStep: UnusedCallback,
    /// 61
    pub FramePop: UnusedCallback,
    /// 62
    pub Breakpoint: UnusedCallback,
    /// 63
    pub FieldAccess: UnusedCallback,
    /// 64
    pub FieldModification: UnusedCallback,
    /// 65
    pub MethodEntry: Option<MethodEntryFn>,
    /// 66
    pub MethodExit: Option<MethodExitFn>,
    /// 67
    pub NativeMethodBind: UnusedCallback,
    /// 68
    pub CompiledMethodLoad: Option<CompiledMethodLoadFn>,
    /// 69
    pub CompiledMethodUnload: UnusedCallback,
    /// 70
    pub DynamicCodeGenerated: Option<DynamicCodeGeneratedFn>,
    /// 71
    pub DataDumpRequest: UnusedCallback,
    /// 72 (reserved)
    pub reserved72: UnusedCallback,
    /// 73
    pub MonitorWait: Option<MonitorWaitFn>,
    /// 74
    pub MonitorWaited: Option<MonitorWaitedFn>,
    /// 75
    pub MonitorContendedEnter: Option<MonitorContendedFn>,
    /// 76
    pub MonitorContendedEntered: Option<MonitorContendedFn>,
    /// 77 (reserved)
    pub reserved77: UnusedCallback,
    /// 78 (reserved)
    pub reserved78: UnusedCallback,
    /// 79 (reserved)
    pub reserved79: UnusedCallback,
    /// 80
    pub ResourceExhausted: UnusedCallback,
    /// 81
    pub GarbageCollectionStart: UnusedCallback,
    /// 82
    pub GarbageCollectionFinish: UnusedCallback,
    /// 83
    pub ObjectFree: UnusedCallback,
    /// 84
    pub VMObjectAlloc: UnusedCallback,
    /// 85 (reserved)
    pub reserved85: UnusedCallback,
    /// 86
    pub SampledObjectAlloc: Option<SampledObjectAllocFn>,
}

/// Declares `jvmtiEvent` constants and the [`EVENT_NAMES`] table from one list.
macro_rules! jvmti_events {
    ($( $name:ident = $value:literal, )*) => {
        $( #[doc = concat!("`", stringify!($name), "`")] pub const $name: jvmtiEvent = $value; )*
        /// `(name, value)` of every `JVMTI_EVENT_…` in the JDK 17 header.
        pub const EVENT_NAMES: &[(&str, jvmtiEvent)] = &[$((stringify!($name), $value)),*];
    };
}

jvmti_events! {
    JVMTI_EVENT_VM_INIT = 50,
    JVMTI_EVENT_VM_DEATH = 51,
    JVMTI_EVENT_THREAD_START = 52,
    JVMTI_EVENT_THREAD_END = 53,
    JVMTI_EVENT_CLASS_FILE_LOAD_HOOK = 54,
    JVMTI_EVENT_CLASS_LOAD = 55,
    JVMTI_EVENT_CLASS_PREPARE = 56,
    JVMTI_EVENT_VM_START = 57,
    JVMTI_EVENT_EXCEPTION = 58,
    JVMTI_EVENT_EXCEPTION_CATCH = 59,
    JVMTI_EVENT_SINGLE_STEP = 60,
    JVMTI_EVENT_FRAME_POP = 61,
    JVMTI_EVENT_BREAKPOINT = 62,
    JVMTI_EVENT_FIELD_ACCESS = 63,
    JVMTI_EVENT_FIELD_MODIFICATION = 64,
    JVMTI_EVENT_METHOD_ENTRY = 65,
    JVMTI_EVENT_METHOD_EXIT = 66,
    JVMTI_EVENT_NATIVE_METHOD_BIND = 67,
    JVMTI_EVENT_COMPILED_METHOD_LOAD = 68,
    JVMTI_EVENT_COMPILED_METHOD_UNLOAD = 69,
    JVMTI_EVENT_DYNAMIC_CODE_GENERATED = 70,
    JVMTI_EVENT_DATA_DUMP_REQUEST = 71,
    JVMTI_EVENT_MONITOR_WAIT = 73,
    JVMTI_EVENT_MONITOR_WAITED = 74,
    JVMTI_EVENT_MONITOR_CONTENDED_ENTER = 75,
    JVMTI_EVENT_MONITOR_CONTENDED_ENTERED = 76,
    JVMTI_EVENT_RESOURCE_EXHAUSTED = 80,
    JVMTI_EVENT_GARBAGE_COLLECTION_START = 81,
    JVMTI_EVENT_GARBAGE_COLLECTION_FINISH = 82,
    JVMTI_EVENT_OBJECT_FREE = 83,
    JVMTI_EVENT_VM_OBJECT_ALLOC = 84,
    JVMTI_EVENT_SAMPLED_OBJECT_ALLOC = 86,
}

/// Declares `jvmtiError` constants and the [`ERROR_NAMES`] table from one list.
macro_rules! jvmti_errors {
    ($( $name:ident = $value:literal, )*) => {
        $( #[doc = concat!("`", stringify!($name), "`")] pub const $name: jvmtiError = $value; )*
        /// `(value, name)` of every `JVMTI_ERROR_…` in the JDK 17 and JDK 25
        /// headers, for messages that do not need a live environment.
        pub const ERROR_NAMES: &[(jvmtiError, &str)] = &[$(($value, stringify!($name))),*];
    };
}

jvmti_errors! {
    JVMTI_ERROR_NONE = 0,
    JVMTI_ERROR_INVALID_THREAD = 10,
    JVMTI_ERROR_INVALID_THREAD_GROUP = 11,
    JVMTI_ERROR_INVALID_PRIORITY = 12,
    JVMTI_ERROR_THREAD_NOT_SUSPENDED = 13,
    JVMTI_ERROR_THREAD_SUSPENDED = 14,
    JVMTI_ERROR_THREAD_NOT_ALIVE = 15,
    JVMTI_ERROR_INVALID_OBJECT = 20,
    JVMTI_ERROR_INVALID_CLASS = 21,
    JVMTI_ERROR_CLASS_NOT_PREPARED = 22,
    JVMTI_ERROR_INVALID_METHODID = 23,
    JVMTI_ERROR_INVALID_LOCATION = 24,
    JVMTI_ERROR_INVALID_FIELDID = 25,
    JVMTI_ERROR_INVALID_MODULE = 26,
    JVMTI_ERROR_NO_MORE_FRAMES = 31,
    JVMTI_ERROR_OPAQUE_FRAME = 32,
    JVMTI_ERROR_TYPE_MISMATCH = 34,
    JVMTI_ERROR_INVALID_SLOT = 35,
    JVMTI_ERROR_DUPLICATE = 40,
    JVMTI_ERROR_NOT_FOUND = 41,
    JVMTI_ERROR_INVALID_MONITOR = 50,
    JVMTI_ERROR_NOT_MONITOR_OWNER = 51,
    JVMTI_ERROR_INTERRUPT = 52,
    JVMTI_ERROR_INVALID_CLASS_FORMAT = 60,
    JVMTI_ERROR_CIRCULAR_CLASS_DEFINITION = 61,
    JVMTI_ERROR_FAILS_VERIFICATION = 62,
    JVMTI_ERROR_UNSUPPORTED_REDEFINITION_METHOD_ADDED = 63,
    JVMTI_ERROR_UNSUPPORTED_REDEFINITION_SCHEMA_CHANGED = 64,
    JVMTI_ERROR_INVALID_TYPESTATE = 65,
    JVMTI_ERROR_UNSUPPORTED_REDEFINITION_HIERARCHY_CHANGED = 66,
    JVMTI_ERROR_UNSUPPORTED_REDEFINITION_METHOD_DELETED = 67,
    JVMTI_ERROR_UNSUPPORTED_VERSION = 68,
    JVMTI_ERROR_NAMES_DONT_MATCH = 69,
    JVMTI_ERROR_UNSUPPORTED_REDEFINITION_CLASS_MODIFIERS_CHANGED = 70,
    JVMTI_ERROR_UNSUPPORTED_REDEFINITION_METHOD_MODIFIERS_CHANGED = 71,
    JVMTI_ERROR_UNSUPPORTED_REDEFINITION_CLASS_ATTRIBUTE_CHANGED = 72,
    JVMTI_ERROR_UNSUPPORTED_OPERATION = 73,
    JVMTI_ERROR_UNMODIFIABLE_CLASS = 79,
    JVMTI_ERROR_UNMODIFIABLE_MODULE = 80,
    JVMTI_ERROR_NOT_AVAILABLE = 98,
    JVMTI_ERROR_MUST_POSSESS_CAPABILITY = 99,
    JVMTI_ERROR_NULL_POINTER = 100,
    JVMTI_ERROR_ABSENT_INFORMATION = 101,
    JVMTI_ERROR_INVALID_EVENT_TYPE = 102,
    JVMTI_ERROR_ILLEGAL_ARGUMENT = 103,
    JVMTI_ERROR_NATIVE_METHOD = 104,
    JVMTI_ERROR_CLASS_LOADER_UNSUPPORTED = 106,
    JVMTI_ERROR_OUT_OF_MEMORY = 110,
    JVMTI_ERROR_ACCESS_DENIED = 111,
    JVMTI_ERROR_WRONG_PHASE = 112,
    JVMTI_ERROR_INTERNAL = 113,
    JVMTI_ERROR_UNATTACHED_THREAD = 115,
    JVMTI_ERROR_INVALID_ENVIRONMENT = 116,
}

/// The `JVMTI_ERROR_…` name of `code`, if it is one of [`ERROR_NAMES`].
pub fn error_name(code: jvmtiError) -> Option<&'static str> {
    ERROR_NAMES
        .iter()
        .find(|(value, _)| *value == code)
        .map(|(_, name)| *name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capability_setters_set_exactly_their_bit() {
        type Setter = fn(&mut jvmtiCapabilities) -> &mut jvmtiCapabilities;
        let setters: [(Setter, u32); 4] = [
            (
                jvmtiCapabilities::set_can_generate_method_entry_events,
                CAN_GENERATE_METHOD_ENTRY_EVENTS,
            ),
            (
                jvmtiCapabilities::set_can_generate_method_exit_events,
                CAN_GENERATE_METHOD_EXIT_EVENTS,
            ),
            (
                jvmtiCapabilities::set_can_generate_monitor_events,
                CAN_GENERATE_MONITOR_EVENTS,
            ),
            (
                jvmtiCapabilities::set_can_generate_sampled_object_alloc_events,
                CAN_GENERATE_SAMPLED_OBJECT_ALLOC_EVENTS,
            ),
        ];
        for (set, bit) in setters {
            let mut caps = jvmtiCapabilities::default();
            set(&mut caps);
            let mut expected = [0u32; 4];
            expected[(bit / 32) as usize] = 1 << (bit % 32);
            assert_eq!(caps.words, expected, "bit {bit}");
            assert!(caps.has_bit(bit));
        }
    }

    #[test]
    fn sizes_match_the_c_layout() {
        assert_eq!(std::mem::size_of::<jvmtiCapabilities>(), 16);
        assert_eq!(
            std::mem::size_of::<jvmtiEventCallbacks>(),
            37 * std::mem::size_of::<usize>()
        );
        assert_eq!(
            std::mem::size_of::<jvmtiInterface_1_>(),
            JVMTI_FUNCTION_COUNT * std::mem::size_of::<usize>()
        );
        // char* name; jint priority; jboolean is_daemon; (pad) jthreadGroup; jobject
        assert_eq!(std::mem::size_of::<jvmtiThreadInfo>(), 32);
        assert_eq!(std::mem::offset_of!(jvmtiThreadInfo, thread_group), 16);
    }

    #[test]
    fn error_names_are_unique_and_known() {
        assert_eq!(
            error_name(JVMTI_ERROR_WRONG_PHASE),
            Some("JVMTI_ERROR_WRONG_PHASE")
        );
        assert_eq!(error_name(9999), None);
        for (i, (code, _)) in ERROR_NAMES.iter().enumerate() {
            assert!(
                ERROR_NAMES[i + 1..].iter().all(|(other, _)| other != code),
                "{code} listed twice"
            );
        }
    }
}
