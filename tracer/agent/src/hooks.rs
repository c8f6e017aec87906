//! What the agent does at each JVMTI event, as plain safe Rust: the
//! trampolines in `lib.rs` catch panics and hand over a [`Jvmti`] plus the
//! event's arguments.
//!
//! Each Java thread builds its own [`CallTree`] in a thread-local (no lock
//! on the entry/exit path), publishes its current node to its slot of the
//! thread work area (claimed on its first event), and credits the idle
//! counts the tracer writes there to the node it is leaving. Method names
//! are resolved once, when a node for a new path is created. Each thread
//! snapshots its tree every `interval_ms` (and at its end), encoded at once
//! as a binary `TREE_THREAD` record (so a thread whose tree did not change
//! costs nothing more); a writer thread writes the latest records after a
//! `TREE_HEAD` to `<trees>/tree-<pid>.bin` just as often, and VM
//! death writes the final dump, so a JVM killed mid-run still leaves its
//! last snapshot.
//!
//! Invariants: node ids are unique in the recording (`pid << 32 | n`); an
//! event that arrives while the same thread is already inside a hook (a
//! re-entrant callback) is ignored rather than corrupting the tree; every
//! error is reported once on stderr and the JVM keeps running.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use idleflow_format::tree::{encode_head, encode_thread, frame};
use idleflow_format::{kind, ThreadTree, TreeHead};
use idleflow_wire::twa::{SlotRef, WorkArea};
use rustc_hash::FxHashMap;

use crate::clock::{monotonic_ns, Clock, ClockKind, ThreadClock};
use crate::env::{java_class_name, Jvmti, MethodId, ThreadRef};
use crate::tree::CallTree;

/// Agent options: `twa=PATH,trees=DIR,handoff=SOCKET,interval_ms=N,clock=tsc|monotonic,tree=0|1,perfmap=0|1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// The thread work area to publish to.
    pub twa: Option<PathBuf>,
    /// Where to dump call trees.
    pub trees: Option<PathBuf>,
    /// The recorder's hand-off socket: where a JVM that may not open the
    /// work area by path (another user's) asks for it.
    pub handoff: Option<PathBuf>,
    /// Snapshot and dump period.
    pub interval_ms: u64,
    /// `noop=1`: callbacks return at once (the floor of the entry/exit
    /// approach, for benchmarks).
    pub noop: bool,
    /// `clock=tsc|monotonic`: how the hot path reads time (see [`clock`](crate::clock)).
    pub clock: ClockKind,
    /// `tree=0`: no method entry/exit events and no call trees (default 1).
    pub tree: bool,
    /// `perfmap=1`: write the JVM's perf map (see [`perfmap`](crate::perfmap)).
    pub perfmap: bool,
}

/// Parses the agent's option string.
pub fn parse_options(s: &str) -> Result<Options, String> {
    let mut o = Options {
        twa: None,
        trees: None,
        handoff: None,
        interval_ms: 1000,
        noop: false,
        clock: ClockKind::Tsc,
        tree: true,
        perfmap: false,
    };
    for part in s.split(',').filter(|p| !p.is_empty()) {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| format!("option `{part}` is not key=value"))?;
        match k {
            "twa" => o.twa = Some(PathBuf::from(v)),
            "trees" => o.trees = Some(PathBuf::from(v)),
            "handoff" => o.handoff = Some(PathBuf::from(v)),
            "noop" => o.noop = v == "1",
            "tree" => o.tree = flag(k, v)?,
            "perfmap" => o.perfmap = flag(k, v)?,
            "clock" => {
                o.clock = match v {
                    "tsc" => ClockKind::Tsc,
                    "monotonic" => ClockKind::Monotonic,
                    _ => return Err(format!("clock={v}: expected tsc or monotonic")),
                }
            }
            "interval_ms" => {
                o.interval_ms = v
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| format!("interval_ms={v} is not a positive number"))?
            }
            other => {
                return Err(format!(
                "unknown option `{other}` (known: twa, trees, handoff, interval_ms, clock, noop, tree, perfmap)"
            ))
            }
        }
    }
    Ok(o)
}

/// A `0|1` option.
fn flag(key: &str, value: &str) -> Result<bool, String> {
    match value {
        "0" => Ok(false),
        "1" => Ok(true),
        _ => Err(format!("{key}={value}: expected 0 or 1")),
    }
}

struct Methods {
    index: FxHashMap<usize, u32>,
    names: Vec<String>,
}

struct Agent {
    opts: Options,
    pid: u32,
    area: Option<WorkArea>,
    clock: Clock,
    next_node: AtomicU64,
    methods: Mutex<Methods>,
    /// Latest tree of each thread, keyed by its root node id (a tid can
    /// come back as a new Java thread, e.g. `main` then `DestroyJavaVM`).
    /// Each is a framed `TREE_THREAD` record.
    snapshots: Mutex<BTreeMap<u64, std::sync::Arc<[u8]>>>,
    unmatched_exits: AtomicU64,
    finished: AtomicBool,
    /// The dump writer's tid (0 before it starts): named in every dump so
    /// that reports never count the agent's own thread as a cause of idle.
    dump_tid: AtomicU32,
}

static AGENT: OnceLock<Agent> = OnceLock::new();

fn report_once(flag: &AtomicBool, msg: &str) {
    if !flag.swap(true, Ordering::Relaxed) {
        eprintln!("idleflow-agent: {msg}");
    }
}

static WARNED_SLOTS: AtomicBool = AtomicBool::new(false);
static WARNED_DUMP: AtomicBool = AtomicBool::new(false);

/// `e` and its causes, on one line.
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}

fn gettid() -> u32 {
    // SAFETY: gettid has no memory effects.
    unsafe { libc::gettid() as u32 }
}

impl Agent {
    fn node_id(&self) -> u64 {
        (u64::from(self.pid) << 32) | self.next_node.fetch_add(1, Ordering::Relaxed)
    }

    /// The method table index of `method`, resolving its name the first time.
    fn method_index(&self, jvmti: Jvmti, method: MethodId) -> u32 {
        let key = method.as_raw() as usize;
        let Ok(mut m) = self.methods.lock() else {
            return u32::MAX;
        };
        if let Some(&i) = m.index.get(&key) {
            return i;
        }
        let name = match jvmti.method_name(method) {
            Ok((class, name)) => format!("{}.{}", java_class_name(&class), name),
            Err(e) => format!("<method {key:#x}: {e}>"),
        };
        let i = m.names.len() as u32;
        m.names.push(name);
        m.index.insert(key, i);
        i
    }

    fn dump(&self, final_dump: bool) {
        let Some(dir) = &self.opts.trees else { return };
        let methods = match self.methods.lock() {
            Ok(m) => m.names.clone(),
            Err(_) => return,
        };
        // The records are shared, not copied, under the lock: a thread's
        // next snapshot never waits for the file.
        let snapshots: Vec<std::sync::Arc<[u8]>> = match self.snapshots.lock() {
            Ok(s) => s.values().cloned().collect(),
            Err(_) => return,
        };
        let head = TreeHead {
            pid: self.pid,
            final_dump,
            time_ns: monotonic_ns(),
            methods,
            threads: snapshots.len() as u64,
            unmatched_exits: self.unmatched_exits.load(Ordering::Relaxed),
            agent_tids: match self.dump_tid.load(Ordering::Relaxed) {
                0 => vec![],
                tid => vec![tid],
            },
        };
        let mut payload = Vec::new();
        encode_head(&head, &mut payload);
        let mut head_record = Vec::with_capacity(payload.len() + 11);
        frame(kind::TREE_HEAD, &payload, &mut head_record);
        let path = dir.join(format!("tree-{}.bin", self.pid));
        let tmp = dir.join(format!(".tree-{}.bin.tmp", self.pid));
        let result = (|| {
            use std::io::Write;
            let mut out = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
            out.write_all(&head_record)?;
            for t in &snapshots {
                out.write_all(t)?;
            }
            out.into_inner().map_err(|e| e.into_error())?;
            std::fs::rename(&tmp, &path)
        })();
        drop(snapshots);
        if let Err(e) = result {
            report_once(
                &WARNED_DUMP,
                &format!("cannot write {}: {e}", path.display()),
            );
        }
    }
}

struct ThreadState {
    tree: CallTree,
    slot: Option<SlotRef<'static>>,
    tid: u32,
    /// The Java thread name; `None` until JVMTI can tell it (not yet during
    /// VM start-up), asked again at each snapshot.
    name: Option<String>,
    /// The work-area counts last credited.
    counts: (u64, u64),
    /// When the current node became current.
    since: u64,
    clock: ThreadClock,
    last_snapshot: u64,
    /// Time between snapshots, ns: the option's interval, or longer for a
    /// big tree ([`spaced`]).
    snapshot_every: u64,
}

/// Periodic work (a thread's snapshot, the dump) may take at most this
/// share of the time: after work that took `cost` ns, the next waits at
/// least `cost × SPACING` (a 2 % budget). A JVM with millions of call-tree
/// nodes (Tomcat under load: 2.1 M) then snapshots every few seconds
/// instead of spending 40 % of a CPU on it; small trees keep the interval.
const SPACING: u64 = 50;

/// The interval to wait after periodic work that took `cost` ns.
fn spaced(interval_ns: u64, cost: u64) -> u64 {
    interval_ns.max(cost.saturating_mul(SPACING))
}

thread_local! {
    static THREAD: RefCell<Option<ThreadState>> = const { RefCell::new(None) };
}

impl ThreadState {
    fn new(agent: &'static Agent, jvmti: Jvmti, thread: ThreadRef<'_>) -> Self {
        let tid = gettid();
        let mut clock = agent.clock.thread();
        let now = clock.now(&agent.clock);
        let tree = CallTree::new(agent.node_id());
        let slot = agent.area.as_ref().and_then(|a| {
            let s = a.claim(tid, agent.pid, tree.current_id(), now);
            if s.is_none() {
                report_once(
                    &WARNED_SLOTS,
                    "the work area is full: further threads run untagged (raise record --max-threads)",
                );
            }
            s
        });
        let counts = slot.map_or((0, 0), |s| s.counts());
        ThreadState {
            tree,
            slot,
            tid,
            name: jvmti.current_thread_name(thread),
            counts,
            since: now,
            clock,
            last_snapshot: now,
            snapshot_every: agent.opts.interval_ms * 1_000_000,
        }
    }

    /// Credits the idle counts the tracer wrote since the last look to the
    /// node being left.
    fn credit_idle(&mut self) {
        if let Some(slot) = self.slot {
            let (dip, idle) = slot.counts();
            let d = (
                dip.saturating_sub(self.counts.0),
                idle.saturating_sub(self.counts.1),
            );
            if d != (0, 0) {
                self.tree.add_idle(d.0, d.1);
                self.counts = (dip, idle);
            }
        }
    }

    fn publish(&mut self, old: u64, now: u64) {
        let new = self.tree.current_id();
        if let Some(slot) = self.slot {
            slot.publish(old, self.since, new, now);
        }
        self.since = now;
    }

    fn snapshot(&mut self, agent: &Agent, now: u64) {
        let started = monotonic_ns();
        let tree = ThreadTree {
            pid: agent.pid,
            tid: self.tid,
            name: self
                .name
                .clone()
                .unwrap_or_else(|| format!("tid-{}", self.tid)),
            nodes: self.tree.snapshot(now),
        };
        let mut payload = Vec::with_capacity(24 * tree.nodes.len() + 64);
        encode_thread(&tree, &mut payload);
        let mut record = Vec::with_capacity(payload.len() + 11);
        frame(kind::TREE_THREAD, &payload, &mut record);
        if let Ok(mut s) = agent.snapshots.lock() {
            s.insert(self.tree.nodes()[0].id, record.into());
        }
        let cost = monotonic_ns().saturating_sub(started);
        self.snapshot_every = spaced(agent.opts.interval_ms * 1_000_000, cost);
        self.last_snapshot = now;
    }
}

/// Runs `f` on this thread's state, creating it on the first event.
/// Re-entrant events (a hook running inside a hook) are dropped.
fn with_thread(
    jvmti: Jvmti,
    thread: ThreadRef<'_>,
    f: impl FnOnce(&'static Agent, &mut ThreadState, u64),
) {
    let Some(agent) = AGENT.get() else { return };
    if agent.opts.noop || agent.finished.load(Ordering::Relaxed) {
        return;
    }
    THREAD.with(|cell| {
        let Ok(mut guard) = cell.try_borrow_mut() else {
            return;
        };
        let state = guard.get_or_insert_with(|| ThreadState::new(agent, jvmti, thread));
        let now = state.clock.now(&agent.clock);
        f(agent, state, now);
        if now.saturating_sub(state.last_snapshot) >= state.snapshot_every {
            if state.name.is_none() {
                state.name = jvmti.current_thread_name(thread);
            }
            state.snapshot(agent, now);
        }
    });
}

/// Called first in `Agent_OnLoad` with the text after `=` in
/// `-agentpath:libidleflow_agent.so=OPTIONS` (empty when there is none).
/// An `Err` is printed and the agent stays inert.
pub fn on_load(options: &str) -> Result<Options, String> {
    let mut opts = parse_options(options)?;
    let area = match opts.twa.clone().filter(|_| opts.tree) {
        Some(p) => Some(open_work_area(&p, &mut opts)?),
        None => None,
    };
    let agent = Agent {
        pid: std::process::id(),
        area,
        clock: Clock::new(opts.clock),
        next_node: AtomicU64::new(1),
        methods: Mutex::new(Methods {
            index: FxHashMap::default(),
            names: Vec::new(),
        }),
        snapshots: Mutex::new(BTreeMap::new()),
        unmatched_exits: AtomicU64::new(0),
        dump_tid: AtomicU32::new(0),
        finished: AtomicBool::new(false),
        opts: opts.clone(),
    };
    AGENT
        .set(agent)
        .map_err(|_| "the agent was loaded twice".to_string())?;
    Ok(opts)
}

/// Opens the work area at `path`; when this JVM's user may not (it runs as
/// another user than the recorder), asks the recorder for it over the
/// hand-off socket, which also names the tree directory made for this JVM.
fn open_work_area(path: &std::path::Path, opts: &mut Options) -> Result<WorkArea, String> {
    match WorkArea::open(path) {
        Ok(a) => Ok(a),
        Err(idleflow_wire::twa::TwaError::Io { source, .. })
            if source.kind() == std::io::ErrorKind::PermissionDenied && opts.handoff.is_some() =>
        {
            let socket = opts.handoff.as_deref().unwrap_or(path);
            let (fd, trees) = idleflow_wire::handoff::request(socket).map_err(|e| {
                format!(
                    "cannot open the work area {} as this user, nor get it from the recorder at {}: {e}",
                    path.display(),
                    socket.display()
                )
            })?;
            opts.trees = Some(PathBuf::from(trees));
            WorkArea::from_file(&std::fs::File::from(fd), path).map_err(|e| with_causes(&e))
        }
        Err(e) => Err(with_causes(&e)),
    }
}

/// Tells the recorder (when `options` name its hand-off socket) why this
/// JVM runs without the agent, so that the report can say so; best effort.
pub fn note_disabled(options: &str, why: &str) {
    if let Some(socket) = options.split(',').find_map(|p| p.strip_prefix("handoff=")) {
        let _ = idleflow_wire::handoff::note(
            std::path::Path::new(socket),
            &format!("agent disabled: {why}"),
        );
    }
}

/// The VM finished initialising: start the periodic dump writer.
pub fn vm_init(_jvmti: Jvmti) {
    let Some(agent) = AGENT.get() else { return };
    if agent.opts.trees.is_none() {
        return;
    }
    let period = Duration::from_millis(agent.opts.interval_ms);
    let spawned = std::thread::Builder::new()
        .name("idleflow-dump".into())
        .spawn(move || {
            agent.dump_tid.store(gettid(), Ordering::Relaxed);
            let mut wait = period;
            while !agent.finished.load(Ordering::Relaxed) {
                std::thread::sleep(wait);
                if !agent.finished.load(Ordering::Relaxed) {
                    let started = monotonic_ns();
                    agent.dump(false);
                    let cost = monotonic_ns().saturating_sub(started);
                    wait = Duration::from_nanos(spaced(period.as_nanos() as u64, cost));
                }
            }
        });
    if let Err(e) = spawned {
        eprintln!("idleflow-agent: cannot start the dump thread: {e}");
    }
}

/// The VM is about to exit: snapshot this thread and write the final dump.
pub fn vm_death(_jvmti: Jvmti) {
    let Some(agent) = AGENT.get() else { return };
    THREAD.with(|cell| {
        if let Ok(mut guard) = cell.try_borrow_mut() {
            if let Some(state) = guard.as_mut() {
                let now = state.clock.now(&agent.clock);
                state.snapshot(agent, now);
            }
        }
    });
    agent.finished.store(true, Ordering::Relaxed);
    agent.dump(true);
}

/// A thread started (it is the current thread; also called for the thread
/// that loads the agent): claim its work-area slot now, so that its
/// dispatches before its first method are tagged with its root node rather
/// than left untraced.
pub fn thread_start(jvmti: Jvmti, thread: ThreadRef<'_>) {
    with_thread(jvmti, thread, |_, _, _| {});
}

/// A thread is ending (it is the current thread): keep its final tree and
/// free its work-area slot.
pub fn thread_end(jvmti: Jvmti, thread: ThreadRef<'_>) {
    let Some(agent) = AGENT.get() else { return };
    THREAD.with(|cell| {
        if let Ok(mut guard) = cell.try_borrow_mut() {
            if let Some(mut state) = guard.take() {
                let now = state.clock.now(&agent.clock);
                state.credit_idle();
                if state.name.is_none() {
                    state.name = jvmti.current_thread_name(thread);
                }
                state.snapshot(agent, now);
                agent
                    .unmatched_exits
                    .fetch_add(state.tree.unmatched_exits(), Ordering::Relaxed);
                if let Some(slot) = state.slot {
                    slot.release(now);
                }
            }
        }
    });
}

/// `thread` entered `method`.
pub fn method_entry(jvmti: Jvmti, thread: ThreadRef<'_>, method: MethodId) {
    with_thread(jvmti, thread, |agent, s, now| {
        s.credit_idle();
        let old = s.tree.current_id();
        s.tree.enter(method.as_raw() as usize, now, || {
            (agent.node_id(), agent.method_index(jvmti, method))
        });
        s.publish(old, now);
    });
}

/// `thread` allocated an object of `size` bytes that the JVM sampled (about
/// one per 512 KiB allocated): counted into the current node's AO / AB.
pub fn sampled_alloc(jvmti: Jvmti, thread: ThreadRef<'_>, size: u64) {
    with_thread(jvmti, thread, |_, s, _| s.tree.add_alloc(size));
}

/// `thread` left `method`, by a return or by an exception.
pub fn method_exit(jvmti: Jvmti, thread: ThreadRef<'_>, method: MethodId, _by_exception: bool) {
    with_thread(jvmti, thread, |_, s, now| {
        s.credit_idle();
        let old = s.tree.current_id();
        s.tree.exit(method.as_raw() as usize, now);
        if s.tree.current_id() != old {
            s.publish(old, now);
        }
    });
}

#[cfg(test)]
mod tests {
    #[test]
    fn periodic_work_keeps_to_its_budget() {
        let second = 1_000_000_000;
        // Small trees: the interval stands.
        assert_eq!(spaced(second, 2_000_000), second);
        // A 300 ms dump of a huge tree: the next in 15 s (2 %).
        assert_eq!(spaced(second, 300_000_000), 15 * second);
    }

    use super::*;

    #[test]
    fn options_parse_and_refuse_unknown_keys() {
        let o = parse_options("twa=/tmp/x/twa,trees=/tmp/x/trees,interval_ms=250").unwrap();
        assert_eq!(o.twa, Some(PathBuf::from("/tmp/x/twa")));
        assert_eq!(o.trees, Some(PathBuf::from("/tmp/x/trees")));
        assert_eq!(o.interval_ms, 250);
        assert_eq!(parse_options("").unwrap().interval_ms, 1000);
        assert!(parse_options("colour=blue")
            .unwrap_err()
            .contains("unknown option"));
        assert!(parse_options("interval_ms=0").is_err());
        assert!(parse_options("twa").is_err());
        assert_eq!(parse_options("").unwrap().clock, ClockKind::Tsc);
        assert_eq!(
            parse_options("clock=monotonic").unwrap().clock,
            ClockKind::Monotonic
        );
        assert!(parse_options("clock=sundial")
            .unwrap_err()
            .contains("tsc or monotonic"));
        let light = parse_options("tree=0,perfmap=1").unwrap();
        assert!(!light.tree && light.perfmap);
        let default = parse_options("").unwrap();
        assert!(default.tree && !default.perfmap);
        assert!(parse_options("perfmap=yes").unwrap_err().contains("0 or 1"));
    }
}
