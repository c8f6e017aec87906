//! The safe face of JVMTI: [`Jvmti`], a copyable handle on a JVMTI
//! environment, with one method per call the agent makes, and
//! [`JvmtiError`], the typed failure of any of them.
//!
//! This module owns the rules `jvmti.h` leaves to the caller: which pointer is
//! valid for how long, who frees what (every JVMTI-allocated string goes back
//! through `Deallocate`, also on early returns, via `JvmtiString`'s `Drop`),
//! and how JVMTI status codes become `Result`s.
//!
//! Invariant: a [`Jvmti`] only exists for a valid environment, a
//! [`ThreadRef`] for a thread reference that is live for its lifetime, a
//! [`MethodId`] for a method ID the JVM issued. Their constructors are
//! `unsafe` and state those contracts (the event trampolines in `lib.rs` meet
//! them with the callback's own arguments), so every method here is safe: a
//! raw `jthread` or `jmethodID` never reaches a safe function, because JVMTI
//! can reject a stale handle but would crash on a made-up pointer.
//!
//! Local references: `GetMethodDeclaringClass` and `GetThreadInfo` return JNI
//! local references (the declaring class; the thread group and context class
//! loader). We never keep them, and we do not delete them: inside an event
//! callback the JVM frees every local reference created during the callback
//! when it returns. Called outside a callback on a thread with no local frame
//! of its own (e.g. a long-running native thread), each call would hold on to
//! up to two local references until that thread returns to Java.
//!
//! Beside it: `env/lent.rs` (what the JVM lends a callback, copied into
//! owned values); type signatures in Java source form are
//! `idleflow_format::signatures` (shared with `idleflow-hotspot`).

mod lent;

pub use idleflow_format::signatures::{java_class_name, java_parameters};
pub use lent::{agent_options, borrowed_text, inline_records, InlinePc};

use std::ffi::{c_char, c_void, CStr};
use std::ptr::{self, NonNull};

use std::marker::PhantomData;

use jni_sys::{jclass, jint, jlong, jmethodID, JavaVM, JNI_EDETACHED, JNI_EVERSION, JNI_OK};

use crate::jvmti::{
    self, function, jthread, jvmtiCapabilities, jvmtiEnv, jvmtiError, jvmtiEvent,
    jvmtiEventCallbacks, jvmtiThreadInfo, JVMTI_DISABLE, JVMTI_ENABLE, JVMTI_ERROR_INTERNAL,
    JVMTI_ERROR_NONE, JVMTI_ERROR_NOT_AVAILABLE, JVMTI_ERROR_NULL_POINTER,
    JVMTI_ERROR_UNATTACHED_THREAD, JVMTI_ERROR_UNSUPPORTED_VERSION, JVMTI_VERSION_1_2,
};

/// The capability set passed to [`Jvmti::add_capabilities`].
pub type Caps = jvmtiCapabilities;

/// A `jthread` that is valid for `'a`: in practice a callback's `thread`
/// argument, a JNI local reference that dies when the callback returns, so
/// the lifetime keeps it from being stored. Not `Send`: local references
/// belong to their thread.
#[derive(Debug, Clone, Copy)]
pub struct ThreadRef<'a> {
    raw: jthread,
    _callback: PhantomData<&'a ()>,
}

impl<'a> ThreadRef<'a> {
    /// "The current thread": JVMTI's null `jthread`.
    pub fn current() -> ThreadRef<'static> {
        ThreadRef {
            raw: ptr::null_mut(),
            _callback: PhantomData,
        }
    }

    /// Wraps a raw `jthread`.
    ///
    /// # Safety
    /// `raw` must be null or a JNI reference to a `java.lang.Thread` that
    /// stays valid for `'a`, usable on the current thread (e.g. the `thread`
    /// argument of the JVMTI event callback that is running).
    pub unsafe fn from_raw(raw: jthread) -> ThreadRef<'a> {
        ThreadRef {
            raw,
            _callback: PhantomData,
        }
    }

    /// The raw `jthread` (null for [`ThreadRef::current`]).
    pub fn as_raw(self) -> jthread {
        self.raw
    }
}

/// A `jmethodID` issued by the JVM. Method IDs are global (any thread may use
/// them) and outlive callbacks; HotSpot never frees them, so one whose class
/// was unloaded makes JVMTI answer `JVMTI_ERROR_INVALID_METHODID` rather than
/// crash. That is what makes it safe to keep them, e.g. in a symbol cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MethodId {
    raw: jmethodID,
}

// SAFETY: a jmethodID is a process-wide token, not tied to a thread (see the
// type's documentation); `MethodId` holds nothing else.
unsafe impl Send for MethodId {}
// SAFETY: as for `Send`; it is immutable.
unsafe impl Sync for MethodId {}

impl MethodId {
    /// Wraps a raw `jmethodID`.
    ///
    /// # Safety
    /// `raw` must be a method ID obtained from the JVM this agent runs in
    /// (e.g. the `method` argument of an event callback).
    pub unsafe fn from_raw(raw: jmethodID) -> MethodId {
        MethodId { raw }
    }

    /// The raw `jmethodID`.
    pub fn as_raw(self) -> jmethodID {
        self.raw
    }
}

/// A JVMTI call that failed: which call, and the `jvmtiError` it returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("JVMTI {call} failed: {}", describe(*.code))]
pub struct JvmtiError {
    /// The JVMTI function, as named in `jvmti.h` (e.g. `"GetMethodName"`).
    pub call: &'static str,
    /// The `jvmtiError` it returned. `GetEnv` returns JNI codes instead;
    /// [`Jvmti::from_vm`] maps them to the nearest JVMTI code.
    pub code: jvmtiError,
}

fn describe(code: jvmtiError) -> String {
    match jvmti::error_name(code) {
        Some(name) => format!("{name} ({code})"),
        None => format!("unknown JVMTI error {code}"),
    }
}

/// Turns a JVMTI status into a `Result`.
fn check(call: &'static str, code: jvmtiError) -> Result<(), JvmtiError> {
    if code == JVMTI_ERROR_NONE {
        Ok(())
    } else {
        Err(JvmtiError { call, code })
    }
}

/// The error for a function-table slot the JVM left null.
fn missing(call: &'static str) -> JvmtiError {
    JvmtiError {
        call,
        code: JVMTI_ERROR_NOT_AVAILABLE,
    }
}

/// A handle on one JVMTI environment (`jvmtiEnv*`).
///
/// `Copy`: it is a pointer to JVM-owned state that lives until the JVM exits
/// (we never call `DisposeEnvironment`), so copies cannot dangle.
///
/// `Send` and `Sync`: unlike a `JNIEnv`, a JVMTI environment is not tied to a
/// thread; the JVMTI specification lets any thread use it, and the JVM
/// synchronises its own state. A call from a thread the JVM does not know
/// returns `JVMTI_ERROR_UNATTACHED_THREAD` rather than misbehaving.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Jvmti {
    env: NonNull<jvmtiEnv>,
}

// SAFETY: see the type's documentation: a JVMTI environment may be used from
// any thread, and `Jvmti` holds nothing else.
unsafe impl Send for Jvmti {}
// SAFETY: as for `Send`; every method takes `self` by value and only passes
// the pointer to the JVM, which does its own locking.
unsafe impl Sync for Jvmti {}

impl Jvmti {
    /// Gets a JVMTI 1.2 environment from the JVM (`GetEnv`).
    ///
    /// `GetEnv` answers in JNI codes, which are mapped: `JNI_EVERSION` to
    /// `JVMTI_ERROR_UNSUPPORTED_VERSION`, `JNI_EDETACHED` to
    /// `JVMTI_ERROR_UNATTACHED_THREAD`, a null VM or environment to
    /// `JVMTI_ERROR_NULL_POINTER`, anything else to `JVMTI_ERROR_INTERNAL`.
    ///
    /// # Safety
    /// `vm` must be null or the `JavaVM*` the JVM passed to `Agent_OnLoad`
    /// (or another valid `JavaVM*`), and the JVM must outlive every use of the
    /// returned handle.
    pub unsafe fn from_vm(vm: *mut JavaVM) -> Result<Jvmti, JvmtiError> {
        const CALL: &str = "GetEnv";
        // SAFETY: the caller guarantees `vm` is null or a valid `JavaVM*`,
        // i.e. a pointer to a pointer to the invocation interface.
        if vm.is_null() || unsafe { (*vm).is_null() } {
            return Err(JvmtiError {
                call: CALL,
                code: JVMTI_ERROR_NULL_POINTER,
            });
        }
        let mut env: *mut c_void = ptr::null_mut();
        // SAFETY: `vm` is valid (above); `GetEnv` is part of the JNI 1.2
        // invocation interface, which every JVM we load into provides; `env`
        // is a valid out-pointer.
        let rc = unsafe { ((**vm).v1_2.GetEnv)(vm, &mut env, JVMTI_VERSION_1_2) };
        let code = match rc {
            JNI_OK => match NonNull::new(env.cast::<jvmtiEnv>()) {
                Some(env) => return Ok(Jvmti { env }),
                None => JVMTI_ERROR_NULL_POINTER,
            },
            JNI_EVERSION => JVMTI_ERROR_UNSUPPORTED_VERSION,
            JNI_EDETACHED => JVMTI_ERROR_UNATTACHED_THREAD,
            _ => JVMTI_ERROR_INTERNAL,
        };
        Err(JvmtiError { call: CALL, code })
    }

    /// Wraps the `jvmtiEnv*` an event callback receives; `None` if null.
    ///
    /// # Safety
    /// `env` must be null or a valid JVMTI environment pointer whose JVM
    /// outlives every use of the returned handle.
    pub unsafe fn from_raw(env: *mut jvmtiEnv) -> Option<Jvmti> {
        NonNull::new(env).map(|env| Jvmti { env })
    }

    /// The raw `jvmtiEnv*`, for calls this wrapper does not cover.
    pub fn as_raw(self) -> *mut jvmtiEnv {
        self.env.as_ptr()
    }

    /// The capabilities this environment could add (`GetPotentialCapabilities`).
    pub fn potential_capabilities(self) -> Result<Caps, JvmtiError> {
        const CALL: &str = "GetPotentialCapabilities";
        // SAFETY: `self.env` is valid (type invariant).
        let f = unsafe { function::GetPotentialCapabilities(self.as_raw()) }
            .ok_or_else(|| missing(CALL))?;
        let mut caps = Caps::default();
        // SAFETY: `f` is the table's GetPotentialCapabilities; `caps` is a
        // valid, writable `jvmtiCapabilities`.
        check(CALL, unsafe { f(self.as_raw(), &mut caps) })?;
        Ok(caps)
    }

    /// Adds `caps` to this environment (`AddCapabilities`). Fails with
    /// `JVMTI_ERROR_NOT_AVAILABLE` if the JVM cannot grant one of them (some
    /// may only be added in the `OnLoad` phase).
    pub fn add_capabilities(self, caps: &Caps) -> Result<(), JvmtiError> {
        const CALL: &str = "AddCapabilities";
        // SAFETY: `self.env` is valid (type invariant).
        let f = unsafe { function::AddCapabilities(self.as_raw()) }.ok_or_else(|| missing(CALL))?;
        // SAFETY: `f` is the table's AddCapabilities; `caps` is a valid
        // `jvmtiCapabilities` the JVM only reads during the call.
        check(CALL, unsafe { f(self.as_raw(), caps) })
    }

    /// Installs `callbacks` (`SetEventCallbacks`). The JVM copies the struct,
    /// so it need not outlive the call; the functions in it must stay loaded,
    /// which they do since the agent library is never unloaded before exit.
    pub fn set_callbacks(self, callbacks: &jvmtiEventCallbacks) -> Result<(), JvmtiError> {
        const CALL: &str = "SetEventCallbacks";
        // SAFETY: `self.env` is valid (type invariant).
        let f =
            unsafe { function::SetEventCallbacks(self.as_raw()) }.ok_or_else(|| missing(CALL))?;
        let size = std::mem::size_of::<jvmtiEventCallbacks>() as jint;
        // SAFETY: `f` is the table's SetEventCallbacks; `callbacks` points to
        // `size` readable bytes laid out as `jvmtiEventCallbacks` (checked
        // against the header by the tests).
        check(CALL, unsafe { f(self.as_raw(), callbacks, size) })
    }

    /// Turns on `event` for all threads (`SetEventNotificationMode`,
    /// `JVMTI_ENABLE`, thread = null).
    pub fn enable(self, event: jvmtiEvent) -> Result<(), JvmtiError> {
        self.set_event_mode(JVMTI_ENABLE, event)
    }

    /// Turns off `event` for all threads (`JVMTI_DISABLE`, thread = null).
    pub fn disable(self, event: jvmtiEvent) -> Result<(), JvmtiError> {
        self.set_event_mode(JVMTI_DISABLE, event)
    }

    fn set_event_mode(self, mode: u32, event: jvmtiEvent) -> Result<(), JvmtiError> {
        const CALL: &str = "SetEventNotificationMode";
        // SAFETY: `self.env` is valid (type invariant).
        let f = unsafe { function::SetEventNotificationMode(self.as_raw()) }
            .ok_or_else(|| missing(CALL))?;
        // SAFETY: `f` is the table's variadic SetEventNotificationMode,
        // declared variadic so the C calling convention for `...` is used;
        // no extra arguments are defined for any event. A null thread means
        // "all threads". An unknown `event` is reported by the JVM as
        // JVMTI_ERROR_INVALID_EVENT_TYPE.
        check(CALL, unsafe {
            f(self.as_raw(), mode, event, ptr::null_mut())
        })
    }

    /// The declaring class's signature (`Lcom/example/Pool;`, see
    /// [`java_class_name`]) and the name of `method`
    /// (`GetMethodDeclaringClass`, `GetClassSignature`, `GetMethodName`).
    pub fn method_name(self, method: MethodId) -> Result<(String, String), JvmtiError> {
        let (name, _) = self.method_name_signature(method, false)?;
        let class = self.declaring_class(method)?;
        let signature = self.class_signature(class)?;
        Ok((signature, name))
    }

    /// As [`method_name`](Self::method_name), plus the method's own
    /// signature (`(Ljava/lang/String;I)V`): (class signature, name,
    /// method signature).
    pub fn method_descriptor(
        self,
        method: MethodId,
    ) -> Result<(String, String, String), JvmtiError> {
        let (name, signature) = self.method_name_signature(method, true)?;
        let class = self.declaring_class(method)?;
        let class = self.class_signature(class)?;
        Ok((class, name, signature.unwrap_or_default()))
    }

    /// `GetMethodName`: the name, and the signature when `with_signature`.
    fn method_name_signature(
        self,
        method: MethodId,
        with_signature: bool,
    ) -> Result<(String, Option<String>), JvmtiError> {
        const CALL: &str = "GetMethodName";
        // SAFETY: `self.env` is valid (type invariant).
        let f = unsafe { function::GetMethodName(self.as_raw()) }.ok_or_else(|| missing(CALL))?;
        let mut name: *mut c_char = ptr::null_mut();
        let mut signature: *mut c_char = ptr::null_mut();
        // SAFETY: `f` is the table's GetMethodName; `method` was issued by
        // the JVM (`MethodId` invariant); `name` is a valid out-pointer, the
        // signature's is valid or null (not returned), and the generic
        // out-pointer may be null.
        let code = unsafe {
            f(
                self.as_raw(),
                method.as_raw(),
                &mut name,
                if with_signature {
                    &mut signature
                } else {
                    ptr::null_mut()
                },
                ptr::null_mut(),
            )
        };
        let name = JvmtiString {
            jvmti: self,
            ptr: name,
        };
        let signature = JvmtiString {
            jvmti: self,
            ptr: signature,
        };
        check(CALL, code)?;
        let name = name.to_string().ok_or(JvmtiError {
            call: CALL,
            code: JVMTI_ERROR_NULL_POINTER,
        })?;
        Ok((name, signature.to_string()))
    }

    fn declaring_class(self, method: MethodId) -> Result<jclass, JvmtiError> {
        const CALL: &str = "GetMethodDeclaringClass";
        // SAFETY: `self.env` is valid (type invariant).
        let f = unsafe { function::GetMethodDeclaringClass(self.as_raw()) }
            .ok_or_else(|| missing(CALL))?;
        let mut class: jclass = ptr::null_mut();
        // SAFETY: `f` is the table's GetMethodDeclaringClass; `method` was
        // issued by the JVM; `class` is a valid out-pointer. The result is a local
        // reference (see the module doc).
        check(CALL, unsafe {
            f(self.as_raw(), method.as_raw(), &mut class)
        })?;
        Ok(class)
    }

    fn class_signature(self, class: jclass) -> Result<String, JvmtiError> {
        const CALL: &str = "GetClassSignature";
        // SAFETY: `self.env` is valid (type invariant).
        let f =
            unsafe { function::GetClassSignature(self.as_raw()) }.ok_or_else(|| missing(CALL))?;
        let mut signature: *mut c_char = ptr::null_mut();
        // SAFETY: `f` is the table's GetClassSignature; `class` is a live
        // local reference returned by the JVM just before; `signature` is a
        // valid out-pointer and the generic one may be null.
        let code = unsafe { f(self.as_raw(), class, &mut signature, ptr::null_mut()) };
        let signature = JvmtiString {
            jvmti: self,
            ptr: signature,
        };
        check(CALL, code)?;
        signature.to_string().ok_or(JvmtiError {
            call: CALL,
            code: JVMTI_ERROR_NULL_POINTER,
        })
    }

    /// The name of `thread` ([`ThreadRef::current`] for the calling thread)
    /// from `GetThreadInfo`, or `None` if JVMTI cannot tell (e.g. the thread
    /// is not alive yet, or the VM is in the wrong phase). The two local
    /// references it also returns are left to the callback's frame (module
    /// doc).
    pub fn current_thread_name(self, thread: ThreadRef<'_>) -> Option<String> {
        // SAFETY: `self.env` is valid (type invariant).
        let f = unsafe { function::GetThreadInfo(self.as_raw()) }?;
        let mut info = jvmtiThreadInfo {
            name: ptr::null_mut(),
            priority: 0,
            is_daemon: 0,
            thread_group: ptr::null_mut(),
            context_class_loader: ptr::null_mut(),
        };
        // SAFETY: `f` is the table's GetThreadInfo; `thread` is null or live
        // (`ThreadRef` invariant); `info` is a valid, writable
        // `jvmtiThreadInfo` (layout checked by the tests).
        let code = unsafe { f(self.as_raw(), thread.as_raw(), &mut info) };
        let name = JvmtiString {
            jvmti: self,
            ptr: info.name,
        };
        if code != JVMTI_ERROR_NONE {
            return None;
        }
        name.to_string()
    }

    /// Number of frames on `thread`'s Java stack (`GetFrameCount`).
    pub fn frame_count(self, thread: ThreadRef<'_>) -> Result<u32, JvmtiError> {
        const CALL: &str = "GetFrameCount";
        // SAFETY: `self.env` is valid (type invariant).
        let f = unsafe { function::GetFrameCount(self.as_raw()) }.ok_or_else(|| missing(CALL))?;
        let mut count: jint = 0;
        // SAFETY: `f` is the table's GetFrameCount; `thread` is null or live
        // (`ThreadRef` invariant); `count` is a valid out-pointer.
        check(CALL, unsafe {
            f(self.as_raw(), thread.as_raw(), &mut count)
        })?;
        // A negative count would be a JVM bug; report it rather than wrap.
        u32::try_from(count).map_err(|_| JvmtiError {
            call: CALL,
            code: JVMTI_ERROR_INTERNAL,
        })
    }

    /// Samples about one allocation every `bytes` allocated per thread
    /// (`SetHeapSamplingInterval`; 0 samples every allocation).
    pub fn set_heap_sampling_interval(self, bytes: i32) -> Result<(), JvmtiError> {
        const CALL: &str = "SetHeapSamplingInterval";
        // SAFETY: `self.env` is valid (type invariant).
        let f = unsafe { function::SetHeapSamplingInterval(self.as_raw()) }
            .ok_or_else(|| missing(CALL))?;
        // SAFETY: `f` is the table's SetHeapSamplingInterval; it takes an int.
        check(CALL, unsafe { f(self.as_raw(), bytes) })
    }

    /// The JVM's timer, in nanoseconds (`GetTime`).
    pub fn time_nanos(self) -> Result<i64, JvmtiError> {
        const CALL: &str = "GetTime";
        // SAFETY: `self.env` is valid (type invariant).
        let f = unsafe { function::GetTime(self.as_raw()) }.ok_or_else(|| missing(CALL))?;
        let mut nanos: jlong = 0;
        // SAFETY: `f` is the table's GetTime; `nanos` is a valid out-pointer.
        check(CALL, unsafe { f(self.as_raw(), &mut nanos) })?;
        Ok(nanos)
    }

    /// Stores `data` as this environment's value for `thread`
    /// (`SetThreadLocalStorage`). JVMTI only keeps the pointer and never
    /// dereferences it; what it points to stays the caller's to manage.
    // Clippy cannot see that `data` is only stored: nobody dereferences it
    // without an `unsafe` block of their own.
    #[allow(clippy::not_unsafe_ptr_arg_deref)]
    pub fn set_thread_local(
        self,
        thread: ThreadRef<'_>,
        data: *const c_void,
    ) -> Result<(), JvmtiError> {
        const CALL: &str = "SetThreadLocalStorage";
        // SAFETY: `self.env` is valid (type invariant).
        let f = unsafe { function::SetThreadLocalStorage(self.as_raw()) }
            .ok_or_else(|| missing(CALL))?;
        // SAFETY: `f` is the table's SetThreadLocalStorage; `thread` is null
        // or live (`ThreadRef` invariant); `data` is stored, never
        // dereferenced.
        check(CALL, unsafe { f(self.as_raw(), thread.as_raw(), data) })
    }

    /// The value last stored by [`Jvmti::set_thread_local`] for `thread`
    /// (null if none) (`GetThreadLocalStorage`).
    pub fn thread_local(self, thread: ThreadRef<'_>) -> Result<*mut c_void, JvmtiError> {
        const CALL: &str = "GetThreadLocalStorage";
        // SAFETY: `self.env` is valid (type invariant).
        let f = unsafe { function::GetThreadLocalStorage(self.as_raw()) }
            .ok_or_else(|| missing(CALL))?;
        let mut data: *mut c_void = ptr::null_mut();
        // SAFETY: `f` is the table's GetThreadLocalStorage; `thread` is null
        // or live (`ThreadRef` invariant); `data` is a valid out-pointer.
        check(CALL, unsafe {
            f(self.as_raw(), thread.as_raw(), &mut data)
        })?;
        Ok(data)
    }

    /// The JVM's own name for error `code` (`GetErrorName`), e.g.
    /// `JVMTI_ERROR_WRONG_PHASE`; `None` if it does not know the code.
    /// [`JvmtiError`]'s `Display` uses a built-in table instead, so it needs
    /// no environment.
    pub fn error_name(self, code: jvmtiError) -> Option<String> {
        // SAFETY: `self.env` is valid (type invariant).
        let f = unsafe { function::GetErrorName(self.as_raw()) }?;
        let mut name: *mut c_char = ptr::null_mut();
        // SAFETY: `f` is the table's GetErrorName; `name` is a valid
        // out-pointer.
        let rc = unsafe { f(self.as_raw(), code, &mut name) };
        let name = JvmtiString {
            jvmti: self,
            ptr: name,
        };
        if rc != JVMTI_ERROR_NONE {
            return None;
        }
        name.to_string()
    }
}

/// A NUL-terminated string allocated by JVMTI, given back with `Deallocate`
/// when dropped (null is allowed and ignored).
struct JvmtiString {
    jvmti: Jvmti,
    ptr: *mut c_char,
}

impl JvmtiString {
    /// The text, decoded leniently: JVMTI strings are "modified UTF-8", which
    /// differs from UTF-8 only for NUL and characters outside the BMP; those
    /// come out as U+FFFD.
    fn to_string(&self) -> Option<String> {
        if self.ptr.is_null() {
            return None;
        }
        // SAFETY: a non-null string returned by JVMTI is NUL-terminated and
        // stays allocated until `Drop` deallocates it, after this borrow.
        let text = unsafe { CStr::from_ptr(self.ptr) };
        Some(text.to_string_lossy().into_owned())
    }
}

impl Drop for JvmtiString {
    fn drop(&mut self) {
        if self.ptr.is_null() {
            return;
        }
        // SAFETY: `self.jvmti` is valid (type invariant).
        if let Some(deallocate) = unsafe { function::Deallocate(self.jvmti.as_raw()) } {
            // SAFETY: `self.ptr` was allocated by this environment and is
            // freed exactly once, here. Nothing useful can be done if
            // deallocation fails, so its status is ignored.
            unsafe { deallocate(self.jvmti.as_raw(), self.ptr.cast()) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_call_and_the_code() {
        let err = JvmtiError {
            call: "GetMethodName",
            code: 23,
        };
        assert_eq!(
            err.to_string(),
            "JVMTI GetMethodName failed: JVMTI_ERROR_INVALID_METHODID (23)"
        );
        let err = JvmtiError {
            call: "GetTime",
            code: 4242,
        };
        assert_eq!(
            err.to_string(),
            "JVMTI GetTime failed: unknown JVMTI error 4242"
        );
    }

    #[test]
    fn null_vm_is_an_error_not_a_crash() {
        // SAFETY: null is explicitly allowed by `from_vm`'s contract.
        let err = unsafe { Jvmti::from_vm(ptr::null_mut()) }.unwrap_err();
        assert_eq!(err.call, "GetEnv");
        assert_eq!(err.code, JVMTI_ERROR_NULL_POINTER);
    }
}
