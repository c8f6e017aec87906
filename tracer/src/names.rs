//! Thread names and parents, resolved in time order.
//!
//! The kernel says who a thread is through task records: a fork record
//! (raised in the parent's context) gives a new thread its process and
//! parent, a comm record (raised in the thread's own context) its name,
//! at `exec` (flagged) and at every rename (`prctl(PR_SET_NAME)`,
//! `pthread_setname_np`). A new thread has no comm record of its own: it
//! carries the name its parent had at the fork.
//!
//! Those records arrive in different CPUs' rings, read one ring after the
//! other, so in read order a child's fork can come after its own `exec`, or
//! a fork after the exec of the parent that made it. Resolving names in read
//! order gave forked children stale names (every PostgreSQL backend called
//! `runuser`, a JVM's main thread called `catalina.sh`).
//!
//! Invariant: [`ThreadNames`] is fed task events only after the merge has
//! put them in global time order, so the name a fork copies is the name its
//! parent had at that instant, and the THREAD record it yields carries it.

use idleflow_format::ThreadInfo;
use rustc_hash::FxHashMap;

/// A task record as read from a ring, before its name is resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskEvent {
    /// Thread `tid` of process `pid` is now called `comm`.
    Comm {
        /// Time, ns.
        time: u64,
        /// Process.
        pid: u32,
        /// Thread.
        tid: u32,
        /// New name.
        comm: String,
    },
    /// Thread `tid` of process `pid` was made by thread `ptid` of process `ppid`.
    Fork {
        /// Time, ns.
        time: u64,
        /// Process of the new thread.
        pid: u32,
        /// Process of the parent.
        ppid: u32,
        /// The new thread.
        tid: u32,
        /// The parent thread.
        ptid: u32,
    },
}

/// Names known so far: tid → (pid, ppid, comm). See the module documentation.
#[derive(Debug, Default)]
pub struct ThreadNames {
    known: FxHashMap<u32, (u32, u32, String)>,
}

impl ThreadNames {
    /// Learns a thread that existed when recording started (from `/proc`).
    pub fn existing(&mut self, t: &ThreadInfo) {
        self.known.insert(t.tid, (t.pid, t.ppid, t.comm.clone()));
    }

    /// Applies one task event (in time order) and returns the THREAD record
    /// it means.
    pub fn apply(&mut self, event: TaskEvent) -> ThreadInfo {
        let (time, tid, pid, ppid, comm) = match event {
            TaskEvent::Comm {
                time,
                pid,
                tid,
                comm,
            } => {
                let ppid = self.known.get(&pid).map_or(0, |n| n.1);
                (time, tid, pid, ppid, comm)
            }
            TaskEvent::Fork {
                time,
                pid,
                ppid,
                tid,
                ptid,
            } => {
                let comm = self
                    .known
                    .get(&ptid)
                    .map(|n| n.2.clone())
                    .unwrap_or_default();
                // A new thread of an existing process has that process's parent.
                let ppid = if pid == ppid {
                    self.known.get(&pid).map_or(0, |n| n.1)
                } else {
                    ppid
                };
                (time, tid, pid, ppid, comm)
            }
        };
        self.known.insert(tid, (pid, ppid, comm.clone()));
        ThreadInfo {
            time,
            tid,
            pid,
            ppid,
            comm,
        }
    }

    /// Forgets a thread that exited.
    pub fn exited(&mut self, tid: u32) {
        self.known.remove(&tid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merge::Merge;

    fn names_of(events: Vec<TaskEvent>) -> Vec<(u32, String)> {
        let mut names = ThreadNames::default();
        names.existing(&ThreadInfo {
            time: 0,
            tid: 100,
            pid: 100,
            ppid: 1,
            comm: "runuser".into(),
        });
        // Read ring after ring: the merge restores time order.
        let mut merge = Merge::default();
        for e in events {
            let t = match &e {
                TaskEvent::Comm { time, .. } | TaskEvent::Fork { time, .. } => *time,
            };
            merge.push(0, t, e);
        }
        let mut out = Vec::new();
        merge.release(u64::MAX, |_, e| {
            let t = names.apply(e);
            out.push((t.tid, t.comm));
        });
        out
    }

    #[test]
    fn a_fork_read_after_the_exec_it_preceded_keeps_the_exec_name() {
        // runuser (100) forks 200 on CPU 1; 200 execs postgres on CPU 0 and
        // forks a backend 300; CPU 0's ring is read first.
        let out = names_of(vec![
            TaskEvent::Comm {
                time: 20,
                pid: 200,
                tid: 200,
                comm: "postgres".into(),
            },
            TaskEvent::Fork {
                time: 30,
                pid: 300,
                ppid: 200,
                tid: 300,
                ptid: 200,
            },
            TaskEvent::Fork {
                time: 10,
                pid: 200,
                ppid: 100,
                tid: 200,
                ptid: 100,
            },
        ]);
        assert_eq!(
            out,
            vec![
                (200, "runuser".to_string()),
                (200, "postgres".to_string()),
                (300, "postgres".to_string())
            ]
        );
    }
}
