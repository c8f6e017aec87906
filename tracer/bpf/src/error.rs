//! The crate's one error type: why eBPF recording cannot be used or failed,
//! in words a user can act on (the recorder falls back to perf and prints
//! it).
//!
//! Invariant: no libbpf-rs type appears in it; its errors are carried as
//! boxed sources, so the crate's public API does not change when libbpf-rs
//! does.

use std::io;

/// A boxed error from below (libbpf, the kernel).
pub type Source = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why eBPF recording cannot be used here, or what failed.
#[derive(Debug, thiserror::Error)]
pub enum BpfError {
    /// The kernel describes no types (no `CONFIG_DEBUG_INFO_BTF`): the
    /// programs cannot be relocated to it.
    #[error(
        "the kernel has no BTF ({path}: {source}): eBPF recording needs a kernel built with \
         CONFIG_DEBUG_INFO_BTF"
    )]
    NoBtf {
        /// The file looked for.
        path: &'static str,
        /// Why it could not be read.
        source: io::Error,
    },
    /// The process lacks a capability the programs need.
    #[error(
        "missing {missing}: eBPF recording needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN); \
         run as root or grant them"
    )]
    NoCapability {
        /// The capabilities missing, by name.
        missing: String,
    },
    /// Kernel lockdown forbids BPF programs to read kernel memory.
    #[error(
        "the kernel is locked down ({mode}), which forbids BPF programs to read kernel memory"
    )]
    Lockdown {
        /// The lockdown mode (`confidentiality`).
        mode: String,
    },
    /// The kernel refused to load the programs (the verifier, a missing
    /// feature such as BPF ring buffers before Linux 5.8, or permission).
    #[error("the kernel refused the BPF programs: {reason}")]
    Refused {
        /// What libbpf and the verifier said (the last lines of their log).
        reason: String,
        /// The load's error.
        source: Source,
    },
    /// A program loaded but could not be attached to its tracepoint.
    #[error("attaching the BPF programs to the scheduler's tracepoints failed: {source}")]
    Attach {
        /// The attach's error.
        source: Source,
    },
    /// A CPU asked for does not exist.
    #[error("CPU {cpu} is not a possible CPU (this machine has {possible})")]
    NoSuchCpu {
        /// The CPU asked for.
        cpu: u32,
        /// How many possible CPUs there are.
        possible: usize,
    },
    /// A map or ring operation failed.
    #[error("{what}: {source}")]
    Kernel {
        /// What was being done.
        what: String,
        /// Its error.
        source: Source,
    },
}

impl BpfError {
    /// A [`BpfError::Kernel`] for `what`.
    pub(crate) fn kernel(what: impl Into<String>, source: impl Into<Source>) -> Self {
        BpfError::Kernel {
            what: what.into(),
            source: source.into(),
        }
    }
}
