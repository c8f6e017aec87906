//! idleflow's recording session: everything `idleflow record` does between
//! parsing its arguments and printing its summary line.
//!
//! A session ([`record`]) opens the recorder on every CPU
//! (`idleflow-tracer`), prepares what the JVMs need (the entry/exit agent's
//! work area, `agent`; the flight recorders' settings, `jfr`), starts
//! the target (a command, a running process or the whole machine), starts
//! each JVM's flight recorder through its attach mechanism ([`attach`]) as
//! the JVMs appear, polls the recorder until the target ends, the duration
//! passes or the stop flag is raised, then stops the window, reads the
//! JVMs' flight recordings into the recording, finishes it, and resolves its
//! user stacks in place (`idleflow-unwind`, `resolve`).
//!
//! The caller (the CLI) owns the terminal: the session prints nothing and
//! says what happens through [`Progress`]; its errors are
//! [`SessionError`]s whose messages are the lines the CLI prints. The
//! executable that runs a session must answer its own subcommand
//! [`CONVERT_SUBCOMMAND`] by calling [`convert_child`]: the session reads
//! each JVM's flight recording in such a child of itself.
//!
//! Modules: `record` (the life cycle, one function per step), [`flight`]
//! (`record --flight`: the flight recorder's session and its trigger
//! socket), `agent`,
//! `jfr` (its watcher thread, its every-wait policy, its converter child),
//! [`attach`], `resolve`, and `error`.
//!
//! Invariant: an error while the window is open never leaves the recorded
//! command behind (the session waits for it as it runs on unrecorded), and
//! what was recorded up to an error stays readable in the `.partial` file
//! its message names; the JVMs get their flight recordings stopped before
//! their files are read, and the window closes before any of that work
//! (reading the JVMs' files is not recorded).

mod agent;
pub mod attach;
mod error;
pub mod flight;
mod jfr;
mod record;
mod resolve;

use std::path::PathBuf;

pub use error::{one_line, SessionError};
pub use jfr::convert::{convert_child, ConvertJob, CONVERT_SUBCOMMAND};
pub use record::{record, Recorded};
pub use resolve::resolve_stacks;

/// What to record and how: `idleflow record`'s options, checked by
/// [`record`] (its errors name the options as the command line spells
/// them).
#[derive(Debug, Clone)]
pub struct Options {
    /// Where to write the recording.
    pub output: PathBuf,
    /// Stop after this many seconds.
    pub duration: Option<f64>,
    /// The running process whose threads the report shows (records until it
    /// exits); none with a `command`.
    pub pid: Option<u32>,
    /// The command to run and record (empty: `pid`, or the whole machine).
    pub command: Vec<String>,
    /// The recorder's own options (rings, stacks, wake-ups).
    pub recorder: idleflow_tracer::RecordOptions,
    /// What to do in the JVMs.
    pub java: JavaOptions,
    /// Unwind and name the user-stack copies when the recording ends.
    pub resolve: bool,
    /// Report only notes and errors, no account of what was done.
    pub quiet: bool,
}

/// What to record in the JVMs of the target (`record --java` and the
/// options around it).
#[derive(Debug, Clone)]
pub struct JavaOptions {
    /// Start their flight recorders for their waits.
    pub waits: bool,
    /// Inject the entry/exit agent for the call tree (commands only).
    pub tree: bool,
    /// Name the JIT-compiled frames of the user stacks (frame pointers, perf maps).
    pub stacks: bool,
    /// Walk the Java frames of the switch-outs from the JVMs' own
    /// structures (no agent, no flag, no attach).
    pub vm: bool,
    /// Nothing asked: the session chooses once the recorder is open
    /// ([`JavaOptions::chosen`]): `vm` on the eBPF source, with the flight
    /// recorder of each JVM whose structures cannot be read (a flight
    /// recorder's dumps too); `waits` and `stacks` on the perf source.
    pub auto: bool,
    /// With `vm`: start a JVM's flight recorder only if its structures
    /// cannot be read (set by [`JavaOptions::chosen`]).
    pub waits_where_vm_cannot: bool,
    /// Waits shorter than this are not recorded, ms.
    pub wait_threshold_ms: f64,
    /// Contended monitor enters shorter than this are not recorded, ms.
    pub monitor_threshold_ms: f64,
    /// While a JVM's threads block fewer times a second per CPU, every wait is recorded.
    pub all_waits_below: f64,
    /// The agent library (default: the one beside the executable).
    pub agent: Option<PathBuf>,
    /// How often each JVM dumps its call trees, ms.
    pub snapshot_interval_ms: u64,
    /// Δ of the work area, ns.
    pub delta_ns: u64,
    /// Java threads the work area has room for.
    pub max_threads: u32,
}

impl JavaOptions {
    /// The modes to run with once the recorder is open (`bpf`: its events
    /// come from the eBPF programs; `stacks_at_waits`: perf takes the
    /// stacks, at every blocking switch-out, without the Java threads'
    /// anchors), and what the recording's header says of them
    /// (`RunInfo::java_frames`, `_why`).
    pub fn chosen(&self, bpf: bool, stacks_at_waits: bool) -> (JavaOptions, String, String) {
        let mut j = self.clone();
        let why = if !self.auto {
            "asked for"
        } else if !bpf {
            j.waits = true;
            j.stacks = true;
            "the default without eBPF"
        } else if stacks_at_waits {
            j.waits = true;
            j.stacks = true;
            "the default with --stacks waits (perf's stacks, without the threads' anchors)"
        } else {
            j.vm = true;
            j.waits = true;
            j.waits_where_vm_cannot = true;
            "the default on eBPF"
        };
        j.auto = false;
        let modes = [
            (j.vm, "vm"),
            (j.waits && !j.waits_where_vm_cannot, "waits"),
            (j.stacks, "stacks"),
            (j.tree, "tree"),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, m)| *m)
        .collect::<Vec<_>>()
        .join(",");
        let why = if modes.is_empty() { "" } else { why };
        (j, modes, why.to_string())
    }
}

/// The recorder's counts, for a live status line.
#[derive(Debug, Clone, Copy)]
pub struct Status {
    /// Dispatches written so far.
    pub dispatches: u64,
    /// Records the kernel dropped, all CPUs.
    pub lost: u64,
    /// Bytes written so far.
    pub bytes: u64,
}

/// How a session tells its caller what happens. Each method has a default
/// that ignores it.
pub trait Progress {
    /// What was done (`idleflow: LINE`).
    fn info(&mut self, _line: &str) {}
    /// Something came out less well than asked (`idleflow: note: LINE`).
    fn note(&mut self, _line: &str) {}
    /// An error the session goes on from (`idleflow: error: LINE`).
    fn error(&mut self, _line: &str) {}
    /// The recording window opened: a live status may start.
    fn begun(&mut self) {}
    /// The recorder's counts, about every quarter second while the window is
    /// open, when no command shares the terminal and the session is not quiet.
    fn status(&mut self, _status: &Status) {}
    /// The window closed: a live status ends.
    fn ended(&mut self) {}
    /// `done` of `total` bytes of a long step (`what`) are done.
    fn bytes(&mut self, _what: &str, _done: u64, _total: u64) {}
    /// The long step ended.
    fn bytes_done(&mut self) {}
}

/// A [`Progress`] that ignores everything.
impl Progress for () {}
