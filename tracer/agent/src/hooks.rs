//! What the agent does at each JVMTI event, as plain safe Rust: the
//! trampolines in `lib.rs` catch panics and hand over a [`Jvmti`] plus the
//! event's arguments.
//!
//! This is the SMOKE version: it counts method entries and exits and prints
//! the totals at VM death, enough to prove the FFI plumbing end to end
//! (`tests/smoke.rs`). It is meant to be replaced wholesale; a replacement
//! keeps the signatures, the `idleflow-agent: N method entries, M exits` line
//! (or updates the smoke test), and the rule that [`on_load`] rejects options
//! it does not understand (the smoke test checks that path too).
//!
//! Invariant: nothing here blocks or allocates per event; the counters are
//! relaxed atomics because they are only read at VM death, after the JVM has
//! stopped posting entry/exit events.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::env::{Jvmti, MethodId, ThreadRef};

static METHOD_ENTRIES: AtomicU64 = AtomicU64::new(0);
static METHOD_EXITS: AtomicU64 = AtomicU64::new(0);

/// Called first in `Agent_OnLoad` with the text after `=` in
/// `-agentpath:libidleflow_agent.so=OPTIONS` (empty when there is none).
/// An `Err` is printed and the agent stays inert.
pub fn on_load(options: &str) -> Result<(), String> {
    if options.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "unknown options {options:?} (this agent takes none)"
        ))
    }
}

/// The VM finished initialising (live phase begins).
pub fn vm_init(_jvmti: Jvmti) {}

/// The VM is about to exit; no further events will be posted.
pub fn vm_death(_jvmti: Jvmti) {
    let entries = METHOD_ENTRIES.load(Ordering::Relaxed);
    let exits = METHOD_EXITS.load(Ordering::Relaxed);
    // A failed write to stderr is not worth a panic.
    let _ = writeln!(
        std::io::stderr(),
        "idleflow-agent: {entries} method entries, {exits} exits"
    );
}

/// A thread started (it is the current thread).
pub fn thread_start(_jvmti: Jvmti, _thread: ThreadRef<'_>) {}

/// A thread is ending (it is the current thread).
pub fn thread_end(_jvmti: Jvmti, _thread: ThreadRef<'_>) {}

/// `thread` entered `method`.
pub fn method_entry(_jvmti: Jvmti, _thread: ThreadRef<'_>, _method: MethodId) {
    METHOD_ENTRIES.fetch_add(1, Ordering::Relaxed);
}

/// `thread` left `method`, by a return or by an exception.
pub fn method_exit(_jvmti: Jvmti, _thread: ThreadRef<'_>, _method: MethodId, _by_exception: bool) {
    METHOD_EXITS.fetch_add(1, Ordering::Relaxed);
}
