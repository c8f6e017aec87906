//! What the JVM lends the agent for one call, copied into owned values:
//! the `Agent_OnLoad` options string, a callback's C string, and
//! `CompiledMethodLoad`'s inlining records.
//!
//! Invariant: every function here is `unsafe` and states the lending
//! contract it needs (null allowed, valid for the call); nothing it returns
//! borrows the JVM's memory, and every `unsafe` block inside has its
//! `// SAFETY:` line.

use std::ffi::{c_char, c_void, CStr};

use super::MethodId;

/// Decodes the options string the JVM passes to `Agent_OnLoad` (the part of
/// `-agentpath:lib.so=OPTIONS` after `=`). Null (no `=`) is the empty string.
///
/// # Safety
/// `options` must be null or point to a NUL-terminated string that stays
/// valid during the call.
pub unsafe fn agent_options(options: *const c_char) -> Result<String, String> {
    if options.is_null() {
        return Ok(String::new());
    }
    // SAFETY: non-null and NUL-terminated by the caller's contract.
    let options = unsafe { CStr::from_ptr(options) };
    options
        .to_str()
        .map(str::to_owned)
        .map_err(|_| format!("agent options are not UTF-8: {options:?}"))
}

/// The text of a NUL-terminated string the JVM lends to a callback
/// (`DynamicCodeGenerated`'s name), decoded leniently as
/// `JvmtiString`s are; `None` for null.
///
/// # Safety
/// `text` must be null or point to a NUL-terminated string that stays
/// valid during the call.
pub unsafe fn borrowed_text(text: *const c_char) -> Option<String> {
    if text.is_null() {
        return None;
    }
    // SAFETY: non-null and NUL-terminated by the caller's contract.
    let text = unsafe { CStr::from_ptr(text) };
    Some(text.to_string_lossy().into_owned())
}

/// One address of a compiled method with the methods inlined there: what
/// the compile-time stack holds at `pc` (an address after a call, or a
/// safepoint), innermost first, the compiled method itself last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InlinePc {
    pub pc: u64,
    pub methods: Vec<MethodId>,
}

/// The inlining records of `CompiledMethodLoad`'s `compile_info` list
/// (`JVMTI_CMLR_INLINE_INFO`; other kinds are skipped), sorted by address.
/// A list with no such record (or null) gives none.
///
/// # Safety
/// `compile_info` must be null or the `compile_info` argument of the
/// `CompiledMethodLoad` callback running now: the JVM keeps the list and
/// its arrays valid for the callback, and every `jmethodID` in it is
/// issued by this JVM.
pub unsafe fn inline_records(compile_info: *const c_void) -> Vec<InlinePc> {
    use crate::jvmti::{
        jvmtiCompiledMethodLoadInlineRecord, jvmtiCompiledMethodLoadRecordHeader,
        JVMTI_CMLR_INLINE_INFO,
    };
    let mut out = Vec::new();
    let mut record = compile_info.cast::<jvmtiCompiledMethodLoadRecordHeader>();
    // A cycle would be the JVM's bug; a bound keeps the agent from hanging.
    for _ in 0..64 {
        if record.is_null() {
            break;
        }
        // SAFETY: non-null and valid for the callback (caller's contract).
        let header = unsafe { &*record };
        if header.kind == JVMTI_CMLR_INLINE_INFO {
            // SAFETY: a record of this kind is an inline record.
            let inline = unsafe { &*record.cast::<jvmtiCompiledMethodLoadInlineRecord>() };
            let n = usize::try_from(inline.numpcs).unwrap_or(0);
            if !inline.pcinfo.is_null() && n > 0 {
                // SAFETY: `pcinfo` holds `numpcs` entries (jvmticmlr.h).
                let pcs = unsafe { std::slice::from_raw_parts(inline.pcinfo, n) };
                for p in pcs {
                    let frames = usize::try_from(p.numstackframes).unwrap_or(0);
                    if p.methods.is_null() || frames == 0 {
                        continue;
                    }
                    // SAFETY: `methods` holds `numstackframes` method ids
                    // issued by this JVM (jvmticmlr.h, caller's contract).
                    let ids = unsafe { std::slice::from_raw_parts(p.methods, frames) };
                    out.push(InlinePc {
                        pc: p.pc as u64,
                        // SAFETY: issued by this JVM, see above.
                        methods: ids
                            .iter()
                            .map(|&m| unsafe { MethodId::from_raw(m) })
                            .collect(),
                    });
                }
            }
        }
        record = header.next;
    }
    out.sort_by_key(|p| p.pc);
    out
}

#[cfg(test)]
mod tests {
    use std::ptr;

    use super::*;

    #[test]
    fn agent_options_decode() {
        // SAFETY: null and a literal C string are both allowed.
        unsafe {
            assert_eq!(agent_options(ptr::null()), Ok(String::new()));
            assert_eq!(agent_options(c"a=1,b".as_ptr()), Ok("a=1,b".to_owned()));
            assert!(agent_options(c"\xff".as_ptr()).is_err());
        }
    }
}
