//! Checks the hand-written bindings of `src/jvmti.rs` against the real
//! `jvmti.h`, number by number: function-table slots, capability bits,
//! callback-struct fields, event and error codes, and the few constants.
//!
//! The JDK 17 header is required (it is the layout we follow exactly); the
//! JDK 25 header is checked when installed, where our structs must be a
//! prefix of its ones and its additions are printed.

use std::collections::BTreeMap;
use std::mem::{offset_of, size_of};
use std::path::Path;

use idleflow_agent::jvmti::{
    self, jvmtiCapabilities, jvmtiEventCallbacks, jvmtiInterface_1_, CAPABILITY_BITS, ERROR_NAMES,
    EVENT_NAMES, FUNCTION_SLOTS, JVMTI_FUNCTION_COUNT,
};

const JDK17_HEADER: &str = "/usr/lib/jvm/java-17-openjdk-amd64/include/jvmti.h";
const JDK25_HEADER: &str = "/usr/lib/jvm/temurin-25-jdk-amd64/include/jvmti.h";

/// What we read out of one `jvmti.h`.
struct Header {
    /// `struct jvmtiInterface_1_` members in order: (number in the comment, name).
    functions: Vec<(usize, String)>,
    /// `jvmtiEventCallbacks` fields in order: (event number in the comment, name).
    callbacks: Vec<(u32, String)>,
    /// `jvmtiCapabilities`: named field -> bit offset, and the total bit count.
    capabilities: BTreeMap<String, u32>,
    capability_bits: u32,
    /// `JVMTI_EVENT_…` and `JVMTI_ERROR_…` enumerators (without the `_MAX` ones).
    events: BTreeMap<String, u32>,
    errors: BTreeMap<String, u32>,
    /// Every other `NAME = value` enumerator (versions, event modes, …).
    constants: BTreeMap<String, String>,
}

/// The lines strictly between the line containing `open` and the first line
/// after it containing `close`.
fn block<'a>(text: &'a str, open: &str, close: &str) -> Vec<&'a str> {
    let lines: Vec<&str> = text.lines().collect();
    let close_at = lines
        .iter()
        .position(|l| l.contains(close))
        .unwrap_or_else(|| panic!("jvmti.h: no line containing {close:?}"));
    let open_at = lines[..close_at]
        .iter()
        .rposition(|l| l.contains(open))
        .unwrap_or_else(|| panic!("jvmti.h: no {open:?} before {close:?}"));
    lines[open_at + 1..close_at].to_vec()
}

/// The number in a `/*   64 : Get Method Name */` or `/*   72 */` comment.
fn comment_number(line: &str) -> Option<u32> {
    let inner = line.trim().strip_prefix("/*")?.strip_suffix("*/")?;
    let digits: String = inner
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

fn parse(path: &str) -> Header {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {path}: {e}"));

    // Function table: a numbering comment, then a `void *reservedN;` or a
    // `jvmtiError (JNICALL *Name) (...` member.
    let mut functions = Vec::new();
    let mut pending: Option<u32> = None;
    for line in block(
        &text,
        "typedef struct jvmtiInterface_1_ {",
        "} jvmtiInterface_1;",
    ) {
        if let Some(n) = comment_number(line) {
            pending = Some(n);
            continue;
        }
        let name = if let Some(rest) = line.split("(JNICALL *").nth(1) {
            rest.split(')').next().map(str::to_owned)
        } else {
            line.trim()
                .strip_prefix("void *")
                .and_then(|r| r.strip_suffix(';'))
                .map(str::to_owned)
        };
        if let Some(name) = name {
            let number = pending
                .take()
                .unwrap_or_else(|| panic!("{path}: function {name} has no numbering comment"));
            functions.push((number as usize, name));
        }
    }

    // Event callbacks: a numbering comment, then `jvmtiEventX Name;`.
    let mut callbacks = Vec::new();
    let mut pending: Option<u32> = None;
    for line in block(&text, "typedef struct {", "} jvmtiEventCallbacks;") {
        if let Some(n) = comment_number(line) {
            pending = Some(n);
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        if let [_ty, name] = words[..] {
            if let Some(name) = name.strip_suffix(';') {
                let number = pending
                    .take()
                    .unwrap_or_else(|| panic!("{path}: callback {name} has no numbering comment"));
                callbacks.push((number, name.to_owned()));
            }
        }
    }

    // Capabilities: `unsigned int name : W;` or `unsigned int : W;`, laid
    // out as GCC does: in 32-bit units from the low bit, a field that does
    // not fit in what is left of a unit starting the next one.
    let mut capabilities = BTreeMap::new();
    let mut bit = 0u32;
    for line in block(&text, "typedef struct {", "} jvmtiCapabilities;") {
        let Some(decl) = line
            .trim()
            .strip_prefix("unsigned int")
            .and_then(|r| r.strip_suffix(';'))
        else {
            continue;
        };
        let (name, width) = decl.split_once(':').expect("bit-field without width");
        let width: u32 = width.trim().parse().expect("bit-field width");
        if bit % 32 + width > 32 {
            bit = bit.next_multiple_of(32);
        }
        let name = name.trim();
        if !name.is_empty() {
            capabilities.insert(name.to_owned(), bit);
        }
        bit += width;
    }

    // Enumerators: `    NAME = value,` anywhere in the file.
    let mut events = BTreeMap::new();
    let mut errors = BTreeMap::new();
    let mut constants = BTreeMap::new();
    for line in text.lines() {
        let Some((name, value)) = line.trim().trim_end_matches(',').split_once(" = ") else {
            continue;
        };
        let name = name.trim();
        if !name.starts_with("JVMTI_") || name.contains(' ') || name.ends_with("_MAX") {
            continue;
        }
        let number = value.trim().parse::<u32>();
        if name.starts_with("JVMTI_EVENT_") {
            events.insert(name.to_owned(), number.expect("event value"));
        } else if name.starts_with("JVMTI_ERROR_") {
            errors.insert(name.to_owned(), number.expect("error value"));
        } else {
            constants.insert(name.to_owned(), value.trim().to_owned());
        }
    }

    Header {
        functions,
        callbacks,
        capabilities,
        capability_bits: bit,
        events,
        errors,
        constants,
    }
}

/// Our callback fields, by name, with their position (in pointers).
macro_rules! callback_positions {
    ($($field:ident),* $(,)?) => {
        vec![$((stringify!($field), offset_of!(jvmtiEventCallbacks, $field) / size_of::<usize>())),*]
    };
}

fn our_callbacks() -> Vec<(&'static str, usize)> {
    let fields = callback_positions![
        VMInit,
        VMDeath,
        ThreadStart,
        ThreadEnd,
        ClassFileLoadHook,
        ClassLoad,
        ClassPrepare,
        VMStart,
        Exception,
        ExceptionCatch,
        SingleStep,
        FramePop,
        Breakpoint,
        FieldAccess,
        FieldModification,
        MethodEntry,
        MethodExit,
        NativeMethodBind,
        CompiledMethodLoad,
        CompiledMethodUnload,
        DynamicCodeGenerated,
        DataDumpRequest,
        reserved72,
        MonitorWait,
        MonitorWaited,
        MonitorContendedEnter,
        MonitorContendedEntered,
        reserved77,
        reserved78,
        reserved79,
        ResourceExhausted,
        GarbageCollectionStart,
        GarbageCollectionFinish,
        ObjectFree,
        VMObjectAlloc,
        reserved85,
        SampledObjectAlloc,
    ];
    // Listing every field is what makes the position check complete.
    assert_eq!(
        fields.len() * size_of::<usize>(),
        size_of::<jvmtiEventCallbacks>(),
        "callback_positions! must list every field of jvmtiEventCallbacks"
    );
    fields
}

/// Checks everything; `exact` is true for the header whose layout we follow
/// (JDK 17), false for a newer one, which may only append.
fn check(path: &str, exact: bool) {
    let h = parse(path);
    let mut problems: Vec<String> = Vec::new();
    let mut notes: Vec<String> = Vec::new();

    // 1. Function table: the header's own numbering is consecutive, and each
    //    slot constant is that function's position.
    for (ordinal, (number, name)) in h.functions.iter().enumerate() {
        if *number != ordinal + 1 {
            problems.push(format!(
                "header member {name} is number {number} but position {}",
                ordinal + 1
            ));
        }
    }
    if h.functions.len() != JVMTI_FUNCTION_COUNT {
        problems.push(format!(
            "jvmtiInterface_1_ has {} slots, JVMTI_FUNCTION_COUNT is {JVMTI_FUNCTION_COUNT}",
            h.functions.len()
        ));
    }
    assert_eq!(
        size_of::<jvmtiInterface_1_>(),
        JVMTI_FUNCTION_COUNT * size_of::<usize>()
    );
    for &(name, index) in FUNCTION_SLOTS {
        match h.functions.iter().position(|(_, n)| n == name) {
            Some(ordinal) if ordinal == index => {}
            Some(ordinal) => problems.push(format!(
                "slot::{name} = {index}, but the header has it at index {ordinal} (number {})",
                ordinal + 1
            )),
            None => problems.push(format!("slot::{name}: not in jvmtiInterface_1_")),
        }
    }

    // 2. Capabilities: 128 bits, and each bit we set is that field's bit.
    if h.capability_bits != 128 || size_of::<jvmtiCapabilities>() * 8 != 128 {
        problems.push(format!(
            "jvmtiCapabilities is {} bits in the header, {} in Rust",
            h.capability_bits,
            size_of::<jvmtiCapabilities>() * 8
        ));
    }
    for &(name, bit) in CAPABILITY_BITS {
        match h.capabilities.get(name) {
            Some(&header_bit) if header_bit == bit => {}
            Some(&header_bit) => problems.push(format!(
                "{name}: bit {bit} here, {header_bit} in the header"
            )),
            None => problems.push(format!("{name}: not in jvmtiCapabilities")),
        }
    }

    // 3. Callbacks: the header's numbering is 50, 51, …; our fields are its
    //    first fields, same names, same positions.
    for (ordinal, (number, name)) in h.callbacks.iter().enumerate() {
        if *number != 50 + ordinal as u32 {
            problems.push(format!(
                "header callback {name} is event {number} at position {ordinal}"
            ));
        }
    }
    let ours = our_callbacks();
    for &(name, position) in &ours {
        match h.callbacks.get(position) {
            Some((_, header_name)) if header_name == name => {}
            Some((_, header_name)) => problems.push(format!(
                "callback field {position} is {name} here, {header_name} in the header"
            )),
            None => problems.push(format!(
                "callback field {position} ({name}) is past the header's {} fields",
                h.callbacks.len()
            )),
        }
    }
    if h.callbacks.len() != ours.len() {
        let message = format!(
            "jvmtiEventCallbacks has {} fields in the header, {} here; extra: {:?}",
            h.callbacks.len(),
            ours.len(),
            h.callbacks.get(ours.len()..).unwrap_or_default()
        );
        if exact || h.callbacks.len() < ours.len() {
            problems.push(message);
        } else {
            notes.push(message);
        }
    }

    // 4. Events: ours equal the header's; a newer header may add some.
    for &(name, value) in EVENT_NAMES {
        match h.events.get(name) {
            Some(&v) if v == value => {}
            Some(&v) => problems.push(format!("{name} = {value} here, {v} in the header")),
            None => problems.push(format!("{name}: not in the header")),
        }
    }
    for (name, value) in &h.events {
        if !EVENT_NAMES.iter().any(|(n, _)| n == name) {
            let message = format!("header event {name} = {value} has no constant here");
            if exact {
                problems.push(message);
            } else {
                notes.push(message);
            }
        }
    }

    // 5. Errors: every header error is named here (for messages), with the
    //    same value; we may know newer ones the header lacks.
    for (name, value) in &h.errors {
        match ERROR_NAMES.iter().find(|(_, n)| n == name) {
            Some((v, _)) if v == value => {}
            Some((v, _)) => problems.push(format!("{name} = {v} here, {value} in the header")),
            None => problems.push(format!("header error {name} = {value} is not named here")),
        }
    }
    for (_, name) in ERROR_NAMES {
        if !h.errors.contains_key(*name) {
            notes.push(format!("{name} is not in this header (newer JDK)"));
        }
    }

    // 6. Constants.
    let expect = [
        (
            "JVMTI_VERSION_1_2",
            format!("{:#x}", jvmti::JVMTI_VERSION_1_2),
        ),
        ("JVMTI_ENABLE", jvmti::JVMTI_ENABLE.to_string()),
        ("JVMTI_DISABLE", jvmti::JVMTI_DISABLE.to_string()),
    ];
    for (name, value) in expect {
        match h.constants.get(name) {
            Some(v) if v.eq_ignore_ascii_case(&value) => {}
            other => problems.push(format!("{name} = {value} here, {other:?} in the header")),
        }
    }

    for note in &notes {
        println!("{path}: note: {note}");
    }
    assert!(
        problems.is_empty(),
        "{path} disagrees with src/jvmti.rs:\n  {}",
        problems.join("\n  ")
    );
    println!(
        "{path}: {} slots, {} capability bits, {} callback fields, {} events, {} errors checked",
        FUNCTION_SLOTS.len(),
        CAPABILITY_BITS.len(),
        ours.len(),
        EVENT_NAMES.len(),
        h.errors.len()
    );
}

#[test]
fn bindings_match_the_jdk17_header() {
    assert!(
        Path::new(JDK17_HEADER).exists(),
        "{JDK17_HEADER} is missing: install openjdk-17-jdk-headless (the agent's ABI is checked against it)"
    );
    check(JDK17_HEADER, true);
}

#[test]
fn bindings_match_the_jdk25_header_when_installed() {
    if !Path::new(JDK25_HEADER).exists() {
        println!("skipped: {JDK25_HEADER} not installed (Temurin 25 header check)");
        return;
    }
    check(JDK25_HEADER, false);
}

/// The parser itself must find what it looks for, or every check above would
/// pass vacuously.
#[test]
fn parser_reads_known_landmarks() {
    if !Path::new(JDK17_HEADER).exists() {
        panic!("{JDK17_HEADER} is missing: install openjdk-17-jdk-headless");
    }
    let h = parse(JDK17_HEADER);
    assert_eq!(
        h.functions.get(1),
        Some(&(2, "SetEventNotificationMode".to_owned()))
    );
    assert_eq!(h.functions.first(), Some(&(1, "reserved1".to_owned())));
    assert_eq!(h.callbacks.first(), Some(&(50, "VMInit".to_owned())));
    assert_eq!(
        h.callbacks.last(),
        Some(&(86, "SampledObjectAlloc".to_owned()))
    );
    assert_eq!(h.capabilities.get("can_tag_objects"), Some(&0));
    assert_eq!(h.events.get("JVMTI_EVENT_METHOD_ENTRY"), Some(&65));
    assert_eq!(h.errors.get("JVMTI_ERROR_NONE"), Some(&0));
    assert!(h.errors.len() > 40, "{} errors", h.errors.len());
}

/// `jvmticmlr.h`'s records, laid out by the C compiler: each field's offset
/// and each struct's size against our `#[repr(C)]` copies, and the record
/// kind's number.
#[test]
fn inline_records_match_jvmticmlr_h() {
    use idleflow_agent::jvmti::{
        jvmtiCompiledMethodLoadInlineRecord as Inline,
        jvmtiCompiledMethodLoadRecordHeader as HeaderRec, PCStackInfo, JVMTI_CMLR_INLINE_INFO,
    };
    let include = "/usr/lib/jvm/java-17-openjdk-amd64/include";
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("cmlr.c");
    std::fs::write(
        &src,
        r#"#include <stddef.h>
#include <stdio.h>
#include "jvmti.h"
#include "jvmticmlr.h"
#define F(s, f) printf(#s "." #f " %zu\n", offsetof(s, f))
int main(void) {
  printf("JVMTI_CMLR_INLINE_INFO %d\n", (int)JVMTI_CMLR_INLINE_INFO);
  F(jvmtiCompiledMethodLoadRecordHeader, kind);
  F(jvmtiCompiledMethodLoadRecordHeader, majorinfoversion);
  F(jvmtiCompiledMethodLoadRecordHeader, minorinfoversion);
  F(jvmtiCompiledMethodLoadRecordHeader, next);
  printf("sizeof.header %zu\n", sizeof(jvmtiCompiledMethodLoadRecordHeader));
  F(PCStackInfo, pc); F(PCStackInfo, numstackframes); F(PCStackInfo, methods); F(PCStackInfo, bcis);
  printf("sizeof.pcstackinfo %zu\n", sizeof(PCStackInfo));
  F(jvmtiCompiledMethodLoadInlineRecord, header);
  F(jvmtiCompiledMethodLoadInlineRecord, numpcs);
  F(jvmtiCompiledMethodLoadInlineRecord, pcinfo);
  printf("sizeof.inline %zu\n", sizeof(jvmtiCompiledMethodLoadInlineRecord));
  return 0;
}
"#,
    )
    .unwrap();
    let exe = dir.path().join("cmlr");
    let cc = std::process::Command::new("cc")
        .arg(format!("-I{include}"))
        .arg(format!("-I{include}/linux"))
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("cc (Debian's gcc) compiles the layout probe");
    assert!(
        cc.status.success(),
        "{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let out = std::process::Command::new(&exe).output().unwrap();
    let c: BTreeMap<String, usize> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect();
    let ours: [(&str, usize); 14] = [
        ("JVMTI_CMLR_INLINE_INFO", JVMTI_CMLR_INLINE_INFO as usize),
        (
            "jvmtiCompiledMethodLoadRecordHeader.kind",
            offset_of!(HeaderRec, kind),
        ),
        (
            "jvmtiCompiledMethodLoadRecordHeader.majorinfoversion",
            offset_of!(HeaderRec, majorinfoversion),
        ),
        (
            "jvmtiCompiledMethodLoadRecordHeader.minorinfoversion",
            offset_of!(HeaderRec, minorinfoversion),
        ),
        (
            "jvmtiCompiledMethodLoadRecordHeader.next",
            offset_of!(HeaderRec, next),
        ),
        ("sizeof.header", size_of::<HeaderRec>()),
        ("PCStackInfo.pc", offset_of!(PCStackInfo, pc)),
        (
            "PCStackInfo.numstackframes",
            offset_of!(PCStackInfo, numstackframes),
        ),
        ("PCStackInfo.methods", offset_of!(PCStackInfo, methods)),
        ("PCStackInfo.bcis", offset_of!(PCStackInfo, bcis)),
        ("sizeof.pcstackinfo", size_of::<PCStackInfo>()),
        (
            "jvmtiCompiledMethodLoadInlineRecord.numpcs",
            offset_of!(Inline, numpcs),
        ),
        (
            "jvmtiCompiledMethodLoadInlineRecord.pcinfo",
            offset_of!(Inline, pcinfo),
        ),
        ("sizeof.inline", size_of::<Inline>()),
    ];
    for (name, value) in ours {
        assert_eq!(
            c.get(name),
            Some(&value),
            "{name}: C says {:?}, we {value}",
            c.get(name)
        );
    }
}
