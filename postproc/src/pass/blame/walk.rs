//! One walk down a wait chain (see [`super`]): an idle interval charged to a
//! thread is followed through what its waker did at each instant — running,
//! runnable, blocked (recursively) — to its roots.
//!
//! Invariant: a walk covers every instant of its window, so its roots add up
//! to the idle it was given; a visited set stops cycles, a budget and a
//! depth bound its work (what they cut is an `unknown` root).

use rustc_hash::FxHashMap;

use super::roots::{key_of, Chains, Leaf, Out, RootKey, RootKind};
use super::timeline::{Extra, Line, WakeStacks, Waker, What};
use crate::pass::idle_paths::RowKey;
use crate::pass::java_waits::JavaWaits;

/// Links a chain follows, at most.
pub(super) const MAX_DEPTH: usize = 12;

/// Segments one idle interval's walk may visit, at most.
pub(super) const WALK_BUDGET: u32 = 50_000;

/// `ns * num / den` without overflow.
pub(super) fn scale(ns: u64, num: u64, den: u64) -> u64 {
    (u128::from(ns) * u128::from(num) / u128::from(den.max(1))) as u64
}

/// One walk down a wait chain, over the timelines as they are.
pub(super) struct Walk<'a> {
    pub(super) lines: &'a FxHashMap<u32, Line>,
    pub(super) chains: &'a mut Chains,
    pub(super) java: &'a JavaWaits,
    pub(super) out: Vec<Out>,
    /// The waits followed so far, the victim's first.
    pub(super) links: Vec<RowKey>,
    pub(super) visited: Vec<u32>,
    pub(super) budget: u32,
    /// Time the budget or the depth cut, ns.
    pub(super) cut: u64,
    /// The current thread's release site: its stacks at the wake-up that
    /// ended the last link's wait.
    pub(super) release: WakeStacks,
}

impl Walk<'_> {
    /// The last link as the root, the others as its chain; `irq` the
    /// interrupt's stack that ended its wait.
    pub(super) fn end_here(&mut self, kind: RootKind, ns: u64, irq: u64) {
        let (path, links) = self
            .links
            .split_last()
            .expect("a walk starts with the victim's wait");
        let links = self.chains.id(links);
        let extra = Extra {
            release: self.release,
            irq,
        };
        self.out.push((
            Leaf::Root(RootKey {
                kind,
                path: *path,
                links,
            }),
            ns,
            extra,
        ));
    }

    pub(super) fn root(&mut self, kind: RootKind, path: RowKey, ns: u64) {
        let links = self.chains.id(&self.links);
        let extra = Extra {
            release: self.release,
            irq: 0,
        };
        self.out
            .push((Leaf::Root(RootKey { kind, path, links }), ns, extra));
    }

    /// What the last link waited for over `[a, b)`: its waker, whose
    /// wake-up that ended the wait took stacks `woke`.
    pub(super) fn waker(&mut self, waker: Waker, a: u64, b: u64, woke: WakeStacks) {
        if b <= a {
            return;
        }
        match waker {
            Waker::Interrupt => self.end_here(RootKind::Device, b - a, woke.kernel.into()),
            Waker::Unknown => self.end_here(RootKind::Unknown, b - a, 0),
            Waker::Thread(x) => {
                let outer = std::mem::replace(&mut self.release, woke);
                self.thread(x, a, b);
                self.release = outer;
            }
        }
    }

    /// What thread `x` did over `[a, b)`.
    pub(super) fn thread(&mut self, x: u32, a: u64, b: u64) {
        if self.visited.contains(&x) || self.links.len() >= MAX_DEPTH || self.budget == 0 {
            if !self.visited.contains(&x) {
                self.cut = self.cut.saturating_add(b - a);
            }
            self.end_here(RootKind::Unknown, b - a, 0);
            return;
        }
        let java = self.java;
        let Some(line) = self.lines.get(&x) else {
            let key = key_of(java, x, None, a);
            self.root(RootKind::Unknown, key, b - a);
            return;
        };
        self.visited.push(x);
        let mut at = a;
        let first = line.segments.partition_point(|s| s.end <= a);
        for s in line
            .segments
            .range(first..)
            .chain(std::iter::once(&line.current))
        {
            if at >= b {
                break;
            }
            let (from, to) = (s.start.max(at), s.end.min(b));
            if to <= from {
                continue;
            }
            if from > at {
                // Nothing known of the thread before: history dropped.
                let key = key_of(java, x, None, at);
                self.root(RootKind::Unknown, key, from - at);
            }
            self.budget = self.budget.saturating_sub(1);
            let open = s.end == u64::MAX;
            match s.what {
                What::Running if open => {
                    let links = self.chains.id(&self.links);
                    let extra = Extra {
                        release: self.release,
                        irq: 0,
                    };
                    self.out.push((Leaf::OpenRun(x, links), to - from, extra));
                }
                What::Running => {
                    let key = key_of(java, x, Some(s), s.end);
                    self.root(RootKind::Path, key, to - from);
                }
                What::Runnable => {
                    let key = key_of(java, x, None, from);
                    self.root(RootKind::Contention, key, to - from);
                }
                What::Blocked(w) => {
                    let key = key_of(java, x, Some(s), s.start);
                    self.links.push(key);
                    match w {
                        Some(w) => self.waker(w, from, to, s.woke),
                        None => self.end_here(RootKind::Unknown, to - from, 0),
                    }
                    self.links.pop();
                }
                What::Gone => {
                    let key = key_of(java, x, None, from);
                    self.root(RootKind::Unknown, key, to - from);
                }
            }
            at = to;
        }
        if at < b {
            let key = key_of(java, x, None, at);
            self.root(RootKind::Unknown, key, b - at);
        }
        self.visited.pop();
    }
}
