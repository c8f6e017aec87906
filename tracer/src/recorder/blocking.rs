//! The counts of watched processes' blocking switch-outs (a thread leaving
//! its CPU to wait, not preempted), read as the rings are: what the JVM
//! watcher's every-wait policy decides on. A process's threads named to
//! skip (a runtime's own) are left out.
//!
//! Invariant: each counted process appears once, its threads to skip
//! sorted (a binary search per switch-out of the process).

use super::Recorder;

/// A process whose blocking switch-outs [`Recorder::count_blocking_switch_outs`]
/// counts, and its threads whose switch-outs it leaves out (a runtime's own
/// threads, whose waits say nothing of how often the program waits).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counted {
    /// The process.
    pub pid: u32,
    /// Its threads left out.
    pub skip: Vec<u32>,
}

/// A counted process's blocking switch-outs so far.
#[derive(Debug, Clone)]
pub(crate) struct BlockingCount {
    pub(crate) pid: u32,
    /// Threads left out, sorted.
    pub(crate) skip: Vec<u32>,
    pub(crate) count: u64,
}

impl BlockingCount {
    /// Counts a blocking switch-out of thread `tid` of process `pid` in
    /// its process's count, unless the process is not counted or the
    /// thread is left out.
    pub(crate) fn count(counts: &mut [BlockingCount], pid: u32, tid: u32) {
        if let Some(c) = counts.iter_mut().find(|c| c.pid == pid) {
            if c.skip.binary_search(&tid).is_err() {
                c.count += 1;
            }
        }
    }
}

impl Recorder {
    /// Counts the blocking switch-outs (a thread leaving its CPU to wait,
    /// not preempted) of the threads of each process of `counted` from now
    /// on, as the rings are read, but for the threads it names to skip;
    /// processes no longer named are forgotten, those named again keep
    /// their counts and take the new threads to skip. For a policy that
    /// watches how often a program waits (a handful of processes: the
    /// lookup is linear).
    pub fn count_blocking_switch_outs(&mut self, counted: &[Counted]) {
        self.blocking
            .retain(|c| counted.iter().any(|n| n.pid == c.pid));
        for n in counted {
            let mut skip = n.skip.clone();
            skip.sort_unstable();
            match self.blocking.iter_mut().find(|c| c.pid == n.pid) {
                Some(c) => c.skip = skip,
                None => self.blocking.push(BlockingCount {
                    pid: n.pid,
                    skip,
                    count: 0,
                }),
            }
        }
    }

    /// Each counted process's blocking switch-outs since it was named
    /// ([`Recorder::count_blocking_switch_outs`]), as read so far: (pid,
    /// count).
    pub fn blocking_switch_outs(&self) -> Vec<(u32, u64)> {
        self.blocking.iter().map(|c| (c.pid, c.count)).collect()
    }
}
