//! idleflow's eBPF recorder of switches and wake-ups.
//!
//! BPF programs at the scheduler's tracepoints (`tp_btf/sched_switch`,
//! `sched_waking`, `sched_wakeup_new`; source in `src/bpf/sched.bpf.c`)
//! write one 32-byte record per event, in the kernel, into a BPF ring
//! buffer of the CPU it happened on (batched per CPU: see `flush`); [`SchedRecorder`] loads and attaches
//! them and reads the rings as [`SchedEvent`]s, which carry what the
//! recording's [`Dispatch`](idleflow_format::Dispatch) and
//! [`Wakeup`](idleflow_format::Wakeup) need ([`Switch::to_dispatch`],
//! [`Wake::to_wakeup`]), with the same [`PrevState`] and [`WakeContext`]
//! the perf path gives for the same event. Unlike perf's tracepoint
//! samples, the programs also run while a CPU is idle on kernels that drop
//! those samples (`docs/PERFORMANCE.md`, "eBPF switch and wake-up records").
//!
//! [`probe()`] tells whether eBPF can be used here, and if not why (no BTF,
//! no CAP_BPF/CAP_PERFMON, lockdown, the verifier), so the recorder can
//! fall back to perf and say so.
//!
//! What a recorder built on it must know:
//! - A switch is stamped once, at the tracepoint, in the thread leaving. The
//!   perf path stamps a switch out of idle at the switch-in record, in the
//!   thread arriving: the same switch, 0.3 µs later (median; ≤ 1.1 µs
//!   measured, `tests/prev_state.rs`).
//! - Each CPU's events come in the order that CPU wrote them; merge the CPUs
//!   by time. Every event not delivered is counted ([`Lost`]).
//! - There are no thread names, forks or exits here: the recorder keeps
//!   getting those as today.
//! - Some kernels raise no tracepoint in some contexts at all. On this
//!   machine's, pid 1's threads: a switch out of one of them never comes
//!   (perf's switch-in record showed it; here the next switch of that CPU
//!   names another `prev` than the last `next` — a stream break to count),
//!   nor a waking raised while one of them runs.
//!
//! Modules, one job each: [`record`] (the record's bytes → [`SchedEvent`]),
//! [`state`] (raw task state → [`PrevState`]), [`context`] (preempt count →
//! [`WakeContext`]), `glue` (the tracing glue atop the programs' kernel
//! call chains), `percpu` (where the preempt count is, from the kernel
//! BTF), [`probe`](mod@probe) (can eBPF be used here), `stack_config` (which
//! stacks the programs take), `loader` (the BPF object
//! loaded), `rings` (one ring per CPU and their reader), `ringmap` (one
//! ring mapped, read a run of records at a time), `flush` (the programs'
//! per-CPU batches: which hold records, a flush on demand), [`stats`] (the
//! programs' run counts and times), [`recorder`] (the life cycle), and
//! [`error`]. All use of libbpf-rs stays inside this crate: no libbpf-rs
//! type is part of its API.

pub mod context;
pub mod error;
mod flush;
mod glue;
mod loader;
mod percpu;
pub mod probe;
pub mod record;
pub mod recorder;
mod ringmap;
mod rings;
mod skel;
mod stack_config;
pub mod state;
pub mod stats;

pub use error::BpfError;
pub use glue::{KernelGlue, LoadingGlue};
pub use idleflow_format::{PrevState, WakeContext};
pub use percpu::WakeContextSource;
pub use probe::{preconditions, probe, Probe};
pub use record::{
    decode, split_size, stacks, DecodeError, RecordStacks, SchedEvent, Switch, UserCopy, Wake,
    FLAG_STACKS, RECORD_BYTES, STACK_HEAD_BYTES,
};
pub use recorder::{
    CpuLost, JavaAnchors, Lost, SchedRecorder, RING_BYTES_PER_RECORD, WAKEUP_BYTES,
};
pub use ringmap::{framed_len, records, ring_record_at, ring_records};
pub use rings::RingDrain;
pub use stack_config::StackConfig;
pub use stats::{ProgramStats, RunTimeStats};
