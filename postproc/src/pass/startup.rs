//! Where a recorded program's start-up ends, for `--skip-startup`: where
//! the longest stretch begins in which the program started no thread or
//! process (at least a second of it).
//!
//! Servers start their threads (thread pools, connection acceptors, JIT
//! compilers) while they start up, then serve with the threads they have
//! until they shut down (which starts a thread or two again): their steady
//! state is the longest stretch without a new thread. The first quiet
//! second would not do: a JVM loads classes for seconds between starting
//! its own threads and the server's.
//!
//! Invariant: only the recorded program counts (the command or `--pid`
//! process and its descendants, as the report shows them); threads that
//! existed when the recording started are not new.

use std::io::Read;

use idleflow_format::{FormatError, Reader, Record};
use rustc_hash::FxHashSet;

/// What the scan found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartupEnd {
    /// The start-up ended at this time (ns on the recording's clock): the
    /// program's last new thread before its longest quiet stretch, or the
    /// recording's start if that stretch starts there.
    At(u64),
    /// The recording has no program (system-wide): nothing starts up.
    NoProgram,
    /// The program never went `quiet_ns` without starting a thread or process.
    NeverQuiet {
        /// Its last new thread, ns.
        last_new_ns: u64,
    },
}

/// Scans `input` for the end of the recorded program's start-up: the start
/// of its longest stretch without a new thread, if that lasts `quiet_ns`.
pub fn startup_end(input: impl Read, quiet_ns: u64) -> Result<StartupEnd, FormatError> {
    let mut reader = Reader::new(input)?;
    reader.keep_trees_encoded(true);
    let info = reader.info().clone();
    if info.target_pids.is_empty() {
        return Ok(StartupEnd::NoProgram);
    }
    let mut pids: FxHashSet<u32> = info.target_pids.iter().copied().collect();
    let mut seen: FxHashSet<u32> = FxHashSet::default();
    let mut last_new = info.start_ns;
    let mut last_time = info.start_ns;
    // (length, start) of the longest quiet stretch so far.
    let mut best = (0u64, info.start_ns);
    while let Some(rec) = reader.next_complete_record()? {
        if matches!(rec, Record::TreeHead(_) | Record::TreeThreadEncoded(_)) {
            break; // after the last timed record
        }
        last_time = last_time.max(rec.time());
        if let Record::Thread(t) = &rec {
            if t.tid == t.pid && pids.contains(&t.ppid) {
                pids.insert(t.pid);
            }
            if pids.contains(&t.pid) && seen.insert(t.tid) && t.time > info.start_ns {
                let gap = t.time.saturating_sub(last_new);
                if gap > best.0 {
                    best = (gap, last_new);
                }
                last_new = t.time;
            }
        }
    }
    let end = reader
        .summary()
        .map_or(last_time, |s| s.stop_ns.max(last_time));
    let gap = end.saturating_sub(last_new);
    if gap > best.0 {
        best = (gap, last_new);
    }
    Ok(if best.0 >= quiet_ns {
        StartupEnd::At(best.1)
    } else {
        StartupEnd::NeverQuiet {
            last_new_ns: last_new,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use idleflow_format::{Dispatch, NodeTag, PrevState, RunInfo, RunSummary, ThreadInfo, Writer};

    fn thread(time: u64, tid: u32, pid: u32, ppid: u32) -> Record {
        Record::Thread(ThreadInfo {
            time,
            tid,
            pid,
            ppid,
            comm: "x".into(),
        })
    }

    fn dispatch(time: u64) -> Record {
        Record::Dispatch(Dispatch {
            time,
            cpu: 0,
            prev_tid: 0,
            prev_state: PrevState::Unknown,
            next_tid: 1,
            prev_node: NodeTag::Untraced,
        })
    }

    fn scan(target: Vec<u32>, records: &[Record], quiet_ns: u64) -> StartupEnd {
        let info = RunInfo {
            target_pids: target,
            ..RunInfo::minimal(vec![0], 1_000)
        };
        let mut w = Writer::new(Vec::new(), &info).unwrap();
        for r in records {
            w.write(r).unwrap();
        }
        let stop_ns = records.iter().map(Record::time).max().unwrap_or(0);
        let bytes = w
            .finish(&RunSummary {
                stop_ns,
                ..Default::default()
            })
            .unwrap();
        startup_end(&bytes[..], quiet_ns).unwrap()
    }

    #[test]
    fn start_up_ends_where_the_longest_stretch_without_a_new_thread_begins() {
        let records = [
            thread(1_000, 10, 10, 1),    // the program, there at the start
            thread(1_000, 99, 99, 1),    // another process
            thread(5_000, 11, 10, 1),    // a new thread of the program
            thread(700_000, 20, 20, 10), // a child process, after 0.7 ms
            thread(800_000, 21, 20, 10), // its thread
            dispatch(1_000_000),
            thread(1_500_000, 98, 99, 1), // not the program's: does not count
            dispatch(2_000_000),
            thread(3_000_000, 12, 10, 1), // shutting down: 2.2 ms of quiet before
            dispatch(3_100_000),
        ];
        assert_eq!(scan(vec![10], &records, 1_000_000), StartupEnd::At(800_000));
        assert_eq!(scan(vec![], &records, 1_000_000), StartupEnd::NoProgram);
        assert_eq!(
            scan(vec![10], &records, 3_000_000),
            StartupEnd::NeverQuiet {
                last_new_ns: 3_000_000
            }
        );
        // The last stretch runs to the end of the recording.
        assert_eq!(
            scan(vec![10], &records[..8], 100_000),
            StartupEnd::At(800_000)
        );
    }
}
