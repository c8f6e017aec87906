//! Records of stacks carried to the switch-outs to idle without their
//! own (`RunInfo::idle_stack_budget`, [`previous_stacks`]).

use super::*;
use crate::pass::kernel_waits::{Caused, StackSources};
use crate::sections::Report;
use idleflow_format::{KernelStack, KernelSymbol, KernelSymbols};
use idleflow_format::{SwitchStack, ThreadExit, WakeContext, Wakeup};
use PrevState::{Preempted, Sleeping};

const K1: u64 = 11;
const U1: u64 = 21;

fn on(cpu: u32, time: u64, prev_tid: u32, prev_state: PrevState, next_tid: u32) -> Record {
    Record::Dispatch(Dispatch {
        time,
        cpu,
        prev_tid,
        prev_state,
        next_tid,
        prev_node: NodeTag::Untraced,
    })
}

/// The kernel and user stack records of `tid`'s switch-out at `time`.
fn stacks(cpu: u32, time: u64, tid: u32, kernel: u64, user: u64) -> [Record; 2] {
    let s = |stack| SwitchStack {
        time,
        cpu,
        tid,
        stack,
    };
    [
        Record::SwitchStack(s(kernel)),
        Record::SwitchUserStack(s(user)),
    ]
}

fn analyse(records: &[Record], stop_ns: u64, budget: u32) -> Analysis {
    let info = RunInfo {
        tool_pid: TOOL,
        stacks: "idle".into(),
        idle_stack_budget: budget,
        ..RunInfo::minimal(vec![0, 1], 0)
    };
    analyse_records(&info, records, stop_ns)
}

/// The merged paths' rows of `tid`: (kernel, user) → (dispatches, idle ns).
fn rows(a: &Analysis, tid: u32) -> Vec<((u64, u64), (u64, u64))> {
    let mut v: Vec<_> = a
        .idle_paths
        .rows
        .iter()
        .filter(|(k, _)| k.tid == tid)
        .map(|(k, r)| ((k.kernel, k.user), (r.dispatches, r.idle_ns)))
        .collect();
    v.sort_unstable();
    v
}

fn caused(dispatches: u64, idle_ns: u64) -> Caused {
    Caused {
        dispatches,
        idle_ns,
    }
}

/// Worker 51 leaves CPU 0 idle twice: at 100 with K1/U1, at 300
/// with no stack record (`second`: the records it had instead).
fn worker(second: &[Record]) -> Vec<Record> {
    let mut r = vec![
        thread(51, 50, "worker"),
        on(0, 10, IDLE_TID, Preempted, 51),
        on(0, 100, 51, Sleeping, IDLE_TID),
    ];
    r.extend(stacks(0, 100, 51, K1, U1));
    r.extend([
        on(0, 200, IDLE_TID, Preempted, 51),
        on(0, 300, 51, Sleeping, IDLE_TID),
    ]);
    r.extend_from_slice(second);
    r.push(on(0, 450, IDLE_TID, Preempted, 51));
    r
}

#[test]
fn without_a_budget_a_switch_out_without_stacks_stays_without() {
    let a = analyse(&worker(&[]), 500, 0);
    assert_eq!(rows(&a, 51), [((0, 0), (1, 150)), ((K1, U1), (1, 100))]);
    assert_eq!(a.kernel.caused.len(), 1);
    assert_eq!(a.kernel.caused[&(K1, U1, 51)], caused(1, 100));
    assert_eq!(a.kernel.stack_sources(&FxHashSet::default()), None);
    let r = Report::new(&a, 10);
    assert_eq!(r.idle_stack_sampling, None);
    let json = serde_json::to_string(&r).unwrap();
    assert!(!json.contains("idle_stack_sampling"));
}

#[test]
fn with_a_budget_a_switch_out_without_stacks_takes_its_threads_previous_ones() {
    let a = analyse(&worker(&[]), 500, 1000);
    assert_eq!(rows(&a, 51), [((K1, U1), (2, 100 + 150))]);
    assert_eq!(a.kernel.caused.len(), 1);
    assert_eq!(a.kernel.caused[&(K1, U1, 51)], caused(2, 250));
    // Carried stacks are not records read.
    assert_eq!(
        (a.kernel.switch_stacks, a.kernel.switch_user_stacks),
        (1, 1)
    );
    let s = a.kernel.stack_sources(&FxHashSet::default()).unwrap();
    assert_eq!(
        s,
        StackSources {
            own: caused(1, 100),
            carried: caused(1, 150),
            none: caused(0, 0),
        }
    );
    let r = Report::new(&a, 10).idle_stack_sampling.unwrap();
    assert_eq!(r.budget_per_s_per_cpu, 1000);
    assert_eq!(
        (r.own.idle_ns, r.carried.idle_ns, r.none.idle_ns),
        (100, 150, 0)
    );
    assert_eq!(r.total(), (2, 250));
}

/// The stacks carried land where the switch-out's own records would
/// have: every part of the report is the same, the thread woken and
/// run on another CPU before the idle it left ends included.
#[test]
fn carried_stacks_make_the_same_report_as_the_same_stacks_recorded() {
    let wake = |time, waker_tid, wakee_tid| {
        Record::Wakeup(Wakeup {
            time,
            cpu: 1,
            waker_tid,
            wakee_tid,
            target_cpu: 1,
            new_thread: false,
            context: WakeContext::Task,
        })
    };
    // The kernel stacks named, so that every path has frames.
    let stack = |id, wait| {
        Record::KernelStack(Box::new(KernelStack {
            id,
            ips: vec![0x10, wait],
        }))
    };
    let symbols = Record::KernelSymbols(Box::new(KernelSymbols {
        source: "test".into(),
        symbols: [
            (0x10, "schedule"),
            (0x20, "pipe_read"),
            (0x30, "do_nanosleep"),
        ]
        .into_iter()
        .map(|(addr, name)| KernelSymbol {
            addr,
            name: name.into(),
            offset: 0,
        })
        .collect(),
        notes: Vec::new(),
    }));
    let run = |second: &[Record], budget| {
        let mut r = vec![
            stack(K1, 0x20),
            stack(K1 + 1, 0x30),
            symbols.clone(),
            thread(51, 50, "worker"),
            thread(61, 60, "waker"),
            on(0, 10, IDLE_TID, Preempted, 51),
            on(1, 10, IDLE_TID, Preempted, 61),
            on(0, 100, 51, Sleeping, IDLE_TID),
        ];
        r.extend(stacks(0, 100, 51, K1, U1));
        r.extend([
            wake(150, 61, 51),
            on(0, 200, IDLE_TID, Preempted, 51),
            on(0, 300, 51, Sleeping, IDLE_TID),
        ]);
        r.extend_from_slice(second);
        r.extend([
            // 61 wakes 51, which runs on CPU 1 while CPU 0 stays idle.
            wake(350, 61, 51),
            on(1, 360, 61, Sleeping, 51),
            on(1, 380, 51, Sleeping, IDLE_TID),
        ]);
        r.extend(stacks(1, 380, 51, K1 + 1, U1 + 1));
        r.extend([
            on(0, 600, IDLE_TID, Preempted, 61),
            on(0, 700, 61, Sleeping, IDLE_TID),
        ]);
        // The worker runs Java: it leaves in call-tree node 7.
        for rec in &mut r {
            if let Record::Dispatch(d) = rec {
                if d.prev_tid == 51 {
                    d.prev_node = NodeTag::Current(7);
                }
            }
        }
        let a = analyse(&r, 900, budget);
        let mut report = Report::new(&a, 10);
        report.idle_stack_sampling = None;
        (a, serde_json::to_string_pretty(&report).unwrap())
    };
    let (b, recorded) = run(&stacks(0, 300, 51, K1, U1), 0);
    let (a, carried) = run(&[], 1000);
    assert_eq!(carried, recorded);
    // The call-tree node's stacks too.
    let native = |a: &Analysis| a.node_idle.nodes[&7].native.clone();
    assert_eq!(native(&a), native(&b));
    let k1 = native(&a).into_iter().find(|s| s.kernel == K1).unwrap();
    assert_eq!((k1.user, k1.idle_dispatches, k1.idle_ns), (U1, 2, 400));
    // The paths, the root causes, the kernel waits and the call paths
    // name the stacks.
    assert_eq!(recorded.matches("\"pipe_read\"").count(), 5, "{recorded}");
    assert_eq!(
        rows(&a, 51),
        [((K1, U1), (2, 100 + 300)), ((K1 + 1, U1 + 1), (1, 520))]
    );
    let s = a.kernel.stack_sources(&FxHashSet::default()).unwrap();
    assert_eq!((s.own, s.carried), (caused(2, 620), caused(1, 300)));
    // 61 never had stacks: none, then (its idle open at the end).
    assert_eq!(s.none, caused(1, 200));
}

#[test]
fn a_thread_without_earlier_stacks_stays_without_and_never_takes_anothers() {
    let mut r = worker(&[]);
    r.extend([
        thread(52, 50, "other"),
        // 52 leaves CPU 1 idle right after 51 left CPU 0 with stacks.
        on(1, 10, IDLE_TID, Preempted, 52),
        on(1, 101, 52, Sleeping, IDLE_TID),
        on(1, 150, IDLE_TID, Preempted, 52),
        // 51 exits; a thread with its tid comes back without stacks.
        Record::Exit(ThreadExit {
            time: 460,
            tid: 51,
            pid: 50,
        }),
        on(0, 470, 51, Sleeping, IDLE_TID),
    ]);
    r.sort_by_key(Record::time);
    let a = analyse(&r, 500, 1000);
    assert_eq!(rows(&a, 52), [((0, 0), (1, 49))]);
    assert_eq!(
        rows(&a, 51),
        [((0, 0), (1, 30)), ((K1, U1), (2, 100 + 150))]
    );
    let s = a.kernel.stack_sources(&FxHashSet::default()).unwrap();
    assert_eq!(s.none, caused(2, 49 + 30));
    assert_eq!((s.own, s.carried), (caused(1, 100), caused(1, 150)));
    // idleflow's own threads are left out of the report's counts.
    let skip: FxHashSet<u32> = [52].into_iter().collect();
    let s = a.kernel.stack_sources(&skip).unwrap();
    assert_eq!(s.none, caused(1, 30));
}
