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
/// now on. `/tmp` is everyone's, and the JVM may run as root: the map is
/// made new under an unguessable name and renamed over `perf-PID.map`
/// (a stale map of an earlier process with this pid, or a link someone
/// planted there, is replaced, never written through:
/// `idleflow_format::files`).
pub fn open() -> Result<(), String> {
    let path = path(std::process::id());
    idleflow_format::files::stage(&path)
        .map_err(std::io::Error::from)
        .and_then(|(file, staged)| {
            idleflow_format::files::set_append(&file)?;
            staged.commit().map(|()| file)
        })
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
/// `start`, named `package.Class.method(parameter types)`; `inlined`: its
/// inlining records ([`crate::env::inline_records`]). After the method's
/// line, each call site inside methods the JIT inlined gets a line of its
/// own that names the chain ([`inlined_ranges`]): written later, it wins
/// over the method's line for its addresses.
pub fn compiled_method_load(
    jvmti: Jvmti,
    method: MethodId,
    start: u64,
    size: u64,
    inlined: &[crate::env::InlinePc],
) {
    let mut names: std::collections::HashMap<MethodId, String> = Default::default();
    let mut name_of = |m: MethodId| -> String {
        names
            .entry(m)
            .or_insert_with(|| match jvmti.method_descriptor(m) {
                Ok((class, name, signature)) => format!(
                    "{}.{name}{}",
                    java_class_name(&class),
                    java_parameters(&signature)
                ),
                Err(e) => format!("<compiled method: {e}>"),
            })
            .clone()
    };
    append(start, size, &name_of(method));
    let pcs: Vec<(u64, &[MethodId])> = inlined.iter().map(|p| (p.pc, &p.methods[..])).collect();
    for (from, to, i) in inlined_ranges(start, start.saturating_add(size), &pcs) {
        // The compiled method outermost, then each inlined one inwards,
        // without parameters (a path names Java methods without them).
        let chain: Vec<String> = inlined[i]
            .methods
            .iter()
            .rev()
            .map(|&m| {
                let name = name_of(m);
                name.split_once('(')
                    .map_or(name.clone(), |(n, _)| n.to_string())
            })
            .collect();
        append(from, to - from, &chain.join(INLINED));
    }
}

/// What joins a chain of inlined methods in a perf-map name, outermost
/// first (`Outer.run()->Inner.get()`): no Java name holds it.
pub const INLINED: &str = "->";

/// The address ranges that name inlined methods, as (from, to, index in
/// `pcs`): `pcs` are a compiled method's (address, methods on the
/// compile-time stack) in address order, inside [`start`, `end`). A frame
/// of the method on a stack holds a return address, which is such an
/// address, and the unwinder looks up that address minus one, inside the
/// call: so an address with more than one method names the range from the
/// address before it (or the method's start) up to it. Adjacent ranges of
/// the same chain are one.
pub fn inlined_ranges<T: PartialEq>(
    start: u64,
    end: u64,
    pcs: &[(u64, &[T])],
) -> Vec<(u64, u64, usize)> {
    let mut out: Vec<(u64, u64, usize)> = Vec::new();
    let mut from = start;
    for (i, &(pc, methods)) in pcs.iter().enumerate() {
        if pc <= from || pc > end {
            continue;
        }
        if methods.len() > 1 {
            match out.last_mut() {
                Some(last) if last.1 == from && pcs[last.2].1 == methods => last.1 = pc,
                _ => out.push((from, pc, i)),
            }
        }
        from = pc;
    }
    out
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

    #[test]
    fn inlined_call_sites_name_the_range_that_ends_at_their_return_address() {
        // A method at 0x100..0x200: call sites at 0x120 (not inlined),
        // 0x140 and 0x160 (inlined), a duplicate 0x160, 0x300 outside.
        let (one, two, three): (&[u8], &[u8], &[u8]) = (&[1], &[2, 1], &[3, 2, 1]);
        let pcs = [
            (0x120, one),
            (0x140, two),
            (0x160, three),
            (0x160, three),
            (0x170, three),
            (0x300, two),
        ];
        // 0x160 and 0x170 hold the same chain: one range.
        assert_eq!(
            inlined_ranges(0x100, 0x200, &pcs),
            vec![(0x120, 0x140, 1), (0x140, 0x170, 2)]
        );
        // A return address looked up minus one lands in its own range.
        let r = inlined_ranges(0x100, 0x200, &pcs);
        for (ret, chain) in [(0x140u64, two), (0x160, three), (0x170, three)] {
            let lookup = ret - 1;
            assert!(r
                .iter()
                .any(|&(a, b, i)| (a..b).contains(&lookup) && pcs[i].1 == chain));
        }
        assert!(inlined_ranges::<u8>(0x100, 0x200, &[]).is_empty());
    }
}
