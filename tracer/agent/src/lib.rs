//! `idleflow-agent`: the JVMTI agent that lets idleflow see Java method
//! entries and exits. Built as a `cdylib` and loaded with
//! `java -agentpath:/path/to/libidleflow_agent.so[=OPTIONS]`.
//!
//! The crate owns the JVM side of the FFI boundary and nothing above it:
//! - [`jvmti`]: raw bindings for the part of `jvmti.h` we use, checked slot by
//!   slot against the JDK 17 and JDK 25 headers (`tests/jvmti_header.rs`);
//! - [`env`](mod@env): the safe [`Jvmti`] handle, typed [`JvmtiError`]s, and
//!   [`java_class_name`];
//! - [`hooks`]: what to do at each event of the tree mode (the default),
//!   in safe Rust: a call tree per thread from method entries and exits;
//! - [`perfmap`]: the light mode (`tree=0,perfmap=1`): no entries or exits,
//!   only the JVM's perf map from `CompiledMethodLoad` and
//!   `DynamicCodeGenerated`;
//! - this file: `Agent_OnLoad` and one `extern "system"` trampoline per event.
//!
//! Invariants:
//! - No panic crosses the FFI boundary. `Agent_OnLoad` and every trampoline
//!   run their body inside `catch_unwind`; a panic becomes one line on
//!   stderr, never an unwind into the JVM (which would abort it).
//! - All unsafe operations (dereferencing JVM pointers, calling through the
//!   JVMTI function table, reading C strings) live in `jvmti.rs` and
//!   `env.rs`. The `unsafe` blocks here only hand the JVM's raw arguments to
//!   `env`'s constructors, whose contracts the JVM's calling convention
//!   meets.
//! - The agent never takes the JVM down: any failure while loading is printed
//!   once to stderr, prefixed `idleflow-agent:`, and `Agent_OnLoad` still
//!   returns `JNI_OK` with events left disabled, so the program runs as if
//!   the agent were absent.

pub mod clock;
pub mod env;
pub mod hooks;
pub mod jvmti;
pub mod perfmap;
pub mod tree;

use std::any::Any;
use std::ffi::{c_char, c_void};
use std::io::Write;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};

use jni_sys::{jclass, jint, jlong, jmethodID, jobject, jvalue, JNIEnv, JavaVM, JNI_OK};

pub use env::{java_class_name, Caps, Jvmti, JvmtiError, MethodId, ThreadRef};
use jvmti::{jthread, jvmtiEnv, jvmtiEvent, jvmtiEventCallbacks, JvmtiBool};

/// The events the tree mode turns on, in the order it turns them on.
const TREE_EVENTS: [jvmtiEvent; 7] = [
    jvmti::JVMTI_EVENT_VM_INIT,
    jvmti::JVMTI_EVENT_VM_DEATH,
    jvmti::JVMTI_EVENT_THREAD_START,
    jvmti::JVMTI_EVENT_THREAD_END,
    jvmti::JVMTI_EVENT_METHOD_ENTRY,
    jvmti::JVMTI_EVENT_METHOD_EXIT,
    jvmti::JVMTI_EVENT_SAMPLED_OBJECT_ALLOC,
];

/// The events the perf-map writer turns on.
const PERFMAP_EVENTS: [jvmtiEvent; 2] = [
    jvmti::JVMTI_EVENT_COMPILED_METHOD_LOAD,
    jvmti::JVMTI_EVENT_DYNAMIC_CODE_GENERATED,
];

/// Bytes allocated per thread between two allocation samples (AO / AB).
const HEAP_SAMPLING_INTERVAL: i32 = 512 * 1024;

/// Entry point called by the JVM when it loads the library through
/// `-agentpath:` (or `-agentlib:`), before any Java code runs.
///
/// Always returns `JNI_OK`: a failure is reported on stderr and leaves the
/// agent inert rather than stopping the JVM.
///
/// # Safety
/// Called by the JVM only: `vm` is its `JavaVM*`, `options` null or a
/// NUL-terminated string valid for the call.
#[no_mangle]
pub unsafe extern "system" fn Agent_OnLoad(
    vm: *mut JavaVM,
    options: *mut c_char,
    _reserved: *mut c_void,
) -> jint {
    let mut option_text = String::new();
    let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the JVM passes null or a NUL-terminated string that is
        // valid for the duration of `Agent_OnLoad`.
        let options = unsafe { env::agent_options(options) }?;
        option_text.clone_from(&options);
        let opts = hooks::on_load(&options)?;
        if opts.perfmap {
            match perfmap::open() {
                Ok(()) => {}
                // The light mode has nothing else to do.
                Err(e) if !opts.tree => return Err(e),
                // The call trees do not need the map: go on without it.
                Err(e) => report_once(&format!("{e}; JIT frames stay unnamed")),
            }
        }
        // SAFETY: `vm` is the JVM's own `JavaVM*`, valid until it exits, and
        // the environment we get from it lives as long.
        let jvmti = unsafe { Jvmti::from_vm(vm) }.map_err(|e| e.to_string())?;
        start(jvmti, opts.tree, opts.perfmap)?;
        if opts.tree {
            // The thread loading the agent creates the VM and then runs
            // `main`: trace it from now on, so that its dispatches during VM
            // start-up are tagged with its root node.
            hooks::thread_start(jvmti, ThreadRef::current());
        }
        Ok::<(), String>(())
    }));
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(message)) => {
            report_once(&format!("{message}; agent disabled"));
            hooks::note_disabled(&option_text, &message);
        }
        Err(payload) => report_once(&format!(
            "panic while loading: {}; agent disabled",
            panic_message(payload.as_ref())
        )),
    }
    JNI_OK
}

/// Adds the capabilities, installs the trampolines and enables the events
/// of the modes asked for ([`TREE_EVENTS`], [`PERFMAP_EVENTS`]). If
/// enabling fails part-way, the events already enabled are disabled again,
/// so the agent is either fully on or fully off.
fn start(jvmti: Jvmti, tree: bool, perfmap: bool) -> Result<(), String> {
    let mut caps = Caps::default();
    if tree {
        caps.set_can_generate_method_entry_events()
            .set_can_generate_method_exit_events()
            .set_can_generate_sampled_object_alloc_events();
    }
    if perfmap {
        caps.set_can_generate_compiled_method_load_events();
    }
    jvmti.add_capabilities(&caps).map_err(|e| e.to_string())?;
    if tree {
        jvmti
            .set_heap_sampling_interval(HEAP_SAMPLING_INTERVAL)
            .map_err(|e| e.to_string())?;
    }

    let callbacks = jvmtiEventCallbacks {
        VMInit: Some(on_vm_init),
        VMDeath: Some(on_vm_death),
        ThreadStart: Some(on_thread_start),
        ThreadEnd: Some(on_thread_end),
        MethodEntry: Some(on_method_entry),
        MethodExit: Some(on_method_exit),
        SampledObjectAlloc: Some(on_sampled_object_alloc),
        CompiledMethodLoad: Some(on_compiled_method_load),
        DynamicCodeGenerated: Some(on_dynamic_code_generated),
        ..jvmtiEventCallbacks::default()
    };
    jvmti.set_callbacks(&callbacks).map_err(|e| e.to_string())?;

    let events: Vec<jvmtiEvent> = [(tree, &TREE_EVENTS[..]), (perfmap, &PERFMAP_EVENTS[..])]
        .into_iter()
        .filter(|(on, _)| *on)
        .flat_map(|(_, events)| events.iter().copied())
        .collect();
    for (i, &event) in events.iter().enumerate() {
        if let Err(e) = jvmti.enable(event) {
            for &enabled in &events[..i] {
                // Best effort: we are already reporting the first failure.
                let _ = jvmti.disable(enabled);
            }
            return Err(format!("{e} (event {event})"));
        }
    }
    Ok(())
}

static REPORTED: AtomicBool = AtomicBool::new(false);

/// Prints `idleflow-agent: <message>` to stderr, the first time only: a
/// failure inside a per-method callback would otherwise repeat millions of
/// times.
fn report_once(message: &str) {
    if !REPORTED.swap(true, Ordering::Relaxed) {
        let _ = writeln!(std::io::stderr(), "idleflow-agent: {message}");
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "(non-string panic payload)"
    }
}

/// Runs an event's body, catching any panic so it never unwinds into the
/// JVM; the first one is reported.
fn guarded(event: &str, body: impl FnOnce()) {
    if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(body)) {
        report_once(&format!(
            "panic in {event} callback: {}",
            panic_message(payload.as_ref())
        ));
    }
}

// The trampolines. The JVM calls each with the environment the callback was
// installed in (valid until the JVM exits), a `thread` that is a JNI local
// reference live until the callback returns, and a `method` ID it issued.
// Those facts are the whole SAFETY argument of the `from_raw` calls below;
// the `ThreadRef`s they make are borrowed by the hooks and cannot outlive
// the callback. `from_raw` cannot panic, so it may run outside `guarded`.

unsafe extern "system" fn on_vm_init(env: *mut jvmtiEnv, _jni: *mut JNIEnv, _thread: jthread) {
    // SAFETY: see the comment above the trampolines.
    let jvmti = unsafe { Jvmti::from_raw(env) };
    guarded("VMInit", || {
        if let Some(jvmti) = jvmti {
            hooks::vm_init(jvmti);
        }
    });
}

unsafe extern "system" fn on_vm_death(env: *mut jvmtiEnv, _jni: *mut JNIEnv) {
    // SAFETY: see the comment above the trampolines.
    let jvmti = unsafe { Jvmti::from_raw(env) };
    guarded("VMDeath", || {
        if let Some(jvmti) = jvmti {
            hooks::vm_death(jvmti);
        }
    });
}

unsafe extern "system" fn on_thread_start(env: *mut jvmtiEnv, _jni: *mut JNIEnv, thread: jthread) {
    // SAFETY: see the comment above the trampolines.
    let (jvmti, thread) = unsafe { (Jvmti::from_raw(env), ThreadRef::from_raw(thread)) };
    guarded("ThreadStart", || {
        if let Some(jvmti) = jvmti {
            hooks::thread_start(jvmti, thread);
        }
    });
}

unsafe extern "system" fn on_thread_end(env: *mut jvmtiEnv, _jni: *mut JNIEnv, thread: jthread) {
    // SAFETY: see the comment above the trampolines.
    let (jvmti, thread) = unsafe { (Jvmti::from_raw(env), ThreadRef::from_raw(thread)) };
    guarded("ThreadEnd", || {
        if let Some(jvmti) = jvmti {
            hooks::thread_end(jvmti, thread);
        }
    });
}

unsafe extern "system" fn on_method_entry(
    env: *mut jvmtiEnv,
    _jni: *mut JNIEnv,
    thread: jthread,
    method: jmethodID,
) {
    // SAFETY: see the comment above the trampolines.
    let (jvmti, thread, method) = unsafe {
        (
            Jvmti::from_raw(env),
            ThreadRef::from_raw(thread),
            MethodId::from_raw(method),
        )
    };
    guarded("MethodEntry", || {
        if let Some(jvmti) = jvmti {
            hooks::method_entry(jvmti, thread, method);
        }
    });
}

unsafe extern "system" fn on_method_exit(
    env: *mut jvmtiEnv,
    _jni: *mut JNIEnv,
    thread: jthread,
    method: jmethodID,
    was_popped_by_exception: JvmtiBool,
    _return_value: jvalue,
) {
    // SAFETY: see the comment above the trampolines.
    let (jvmti, thread, method) = unsafe {
        (
            Jvmti::from_raw(env),
            ThreadRef::from_raw(thread),
            MethodId::from_raw(method),
        )
    };
    guarded("MethodExit", || {
        if let Some(jvmti) = jvmti {
            hooks::method_exit(jvmti, thread, method, was_popped_by_exception != 0);
        }
    });
}

unsafe extern "system" fn on_sampled_object_alloc(
    env: *mut jvmtiEnv,
    _jni: *mut JNIEnv,
    thread: jthread,
    _object: jobject,
    _klass: jclass,
    size: jlong,
) {
    // SAFETY: see the comment above the trampolines.
    let (jvmti, thread) = unsafe { (Jvmti::from_raw(env), ThreadRef::from_raw(thread)) };
    guarded("SampledObjectAlloc", || {
        if let Some(jvmti) = jvmti {
            hooks::sampled_alloc(jvmti, thread, size.max(0) as u64);
        }
    });
}

unsafe extern "system" fn on_compiled_method_load(
    env: *mut jvmtiEnv,
    method: jmethodID,
    code_size: jint,
    code_addr: *const c_void,
    _map_length: jint,
    _map: *const c_void,
    compile_info: *const c_void,
) {
    // SAFETY: see the comment above the trampolines; the code address and
    // size are only numbers here; `compile_info` is this callback's.
    let (jvmti, method) = unsafe { (Jvmti::from_raw(env), MethodId::from_raw(method)) };
    guarded("CompiledMethodLoad", || {
        if let Some(jvmti) = jvmti {
            // SAFETY: `compile_info` is this callback's (see above).
            let inlined = unsafe { env::inline_records(compile_info) };
            let (start, size) = (code_addr as u64, code_size.max(0) as u64);
            perfmap::compiled_method_load(jvmti, method, start, size, &inlined);
        }
    });
}

unsafe extern "system" fn on_dynamic_code_generated(
    _env: *mut jvmtiEnv,
    name: *const c_char,
    address: *const c_void,
    length: jint,
) {
    // SAFETY: the JVM lends `name`, NUL-terminated, for the callback.
    let name = unsafe { env::borrowed_text(name) };
    guarded("DynamicCodeGenerated", || {
        let name = name.as_deref().unwrap_or("<generated code>");
        perfmap::dynamic_code_generated(name, address as u64, length.max(0) as u64);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panic_messages_are_extracted() {
        let payload = panic::catch_unwind(|| panic!("boom {}", 1)).unwrap_err();
        assert_eq!(panic_message(payload.as_ref()), "boom 1");
        let payload = panic::catch_unwind(|| std::panic::panic_any(7u8)).unwrap_err();
        assert_eq!(
            panic_message(payload.as_ref()),
            "(non-string panic payload)"
        );
    }

    #[test]
    fn a_panicking_hook_does_not_unwind_out_of_guarded() {
        let mut ran = false;
        guarded("Test", || {
            ran = true;
            panic!("hook failed");
        });
        assert!(ran);
        assert!(REPORTED.load(Ordering::Relaxed));
    }
}
