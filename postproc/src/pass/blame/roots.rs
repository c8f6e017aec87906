//! What blame's walks end in (see [`super`]): the kinds of root, a root's
//! key (its path and its interned chain of links), the chains, and a walk's
//! leaves before they are scaled to the idle they carry.
//!
//! Invariant: a chain is interned once; a root's key carries its id, so
//! counting a root allocates nothing.

use rustc_hash::FxHashMap;
use serde::Serialize;

use super::timeline::{Extra, Segment, What};
use crate::pass::idle_paths::RowKey;
use crate::pass::java_waits::JavaWaits;

/// What a chain ends in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RootKind {
    /// A thread's code: on a CPU while the others waited for it.
    Path,
    /// A wait that a device ended (a timer, the network, a disk): the
    /// root's frames are that wait's.
    Device,
    /// The thread the others waited for was runnable, waiting for a CPU.
    Contention,
    /// The chain ends where nothing says more: no wake-up seen, a thread
    /// still waiting when the recording ended, history dropped, a cycle.
    Unknown,
}

/// One root with the chain that led to it: the links are the waits from
/// the victim's (first) to the one before the root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct RootKey {
    pub kind: RootKind,
    /// The root's path: the running thread's, the device-ended wait's, the
    /// runnable or unknown thread's.
    pub path: RowKey,
    /// The links, interned ([`Chains`]).
    pub links: u32,
}

/// The distinct chains (links, victims first), interned: a root's key
/// carries an id, so that counting a root allocates nothing.
#[derive(Debug, Default)]
pub(crate) struct Chains {
    pub(super) ids: FxHashMap<Box<[RowKey]>, u32>,
    pub(super) list: Vec<Box<[RowKey]>>,
}

impl Chains {
    /// The id of `links`.
    pub(super) fn id(&mut self, links: &[RowKey]) -> u32 {
        if let Some(&i) = self.ids.get(links) {
            return i;
        }
        let i = self.list.len() as u32;
        self.list.push(links.into());
        self.ids.insert(links.into(), i);
        i
    }

    /// The links of chain `id`.
    pub(crate) fn get(&self, id: u32) -> &[RowKey] {
        self.list.get(id as usize).map_or(&[], |l| l)
    }
}

/// A walk's leaf before scaling.
#[derive(Debug, Clone, Copy)]
pub(super) enum Leaf {
    Root(RootKey),
    /// In the waker's running segment that is still open (thread, chain
    /// id): named when it ends.
    OpenRun(u32, u32),
}

/// A walk's leaf with its idle (before scaling) and wake-up stacks.
pub(super) type Out = (Leaf, u64, Extra);

/// The merged path's key of `tid` at `at`: its segment's stacks and node,
/// the flight-recorder wait it lies in, a wait's system-call argument.
pub(super) fn key_of(java: &JavaWaits, tid: u32, s: Option<&Segment>, at: u64) -> RowKey {
    let (stacks, node) = s.map_or(((0, 0), 0), |s| ((s.kernel.into(), s.user.into()), s.node));
    let wait = java.wait_at(tid, at);
    RowKey::new(tid, stacks, node, wait.map(|w| (w, java.wait_group(w)))).with_addr(
        s.filter(|s| matches!(s.what, What::Blocked(_)))
            .map_or(0, |s| s.arg),
    )
}
