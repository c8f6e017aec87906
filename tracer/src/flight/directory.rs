//! What a flight recorder's dump needs from before its window: the name of
//! every thread and the executable mappings of every process the window may
//! mention, and the kernel stacks and walked Java stacks its records name
//! by id.
//!
//! Invariant: an entry is kept while its thread or process may appear in
//! the ring: until it exited before the ring's oldest segment began
//! ([`Directory::forget_before`]). Kernel stacks are kept for the
//! recorder's life: the recorder interns each stack once, and a record in
//! any later segment may name it (their number is that of distinct kernel
//! paths, not of events). So are walked Java stacks, but for those no
//! segment of the ring names once more than [`MAX_WALKED`] are kept (the
//! recorder forgets its own and writes them anew: `recorder/java.rs`).

use idleflow_format::{KernelStack, ModuleMap, Record, ThreadInfo, WalkedStack};
use rustc_hash::{FxHashMap, FxHashSet};

/// Walked Java stacks kept beyond those the ring's segments name.
pub const MAX_WALKED: usize = 1 << 17;

/// See the module documentation.
#[derive(Debug, Default)]
pub struct Directory {
    /// tid → its latest THREAD record, and when it exited.
    threads: FxHashMap<u32, (ThreadInfo, Option<u64>)>,
    /// pid → its executable mappings, and when it exited.
    maps: FxHashMap<u32, (Vec<ModuleMap>, Option<u64>)>,
    /// Kernel stack id → its addresses.
    stacks: FxHashMap<u64, Vec<u64>>,
    /// Walked Java stack id → the stack.
    walked: FxHashMap<u64, WalkedStack>,
}

impl Directory {
    /// Takes note of a record written to the ring.
    pub fn observe(&mut self, r: &Record) {
        match r {
            Record::Thread(t) => {
                let fresh = self.threads.get(&t.tid).is_none_or(|(_, e)| e.is_some());
                if fresh && t.tid == t.pid {
                    // A new process with a reused pid: its mappings are new.
                    self.maps.remove(&t.pid);
                }
                self.threads.insert(t.tid, (t.clone(), None));
            }
            Record::Exit(e) => {
                if let Some(t) = self.threads.get_mut(&e.tid) {
                    t.1 = Some(e.time);
                }
                if e.tid == e.pid {
                    if let Some(m) = self.maps.get_mut(&e.pid) {
                        m.1 = Some(e.time);
                    }
                }
            }
            Record::ModuleMap(m) => {
                let entry = self.maps.entry(m.pid).or_default();
                entry.1 = None;
                entry.0.push((**m).clone());
            }
            Record::KernelStack(k) => {
                self.stacks.insert(k.id, k.ips.clone());
            }
            Record::WalkedStack(w) => {
                self.walked.insert(w.id, (**w).clone());
            }
            _ => {}
        }
    }

    /// Forgets threads and processes that exited before `ns`.
    pub fn forget_before(&mut self, ns: u64) {
        self.threads
            .retain(|_, (_, exited)| exited.is_none_or(|t| t >= ns));
        self.maps
            .retain(|_, (_, exited)| exited.is_none_or(|t| t >= ns));
    }

    /// Forgets the walked stacks no id of `named` (those the ring's
    /// segments name) is, once more than [`MAX_WALKED`] are kept.
    pub fn forget_walked_but(&mut self, named: &FxHashSet<u64>) {
        if self.walked.len() > MAX_WALKED {
            self.walked.retain(|id, _| named.contains(id));
        }
    }

    /// The walked Java stacks `ids` (those known).
    pub fn walked(&self, ids: &[u64]) -> Vec<WalkedStack> {
        ids.iter()
            .filter_map(|id| self.walked.get(id).cloned())
            .collect()
    }

    /// The threads a window starting at `ns` may mention, by tid.
    pub fn threads_at(&self, ns: u64) -> Vec<ThreadInfo> {
        let mut v: Vec<ThreadInfo> = self
            .threads
            .values()
            .filter(|(_, exited)| exited.is_none_or(|t| t >= ns))
            .map(|(t, _)| t.clone())
            .collect();
        v.sort_by_key(|t| t.tid);
        v
    }

    /// The mappings of the processes a window starting at `ns` may mention.
    pub fn maps_at(&self, ns: u64) -> Vec<ModuleMap> {
        let mut pids: Vec<&u32> = self
            .maps
            .iter()
            .filter(|(_, (_, exited))| exited.is_none_or(|t| t >= ns))
            .map(|(pid, _)| pid)
            .collect();
        pids.sort_unstable();
        pids.into_iter()
            .flat_map(|pid| self.maps[pid].0.iter().cloned())
            .collect()
    }

    /// The kernel stacks `ids` (those known).
    pub fn stacks(&self, ids: &[u64]) -> Vec<KernelStack> {
        ids.iter()
            .filter_map(|id| {
                self.stacks.get(id).map(|ips| KernelStack {
                    id: *id,
                    ips: ips.clone(),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idleflow_format::ThreadExit;

    fn thread(tid: u32, pid: u32, comm: &str) -> Record {
        Record::Thread(ThreadInfo {
            time: 1,
            tid,
            pid,
            ppid: 1,
            comm: comm.into(),
        })
    }

    #[test]
    fn exited_threads_stay_while_the_window_may_name_them() {
        let mut d = Directory::default();
        d.observe(&thread(10, 10, "server"));
        d.observe(&thread(11, 10, "worker"));
        d.observe(&Record::Exit(ThreadExit {
            time: 500,
            tid: 11,
            pid: 10,
        }));
        let names = |v: Vec<ThreadInfo>| v.into_iter().map(|t| t.comm).collect::<Vec<_>>();
        assert_eq!(names(d.threads_at(400)), ["server", "worker"]);
        assert_eq!(names(d.threads_at(600)), ["server"]);
        d.forget_before(600);
        assert_eq!(names(d.threads_at(0)), ["server"]);
        // A renamed thread is dumped under its latest name.
        d.observe(&thread(10, 10, "server-main"));
        assert_eq!(names(d.threads_at(0)), ["server-main"]);
    }
}
