//! Whether eBPF recording can be used on this machine, and if not, why:
//! the checks that need no program first (kernel BTF, capabilities,
//! lockdown), each with a reason a user can act on, then the real test —
//! loading the programs, which the verifier may refuse.
//!
//! Invariant: [`probe`] attaches nothing and leaves nothing loaded; its
//! answer for a machine is the one [`crate::SchedRecorder::open`] would
//! give there.

use std::fs;

use crate::error::BpfError;
use crate::loader::Loaded;
use crate::percpu::WakeContextSource;
use crate::stack_config::StackConfig;

/// The kernel's own types, which CO-RE relocates the programs against.
pub const KERNEL_BTF: &str = "/sys/kernel/btf/vmlinux";

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// What eBPF recording can do here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// Where the wake-ups' context comes from.
    pub wake_context: WakeContextSource,
}

/// Tells whether the programs load here (nothing is attached), or why not:
/// with every kind of stack on, so that the verifier sees every path (it
/// skips the code that read-only settings turn off).
pub fn probe() -> Result<Probe, BpfError> {
    preconditions()?;
    let every_stack = StackConfig {
        idle_kernel: true,
        idle_user_bytes: 8192,
        idle_budget: 1000,
        waker_one_in: 16,
        waker_budget: 200,
        waker_kernel: true,
        waker_user_bytes: 2048,
    };
    let loaded = Loaded::load(1, 0, every_stack)?;
    Ok(Probe {
        wake_context: loaded.wake_context().clone(),
    })
}

/// The checks that need no program: BTF, capabilities, lockdown (the
/// verifier's answer comes when the programs load).
pub fn preconditions() -> Result<(), BpfError> {
    if let Err(source) = fs::File::open(KERNEL_BTF) {
        return Err(BpfError::NoBtf {
            path: KERNEL_BTF,
            source,
        });
    }
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    if let Some(missing) = missing_capabilities(&status) {
        return Err(BpfError::NoCapability { missing });
    }
    let lockdown = fs::read_to_string("/sys/kernel/security/lockdown").unwrap_or_default();
    if let Some(mode) = lockdown_mode(&lockdown) {
        return Err(BpfError::Lockdown { mode });
    }
    Ok(())
}

/// The capabilities the programs need that `CapEff` in
/// `/proc/self/status` lacks, by name; `None` when none is missing (or the
/// line is not there: the load will tell).
fn missing_capabilities(status: &str) -> Option<String> {
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))?
        .trim();
    let eff = u64::from_str_radix(hex, 16).ok()?;
    let has = |cap: u32| eff & (1u64 << cap) != 0;
    if has(CAP_SYS_ADMIN) {
        return None;
    }
    let missing: Vec<&str> = [(CAP_BPF, "CAP_BPF"), (CAP_PERFMON, "CAP_PERFMON")]
        .into_iter()
        .filter(|&(cap, _)| !has(cap))
        .map(|(_, name)| name)
        .collect();
    (!missing.is_empty()).then(|| missing.join(" and "))
}

/// The lockdown mode that forbids reading kernel memory
/// (`[confidentiality]` in `/sys/kernel/security/lockdown`), if set.
fn lockdown_mode(text: &str) -> Option<String> {
    text.contains("[confidentiality]")
        .then(|| "confidentiality".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_are_read_from_cap_eff() {
        let root = "Name:\tx\nCapEff:\t000001ffffffffff\n";
        assert_eq!(missing_capabilities(root), None);
        // CAP_BPF and CAP_PERFMON without CAP_SYS_ADMIN: enough.
        let bpf = format!("CapEff:\t{:016x}\n", (1u64 << 39) | (1 << 38));
        assert_eq!(missing_capabilities(&bpf), None);
        let perfmon_only = format!("CapEff:\t{:016x}\n", 1u64 << 38);
        assert_eq!(
            missing_capabilities(&perfmon_only).as_deref(),
            Some("CAP_BPF")
        );
        let none = "CapEff:\t0000000000000000\n";
        assert_eq!(
            missing_capabilities(none).as_deref(),
            Some("CAP_BPF and CAP_PERFMON")
        );
        assert_eq!(missing_capabilities("no such line"), None);
    }

    #[test]
    fn only_confidentiality_lockdown_forbids() {
        assert_eq!(lockdown_mode("[none] integrity confidentiality\n"), None);
        assert_eq!(lockdown_mode("none [integrity] confidentiality\n"), None);
        assert_eq!(
            lockdown_mode("none integrity [confidentiality]\n").as_deref(),
            Some("confidentiality")
        );
        assert_eq!(lockdown_mode(""), None);
    }
}
