//! Opening a recording's events: per online CPU, the `sched_switch` event
//! that owns the CPU's ring, the sampler of the sleeps its filter leaves
//! out, and the wake-up events, with the fallbacks for a kernel that
//! refuses a filter.
//!
//! Invariant: all of [`Recorder::open`]'s privileged work happens here,
//! before anything is written, so a refusal leaves no file. Per CPU, the
//! events go into `Recorder::events` with the ring's owner (the main switch
//! event) last, at the index `Recorder::ring_owner` names; a set of
//! filtered events either opens whole or falls back to its plain events.

use idleflow_format::RunSummary;
use rustc_hash::FxHashMap;

use super::bpf::BpfSource;
use super::source::{choose, Chosen, EventSource, Recorded};
use super::{CpuRing, RecordOptions, Recorder, RecorderError};
use crate::join::{Joiner, SwitchSamples, SWITCH_SAMPLE_FILTER, WAIT_SAMPLE_FILTER};
use crate::merge::Merge;
use crate::names::ThreadNames;
use crate::parse::Layout;
use crate::procfs;
use crate::ring::{page_size, Ring};
use crate::sys::{EventSpec, PerfEvent, SysError, SIDE_BAND_ONLY};
use crate::tracefs::{self, TracefsError, Tracepoint};

/// The filter of the `sched_waking` event that takes the interrupt's
/// kernel stack: wake-ups raised in a hard or soft interrupt or an NMI
/// (`TRACE_FLAG_HARDIRQ` 0x08, `SOFTIRQ` 0x10, `NMI` 0x40).
pub const IRQ_WAKE_FILTER: &str = "common_flags & 0x58";

/// The filter of the `sched_waking` events of thread-context wake-ups
/// (the complement of [`IRQ_WAKE_FILTER`]).
pub const TASK_WAKE_FILTER: &str = "!(common_flags & 0x58)";

/// The stacks the eBPF programs take for `options`: at the switches to
/// idle (unless `--stacks waits`, whose stacks perf's filtered samples
/// take), and at one waking in `waker_sample_period`, at random.
pub(super) fn bpf_stacks(options: &RecordOptions) -> idleflow_bpf::StackConfig {
    let any = options.kernel_stacks || options.user_stack_bytes > 0;
    let idle = any && !options.stacks_at_waits;
    let wakers = any && options.waker_stacks;
    idleflow_bpf::StackConfig {
        idle_kernel: idle,
        idle_user_bytes: if idle {
            options.user_stack_bytes & !7
        } else {
            0
        },
        idle_budget: options.stack_budget,
        waker_one_in: if wakers {
            options.waker_sample_period.max(1)
        } else {
            0
        },
        waker_budget: options.waker_stack_budget,
        waker_kernel: wakers,
        waker_user_bytes: if wakers {
            options.waker_stack_bytes.min(options.user_stack_bytes) & !7
        } else {
            0
        },
    }
}

/// One wake-up event to open on each CPU: its spec (`wakeup_bytes` set by
/// the caller), its filter, and its name for errors.
type WakeEvent = (EventSpec, Option<&'static str>, &'static str);

/// A `sched_waking` or `sched_wakeup_new` event of one sample per event.
fn wake_spec(id: u64) -> EventSpec {
    EventSpec {
        tracepoint_id: id,
        switch_records: false,
        task_records: false,
        wakeup_bytes: 0,
        kernel_callchain: false,
        user_stack_bytes: 0,
        mmap_records: false,
        sample_period: 1,
    }
}

/// Every wake-up, without stacks.
fn plain_wake_events(waking: u64, new: u64) -> Vec<WakeEvent> {
    vec![
        (wake_spec(waking), None, "sched:sched_waking"),
        (wake_spec(new), None, "sched:sched_wakeup_new"),
    ]
}

/// The wake-up events `options` ask for. With waker stacks: every
/// wake-up plainly, and one in `waker_sample_period` (per CPU) again with
/// stacks — an interrupt's with the kernel's (which device), a thread's
/// with the waker's kernel and user stacks; the recorder joins the two
/// samples of one wake-up. Sampling every one, the two stack events alone
/// (their filters are disjoint).
fn wake_events(options: &RecordOptions, waking: u64, new: u64) -> Vec<WakeEvent> {
    let user = options.waker_stack_bytes.min(options.user_stack_bytes) & !7;
    if !options.waker_stacks || (!options.kernel_stacks && user == 0) {
        return plain_wake_events(waking, new);
    }
    let period = u64::from(options.waker_sample_period.max(1));
    let mut v = Vec::new();
    if period > 1 {
        v.push((wake_spec(waking), None, "sched:sched_waking"));
    }
    v.push((
        EventSpec {
            kernel_callchain: options.kernel_stacks,
            sample_period: period,
            ..wake_spec(waking)
        },
        Some(IRQ_WAKE_FILTER),
        "sched:sched_waking (interrupt stacks)",
    ));
    v.push((
        EventSpec {
            kernel_callchain: options.kernel_stacks,
            user_stack_bytes: user,
            sample_period: period,
            ..wake_spec(waking)
        },
        Some(TASK_WAKE_FILTER),
        "sched:sched_waking (waker stacks)",
    ));
    v.push((wake_spec(new), None, "sched:sched_wakeup_new"));
    v
}

/// A tracefs error, or the privilege error it really is (mounting or
/// reading tracefs is refused to unprivileged users).
fn privilege_or(e: TracefsError) -> RecorderError {
    let denied = match &e {
        TracefsError::Mount { source, .. } | TracefsError::Read { source, .. } => {
            matches!(source.raw_os_error(), Some(libc::EPERM | libc::EACCES))
        }
        TracefsError::Format { .. } => false,
    };
    if denied {
        RecorderError::Privilege(Box::new(e))
    } else {
        e.into()
    }
}

/// The scheduler tracepoints a recording opens.
struct Tracepoints {
    switch: Tracepoint,
    wakeup: Tracepoint,
    wakeup_new: Tracepoint,
}

impl Tracepoints {
    /// Finds (or mounts) tracefs and reads the tracepoints' ids and layouts.
    fn load() -> Result<Self, RecorderError> {
        let tracefs = tracefs::find_or_mount().map_err(privilege_or)?;
        let load = |name| Tracepoint::load(&tracefs, "sched", name).map_err(privilege_or);
        Ok(Tracepoints {
            switch: load("sched_switch")?,
            // `sched_waking`, not `sched_wakeup`: it runs in the waker's
            // context (the kernel may raise `sched_wakeup` on the wakee's
            // CPU, in whatever ran there), and its flags say whether an
            // interrupt raised it.
            wakeup: load("sched_waking")?,
            wakeup_new: load("sched_wakeup_new")?,
        })
    }
}

/// One CPU's events, opened: the main `sched_switch` event, which owns the
/// CPU's ring, and the others, which write into that ring.
struct CpuEvents {
    /// In the order they go into [`Recorder::events`], before `main`.
    others: Vec<PerfEvent>,
    main: PerfEvent,
    ring: Ring,
    samples: SwitchSamples,
}

/// A refused `perf_event_open` as the privilege error it is, or as itself.
fn priv_err(e: SysError) -> RecorderError {
    if e.is_permission() {
        RecorderError::Privilege(Box::new(e))
    } else {
        RecorderError::Sys(e)
    }
}

/// The source of the dispatches and wake-ups for `asked`
/// ([`super::source`]), by the checks that need no program: the programs
/// are loaded once, by the recorder itself, which falls back to perf if
/// the verifier refuses them and nothing was asked
/// ([`Recorder::open`]; a probe that loaded them first cost a recording's
/// start 40-50 ms).
fn choose_events(asked: EventSource) -> Result<Chosen, RecorderError> {
    choose(asked, idleflow_bpf::preconditions).map_err(RecorderError::NoBpf)
}

impl Recorder {
    /// Opens the scheduler events and maps one ring per online CPU. Needs
    /// root or CAP_PERFMON; nothing is recorded until [`Recorder::enable`].
    pub fn open(options: &RecordOptions) -> Result<Self, RecorderError> {
        let page = page_size();
        let rb = options.ring_bytes;
        if rb < page || !(rb / page).is_power_of_two() || !rb.is_multiple_of(page) {
            return Err(RecorderError::RingSize(rb));
        }
        let event_source = choose_events(options.events)?;
        let with_bpf = event_source.source == Recorded::Bpf;
        // The eBPF source opens no tracepoint with perf unless `--stacks
        // waits` asks for perf's samples: tracefs (root's only) is then not
        // read, and CAP_PERFMON with CAP_BPF records.
        let tp = if !with_bpf || options.stacks_at_waits {
            Some(Tracepoints::load()?)
        } else {
            None
        };
        let mut layout = match &tp {
            Some(tp) => Layout::new(&tp.switch, &tp.wakeup, &tp.wakeup_new)?,
            None => Layout::side_band(),
        };
        layout.user_stacks = options.user_stack_bytes > 0;
        let cpus = procfs::online_cpus().map_err(|source| RecorderError::Io {
            what: "reading",
            path: "/sys/devices/system/cpu/online".into(),
            source,
        })?;
        let wakeup_bytes = (rb / 2) as u32;
        let mut events = Vec::new();
        let mut ring_owner = Vec::new();
        let mut rings = Vec::new();
        let mut mapped = Vec::new();
        // Whether every CPU's sleeps are sampled by the second event (a
        // kernel that refused the main filter samples them all).
        let mut sleeps_sampled = options.stacks_at_waits;
        for &cpu in &cpus {
            let opened = open_cpu(options, tp.as_ref(), cpu, rb, wakeup_bytes, with_bpf)?;
            sleeps_sampled &= opened.samples == SwitchSamples::Filtered;
            events.extend(opened.others);
            ring_owner.push(events.len());
            events.push(opened.main);
            mapped.push(opened.ring);
            rings.push(CpuRing {
                cpu,
                joiner: Joiner::new(cpu, opened.samples),
                lost: 0,
                stack: None,
                last_wake: None,
            });
        }
        let stacks = bpf_stacks(options);
        let bpf = if with_bpf {
            // perf samples the switches' stacks only for `--stacks waits`.
            let paired =
                options.stacks_at_waits && (options.kernel_stacks || options.user_stack_bytes > 0);
            match BpfSource::open(&cpus, rb, stacks, paired) {
                Ok(b) => Some(b),
                Err(e) if options.events == EventSource::Auto => {
                    // Refused where only the load could tell (the
                    // verifier): perf records, and the header says why.
                    drop(events);
                    let mut r = Recorder::open(&RecordOptions {
                        events: EventSource::Perf,
                        ..options.clone()
                    })?;
                    r.event_source = Chosen {
                        source: Recorded::Perf,
                        why: format!("eBPF not usable: {e}"),
                    };
                    return Ok(r);
                }
                Err(e) => return Err(RecorderError::Bpf(e)),
            }
        } else {
            None
        };
        Ok(Recorder {
            pending: (0..bpf.as_ref().map_or(0, |b| b.side.rings()))
                .map(|_| Default::default())
                .collect(),
            written: (0, 0),
            java: None,
            java_frames: Default::default(),
            bpf,
            cpus,
            layout,
            ring_bytes: rb,
            events,
            ring_owner,
            rings,
            mapped,
            drain_priority: options.drain_priority,
            drain: None,
            merge: Merge::default(),
            names: ThreadNames::default(),
            start_ns: 0,
            start_unix_ns: 0,
            proc_stat_start: Vec::new(),
            last_round_start: 0,
            summary: RunSummary::default(),
            output: None,
            work_area: None,
            tree_dir: None,
            java_waits: false,
            renamed: Vec::new(),
            stop_ns: None,
            kernel_stacks: FxHashMap::default(),
            blocking: Vec::new(),
            spool: None,
            fold: std::env::var_os("IDLEFLOW_NO_FOLD").is_none_or(|v| v != "1"),
            user_stacks: options.user_stack_bytes > 0,
            wait_sample_period: if sleeps_sampled {
                options.wait_sample_period.max(1)
            } else {
                1
            },
            idle_stack_budget: if with_bpf && stacks.idle_kernel {
                stacks.idle_budget
            } else {
                0
            },
            // The same stacks at wake-ups from either source: the eBPF
            // programs' also under their budget.
            waker_sampling: match stacks.waker_one_in {
                0 => (0, 0),
                n if with_bpf => (n, stacks.waker_budget),
                n => (n, 0),
            },
            stacks: if !options.kernel_stacks && options.user_stack_bytes == 0 {
                ""
            } else if options.stacks_at_waits {
                "waits"
            } else {
                "idle"
            },
            event_source,
        })
    }
}

/// Opens CPU `cpu`'s events and maps its ring of `rb` bytes: the main
/// `sched_switch` event first, then the sleep sampler and the wake-up
/// events, each pointed at the main event's ring. With the eBPF source
/// (`with_bpf`) the dispatches and wake-ups come from there: no switch
/// records, no plain wake-up events, and `sched_switch` samples only where
/// stacks are taken (the main event still owns the ring and brings the
/// task and mapping records).
fn open_cpu(
    options: &RecordOptions,
    tp: Option<&Tracepoints>,
    cpu: u32,
    rb: usize,
    wakeup_bytes: u32,
    with_bpf: bool,
) -> Result<CpuEvents, RecorderError> {
    // With the eBPF source perf samples no switch unless `--stacks waits`
    // asks for its samples: its dummy event brings the task and mapping
    // records without a tracepoint firing at every switch.
    let stacks = options.kernel_stacks || options.user_stack_bytes > 0;
    let switch = tp.map(|tp| &tp.switch);
    let perf_samples = (!with_bpf || (options.stacks_at_waits && stacks)) && switch.is_some();
    let main = PerfEvent::open_cpu_wide(
        &EventSpec {
            tracepoint_id: match switch {
                Some(s) if perf_samples => s.id,
                _ => SIDE_BAND_ONLY,
            },
            switch_records: !with_bpf,
            task_records: true,
            wakeup_bytes,
            kernel_callchain: options.kernel_stacks,
            user_stack_bytes: options.user_stack_bytes,
            mmap_records: options.user_stack_bytes > 0,
            sample_period: 1,
        },
        cpu,
        switch.map_or("perf's task and mapping records", |s| &s.name),
    )
    .map_err(priv_err)?;
    // A kernel that refuses the filter writes every sample: the joiner then
    // reads each state from its sample, as before. With stacks, the
    // switches that leave the CPU idle are sampled too (their state is then
    // read from the sample). (With the eBPF source and `--stacks waits`,
    // the same samples carry the stacks.)
    let filter = if stacks {
        format!("{SWITCH_SAMPLE_FILTER} || next_pid == 0")
    } else {
        SWITCH_SAMPLE_FILTER.to_string()
    };
    let samples = if !perf_samples {
        SwitchSamples::Filtered
    } else if options.all_switch_samples || main.set_filter(&filter).is_err() {
        SwitchSamples::All
    } else {
        SwitchSamples::Filtered
    };
    let ring = Ring::map(&main, rb)?;
    let mut others = Vec::new();
    if let Some(switch) = switch.filter(|_| options.stacks_at_waits) {
        if samples == SwitchSamples::Filtered {
            others.push(open_sleep_sampler(
                options,
                switch,
                cpu,
                wakeup_bytes,
                &main,
            )?);
        }
    }
    for ev in open_wake_events(options, tp, cpu, wakeup_bytes, with_bpf)? {
        ev.set_output(&main)?;
        others.push(ev);
    }
    Ok(CpuEvents {
        others,
        main,
        ring,
        samples,
    })
}

/// The interruptible sleeps (state 1) the main event leaves out, every
/// `wait_sample_period`th: a second event on the same tracepoint, into the
/// same ring as `main`, whose filter is disjoint from the main one's, so
/// the joiner never sees two samples of one switch.
fn open_sleep_sampler(
    options: &RecordOptions,
    switch: &Tracepoint,
    cpu: u32,
    wakeup_bytes: u32,
    main: &PerfEvent,
) -> Result<PerfEvent, RecorderError> {
    let waits = PerfEvent::open_cpu_wide(
        &EventSpec {
            tracepoint_id: switch.id,
            switch_records: false,
            task_records: false,
            wakeup_bytes,
            kernel_callchain: options.kernel_stacks,
            user_stack_bytes: options.user_stack_bytes,
            mmap_records: false,
            sample_period: u64::from(options.wait_sample_period.max(1)),
        },
        cpu,
        &switch.name,
    )
    .map_err(priv_err)?;
    waits
        .set_filter(WAIT_SAMPLE_FILTER)
        .map_err(RecorderError::Sys)?;
    waits.set_output(main)?;
    Ok(waits)
}

/// Opens CPU `cpu`'s wake-up events ([`wake_events`]). A kernel that
/// refuses the filters records every wake-up plainly, as before: the
/// filtered events are opened as a set. With the eBPF source none: its
/// programs take the wakers' stacks.
fn open_wake_events(
    options: &RecordOptions,
    tp: Option<&Tracepoints>,
    cpu: u32,
    wakeup_bytes: u32,
    with_bpf: bool,
) -> Result<Vec<PerfEvent>, RecorderError> {
    let Some(tp) = tp.filter(|_| !with_bpf) else {
        return Ok(Vec::new());
    };
    let wake_events = wake_events(options, tp.wakeup.id, tp.wakeup_new.id);
    let mut opened = Vec::new();
    for (spec, filter, what) in &wake_events {
        let ev = PerfEvent::open_cpu_wide(
            &EventSpec {
                wakeup_bytes,
                ..*spec
            },
            cpu,
            what,
        )
        .map_err(priv_err)?;
        if let Some(f) = filter {
            if ev.set_filter(f).is_err() {
                opened.clear();
                break;
            }
        }
        opened.push(ev);
    }
    if opened.len() != wake_events.len() {
        for (spec, _, what) in plain_wake_events(tp.wakeup.id, tp.wakeup_new.id) {
            let ev = PerfEvent::open_cpu_wide(
                &EventSpec {
                    wakeup_bytes,
                    ..spec
                },
                cpu,
                what,
            )
            .map_err(priv_err)?;
            opened.push(ev);
        }
    }
    Ok(opened)
}
