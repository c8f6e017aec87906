//! Where the CPU's preempt count sits relative to its run queue in the
//! per-CPU area, read from the kernel's BTF.
//!
//! The wake-up program needs the preempt count to tell an interrupt's
//! wake-up from a thread's ([`crate::context`]). On x86-64 it is a per-CPU
//! variable (`__preempt_count`; in Linux 6.2–6.14 the field
//! `preempt_count` of the per-CPU `pcpu_hot`). A BPF program reaches a
//! per-CPU variable through a typed ksym, which needs the symbol in
//! kallsyms — and kernels built without `CONFIG_KALLSYMS_ALL` (this one)
//! list no data symbols. But the program can reach another per-CPU
//! variable of its own CPU, the run queue (`runqueues`), through the
//! current task (`current->se.cfs_rq->rq`); both lie in the same per-CPU
//! data section, whose layout the kernel BTF describes (`DATASEC
//! .data..percpu`, each variable's offset in it). So the preempt count of
//! this CPU is at `rq + (offset(__preempt_count) - offset(runqueues))`.
//!
//! [`WakeContextSource`] says which it is on the running kernel.
//!
//! Invariant: an offset is returned only when both variables are found in
//! that section; otherwise the reason is, and the programs then write
//! wake-ups with an unknown context rather than read a wrong address.

use std::collections::HashMap;

use libbpf_rs::btf::types::{DataSec, MemberAttr, Struct};
use libbpf_rs::btf::BtfType;
use libbpf_rs::Btf;

/// The kernel's per-CPU data section in BTF.
const PERCPU_SECTION: &str = ".data..percpu";

/// `&preempt_count - &runqueues` in the per-CPU area, from the variables'
/// offsets in it (`var`) and, for the 6.2–6.14 layout, a struct member's
/// byte offset (`member(struct, field)`).
pub fn preempt_count_from_rq(
    var: impl Fn(&str) -> Option<u32>,
    member: impl Fn(&str, &str) -> Option<u32>,
) -> Result<i64, String> {
    let rq =
        var("runqueues").ok_or_else(|| format!("no per-CPU `runqueues` in {PERCPU_SECTION}"))?;
    let pc = match var("__preempt_count") {
        Some(at) => at,
        None => {
            let hot = var("pcpu_hot").zip(member("pcpu_hot", "preempt_count"));
            let (base, field) = hot.ok_or_else(|| {
                format!(
                    "no per-CPU `__preempt_count` (nor `pcpu_hot.preempt_count`) in \
                     {PERCPU_SECTION}: this architecture keeps the preempt count elsewhere"
                )
            })?;
            base + field
        }
    };
    Ok(i64::from(pc) - i64::from(rq))
}

/// [`preempt_count_from_rq`] for the running kernel
/// (`/sys/kernel/btf/vmlinux`).
pub fn running_kernel() -> Result<i64, String> {
    let btf = Btf::from_vmlinux().map_err(|e| format!("reading the kernel BTF: {e}"))?;
    let section: DataSec<'_> = btf
        .type_by_name(PERCPU_SECTION)
        .ok_or_else(|| format!("no {PERCPU_SECTION} section in the kernel BTF"))?;
    let mut vars = HashMap::new();
    for info in section.iter() {
        let name = btf
            .type_by_id::<BtfType<'_>>(info.ty)
            .and_then(|t| t.name().map(|n| n.to_string_lossy().into_owned()));
        if let Some(name) = name {
            vars.insert(name, info.offset);
        }
    }
    let member = |ty: &str, field: &str| {
        let s: Struct<'_> = btf.type_by_name(ty)?;
        let offset = s.iter().find_map(|m| match m.attr {
            MemberAttr::Normal { offset } if m.name.is_some_and(|n| n == field) => Some(offset / 8),
            _ => None,
        });
        offset
    };
    preempt_count_from_rq(|name| vars.get(name).copied(), member)
}

/// Where the wake-ups' context (thread or interrupt) comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WakeContextSource {
    /// The CPU's preempt count, read by the program (exact: what the
    /// tracepoints' `common_flags` say).
    PreemptCount,
    /// Not readable on this kernel (why): wake-ups carry
    /// [`idleflow_format::WakeContext::Unknown`].
    Unavailable(String),
}

/// Where the wake-up context comes from on the running kernel, and the
/// offset the program needs for it (0 when unavailable).
pub(crate) fn wake_context_here() -> (WakeContextSource, i64) {
    match running_kernel() {
        Ok(offset) if offset != 0 => (WakeContextSource::PreemptCount, offset),
        Ok(_) => (
            WakeContextSource::Unavailable("the preempt count's offset came out as 0".into()),
            0,
        ),
        Err(why) => (WakeContextSource::Unavailable(why), 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offset_comes_from_either_layout_or_not_at_all() {
        let none = |_: &str, _: &str| None;
        // This machine's kernel (6.18): __preempt_count at 86064,
        // runqueues at 178752.
        let v618 = |n: &str| match n {
            "runqueues" => Some(178_752),
            "__preempt_count" => Some(86_064),
            _ => None,
        };
        assert_eq!(preempt_count_from_rq(v618, none), Ok(86_064 - 178_752));
        // 6.2–6.14: pcpu_hot.preempt_count.
        let v66 = |n: &str| match n {
            "runqueues" => Some(1000),
            "pcpu_hot" => Some(4000),
            _ => None,
        };
        let m66 = |s: &str, f: &str| (s == "pcpu_hot" && f == "preempt_count").then_some(8);
        assert_eq!(preempt_count_from_rq(v66, m66), Ok(3008));
        // Elsewhere (arm64 keeps it in thread_info): a reason, no offset.
        let arm = |n: &str| (n == "runqueues").then_some(1000);
        assert!(preempt_count_from_rq(arm, none)
            .unwrap_err()
            .contains("__preempt_count"));
        assert!(preempt_count_from_rq(|_| None, none)
            .unwrap_err()
            .contains("runqueues"));
    }
}
