//! The pass's own tests, on constructed streams: idleflow's threads on
//! idle CPUs, what a caller's handler is told; `carried` for the stacks a
//! switch-out without its own is given.

use super::*;
use idleflow_format::{Dispatch, NodeTag, RunInfo, ThreadInfo};

/// Analyses a recording of `records` (constructed streams, for the
/// post-processor's unit tests) that ended at `stop_ns`.
pub(crate) fn analyse_records(info: &RunInfo, records: &[Record], stop_ns: u64) -> Analysis {
    analyse_records_told(info, records, stop_ns, None)
}

/// [`analyse_records`], telling `extra` every event of the pass.
pub(crate) fn analyse_records_told(
    info: &RunInfo,
    records: &[Record],
    stop_ns: u64,
    extra: Option<&mut dyn Handler>,
) -> Analysis {
    let mut w = idleflow_format::Writer::new(Vec::new(), info).unwrap();
    for r in records {
        w.write(r).unwrap();
    }
    let bytes = w
        .finish(&RunSummary {
            stop_ns,
            ..Default::default()
        })
        .unwrap();
    let opts = AnalysisOptions::default();
    Analysis::run_observed(std::io::Cursor::new(bytes), &opts, |_| {}, extra).unwrap()
}

const TOOL: u32 = 9;

fn dispatch(time: u64, prev_tid: u32, prev_state: PrevState, next_tid: u32) -> Record {
    Record::Dispatch(Dispatch {
        time,
        cpu: 0,
        prev_tid,
        prev_state,
        next_tid,
        prev_node: NodeTag::Untraced,
    })
}

fn thread(tid: u32, pid: u32, comm: &str) -> Record {
    Record::Thread(ThreadInfo {
        time: 1,
        tid,
        pid,
        ppid: 1,
        comm: comm.into(),
    })
}

fn analyse(records: &[Record], stop_ns: u64) -> Analysis {
    analyse_told(records, stop_ns, None)
}

fn analyse_told(records: &[Record], stop_ns: u64, extra: Option<&mut dyn Handler>) -> Analysis {
    let info = RunInfo {
        tool_pid: TOOL,
        ..RunInfo::minimal(vec![0], 0)
    };
    analyse_records_told(&info, records, stop_ns, extra)
}

#[test]
fn the_idle_after_idleflow_woke_on_an_idle_cpu_continues_the_idle_it_interrupted() {
    use PrevState::{Preempted, Sleeping};
    let a = analyse(
        &[
            thread(51, 50, "worker"),
            thread(10, TOOL, "idleflow-drain"),
            thread(61, 60, "other"),
            dispatch(10, IDLE_TID, Preempted, 51),
            // The worker waits: idle from 100...
            dispatch(100, 51, Sleeping, IDLE_TID),
            // ...the drain wakes on the idle CPU twice, and leaves...
            dispatch(200, IDLE_TID, Preempted, 10),
            dispatch(210, 10, Sleeping, IDLE_TID),
            dispatch(300, IDLE_TID, Preempted, 10),
            dispatch(305, 10, Sleeping, IDLE_TID),
            // ...until another thread runs and waits in turn...
            dispatch(500, IDLE_TID, Preempted, 61),
            dispatch(600, 61, Sleeping, 10),
            // ...handing the CPU to the drain, which leaves it idle:
            // it interrupted no idle, so the idle after it is its own.
            dispatch(620, 10, Sleeping, IDLE_TID),
        ],
        700,
    );
    let worker = &a.causes[&(0, 51)];
    assert_eq!(worker.dispatches, 1);
    assert_eq!(worker.idle_ns, 100 + 90 + 195);
    assert_eq!(a.continued_idle, (2, 90 + 195));
    let drain = &a.causes[&(0, 10)];
    assert_eq!((drain.dispatches, drain.idle_ns), (1, 80));
    assert!(!a.causes.contains_key(&(0, 61)));
    assert!(a.tool_tids.contains(&10));
}

mod carried;

/// Counts what a caller's handler is told.
#[derive(Default)]
struct Seen {
    dispatches: Vec<u64>,
    credits: Vec<(u32, u64, u64)>,
    open_at_end: usize,
    finished: Option<u64>,
}

impl Handler for Seen {
    fn dispatch(&mut self, e: &DispatchEvent<'_>, _ctx: &Context<'_>) {
        self.dispatches.push(e.dispatch.time);
    }
    fn idle(&mut self, c: &Credit, _ctx: &Context<'_>) {
        self.credits.push((c.charge.tid, c.idle_ns, c.dispatches));
    }
    fn open_at_end(&mut self, _ci: usize, _iv: &IdleInterval, _ctx: &Context<'_>) {
        self.open_at_end += 1;
    }
    fn finish(&mut self, stop: u64, _ctx: &Context<'_>) {
        self.finished = Some(stop);
    }
}

#[test]
fn a_callers_handler_is_told_the_windows_dispatches_and_every_credit_once() {
    use PrevState::{Preempted, Sleeping};
    let records = [
        thread(51, 50, "worker"),
        thread(10, TOOL, "idleflow-drain"),
        dispatch(10, IDLE_TID, Preempted, 51),
        dispatch(100, 51, Sleeping, IDLE_TID),
        // The drain interrupts the worker's idle: a credit of 0 dispatches.
        dispatch(200, IDLE_TID, Preempted, 10),
        dispatch(210, 10, Sleeping, IDLE_TID),
        dispatch(400, IDLE_TID, Preempted, 51),
        // Idle still open at the end: credited, then told as open.
        dispatch(450, 51, Sleeping, IDLE_TID),
    ];
    let mut seen = Seen::default();
    let a = analyse_told(&records, 500, Some(&mut seen));
    assert_eq!(seen.dispatches, [10, 100, 200, 210, 400, 450]);
    assert_eq!(seen.credits, [(51, 100, 1), (51, 190, 0), (51, 50, 1)]);
    assert_eq!((seen.open_at_end, seen.finished), (1, Some(500)));
    // The credits are the causes' idle, every nanosecond once.
    let total: u64 = seen.credits.iter().map(|c| c.1).sum();
    assert_eq!(total, a.causes[&(0, 51)].idle_ns);
}
