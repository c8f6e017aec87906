//! `record`'s grammar and that of its internal helpers (`__jfr-convert`,
//! `__resolve`): the recorder's, the stacks' and the JVMs' options, and
//! the sizes they take (`4M`, `8K`).
//!
//! Invariant: a size is read here once (`K`, `M`, `G` suffixes), and a
//! stack copy the kernel cannot make (over 65528 bytes, not a multiple of
//! 8) is refused by clap before a recording starts.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

/// `record --stacks`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StacksAt {
    /// At the switch-outs that leave a CPU idle.
    Idle,
    /// At every blocking switch-out too.
    Waits,
}

/// `record --events`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Events {
    /// eBPF where it can be used, else perf.
    Auto,
    /// perf's switch records and tracepoint samples.
    Perf,
    /// eBPF programs at the scheduler's tracepoints, or fail.
    Bpf,
}

/// The arguments of `__resolve`.
#[derive(Debug, Args)]
pub struct ResolveArgs {
    /// The recording, rewritten in place.
    pub input: PathBuf,
}

/// The arguments `record` gives its `__jfr-convert` child
/// (`idleflow_session::ConvertJob::args`), read by the session that wrote them.
#[derive(Debug, Args)]
pub struct JfrConvertArgs {
    /// The job's arguments, in `ConvertJob::args`'s order.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<std::ffi::OsString>,
}

#[derive(Debug, Args)]
pub struct RecordArgs {
    /// Where to write the recording [default: run.idleflow], readable by
    /// its owner only (under sudo: the user who ran sudo); with --flight,
    /// the directory the dumps go into [default: idleflow-dumps].
    #[arg(short, long)]
    pub output: Option<PathBuf>,

    /// Run as a flight recorder: keep the last SECONDS (`60s`, `5m`) in
    /// memory, bounded by --flight-bytes too, and write them into the -o
    /// directory as an ordinary recording (0600) whenever a --trigger
    /// fires, SIGUSR2 arrives or `idleflow trigger` asks; records until
    /// the command or --pid's process exits, --duration or Ctrl-C. A dump
    /// has the JVMs' waits of its window, read from their structures (the
    /// default) or, with `--java waits`, from their flight recorders, which
    /// then keep the same window; the call-tree agent (`--java tree`) does
    /// not run here.
    #[arg(long, value_name = "SECONDS", value_parser = parse_duration)]
    pub flight: Option<std::time::Duration>,

    /// The flight recorder's memory bound, bytes (K, M, G suffixes).
    #[arg(long, default_value = "256M", value_parser = parse_size, requires = "flight")]
    pub flight_bytes: usize,

    /// When the flight recorder dumps (repeatable): `cpu-idle [in PATTERN]`
    /// (a thread of interest left a CPU idle; with `every:1000`, every
    /// 1000th time), `wait>=DUR [in PATTERN]` (a thread of interest has
    /// waited DUR), `waiting>=N [for DUR] [in
    /// PATTERN]` (N wait at once, for DUR on end), `idle>=P% [for DUR]
    /// [while waiting>=N [in PATTERN]]` (the CPUs were idle P % of the last
    /// DUR, default 1s), `unclaimed>=DUR [for DUR] [in PATTERN]` (a CPU idle
    /// DUR while a thread of interest was runnable as long), `convoy>=K [in
    /// PATTERN]` (K threads of one pool in turn, each woken from its wait by
    /// the one before: a lock convoy),
    /// `io-full>=P% [for DUR] [while idle>=Q%]` (the kernel's pressure
    /// stall, PSI: every task that could run stalled on I/O P % of the last
    /// DUR; also io-some, memory-full, memory-some, cpu-some), `signal`
    /// (SIGUSR2, always on), `history` (a --heartbeat window had a path
    /// whose share of the idle rose beyond the job's history band); `…
    /// every:N` or `… once-after:N` fires only
    /// every Nth occurrence, or the Nth. PATTERN is a glob on thread names
    /// as the kernel keeps them (15 bytes: `http-nio-8080-exec-*` also takes
    /// `http-nio-8080-e`); without one the threads of interest are the command's or --pid's
    /// (system-wide, every process's threads: the kernel's own only when a
    /// PATTERN names them). Judged on the recorded stream after every
    /// drain batch.
    #[arg(long = "trigger", value_name = "SPEC", requires = "flight")]
    pub triggers: Vec<String>,

    /// No dump sooner than this after the last one, for the triggers' own
    /// conditions; an explicit request (SIGUSR2, `idleflow trigger`) is
    /// held back only by the caps.
    #[arg(long, default_value = "1m", value_parser = parse_duration, requires = "flight")]
    pub cooldown: std::time::Duration,

    /// At most this many dumps in the recorder's life.
    #[arg(long, default_value_t = 20, requires = "flight")]
    pub max_dumps: u32,

    /// At most this many dumps in any hour (0: no cap but --cooldown).
    #[arg(long, default_value_t = 0, value_name = "N", requires = "flight")]
    pub max_per_hour: u32,

    /// Keep at most N of this recorder's dumps in the -o directory: the
    /// oldest is removed once a newer one is written (0: keep all).
    #[arg(long, default_value_t = 0, value_name = "N", requires = "flight")]
    pub keep_files: u32,

    /// Keep this recorder's dumps under this many bytes together (K, M, G
    /// suffixes): the oldest are removed once a newer one is written, the
    /// newest always stays [default: no cap]. One hidden spare file the
    /// ring's size comes on top (a dump is written over it: faster).
    #[arg(long, value_name = "SIZE", value_parser = parse_size, requires = "flight")]
    pub keep_bytes: Option<usize>,

    /// What a dump keeps after its trigger fired (the ring holds --flight
    /// and this much more, so that a dump written after its tail still
    /// reaches --flight back from its trigger).
    #[arg(long, default_value = "1s", value_parser = parse_duration, requires = "flight")]
    pub tail: std::time::Duration,

    /// Keep a summary of every dump in the history under this job (as
    /// `idleflow history add DUMP --job JOB`), so `history check` compares
    /// a dump with the job's normal times; with --heartbeat, the
    /// heartbeats are the job's normal times and dumps go under JOB-dumps.
    #[arg(long, value_name = "JOB", requires = "flight")]
    pub history_job: Option<String>,

    /// Every DUR (`10m`), check the ring's last DUR (at most --flight)
    /// against the --history-job's history and keep it there as a normal
    /// time when no path rose beyond the job's band; when one did, say it
    /// (and dump, with `--trigger history`).
    #[arg(long, value_name = "DUR", value_parser = parse_duration, requires = "history_job")]
    pub heartbeat: Option<std::time::Duration>,

    /// The smallest rise of a path's share, points, that fails a
    /// --heartbeat's check [default: history check's].
    #[arg(long, value_name = "PTS", requires = "heartbeat")]
    pub heartbeat_min_change: Option<f64>,

    /// The history for --history-job: an SQLite file, or a postgres:// URL
    /// [default: ~/.local/share/idleflow/history.sqlite].
    #[arg(
        long,
        value_name = "FILE|URL",
        env = "IDLEFLOW_HISTORY",
        requires = "history_job"
    )]
    pub history: Option<String>,

    /// Members of this group (a name or a gid) may ask for dumps with
    /// `idleflow trigger`, besides root and the recorder's own user.
    #[arg(long, value_name = "GROUP", requires = "flight")]
    pub trigger_group: Option<String>,

    /// Stop after this many seconds (system-wide when no command is given;
    /// a command still running then keeps running, as with --pid).
    #[arg(short, long, value_name = "SECONDS")]
    pub duration: Option<f64>,

    /// Show this running process's threads in the report; records until it exits,
    /// --duration passes or Ctrl-C.
    #[arg(short, long, conflicts_with = "command")]
    pub pid: Option<u32>,

    /// Ring buffer per CPU, in bytes (K and M suffixes), a power-of-two number of pages.
    #[arg(long, default_value = "4M", value_parser = parse_size)]
    pub ring_size: usize,

    /// What to record in the JVMs the command starts (or --pid's),
    /// comma-separated. The default, `auto`, is `vm` where the eBPF programs
    /// record (nothing asked of the JVMs; a JVM whose structures cannot be
    /// read gets `waits`), and `waits,stacks` elsewhere and with --stacks
    /// waits;
    /// the report's header says which named the frames and why.
    /// `waits` starts each JVM's flight recorder (JFR)
    /// through its attach mechanism, as `jcmd PID JFR.start` does, for its
    /// waits — monitor enter/wait, park, sleep, socket and file I/O — each
    /// with its exact Java stack and the JVM's reason, joined to the
    /// dispatches (no instrumentation, no JVM option: safe on a production
    /// server; JFR takes a second or two to start); `tree` injects the
    /// entry/exit agent for the exact arcflow call tree (commands only; Java
    /// then runs interpreted: 25-200x slower). `--java tree,waits` gives both.
    /// `stacks` names the JIT-compiled frames of the user stacks taken at
    /// the switch-outs, at full speed: the command's JVMs run with
    /// -XX:+PreserveFramePointer (frame pointers walk through JIT code) and
    /// the agent's light mode, which records no method entries or exits and
    /// only writes the JVM's perf map (/tmp/perf-PID.map) as it compiles;
    /// --pid's JVMs are asked for theirs when the window closes (`jcmd PID
    /// Compiler.perfmap`). `vm` reads the Java frames of each switch-out
    /// (and waker) from the JVM's own structures (HotSpot's exported
    /// VMStructs tables, through /proc/PID/mem): methods, lines, inlining,
    /// and the waits as the flight recorder names them — monitor enter or
    /// wait on a class and who held it, park on the blocker's class, sleep,
    /// socket and file I/O with the peer or path — with nothing loaded into
    /// the JVM, no flag and no attach (docs/JAVA.md; eBPF recording only).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_values = ["auto"],
        value_name = "MODES"
    )]
    pub java: Vec<JavaMode>,

    /// JVM waits shorter than this many ms are not recorded (fractions
    /// allowed). The default, JFR's own `profile` setting, kept a queue
    /// hand-off of 90k waits/s within 1.08x; 1 ms cost 1.15x there and 0
    /// (every wait) about as much, with 50x the events (docs/PERFORMANCE.md).
    #[arg(long, default_value_t = 10.0, value_name = "MS")]
    pub wait_threshold: f64,

    /// Contended monitor enters (a thread blocked entering `synchronized`)
    /// shorter than this many ms are not recorded. 0 records each one with
    /// its Java stack, the monitor's class and its previous owner: what
    /// names a --pid JVM's short monitor waits (its JIT code has no frame
    /// pointers for the stacks at the switch-outs to walk), at a cost that
    /// grows with the contention: H2 under a hot-row update load ran at
    /// 0.82x with 0, median of 4 alternating windows (docs/PERFORMANCE.md
    /// 3o). Default: --wait-threshold's.
    #[arg(long, value_name = "MS")]
    pub monitor_threshold: Option<f64>,

    /// While a JVM's threads block fewer than RATE times a second per CPU,
    /// its flight recorder records every wait, whatever its length (a
    /// second recording at 0 ms, stopped as soon as the rate exceeds 1.5x
    /// RATE, started again when it falls back): short waits of a program
    /// that waits rarely get their Java frames at little cost, while a
    /// server that waits tens of thousands of times a second keeps the
    /// thresholds above. Measured every quarter second from the recorder's
    /// own switch records; the report says when every wait was recorded.
    /// 0: never, the thresholds alone.
    #[arg(long, default_value_t = 1500.0, value_name = "RATE")]
    pub all_waits_below: f64,

    /// The JVM agent to inject for `--java tree` and `--java stacks`
    /// (default: libidleflow_agent.so beside the idleflow executable).
    #[arg(long, value_name = "PATH")]
    pub agent: Option<PathBuf>,

    /// Leave the JVMs alone: neither their flight recorder nor the agent
    /// (no Java paths; dispatches stay untagged).
    #[arg(long, conflicts_with = "agent")]
    pub no_agent: bool,

    /// How often each JVM dumps its call trees, in ms (so that a JVM killed
    /// mid-run still leaves its last snapshot).
    #[arg(long, default_value_t = 1000, value_name = "MS")]
    pub snapshot_interval: u64,

    /// Δ: a call-tree node must have been current this long (ns) to be kept
    /// in a thread's history for tagging dispatches.
    #[arg(long, default_value_t = 2000, value_name = "NS")]
    pub delta: u64,

    /// Java threads the work area has room for (threads beyond it run untagged).
    #[arg(long, default_value_t = 1024, value_name = "N")]
    pub max_threads: u32,

    /// Real-time priority (SCHED_FIFO, 1-99) of the thread that drains the
    /// rings, so that a saturated machine cannot starve it (it only copies
    /// bytes; everything else runs at ordinary priority). 0: ordinary
    /// priority, as perf without -r.
    #[arg(long, default_value_t = 10, value_name = "PRIO",
          value_parser = clap::value_parser!(i32).range(0..=99))]
    pub drain_priority: i32,

    /// Have the kernel write its sched_switch sample for every switch. By
    /// default it writes one only for the states a switch-out record cannot
    /// tell (D, stopped, dead, parked, idle waits): a sleep (S) is a
    /// switch-out that is not a preemption. One kernel record fewer per
    /// switch (docs/PERFORMANCE.md); either way, states agree with perf's
    /// samples of every switch on 99.96-100 % of switches (tested).
    #[arg(long)]
    pub all_switch_samples: bool,

    /// Which kernel events record the switches and wake-ups: `auto` (the
    /// default), eBPF programs where they load, else perf, and the report's
    /// header says why; `bpf`, eBPF programs at the scheduler's tracepoints,
    /// which write one record per switch or waking and take the stacks in
    /// the kernel (Tomcat under `ab -c 4 -k` ran at 0.93x with them, 0.90x
    /// with perf recording the same events, medians of 8 rounds; their idle
    /// intervals end ~1 µs earlier than perf's switch records say;
    /// docs/PERFORMANCE.md 5e); `perf`, perf's switch
    /// records and tracepoint samples (kernels without BTF or eBPF).
    #[arg(long, value_enum, default_value = "auto", value_name = "SOURCE")]
    pub events: Events,

    /// Take no stacks. By default, at every switch-out that leaves a CPU
    /// idle, the leaving thread's kernel call chain (up to 48 frames) and a
    /// copy of the top of its user stack with its registers are recorded;
    /// when the recording ends (after the program's window) the copies are
    /// unwound (CFI from .eh_frame, frame pointers through JIT code) and
    /// every address is named (kallsyms, ELF and DWARF symbols, perf maps)
    /// into the recording, so it reports the same on another machine. The
    /// report's "Idle-causing call paths" and "kernel waits" say where the
    /// threads waited: read ← pipe_read, pthread_cond_wait ← futex_wait, ...
    #[arg(long)]
    pub no_stacks: bool,

    /// Bytes of each thread's user stack to copy at an idle-causing
    /// switch-out (K suffix allowed; at most 65528). A stack deeper than the
    /// copy keeps its innermost frames and is counted as truncated in the
    /// report. 0 takes kernel stacks only.
    #[arg(long, default_value = "8K", value_parser = parse_stack_size, value_name = "BYTES")]
    pub stack_size: u32,

    /// With `--events bpf`: take the stacks at about N switch-outs to idle a
    /// second per CPU, each switch-out with the same chance, when they come
    /// faster (a busy server goes idle tens of thousands of times a second,
    /// and one path seen that often needs few stacks). A thread's first
    /// switch-out to idle gets its stacks whatever the chance (a short-lived
    /// process's idle keeps its own path); a later one without stacks
    /// stands for its thread's previous ones, and the report's header says
    /// how much of the idle that covers. 0: every one (as the perf source
    /// always does).
    #[arg(long, default_value_t = idleflow_tracer::DEFAULT_STACK_BUDGET, value_name = "N")]
    pub stack_budget: u32,

    /// Where to take the stacks: `idle`, at the switch-outs that leave a CPU
    /// idle (the report's "Idle-causing call paths"); `waits`, at every
    /// blocking switch-out too (a sleep on a lock, a socket, a timer; not a
    /// preemption): the report adds "Blocking call paths", where the
    /// recorded program's threads waited, by blocked time, and `flamegraph
    /// --blocked` draws them (an off-CPU flame graph). `waits` copies a
    /// stack at every wait of every thread on the machine (the kernel's
    /// filter cannot tell processes apart); the report keeps the recorded
    /// program's. On a busy machine, add --wait-sample.
    #[arg(
        long,
        value_enum,
        default_value = "idle",
        value_name = "WHEN",
        conflicts_with = "no_stacks"
    )]
    pub stacks: StacksAt,

    /// With `--stacks waits`: copy the stacks at one interruptible sleep in
    /// N on each CPU (the other sleeps are still recorded, without
    /// stacks); the blocking paths count each sampled wait N times, an
    /// estimate. For a busy or saturated machine, where every switch is a
    /// wait and an 8 KiB copy at each overflows the rings: the summary line
    /// says when records were lost. Uninterruptible waits (disk I/O) and
    /// the switch-outs that leave a CPU idle keep their stacks every time.
    #[arg(long, default_value_t = 1, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub wait_sample: u32,

    /// Take no stacks at wake-ups. By default, with the stacks above, every
    /// wake-up an interrupt raised keeps the kernel's call chain (which
    /// device: a timer, the network, a disk), and a wake-up a thread raised
    /// keeps the waker's kernel and user stacks, one in --waker-sample per
    /// CPU: its release site (the unlock, unpark, notify or write that
    /// ended a wait), which names the code at the root of a chain of waits
    /// when the root's own wait has no stack ("Root causes of idle").
    #[arg(long, conflicts_with = "no_stacks")]
    pub no_waker_stacks: bool,

    /// Keep the waker's stacks at one thread-context wake-up in N on each
    /// CPU (the other wake-ups are still recorded, without stacks).
    #[arg(long, default_value_t = idleflow_tracer::DEFAULT_WAKER_SAMPLE_PERIOD, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub waker_sample: u32,

    /// With `--events bpf`: keep the waker's stacks at about N wake-ups a
    /// second per CPU at most, each wake-up with the same chance, when one
    /// in --waker-sample would be more (a loopback server wakes its threads
    /// tens of thousands of times a second, and a kernel call chain costs
    /// microseconds). 0: no budget.
    #[arg(long, default_value_t = idleflow_tracer::DEFAULT_WAKER_STACK_BUDGET, value_name = "N")]
    pub waker_stack_budget: u32,

    /// Bytes of the waker's user stack to copy at a sampled wake-up (K
    /// suffix allowed; at most --stack-size): the release site is in the
    /// innermost frames. 0 keeps the waker's kernel stack only.
    #[arg(long, default_value = "2K", value_parser = parse_stack_size, value_name = "BYTES")]
    pub waker_stack_size: u32,

    /// (internal, for the resolver's benchmark) Keep the raw stack copies:
    /// `idleflow __resolve FILE` resolves them later.
    #[arg(long, hide = true)]
    pub no_resolve: bool,

    /// Print no summary line.
    #[arg(short, long)]
    pub quiet: bool,

    /// The command to run and record; its exit code becomes idleflow's.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// A kind of Java recording (`record --java`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum JavaMode {
    /// The JVMs' flight recorders: Java wait stacks and reasons.
    Waits,
    /// The entry/exit agent: the arcflow call tree.
    Tree,
    /// JIT-compiled Java frames in the user stacks at the switch-outs:
    /// HotSpot's frame pointers and the agent's light mode (the perf map
    /// only, no entries or exits).
    Stacks,
    /// Java frames of the switch-outs read from the JVMs' own structures
    /// while the thread is still blocked: nothing loaded, no flag, no
    /// attach (works with -XX:+DisableAttachMechanism).
    Vm,
    /// `vm` where the eBPF programs record (each JVM whose structures
    /// cannot be read gets `waits`), else (and with --stacks waits, under
    /// --flight) `waits,stacks`.
    Auto,
}

fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let d = humantime::parse_duration(s.trim())
        .or_else(|_| humantime::parse_duration(&format!("{}s", s.trim())))
        .map_err(|e| format!("'{s}' is not a duration like 60s, 500ms or 5m ({e})"))?;
    if d.is_zero() {
        return Err("a duration must be more than 0".into());
    }
    Ok(d)
}

fn parse_stack_size(s: &str) -> Result<u32, String> {
    if s.trim() == "0" {
        return Ok(0);
    }
    let n = parse_size(s)?;
    if n > 65528 {
        return Err(format!("{n} bytes is more than the kernel copies (65528)"));
    }
    if n % 8 != 0 {
        return Err(format!("{n} is not a multiple of 8"));
    }
    Ok(n as u32)
}

fn parse_size(s: &str) -> Result<usize, String> {
    let (num, mult) = match s.trim().to_ascii_uppercase() {
        t if t.ends_with('K') => (t[..t.len() - 1].to_string(), 1 << 10),
        t if t.ends_with('M') => (t[..t.len() - 1].to_string(), 1 << 20),
        t if t.ends_with('G') => (t[..t.len() - 1].to_string(), 1 << 30),
        t => (t, 1),
    };
    num.parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("`{s}` is not a size such as 512K or 4M"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4M"), Ok(4 << 20));
        assert_eq!(parse_size("512k"), Ok(512 << 10));
        assert_eq!(parse_size("8192"), Ok(8192));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("0").is_err());
    }
}
