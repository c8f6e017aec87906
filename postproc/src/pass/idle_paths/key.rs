//! The key of a merged path (`RowKey`, [`PathKey`] outside the crate): what covers one idle-causing
//! dispatch — its thread, the stacks taken at its switch-out, the call-tree
//! node it left in, the flight-recorder wait that contains it, the system
//! call's argument. Every source meets in it; the pass's handlers and the
//! report's sections name a path by it.
//!
//! Invariant: a key is a few integers (`Copy`), never a path's text: two
//! dispatches with the same key are one path.

use idleflow_format::{JavaWait, WaitReason};

/// A merged path's key, as the pass knows it (opaque): resolve it with
/// [`crate::sections::idle_paths::resolve_path`] once the pass is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PathKey(pub(crate) RowKey);

/// What covers one idle-causing dispatch: the key of its merged path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct RowKey {
    pub(crate) tid: u32,
    /// Kernel and user stack ids at the switch-out (0: none).
    pub(crate) kernel: u64,
    pub(crate) user: u64,
    /// The tree agent's node (0: none).
    pub(crate) node: u64,
    /// The flight-recorder wait that contains the switch-out: its JVM,
    /// stack group (0: no stack), reason and object symbol.
    pub(crate) jvm: u32,
    pub(crate) group: u64,
    pub(crate) reason: Option<WaitReason>,
    pub(crate) object: u64,
    /// The first argument of the system call it waited in (0: not known):
    /// a futex wait's address names the lock.
    pub(crate) addr: u64,
}

impl RowKey {
    /// The key of `tid` leaving with `stacks` (kernel, user ids; 0: none)
    /// in call-tree `node` (0: none), inside the flight-recorder `wait`
    /// (with its stack group).
    pub(crate) fn new(
        tid: u32,
        stacks: (u64, u64),
        node: u64,
        wait: Option<(&JavaWait, u64)>,
    ) -> Self {
        RowKey {
            tid,
            kernel: stacks.0,
            user: stacks.1,
            node,
            jvm: wait.map_or(0, |w| w.0.pid),
            group: wait.map_or(0, |w| w.1),
            reason: wait.map(|w| w.0.reason),
            object: wait.map_or(0, |w| w.0.object),
            addr: 0,
        }
    }

    /// The same key, waiting in a system call whose first argument was
    /// `addr` ([`idleflow_format::SwitchArg`]).
    pub(crate) fn with_addr(self, addr: u64) -> Self {
        RowKey { addr, ..self }
    }

    /// The thread.
    pub(crate) fn tid(&self) -> u32 {
        self.tid
    }
}
