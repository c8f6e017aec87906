//! The light mode (`perfmap=1`): the agent writes the JVM's perf map,
//! `/tmp/perf-PID.map`, one `START SIZE name` line (hex, perf's
//! convention) per blob of code as the JVM makes it: each JIT-compiled
//! method (`CompiledMethodLoad`) and each piece of code the VM generates
//! for itself, such as the interpreter and the stubs
//! (`DynamicCodeGenerated`). It records no method entries or exits, so the
//! JVM runs at full speed; with `-XX:+PreserveFramePointer` the recorder's
//! stack copies walk through the JIT frames this map names.
//!
//! Invariants: the file is created empty when the agent loads (a process
//! that had the same pid before leaves nothing behind) and is then only
//! appended to, one whole line per `write` on an `O_APPEND` file, so the
//! compiler threads never interleave and a reader at any time sees whole
//! lines. A blob written later supersedes an earlier one at the same
//! addresses (a JIT reuses code space), as perf reads the file. Nothing is
//! buffered: a JVM killed at any moment leaves every blob it announced. A
//! write that fails is reported once; the JVM keeps running.

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use crate::env::{java_class_name, java_parameters, Jvmti, MethodId};

struct PerfMap {
    path: PathBuf,
    file: File,
}

static MAP: OnceLock<PerfMap> = OnceLock::new();
static WARNED: AtomicBool = AtomicBool::new(false);

/// The perf map of the process `pid`, where perf and idleflow look for it.
pub fn path(pid: u32) -> PathBuf {
    PathBuf::from(format!("/tmp/perf-{pid}.map"))
}

/// Creates this JVM's perf map, empty; the blobs are appended to it from
/// now on.
pub fn open() -> Result<(), String> {
    let path = path(std::process::id());
    // Truncated first (a stale map of an earlier process with this pid),
    // then opened again to append: one open cannot do both.
    File::create(&path)
        .and_then(|_| File::options().append(true).open(&path))
        .map_err(|e| format!("cannot create the perf map {}: {e}", path.display()))
        .and_then(|file| {
            MAP.set(PerfMap { path, file })
                .map_err(|_| "the perf map was opened twice".to_string())
        })
}

/// One perf-map line: `START SIZE name`, hex without `0x`, as perf reads it.
pub fn line(start: u64, size: u64, name: &str) -> String {
    // A name is one line's last field: no line breaks inside it.
    let name: String = name
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    format!("{start:x} {size:x} {name}\n")
}

fn append(start: u64, size: u64, name: &str) {
    let Some(map) = MAP.get() else { return };
    if size == 0 {
        return;
    }
    if let Err(e) = (&map.file).write_all(line(start, size, name).as_bytes()) {
        if !WARNED.swap(true, Ordering::Relaxed) {
            eprintln!(
                "idleflow-agent: cannot write the perf map {}: {e}; later JIT code stays unnamed",
                map.path.display()
            );
        }
    }
}

/// `CompiledMethodLoad`: `method` now runs as `size` bytes of JIT code at
/// `start`, named `package.Class.method(parameter types)`.
pub fn compiled_method_load(jvmti: Jvmti, method: MethodId, start: u64, size: u64) {
    let name = match jvmti.method_descriptor(method) {
        Ok((class, name, signature)) => format!(
            "{}.{name}{}",
            java_class_name(&class),
            java_parameters(&signature)
        ),
        Err(e) => format!("<compiled method: {e}>"),
    };
    append(start, size, &name);
}

/// `DynamicCodeGenerated`: the VM generated `size` bytes of its own code
/// named `name` (`Interpreter`, `StubRoutines (1)`, …) at `start`.
pub fn dynamic_code_generated(name: &str, start: u64, size: u64) {
    append(start, size, name);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_perfs_hex_format_on_one_line() {
        assert_eq!(
            line(0x7f00_0000_1000, 0x80, "Interpreter"),
            "7f0000001000 80 Interpreter\n"
        );
        assert_eq!(line(0x10, 0x2, "a\nb\rc"), "10 2 a b c\n");
    }
}
