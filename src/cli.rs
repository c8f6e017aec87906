//! The command-line grammar: what each subcommand accepts, with help
//! written for people who know `perf record` / `perf report`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

mod record;

pub use record::{Events, JavaMode, JfrConvertArgs, RecordArgs, ResolveArgs, StacksAt};

/// Which code paths make the processors go idle, and why.
///
/// idleflow records every dispatch (context switch) on every CPU, gives each
/// dispatch that left a CPU idle one call path (kernel, native and Java
/// frames) and a reason, and follows the idle down the wait chain to the code
/// that held things up (its root cause). `record` once as root, then read the
/// recording with any other command, on any machine.
#[derive(Debug, Parser)]
#[command(name = "idleflow", version, propagate_version = true, after_help = MAIN_EXAMPLES)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

// Examples, one command a line, printed as written after each help
// (`tests/cli.rs` checks them at 80 and 120 columns).
const MAIN_EXAMPLES: &str = "Examples:
  sudo idleflow record -o run.idleflow -- ./my-server --threads 8
  idleflow report run.idleflow";
const RECORD_EXAMPLES: &str = "Examples:
  sudo idleflow record -o run.idleflow -- ./my-server --threads 8
  sudo idleflow record --pid 4242 --duration 30 -o live.idleflow
  sudo idleflow record --stacks waits -- make -j8
  sudo idleflow record --flight 60s --trigger 'wait>=500ms' -o dumps/ --pid 4242";
const REPORT_EXAMPLES: &str = "Examples:
  idleflow report run.idleflow
  idleflow report run.idleflow --per-cpu --threads 20 --paths 10
  idleflow report run.idleflow --from 5 --to 15 -f json -o report.json";
const FLAMEGRAPH_EXAMPLES: &str = "Examples:
  idleflow flamegraph run.idleflow -o idle.svg
  idleflow flamegraph run.idleflow --blame -o blame.svg
  idleflow flamegraph run.idleflow --folded -o idle.folded";
const EXPORT_EXAMPLES: &str = "Examples:
  idleflow export run.idleflow -f pprof -o idle.pb.gz
  go tool pprof -top idle.pb.gz
  idleflow export run.idleflow -f perfetto -o idle.pftrace";
const DIFF_EXAMPLES: &str = "Examples:
  idleflow diff base.idleflow new.idleflow
  idleflow diff base.idleflow new.idleflow --svg -o diff.svg";
const SCRIPT_EXAMPLES: &str = "Examples:
  idleflow script run.idleflow | less
  idleflow script run.idleflow | grep LOST";
const TRIGGER_EXAMPLES: &str = "Examples:
  idleflow trigger
  idleflow trigger --pid 4242";
const HISTORY_EXAMPLES: &str = "Examples:
  idleflow history add run.idleflow --job checkout
  idleflow history list --job checkout
  idleflow history show 7
  idleflow history check new.idleflow --job checkout   # exit 1: a path rose";

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Record dispatches on every CPU while a command runs, for a duration, or while a process lives.
    ///
    /// Needs root or CAP_PERFMON. Every CPU is always recorded (idle time is
    /// a property of CPUs, not of one process); the command or --pid only
    /// chooses which threads the report's thread table shows. Stop early
    /// with Ctrl-C: the recording stays valid.
    #[command(after_help = RECORD_EXAMPLES)]
    Record(Box<RecordArgs>),
    /// Print the answer: the code paths that left CPUs idle, their root causes, then the tables.
    ///
    /// Needs no privileges; the recording can come from another machine. The
    /// first screen is the answer: the window and how idle its CPUs were, the
    /// top idle-causing paths one line each (reason, threads, the program's
    /// own innermost frame), and the root causes with their wait chains.
    /// Then the merged paths (--paths), per CPU (--per-cpu), per thread
    /// (--threads) and each source's own section (--view).
    ///
    /// Per-CPU columns: to-idle = dispatches that left the CPU idle;
    /// from-idle = dispatches out of idle; idle ms / idle% = idle time in the
    /// window; kernel% = the kernel's own idle+iowait (/proc/stat) over the
    /// same window, an independent check (it reads lower on wake-up-heavy
    /// work: the kernel stops that clock while the idle task handles
    /// interrupts and wake-ups; a NOTE flags a larger difference); unknown ms
    /// = time a stream break (lost records) leaves unaccounted: the true idle
    /// time lies between idle ms and idle ms + unknown ms; intervals =
    /// complete idle intervals with their median, 99th percentile and
    /// longest.
    ///
    /// Arcflow call tree (recordings of JVMs): one line per call path,
    /// indented by level, long Java names shortened from the left. LV =
    /// depth; CALLS = calls along this path; BASE = exclusive time; idle ms =
    /// idle time that followed a thread leaving a CPU in this node; % = the
    /// subtree's share of the --sort measure. JSON adds CEE (calls made),
    /// MMAX (longest single call), AO / AB (sampled allocations), DIP / IDLE
    /// (dispatches from idle on the thread's CPU / on all CPUs while the
    /// thread was in this node, as the agent credited them from the work
    /// area) and to-idle (dispatches to idle caused in this node). Its
    /// header says how much of the idle after the JVM's threads left a CPU
    /// the tree covers, and how the dispatches of traced threads were tagged: from
    /// the node current at the dispatch, from the thread's history, or
    /// unknown (the node then lasted less than --delta, or its history entry
    /// was overwritten: counted, never guessed), and how many came before
    /// the agent saw the thread or after it left Java (untagged).
    ///
    /// Thread table (the blocked-thread statistics): runtime, slices (times
    /// dispatched), max (longest slice), non-run (times it left the CPU not
    /// runnable: sleeping, waiting for a lock or I/O), preempt (times it was
    /// preempted while runnable), run% / wait% / blk% (shares of the time it
    /// was observed: running, runnable but waiting for a CPU, blocked),
    /// to-idle / idle ms (dispatches to idle its leaving caused, and the idle
    /// time that followed). idleflow's own threads appear only in the header
    /// line `# idleflow itself`, never as a cause.
    #[command(after_help = REPORT_EXAMPLES)]
    Report(ReportArgs),
    /// Print every record of a recording, one line each, in time order (like `perf script`).
    ///
    /// Columns: seconds since the start, CPU, then `dispatch PREV [STATE] -> NEXT`
    /// (thread ids, 0 = idle), `wakeup WAKER wakes WAKEE on cpu N`, thread names, exits,
    /// and LOST lines where the kernel dropped records.
    #[command(after_help = SCRIPT_EXAMPLES)]
    Script(ScriptArgs),
    /// Draw a flame graph of the call paths whose leaving made CPUs idle.
    ///
    /// Frames run root → `java PID` → thread name → Java frames; a frame's
    /// width is the idle time (or the dispatches to idle) that followed a
    /// thread leaving a CPU while in that call path. From the arcflow call
    /// trees where JVMs ran with `record --java tree`, else from the Java
    /// wait stacks of their flight recorders (`--java waits`, the default),
    /// with the JVM's reason on top (`[monitor enter] CLASS`, red), frames
    /// coloured by how they ran: JIT-compiled (`_[j]`, green), inlined
    /// (`_[i]`, aqua), interpreted (`_[0]`) and native (`_[n]`). Without
    /// Java paths, from the kernel stacks taken at the switch-outs: root →
    /// process → thread → kernel frames, the wait on top (`_[k]`, orange).
    #[command(after_help = FLAMEGRAPH_EXAMPLES)]
    Flamegraph(FlamegraphArgs),
    /// Write a recording's idle-causing paths in the format of a tool you already use.
    ///
    /// `--format pprof` (gzip-compressed profile.proto, default `idle.pb.gz`):
    /// one sample per merged path, as `report` shows them, with two sample
    /// types: `idle` (nanoseconds of idle that followed, the default) and
    /// `dispatches_to_idle`; frames innermost first with their files and
    /// lines where known, native frames in their modules' mappings, and the
    /// labels `process`, `thread` (thread or pool), `reason` and `object`.
    /// Read it with `go tool pprof -top idle.pb.gz` (add `-tagroot=thread`
    /// to see the threads as root frames, `-sample_index=dispatches_to_idle`
    /// for counts), or load it in Pyroscope, Parca, Grafana or speedscope.
    ///
    /// `--format perfetto` (a native Perfetto trace, default `idle.pftrace`):
    /// every dispatch as a `sched_switch` on its CPU (idle shows as the gaps
    /// of the CPU tracks), every wake-up as `sched_waking` (thread states:
    /// running, runnable, sleeping, disk), the process tree, and each
    /// idle-causing dispatch as a sample of its thread at the switch-out
    /// whose call stack is its merged path. Open it in ui.perfetto.dev
    /// (nothing leaves the browser), select a time range, and the samples'
    /// flame graph says what made the CPUs idle then.
    ///
    /// `--format csv` (default `roots.csv`): the root causes of idle, one row
    /// each, most idle first — share, idle ns, kind, device, process, thread
    /// or pool, reason, object, the program's frame, the release site, the
    /// heaviest chain into it (victims first) — as the report's "Root
    /// causes of idle" lists them, for a spreadsheet, pandas or DuckDB.
    #[command(after_help = EXPORT_EXAMPLES)]
    Export(ExportArgs),
    /// Compare two recordings: the idle-causing paths whose share of the idle grew or shrank beyond noise.
    ///
    /// Paths are matched by process, reason and frames (names, not lines or
    /// addresses), so the same code matches across builds and runs. Each
    /// recording's idle is split into time windows (up to 64, at least
    /// 50 ms wide), and the windows of both are resampled 1000 times: a
    /// change is reported only when 99 % of the resampled changes lie on
    /// its side of zero and it is at least --min-change points. Most
    /// changed first, each with its share of the idle in both runs, the
    /// idle per second, the interval, and the frames. `--svg` draws a
    /// differential flame graph instead (inferno: red grew, blue shrank).
    #[command(after_help = DIFF_EXAMPLES)]
    Diff(DiffArgs),
    /// Keep runs under a job's name and check new runs against them: did a path's idle rise beyond the job's noise?
    ///
    /// The history is SQLite by default (one file in your data directory,
    /// ~/.local/share/idleflow/history.sqlite), or a PostgreSQL server a
    /// team shares (--history postgres://user@host/db, or IDLEFLOW_HISTORY).
    /// Each run keeps its facts (host, kernel, CPUs, command, start, window)
    /// and per merged idle-causing path its idle and share per time window.
    ///
    /// `check` compares the run with the job's runs at a similar time of
    /// day and week (within 2 h, weekday or weekend) where there are at
    /// least 3, else with all of them (the newest 20), pooled: a path rose
    /// when its share grew by at least --min-change points (1.0, or 1.5
    /// with fewer than 3 runs) beyond the resampled windows' noise and, with
    /// 3 runs or more, beyond 3 standard deviations of the runs' own shares. Exit status: 0 none rose, 1 one
    /// or more rose, 2 an error.
    #[command(subcommand, after_help = HISTORY_EXAMPLES)]
    History(HistoryCommand),
    /// Ask the flight recorders running on this machine (`record --flight`) for a dump now.
    ///
    /// Each recorder listens on /run/idleflow/flight-PID.sock and checks who
    /// asks: root, the recorder's own user, or a member of its
    /// --trigger-group may; anyone else is told "not allowed". The dump
    /// waits the recorder's --tail, then is written into its directory;
    /// the recorder's cooldown and --max-dumps hold for requests too. Exit
    /// status: 0 a recorder is dumping, 1 none is (not allowed, held back,
    /// or no recorder runs).
    #[command(after_help = TRIGGER_EXAMPLES)]
    Trigger(TriggerArgs),
    /// (internal) Convert one JVM's flight recording into wait records, in
    /// a process of its own so that a damaged file cannot take `record` down.
    #[command(name = idleflow_session::CONVERT_SUBCOMMAND, hide = true)]
    JfrConvert(JfrConvertArgs),
    /// (internal, for the resolver's benchmark) Unwind and name the stack
    /// copies of a recording made with `record --no-resolve`, in place, on
    /// the machine and soon after it was recorded.
    #[command(name = "__resolve", hide = true)]
    Resolve(ResolveArgs),
}

/// `idleflow trigger`.
#[derive(Debug, Args)]
pub struct TriggerArgs {
    /// Ask only the flight recorder whose process id this is.
    #[arg(long)]
    pub pid: Option<u32>,
}

#[derive(Debug, Args)]
pub struct ScriptArgs {
    /// The recording to read.
    #[arg(default_value = "run.idleflow")]
    pub input: PathBuf,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Format {
    /// Aligned tables for people.
    Text,
    /// The same numbers for scripts (field names in docs/format.md).
    Json,
    /// One self-contained page to share or print (`report` only): the answer and root
    /// causes as tables, each linked to its chain and its frames in the flame graph, idle
    /// per CPU over time, the flame graph, the tables.
    Html,
}

/// One source's own view of a recording (`report --view`, `flamegraph --view`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ViewArg {
    /// The merged idle-causing paths (the default): each dispatch to idle
    /// with the kernel, native and Java frames of the best source covering it.
    Paths,
    /// The entry/exit agent's arcflow call tree (`record --java tree`).
    Tree,
    /// The JVMs' flight-recorder waits: exact Java stacks and reasons.
    Java,
    /// The user stacks taken at the switch-outs.
    User,
    /// The kernel stacks taken at the switch-outs.
    Kernel,
    /// Where threads blocked, by blocked time (`record --stacks waits`).
    Blocking,
    /// Every view the recording has (report only).
    All,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Where to write the report [default: standard output]; a file is
    /// readable by its owner only, as the recording is.
    #[arg(short, long)]
    pub output: Option<PathBuf>,

    /// The recording to read.
    #[arg(default_value = "run.idleflow")]
    pub input: PathBuf,

    /// Output format.
    #[arg(short, long, value_enum, default_value = "text")]
    pub format: Format,

    /// Also show one source's own section (repeat or comma-separate):
    /// `tree`, `java`, `user`, `kernel`, `blocking`, or `all`. The answer
    /// and the merged paths are always there; JSON carries a view's section
    /// only when asked for.
    #[arg(long, value_enum, value_delimiter = ',', value_name = "VIEW")]
    pub view: Vec<ViewArg>,

    /// Also show the thread tables: the threads whose leaving made a CPU
    /// idle, and N threads' blocked-thread statistics (default 10; JSON has
    /// all).
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "10")]
    pub threads: Option<usize>,

    /// Threads shown among those whose leaving made a CPU idle (with
    /// --threads: all CPUs together; with --per-cpu: each CPU's own).
    #[arg(long, default_value_t = 5)]
    pub causes: usize,

    /// Idle-causing paths shown, merged and per view (JSON has all).
    /// Without it, up to 3, as many as keep the report on one screen
    /// (60 lines) unless --per-cpu, --threads or --view ask for more.
    #[arg(long, value_name = "N")]
    pub paths: Option<usize>,

    /// Also show the per-CPU table (above 16 CPUs the 5 most and 5 least
    /// idle and a histogram) and the idle causes of each CPU it shows; JSON
    /// always has every CPU.
    #[arg(long)]
    pub per_cpu: bool,

    /// Arcflow tree: one tree per thread instead of the threads of a JVM merged.
    #[arg(long)]
    pub per_thread: bool,

    /// Arcflow tree: order children by, and cut subtrees by, this measure.
    #[arg(long, value_enum, default_value = "idle-ns")]
    pub sort: SortArg,

    /// Arcflow tree: hide subtrees below this % of the total of --sort.
    #[arg(long, default_value_t = 1.0, value_name = "PCT")]
    pub min_share: f64,

    #[command(flatten)]
    pub window: WindowArgs,
}

/// The part of a recording to report.
#[derive(Debug, Args, Clone, Copy, Default)]
pub struct WindowArgs {
    /// Report from this many seconds after the recording's start (e.g. to
    /// leave out a server's start-up); the header says which part it is.
    #[arg(long, value_name = "SECONDS")]
    pub from: Option<f64>,

    /// Report up to this many seconds after the recording's start.
    #[arg(long, value_name = "SECONDS")]
    pub to: Option<f64>,

    /// Leave out the recorded program's start-up: report from where its
    /// longest stretch without starting a thread or process begins (at
    /// least a second: servers start their pools, then serve with them until
    /// they shut down). Needs a recorded command or --pid; the header says
    /// where the report starts.
    #[arg(long, conflicts_with = "from")]
    pub skip_startup: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum SortArg {
    /// Idle time that followed a thread leaving in the subtree.
    IdleNs,
    /// Dispatches to idle caused in the subtree.
    IdleDispatches,
    /// Exclusive (BASE) time.
    Base,
    /// Calls.
    Calls,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum WeightArg {
    /// Idle time (ns) that followed a thread leaving each path.
    IdleNs,
    /// Dispatches to idle caused by a thread leaving each path.
    Dispatches,
}

/// `export --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    /// pprof's profile.proto, gzip-compressed (`go tool pprof`, Pyroscope, Parca, Grafana, speedscope).
    Pprof,
    /// A native Perfetto trace (ui.perfetto.dev, trace_processor): CPU tracks with the idle gaps, thread states, the idle-causing paths as call stacks.
    Perfetto,
    /// The root causes of idle as CSV, one row each, most idle first (a spreadsheet, pandas, DuckDB).
    Csv,
}

impl ExportFormat {
    /// The file written when `--output` is not given.
    pub fn default_output(self) -> &'static str {
        match self {
            ExportFormat::Pprof => "idle.pb.gz",
            ExportFormat::Perfetto => "idle.pftrace",
            ExportFormat::Csv => "roots.csv",
        }
    }
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The recording to read.
    #[arg(default_value = "run.idleflow")]
    pub input: PathBuf,

    /// The format to write.
    #[arg(short, long, value_enum)]
    pub format: ExportFormat,

    /// Where to write it [default: idle.pb.gz for pprof, idle.pftrace for perfetto, roots.csv for csv],
    /// readable by its owner only, as the recording is.
    #[arg(short, long)]
    pub output: Option<PathBuf>,

    #[command(flatten)]
    pub window: WindowArgs,
}

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The recording compared against (before the change).
    pub base: PathBuf,

    /// The recording compared (after the change).
    pub new: PathBuf,

    /// Output format; JSON lists every path (`changes`, `within_noise`).
    #[arg(short, long, value_enum, default_value = "text")]
    pub format: Format,

    /// The smallest change reported, in points of the share of idle.
    #[arg(long, default_value_t = 1.0, value_name = "POINTS")]
    pub min_change: f64,

    /// Changed paths shown in the text.
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub paths: usize,

    /// Write a differential flame graph (SVG) instead of the text.
    #[arg(long)]
    pub svg: bool,

    /// Where --svg writes (readable by its owner only, as the recordings are).
    #[arg(short, long, default_value = "diff.svg", requires = "svg")]
    pub output: PathBuf,
}

/// `idleflow history …`.
#[derive(Debug, Subcommand)]
pub enum HistoryCommand {
    /// Keep a recording's summary under a job's name.
    Add(HistoryAddArgs),
    /// List the kept runs, oldest first (of one job with --job).
    List(HistoryListArgs),
    /// One kept run: its facts and its paths.
    Show(HistoryShowArgs),
    /// Compare a recording with its job's history; exit 1 when a path's idle rose beyond noise.
    Check(HistoryCheckArgs),
}

/// Where the history is (every `history` subcommand).
#[derive(Debug, Args)]
pub struct HistoryStore {
    /// The history: an SQLite file, or a postgres:// URL [default: ~/.local/share/idleflow/history.sqlite].
    #[arg(long, value_name = "FILE|URL", env = "IDLEFLOW_HISTORY")]
    pub history: Option<String>,
}

#[derive(Debug, Args)]
pub struct HistoryAddArgs {
    /// The recording to keep.
    pub input: PathBuf,

    /// The job it belongs to (a service, a benchmark, a CI job).
    #[arg(long)]
    pub job: String,

    #[command(flatten)]
    pub store: HistoryStore,
}

#[derive(Debug, Args)]
pub struct HistoryListArgs {
    /// Only this job's runs.
    #[arg(long)]
    pub job: Option<String>,

    /// The newest N runs.
    #[arg(long, default_value_t = 50, value_name = "N")]
    pub last: usize,

    /// Output format.
    #[arg(short, long, value_enum, default_value = "text")]
    pub format: Format,

    #[command(flatten)]
    pub store: HistoryStore,
}

#[derive(Debug, Args)]
pub struct HistoryShowArgs {
    /// The run's id (`history list` shows them).
    pub id: i64,

    /// Paths shown in the text.
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub paths: usize,

    /// Output format.
    #[arg(short, long, value_enum, default_value = "text")]
    pub format: Format,

    #[command(flatten)]
    pub store: HistoryStore,
}

#[derive(Debug, Args)]
pub struct HistoryCheckArgs {
    /// The recording to check.
    pub input: PathBuf,

    /// The job whose history it is compared with.
    #[arg(long)]
    pub job: String,

    /// The smallest rise that fails the check, in points of the share of idle [default: 1.0
    /// with 3 runs or more to compare with, else 1.5].
    ///
    /// Identical runs differ by more than their windows' noise says (up to 1.34 points on
    /// examples/c/stages.c, docs/PERFORMANCE.md): with fewer than 3 runs the history cannot
    /// measure that spread, so the default asks for more.
    #[arg(long, value_name = "POINTS")]
    pub min_change: Option<f64>,

    /// Output format; JSON: `baseline`, `rose`, and the whole `diff`.
    #[arg(short, long, value_enum, default_value = "text")]
    pub format: Format,

    /// Changed paths shown in the text.
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub paths: usize,

    #[command(flatten)]
    pub store: HistoryStore,
}

#[derive(Debug, Args)]
pub struct FlamegraphArgs {
    /// The recording to read.
    #[arg(default_value = "run.idleflow")]
    pub input: PathBuf,

    /// Where to write the SVG (or the folded stacks with --folded), readable
    /// by its owner only, as the recording is.
    #[arg(short, long, default_value = "idle.svg")]
    pub output: PathBuf,

    /// What a frame's width stands for.
    #[arg(long, value_enum, default_value = "idle-ns")]
    pub weight: WeightArg,

    /// Write folded stacks (`frame;frame;frame weight`) for inferno or FlameGraph instead of SVG.
    #[arg(long)]
    pub folded: bool,

    #[command(flatten)]
    pub window: WindowArgs,

    /// Draw one source's own paths instead of the merged ones: `tree`,
    /// `java`, `user` (the user stacks, kernel frames on top), `kernel`, or
    /// `blocking` (same as --blocked).
    #[arg(long, value_enum, default_value = "paths", value_name = "VIEW")]
    pub view: ViewArg,

    /// The paths grouped by their reason first (`[monitor enter] CLASS`,
    /// `[park] CLASS`, `[futex wait]`, …) at the root instead of on top:
    /// the merged paths, or with `--view java` the Java waits.
    #[arg(long)]
    pub by_reason: bool,

    /// The stacks taken at the idle-causing switch-outs alone (process →
    /// thread → user frames → the kernel's, wait on top): `--view user`.
    #[arg(long, conflicts_with = "by_reason")]
    pub stacks: bool,

    /// Of the switch-out stacks, draw the user frames only (no kernel frames).
    #[arg(long)]
    pub user_only: bool,

    /// Draw where the threads blocked, by the time until they ran again
    /// (`--weight idle-ns`) or by waits (`--weight dispatches`): an
    /// off-CPU flame graph of a recording made with `record --stacks waits`.
    #[arg(long, conflicts_with_all = ["by_reason", "stacks"])]
    pub blocked: bool,

    /// Draw the root causes of idle on top of the chains they caused: at
    /// the bottom the threads whose leaving made CPUs idle and their wait,
    /// above each the thread it waited for (`← indexer [park] …`), on top
    /// the root (`[root: timer] writer`, `[root: running] …`) with its
    /// frames. Record with `--stacks waits` for every root's frames.
    #[arg(long, conflicts_with_all = ["by_reason", "stacks", "blocked"])]
    pub blame: bool,

    /// One stack per thread. By default threads whose names differ only in
    /// their last number (a pool: `http-nio-8080-exec-1`, `-exec-2`, …) are
    /// merged under one name (`http-nio-8080-exec-*`).
    #[arg(long)]
    pub per_thread: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grammar_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
