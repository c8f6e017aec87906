//! Reads the waits of a JVM's flight recording (`.jfr`, written by the
//! JVM's own recorder, JFR) into idleflow's wait records
//! ([`idleflow_format::waits`]): per wait, the thread, its start and
//! duration on the recording's clock, the JVM's reason (monitor enter on a
//! class held by a thread, park, socket read, …) and its exact Java stack.
//!
//! The file is parsed by our own bounded reader ([`reader`]) one chunk at
//! a time (a chunk is
//! what the JVM rotates its recording in, ≈ 12 MiB at most by default), so
//! memory holds one chunk plus the interned stacks and texts. Stacks and
//! texts are interned by content, so the ids the JVM used per chunk do not
//! matter, and names are normalized ([`names`]) so that paths compare
//! across runs.
//!
//! Invariants: a symbol or stack record is emitted before the first record
//! that uses it; a damaged file (a JVM killed while writing) gives what its
//! readable chunks hold and a note, never a panic, a hang or an allocation
//! the file does not hold (the reader checks every length it reads; the
//! fuzz target `tracer/jfr/fuzz` holds it to that).

pub use idleflow_format::names;

pub mod reader;

use std::fs::File;
use std::io::{BufReader, Read, Seek};
use std::path::Path;

use idleflow_format::{
    FrameKind, JavaFrame, JavaStack, JavaSymbol, JavaWait, JvmWaits, Record, WaitReason,
};
use reader::{Access, Chunk, Chunks};
use rustc_hash::FxHashMap;

/// What [`convert`] needs to know besides the file.
#[derive(Debug, Clone)]
pub struct Options {
    /// The JVM's process id.
    pub pid: u32,
    /// Added to JFR's wall-clock ns (since the epoch) to get ns on the
    /// recording's clock: the recording's `start_ns - start_unix_ns`.
    pub offset_ns: i64,
    /// The thresholds the JVM recorded with: shorter waits are left out (a
    /// recording the user runs at the same time in that JVM shares its
    /// events, at its own thresholds).
    pub thresholds: Thresholds,
    /// When the JVM recorded every wait whatever its length, ns on the
    /// recording's clock, `[from, to)` (idleflow's policy ran a second
    /// recording at 0 ms then: [`JvmWaits::all_waits`]): a wait under its
    /// threshold is kept if it ended in one.
    pub all_waits: Vec<(u64, u64)>,
    /// The machine's ephemeral ports (`ip_local_port_range`): a socket's
    /// port in this range is a connection's own (the peer of a server's
    /// socket, or a server that chose port 0), shown as `*` so that one
    /// path does not split into one per connection.
    pub ephemeral_ports: (u16, u16),
}

/// The wait thresholds idleflow records a JVM's waits with, ns: a wait
/// shorter than its reason's threshold is not recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    /// Every reason but monitor enter (`record --wait-threshold`).
    pub wait_ns: u64,
    /// Contended monitor enters (`record --monitor-threshold`). A thread
    /// records one only where it found the monitor held and had to block:
    /// the event is written on a path that already waits, which is why it
    /// can be lower than the others (a pool's parks, one per request, cost
    /// throughput when each is recorded).
    pub monitor_enter_ns: u64,
}

impl Thresholds {
    /// The same threshold for every reason.
    pub fn all(ns: u64) -> Self {
        Thresholds {
            wait_ns: ns,
            monitor_enter_ns: ns,
        }
    }

    /// The threshold of `reason`'s waits.
    pub fn of(&self, reason: WaitReason) -> u64 {
        match reason {
            WaitReason::MonitorEnter => self.monitor_enter_ns,
            _ => self.wait_ns,
        }
    }
}

/// The JFR settings file (`.jfc`) idleflow gives a JVM: the wait events
/// idleflow reads, with stacks, each at its reason's threshold, and nothing
/// else (an event a settings file does not name stays off).
pub fn settings(thresholds: &Thresholds) -> String {
    let mut s = String::from(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <configuration version=\"2.0\" label=\"idleflow\" \
         description=\"idleflow: the waits of Java threads, with stacks\" provider=\"idleflow\">\n",
    );
    for r in WaitReason::ALL {
        let threshold = format!("{} us", thresholds.of(r) / 1000);
        s.push_str(&format!(
            "  <event name=\"{}\"><setting name=\"enabled\">true</setting>\
             <setting name=\"stackTrace\">true</setting>\
             <setting name=\"threshold\">{threshold}</setting></event>\n",
            r.jfr_event()
        ));
    }
    // Each thread started while recording, for its Java name: a thread
    // whose waits are all shorter than the thresholds is named too (the
    // kernel's names are cut to 15 characters).
    s.push_str(&format!(
        "  <event name=\"{THREAD_START}\"><setting name=\"enabled\">true</setting>\
         <setting name=\"stackTrace\">false</setting></event>\n"
    ));
    // And the threads that were already running (a JVM recorded with
    // --pid): one thread dump as each chunk begins names them all.
    s.push_str(&format!(
        "  <event name=\"{THREAD_DUMP}\"><setting name=\"enabled\">true</setting>\
         <setting name=\"period\">beginChunk</setting></event>\n"
    ));
    s.push_str("</configuration>\n");
    s
}

/// The flight recorder's event for a thread's start (its `thread` field
/// names it).
const THREAD_START: &str = "jdk.ThreadStart";

/// The flight recorder's thread dump (its `result` field is the text
/// `jstack` prints: a line per thread with its name and `nid`).
const THREAD_DUMP: &str = "jdk.ThreadDump";

/// The (kernel tid, Java name) of each thread in a HotSpot thread dump's
/// text: its lines `"NAME" #N … nid=0x1F2E …` (JDK 17: hexadecimal; JDK 19
/// on: `nid=7982`, decimal). Lines that do not parse are skipped.
fn threads_of_dump(text: &str) -> Vec<(u32, String)> {
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix('"')?;
            let end = rest.rfind("\" ")?;
            let name = &rest[..end];
            let nid = rest[end..]
                .split_whitespace()
                .find_map(|w| w.strip_prefix("nid="))?;
            let tid = match nid.strip_prefix("0x") {
                Some(hex) => u32::from_str_radix(hex, 16).ok()?,
                None => nid.parse().ok()?,
            };
            (tid != 0 && !name.is_empty()).then(|| (tid, name.to_string()))
        })
        .collect()
}

/// Why a file could not be converted at all.
#[derive(Debug, thiserror::Error)]
pub enum Error<E: std::error::Error + 'static> {
    /// The file could not be opened.
    #[error("cannot open {path}")]
    Open {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Writing a converted record failed.
    #[error("writing the JVM's waits")]
    Output(#[source] E),
}

/// Converts the flight recording at `path`: every wait event becomes a
/// [`Record::JavaWait`], preceded by the [`Record::JavaSymbol`] and
/// [`Record::JavaStack`] records it uses, all handed to `out`. Returns what
/// was read (to be written after them as [`Record::JvmWaits`]). Unreadable
/// chunks are skipped with a note in the result.
pub fn convert<E: std::error::Error + 'static>(
    path: &Path,
    opts: &Options,
    out: impl FnMut(Record) -> Result<(), E>,
) -> Result<JvmWaits, Error<E>> {
    let file = File::open(path).map_err(|source| Error::Open {
        path: path.display().to_string(),
        source,
    })?;
    let file_bytes = file.metadata().map(|m| m.len()).unwrap_or(0);
    convert_from(
        BufReader::new(file),
        &path.display().to_string(),
        file_bytes,
        opts,
        out,
    )
}

/// [`convert`] of the `file_bytes` bytes `input` reads, named `name` in
/// what it returns (the fuzz target's entry: no file).
pub fn convert_from<E: std::error::Error + 'static>(
    input: impl Read + Seek,
    name: &str,
    file_bytes: u64,
    opts: &Options,
    mut out: impl FnMut(Record) -> Result<(), E>,
) -> Result<JvmWaits, Error<E>> {
    let mut conv = Converter {
        opts: opts.clone(),
        head: JvmWaits {
            pid: opts.pid,
            source: "jfr".into(),
            file: name.to_string(),
            file_bytes,
            threshold_ns: opts.thresholds.wait_ns,
            monitor_enter_threshold_ns: Some(opts.thresholds.monitor_enter_ns),
            clock_offset_ns: opts.offset_ns,
            all_waits: opts.all_waits.clone(),
            ..Default::default()
        },
        symbols: FxHashMap::default(),
        stacks: FxHashMap::default(),
        threads: FxHashMap::default(),
        dumped: FxHashMap::default(),
        pending: Vec::new(),
    };
    let mut chunks = Chunks::new(input, file_bytes);
    while let Some(next) = chunks.next_chunk() {
        let chunk = match next {
            Ok(c) => c,
            Err(e) => {
                conv.note(format!(
                    "chunk {} unreadable ({e}): the file ends there",
                    conv.head.chunks + 1
                ));
                break;
            }
        };
        conv.head.chunks += 1;
        {
            let h = &chunk.header;
            let to_recording = |epoch_ns: i64| {
                (i128::from(epoch_ns) + i128::from(opts.offset_ns)).clamp(0, i128::from(u64::MAX))
                    as u64
            };
            let from = to_recording(h.start_time_nanos);
            let to = to_recording(h.start_time_nanos.saturating_add(h.duration_nanos));
            if conv.head.chunks == 1 || from < conv.head.recorded_from_ns {
                conv.head.recorded_from_ns = from;
            }
            conv.head.recorded_to_ns = conv.head.recorded_to_ns.max(to);
        }
        let mut cache = ChunkCache::default();
        let mut events = chunk.events();
        let wanted = |name: &str| {
            name == THREAD_START
                || name == THREAD_DUMP
                || WaitReason::from_jfr_event(name).is_some()
        };
        while let Some(next) = events.next_where(wanted) {
            let ev = match next {
                Ok(ev) => ev,
                Err(e) => {
                    conv.note(format!(
                        "chunk {}: an event could not be read ({e}); the rest of the chunk is left out",
                        conv.head.chunks
                    ));
                    break;
                }
            };
            if ev.class_name == THREAD_START {
                conv.pooled_thread(&ev.value, "thread", &mut cache.threads);
                continue;
            }
            if ev.class_name == THREAD_DUMP {
                let dump = ev.value.field("result").and_then(|v| v.string());
                for (tid, name) in threads_of_dump(&dump.unwrap_or_default()) {
                    conv.dumped.entry(tid).or_insert(name);
                }
                continue;
            }
            let wait = WaitReason::from_jfr_event(ev.class_name)
                .and_then(|r| conv.wait(&chunk, r, &ev.value, &mut cache));
            for r in conv.pending.drain(..) {
                out(r).map_err(Error::Output)?;
            }
            if let Some(w) = wait {
                conv.head.waits += 1;
                conv.head.waits_without_stack += u64::from(w.stack == 0);
                out(Record::JavaWait(w)).map_err(Error::Output)?;
            }
        }
        conv.head.events += events.seen();
    }
    for r in conv.pending.drain(..) {
        out(r).map_err(Error::Output)?;
    }
    let mut dumped: Vec<(u32, String)> = conv
        .dumped
        .into_iter()
        .filter(|(tid, _)| !conv.threads.contains_key(tid))
        .collect();
    dumped.sort();
    conv.head.dumped_names = dumped;
    let mut threads: Vec<(u32, String)> = conv.threads.into_iter().collect();
    threads.sort();
    conv.head.threads = threads;
    Ok(conv.head)
}

/// What one chunk's constant-pool entries were converted to, by pool key
/// (keys are per chunk).
#[derive(Default)]
struct ChunkCache {
    stacks: FxHashMap<(i64, i64), u64>,
    threads: FxHashMap<(i64, i64), (u32, u64)>,
}

/// The state of one conversion: interned texts and stacks, thread names.
struct Converter {
    opts: Options,
    head: JvmWaits,
    symbols: FxHashMap<String, u64>,
    stacks: FxHashMap<(Vec<JavaFrame>, bool), u64>,
    threads: FxHashMap<u32, String>,
    /// Names from the thread dumps (`JvmWaits::dumped_names`).
    dumped: FxHashMap<u32, String>,
    /// Symbol and stack records made for the event being converted.
    pending: Vec<Record>,
}

impl Converter {
    fn note(&mut self, text: String) {
        if self.head.notes.len() < 20 {
            self.head.notes.push(text);
        }
    }

    /// The id of `text`, interned (0 for an empty text).
    fn symbol(&mut self, text: String) -> u64 {
        if text.is_empty() {
            return 0;
        }
        if let Some(&id) = self.symbols.get(&text) {
            return id;
        }
        let id = self.symbols.len() as u64 + 1;
        self.pending.push(Record::JavaSymbol(Box::new(JavaSymbol {
            pid: self.opts.pid,
            id,
            text: text.clone(),
        })));
        self.symbols.insert(text, id);
        id
    }

    /// JFR ticks of `chunk` → ns on the recording's clock.
    fn time(&self, chunk: &Chunk, ticks: i64) -> u64 {
        let h = &chunk.header;
        let tps = i128::from(h.ticks_per_second.max(1));
        let since = i128::from(ticks) - i128::from(h.start_ticks);
        let epoch = i128::from(h.start_time_nanos) + since * 1_000_000_000 / tps;
        (epoch + i128::from(self.opts.offset_ns)).clamp(0, i128::from(u64::MAX)) as u64
    }

    /// A thread's kernel tid (noting its Java name), 0 if none.
    fn thread(&mut self, t: Option<Access<'_>>) -> (u32, u64) {
        let Some(t) = t else { return (0, 0) };
        let tid = t
            .field("osThreadId")
            .and_then(|v| v.long())
            .and_then(|v| u32::try_from(v).ok())
            .unwrap_or(0);
        let name = t
            .field("javaName")
            .and_then(|v| v.string())
            .or_else(|| t.field("osName").and_then(|v| v.string()))
            .unwrap_or_default();
        if tid != 0 && !name.is_empty() {
            self.threads.entry(tid).or_insert_with(|| name.clone());
        }
        (tid, self.symbol(name))
    }

    /// [`Converter::thread`] of field `field` of `v`, once per pool entry.
    fn pooled_thread(
        &mut self,
        v: &Access<'_>,
        field: &str,
        cache: &mut FxHashMap<(i64, i64), (u32, u64)>,
    ) -> (u32, u64) {
        let key = v.field_key(field);
        if let Some(&t) = key.and_then(|k| cache.get(&k)) {
            return t;
        }
        let t = self.thread(v.field(field));
        if let Some(k) = key {
            cache.insert(k, t);
        }
        t
    }

    /// One wait event, converted; `None` if it names no thread.
    fn wait(
        &mut self,
        chunk: &Chunk,
        reason: WaitReason,
        v: &Access<'_>,
        cache: &mut ChunkCache,
    ) -> Option<JavaWait> {
        let start = v.field("startTime").and_then(|f| f.long())?;
        let duration = v.field("duration").and_then(|f| f.long())?;
        let (tid, _) = self.pooled_thread(v, "eventThread", &mut cache.threads);
        if tid == 0 {
            return None;
        }
        let h = &chunk.header;
        let duration_ns = (i128::from(duration.max(0)) * 1_000_000_000
            / i128::from(h.ticks_per_second.max(1))) as u64;
        // A recording the user runs at the same time shares its events
        // with idleflow's: its lower thresholds must not leak in, outside
        // the spans where idleflow's own recorded every wait (a wait is
        // written when it ends, at the thresholds of that moment).
        if duration_ns < self.opts.thresholds.of(reason) {
            let end = self.time(chunk, start).saturating_add(duration_ns);
            if !self
                .opts
                .all_waits
                .iter()
                .any(|&(a, b)| a <= end && end < b)
            {
                return None;
            }
        }
        let stack = self.stack(v, &mut cache.stacks);
        let (object, other) = match reason {
            WaitReason::MonitorEnter => ("monitorClass", Some("previousOwner")),
            WaitReason::MonitorWait => ("monitorClass", Some("notifier")),
            WaitReason::Park => ("parkedClass", None),
            WaitReason::Sleep => ("", None),
            WaitReason::SocketRead | WaitReason::SocketWrite => ("address", None),
            WaitReason::FileRead | WaitReason::FileWrite | WaitReason::FileForce => ("path", None),
        };
        let object = match reason {
            WaitReason::SocketRead | WaitReason::SocketWrite => {
                let host = v.field("host").and_then(|f| f.string());
                let address = v.field("address").and_then(|f| f.string());
                let port = v.field("port").and_then(|f| f.long());
                let who = match (host, address) {
                    (Some(h), Some(a)) if !h.is_empty() && h != a => format!("{h}/{a}"),
                    (_, Some(a)) => a,
                    (Some(h), None) => h,
                    (None, None) => String::new(),
                };
                let (lo, hi) = self.opts.ephemeral_ports;
                match port {
                    Some(p) if !who.is_empty() && (i64::from(lo)..=i64::from(hi)).contains(&p) => {
                        format!("{who}:*")
                    }
                    Some(p) if !who.is_empty() => format!("{who}:{p}"),
                    _ => who,
                }
            }
            _ if object.is_empty() => String::new(),
            _ => v
                .field(object)
                .and_then(|f| class_name(&f).or_else(|| f.string()))
                .unwrap_or_default(),
        };
        let object = self.symbol(object);
        let (other_tid, other) = match other {
            Some(field) => self.pooled_thread(v, field, &mut cache.threads),
            None => (0, 0),
        };
        Some(JavaWait {
            pid: self.opts.pid,
            tid,
            start: self.time(chunk, start),
            duration: duration_ns,
            reason,
            stack,
            object,
            other_tid,
            other,
        })
    }

    /// The interned id of the event's stack, 0 if it has none.
    fn stack(&mut self, v: &Access<'_>, stack_ids: &mut FxHashMap<(i64, i64), u64>) -> u64 {
        let pool_key = v.field_key("stackTrace");
        if let Some(&id) = pool_key.and_then(|k| stack_ids.get(&k)) {
            return id;
        }
        let Some(st) = v.field("stackTrace") else {
            return 0;
        };
        let truncated = st
            .field("truncated")
            .and_then(|t| t.bool())
            .unwrap_or(false);
        let mut frames = Vec::new();
        for f in st.field("frames").map(|f| f.elements()).unwrap_or_default() {
            let method = f.field("method");
            let class = method
                .as_ref()
                .and_then(|m| m.field("type"))
                .and_then(|c| class_name(&c))
                .unwrap_or_default();
            let name = method
                .as_ref()
                .and_then(|m| m.field("name"))
                .and_then(|n| n.string())
                .unwrap_or_default();
            let line = f
                .field("lineNumber")
                .and_then(|l| l.long())
                .and_then(|l| u32::try_from(l).ok())
                .unwrap_or(0);
            let kind = f
                .field("type")
                .and_then(|t| t.field("description").and_then(|d| d.string()))
                .map_or(FrameKind::Unknown, |d| FrameKind::from_jfr(&d));
            let method = self.symbol(names::method(&class, &name));
            frames.push(JavaFrame { method, line, kind });
        }
        if frames.is_empty() {
            return 0;
        }
        let key = (frames, truncated);
        let id = match self.stacks.get(&key) {
            Some(&id) => id,
            None => {
                let id = self.stacks.len() as u64 + 1;
                self.pending.push(Record::JavaStack(Box::new(JavaStack {
                    pid: self.opts.pid,
                    id,
                    truncated,
                    frames: key.0.clone(),
                })));
                self.stacks.insert(key, id);
                id
            }
        };
        if let Some(k) = pool_key {
            stack_ids.insert(k, id);
        }
        id
    }
}

/// A class field's name in Java form, normalized.
fn class_name(a: &Access<'_>) -> Option<String> {
    let n = a.field("name").and_then(|n| n.string())?;
    Some(names::class(&n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_dump_names_each_thread_by_its_nid() {
        // JDK 17's format (nid in hexadecimal), a name with quotes and
        // spaces inside, JDK 21's (decimal), and lines that are not threads.
        let dump = "2026-11-26 23:59:59\nFull thread dump OpenJDK 64-Bit Server VM (17.0.13+11):\n\n\
            \"http-nio-8080-Poller\" #35 daemon prio=5 os_prio=0 cpu=12.5ms elapsed=80.1s tid=0x00007f nid=0x1f2e runnable  [0x7f]\n\
            \"H2 TCP Server (tcp://localhost:9092) thread-1\" #20 prio=5 os_prio=0 cpu=1ms elapsed=9s tid=0x1 nid=0x10 waiting\n\
            \"say \"hi\"\" #21 prio=5 os_prio=0 cpu=1ms elapsed=9s tid=0x1 nid=7982 runnable\n\
            \"VM Thread\" os_prio=0 cpu=1ms elapsed=9s tid=0x1 nid=0x0 runnable\n\
            \tat java.lang.Object.wait(Native Method)\n\
            JNI global refs: 15\n";
        assert_eq!(
            threads_of_dump(dump),
            vec![
                (0x1f2e, "http-nio-8080-Poller".to_string()),
                (
                    0x10,
                    "H2 TCP Server (tcp://localhost:9092) thread-1".to_string()
                ),
                (7982, "say \"hi\"".to_string()),
            ]
        );
        assert!(settings(&Thresholds::all(0)).contains("\"jdk.ThreadDump\""));
    }

    #[test]
    fn settings_enable_every_wait_with_stacks_at_its_reasons_threshold() {
        let s = settings(&Thresholds {
            wait_ns: 1_500_000,
            monitor_enter_ns: 0,
        });
        for r in WaitReason::ALL {
            assert!(s.contains(&format!("\"{}\"", r.jfr_event())));
        }
        assert_eq!(
            s.matches("<setting name=\"threshold\">1500 us</setting>")
                .count(),
            8
        );
        let enter = s
            .lines()
            .find(|l| l.contains("jdk.JavaMonitorEnter"))
            .unwrap();
        assert!(
            enter.contains("<setting name=\"threshold\">0 us</setting>"),
            "{enter}"
        );
        assert_eq!(s.matches("stackTrace\">true").count(), 9);
    }
}
