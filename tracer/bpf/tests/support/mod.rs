//! What the kernel tests share: the root check, the perf reference (the
//! recorder's own perf path — `sched_switch` samples with its filter,
//! switch records, `sched_waking` samples — read through idleflow-tracer
//! and joined into dispatches exactly as the recorder does), threads
//! pinned to a CPU, and a reader thread that empties both the BPF rings
//! and the perf rings while a workload runs.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use idleflow_bpf::{Lost, SchedEvent, SchedRecorder, WakeContext};
use idleflow_format::Dispatch;
use idleflow_tracer::join::{Joiner, SwitchSamples, SWITCH_SAMPLE_FILTER};
use idleflow_tracer::parse::{parse, Layout, PerfRecord};
use idleflow_tracer::ring::{read_records, Ring};
use idleflow_tracer::sys::{EventSpec, PerfEvent};
use idleflow_tracer::tracefs::{self, Tracepoint};

/// `true` when the test may run; otherwise says why it does not (and
/// fails, unless `IDLEFLOW_ALLOW_SKIP` asks to skip knowingly).
pub fn may_run(test: &str) -> bool {
    // SAFETY: geteuid has no memory effects.
    let why = if unsafe { libc::geteuid() } != 0 {
        Some("it loads BPF programs and opens system-wide perf events: it needs root".to_string())
    } else {
        idleflow_bpf::probe()
            .err()
            .map(|e| format!("eBPF cannot be used here: {e}"))
    };
    let Some(why) = why else { return true };
    if std::env::var_os("IDLEFLOW_ALLOW_SKIP").is_some() {
        eprintln!("SKIPPED {test}: {why}");
        return false;
    }
    panic!("{test}: {why}; run as root, or set IDLEFLOW_ALLOW_SKIP=1 to skip knowingly");
}

/// The online CPUs.
pub fn online_cpus() -> Vec<u32> {
    idleflow_tracer::procfs::online_cpus().expect("reading the online CPUs")
}

/// Pins the calling thread to `cpu`.
pub fn pin(cpu: u32) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes
    // inside it; sched_setaffinity only reads it.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set)
    };
    assert_eq!(rc, 0, "pinning to CPU {cpu}");
}

/// A thread pinned to `cpu` sleeping `each` `times` times (two switches
/// and a waking each), joined.
pub fn sleep_pinned(cpu: u32, times: usize, each: std::time::Duration) {
    std::thread::spawn(move || {
        pin(cpu);
        for _ in 0..times {
            std::thread::sleep(each);
        }
    })
    .join()
    .unwrap();
}

/// CLOCK_MONOTONIC in ns: the clock of the BPF records' times.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only the timespec it is given.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The calling thread's id.
pub fn gettid() -> u32 {
    // SAFETY: gettid has no memory effects.
    unsafe { libc::gettid() as u32 }
}

/// A wake-up as the perf path saw it (a `sched_waking` sample).
#[derive(Debug, Clone, Copy)]
pub struct PerfWake {
    pub cpu: u32,
    pub time: u64,
    pub waker_tid: u32,
    pub wakee_tid: u32,
    pub context: WakeContext,
}

/// What the perf path recorded, per CPU.
#[derive(Debug, Default)]
pub struct PerfSeen {
    /// The recorder's dispatches (joined as it joins them), per CPU.
    pub dispatches: BTreeMap<u32, Vec<Dispatch>>,
    /// `sched_waking` samples.
    pub wakes: Vec<PerfWake>,
    /// Switch-out records written by the idle task leaving, per CPU.
    pub idle_switch_outs: BTreeMap<u32, u64>,
    /// Records the kernel reported lost.
    pub lost: u64,
}

/// The perf path's events on every CPU, each CPU's bytes kept as drained.
pub struct PerfReference {
    layout: Layout,
    events: Vec<PerfEvent>,
    rings: Vec<(u32, Ring)>,
    bytes: BTreeMap<u32, Vec<u8>>,
}

impl PerfReference {
    /// Opens (disabled) the recorder's events on `cpus`, with rings of
    /// `ring_bytes`.
    pub fn open(cpus: &[u32], ring_bytes: usize) -> Self {
        let tracefs = tracefs::find_or_mount().expect("tracefs");
        let tp = |name| Tracepoint::load(&tracefs, "sched", name).expect(name);
        let (switch, waking, new) = (
            tp("sched_switch"),
            tp("sched_waking"),
            tp("sched_wakeup_new"),
        );
        let layout = Layout::new(&switch, &waking, &new).expect("tracepoint layout");
        let spec = |id, switch_records| EventSpec {
            tracepoint_id: id,
            switch_records,
            task_records: false,
            wakeup_bytes: (ring_bytes / 2) as u32,
            kernel_callchain: false,
            user_stack_bytes: 0,
            mmap_records: false,
            sample_period: 1,
        };
        let mut events = Vec::new();
        let mut rings = Vec::new();
        for &cpu in cpus {
            let main = PerfEvent::open_cpu_wide(&spec(switch.id, true), cpu, "sched_switch")
                .expect("perf_event_open(sched_switch)");
            main.set_filter(SWITCH_SAMPLE_FILTER)
                .expect("the recorder's filter");
            let wake = PerfEvent::open_cpu_wide(&spec(waking.id, false), cpu, "sched_waking")
                .expect("perf_event_open(sched_waking)");
            // The ring must exist before another event can write into it.
            rings.push((
                cpu,
                Ring::map(&main, ring_bytes).expect("mapping a perf ring"),
            ));
            wake.set_output(&main).expect("one ring per CPU");
            events.push(main);
            events.push(wake);
        }
        PerfReference {
            layout,
            events,
            rings,
            bytes: BTreeMap::new(),
        }
    }

    pub fn enable(&self) {
        for e in &self.events {
            e.enable().expect("enabling a perf event");
        }
    }

    pub fn disable(&self) {
        for e in &self.events {
            e.disable().expect("disabling a perf event");
        }
    }

    /// Copies what the rings hold out of them.
    pub fn drain(&mut self) {
        for (cpu, ring) in &mut self.rings {
            let out = self.bytes.entry(*cpu).or_default();
            loop {
                let n = ring.drain_into(|n| {
                    let start = out.len();
                    out.resize(start + n, 0);
                    Some(&mut out[start..])
                });
                if n == 0 {
                    break;
                }
            }
        }
    }

    /// Everything recorded, decoded and joined.
    pub fn finish(mut self) -> PerfSeen {
        self.drain();
        let mut seen = PerfSeen::default();
        for (&cpu, bytes) in &self.bytes {
            let mut joiner = Joiner::new(cpu, SwitchSamples::Filtered);
            let mut dispatches = Vec::new();
            let mut idle_outs = 0;
            read_records(bytes, 0, bytes.len() as u64, &mut Vec::new(), |r| {
                let Some(rec) = parse(r, &self.layout) else {
                    return;
                };
                match &rec {
                    PerfRecord::Wakeup {
                        id,
                        wakee_tid,
                        context,
                        new_thread: false,
                        ..
                    } => seen.wakes.push(PerfWake {
                        cpu: id.cpu,
                        time: id.time,
                        waker_tid: id.tid,
                        wakee_tid: *wakee_tid,
                        context: *context,
                    }),
                    PerfRecord::Switch { id, out: true, .. } if id.tid == 0 => idle_outs += 1,
                    PerfRecord::Lost { count, .. } => seen.lost += count,
                    _ => {}
                }
                joiner.feed(&rec, &mut |d| dispatches.push(d));
            });
            seen.dispatches.insert(cpu, dispatches);
            seen.idle_switch_outs.insert(cpu, idle_outs);
        }
        seen
    }
}

/// What the BPF recorder recorded.
#[derive(Debug, Default)]
pub struct BpfSeen {
    /// Every event, per CPU, in ring order.
    pub events: BTreeMap<u32, Vec<SchedEvent>>,
    pub lost: Lost,
}

/// Both recorders, emptied by one thread while a workload runs.
pub struct Recording {
    stop: Arc<AtomicBool>,
    reader: JoinHandle<(BpfSeen, PerfSeen)>,
}

impl Recording {
    /// Starts the perf reference, then the BPF recorder, on every online CPU.
    pub fn start() -> Self {
        let cpus = online_cpus();
        let mut perf = PerfReference::open(&cpus, 8 << 20);
        perf.enable();
        let mut bpf = SchedRecorder::open(&cpus, 4 << 20, Default::default())
            .expect("opening the BPF recorder");
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let reader = std::thread::spawn(move || {
            let mut seen = BpfSeen::default();
            let mut take = |cpu: u32, e: SchedEvent| seen.events.entry(cpu).or_default().push(e);
            while !stopping.load(Ordering::Relaxed) {
                bpf.poll(Duration::from_millis(20), &mut take)
                    .expect("polling the BPF rings");
                perf.drain();
            }
            bpf.detach();
            perf.disable();
            bpf.poll(Duration::ZERO, &mut take)
                .expect("the last BPF records");
            seen.lost = bpf.lost().expect("the BPF losses");
            (seen, perf.finish())
        });
        Recording { stop, reader }
    }

    /// Stops both and returns what each saw.
    pub fn stop(self) -> (BpfSeen, PerfSeen) {
        self.stop.store(true, Ordering::Relaxed);
        self.reader.join().expect("the reader thread")
    }
}

/// Two times within `us` microseconds.
pub fn close(a: u64, b: u64, us: u64) -> bool {
    a.abs_diff(b) <= us * 1000
}
