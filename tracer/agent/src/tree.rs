//! One thread's call tree, built from method entries and exits.
//!
//! Owns the nodes (one per distinct call path from the thread's root), the
//! stack of open calls and the per-node measures of the arcflow report:
//! calls, callees (CEE), base time (exclusive), longest single call (MMAX),
//! and the idle counts (DIP, IDLE) the work area credits to the node the
//! thread was in. Pure data: no JVMTI, no clock, no locks (a tree belongs to
//! its thread), so every rule is unit-tested.
//!
//! Invariants: node 0 is the thread's root (no method); a node's `level` is
//! its depth; time is exclusive per node: a call's inclusive time minus the
//! inclusive time of the calls it made goes to its node's `base_ns`, so the
//! base times of a finished call's subtree add up to its inclusive time.

use idleflow_format::TreeNode;
use rustc_hash::FxHashMap;

/// A node with no measures yet.
fn fresh(id: u64, parent_id: u64, method: u32, level: u32) -> TreeNode {
    TreeNode {
        id,
        parent_id,
        method,
        level,
        calls: 0,
        callees: 0,
        base_ns: 0,
        mmax_ns: 0,
        ao: 0,
        ab: 0,
        dip: 0,
        idle: 0,
    }
}

#[derive(Debug, Clone, Copy)]
struct Frame {
    node: u32,
    key: usize,
    entered: u64,
    child_ns: u64,
}

/// A thread's call tree. `K` of the methods is an opaque `usize` key (the
/// jmethodID); names are resolved by the caller when a node is created.
#[derive(Debug)]
pub struct CallTree {
    nodes: Vec<TreeNode>,
    children: FxHashMap<(u32, usize), u32>,
    stack: Vec<Frame>,
    unmatched_exits: u64,
}

impl CallTree {
    /// A tree whose root has id `root_id`.
    pub fn new(root_id: u64) -> Self {
        CallTree {
            nodes: vec![fresh(root_id, 0, u32::MAX, 0)],
            children: FxHashMap::default(),
            stack: Vec::new(),
            unmatched_exits: 0,
        }
    }

    /// Index of the current node (the innermost open call, or the root).
    pub fn current(&self) -> u32 {
        self.stack.last().map_or(0, |f| f.node)
    }

    /// Id of the current node.
    pub fn current_id(&self) -> u64 {
        self.nodes[self.current() as usize].id
    }

    /// The nodes, root first.
    pub fn nodes(&self) -> &[TreeNode] {
        &self.nodes
    }

    /// Exits that matched no open call (events enabled mid-call).
    pub fn unmatched_exits(&self) -> u64 {
        self.unmatched_exits
    }

    /// Open calls.
    pub fn depth(&self) -> usize {
        self.stack.len()
    }

    /// A call of method `key` starts at `now`; `new_node` gives the id and
    /// method index of a node not seen before. Returns the new current node.
    pub fn enter(&mut self, key: usize, now: u64, new_node: impl FnOnce() -> (u64, u32)) -> u32 {
        let parent = self.current();
        let node = match self.children.get(&(parent, key)) {
            Some(&n) => n,
            None => {
                let (id, method) = new_node();
                let n = self.nodes.len() as u32;
                let p = &self.nodes[parent as usize];
                let (parent_id, level) = (p.id, p.level + 1);
                self.nodes.push(fresh(id, parent_id, method, level));
                self.children.insert((parent, key), n);
                n
            }
        };
        self.nodes[parent as usize].callees += 1;
        self.nodes[node as usize].calls += 1;
        self.stack.push(Frame {
            node,
            key,
            entered: now,
            child_ns: 0,
        });
        node
    }

    /// The call of method `key` ends at `now` (normally or by an exception).
    /// Calls still open above it (their exits were not seen) end with it.
    /// Returns the new current node.
    pub fn exit(&mut self, key: usize, now: u64) -> u32 {
        match self.stack.iter().rposition(|f| f.key == key) {
            Some(pos) => {
                while self.stack.len() > pos {
                    self.close_top(now);
                }
            }
            None => self.unmatched_exits += 1,
        }
        self.current()
    }

    fn close_top(&mut self, now: u64) {
        let Some(f) = self.stack.pop() else { return };
        let inclusive = now.saturating_sub(f.entered);
        let n = &mut self.nodes[f.node as usize];
        n.base_ns += inclusive.saturating_sub(f.child_ns);
        n.mmax_ns = n.mmax_ns.max(inclusive);
        if let Some(parent) = self.stack.last_mut() {
            parent.child_ns += inclusive;
        }
    }

    /// Credits idle counts to the current node.
    pub fn add_idle(&mut self, dip: u64, idle: u64) {
        let cur = self.current() as usize;
        let n = &mut self.nodes[cur];
        n.dip += dip;
        n.idle += idle;
    }

    /// Credits a sampled allocation to the current node.
    pub fn add_alloc(&mut self, bytes: u64) {
        let cur = self.current() as usize;
        let n = &mut self.nodes[cur];
        n.ao += 1;
        n.ab += bytes;
    }

    /// The nodes with the open calls' time so far added (a snapshot of a
    /// live thread), without changing the tree.
    pub fn snapshot(&self, now: u64) -> Vec<TreeNode> {
        let mut nodes = self.nodes.clone();
        // Innermost first: each open call's open child counts as its callee time.
        let mut open_child = 0;
        for f in self.stack.iter().rev() {
            let inclusive = now.saturating_sub(f.entered);
            let n = &mut nodes[f.node as usize];
            n.base_ns += inclusive.saturating_sub(f.child_ns + open_child);
            n.mmax_ns = n.mmax_ns.max(inclusive);
            open_child = inclusive;
        }
        nodes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> impl FnMut() -> (u64, u32) {
        let mut next = 100;
        move || {
            next += 1;
            (next, next as u32)
        }
    }

    #[test]
    fn paths_become_nodes_and_calls_are_counted_exactly() {
        let mut t = CallTree::new(1);
        let mut id = ids();
        // main -> work x3 -> leaf x2 each
        t.enter(1, 0, &mut id);
        for i in 0..3 {
            t.enter(2, 10 + i * 100, &mut id);
            t.enter(3, 20 + i * 100, &mut id);
            t.exit(3, 30 + i * 100);
            t.enter(3, 40 + i * 100, &mut id);
            t.exit(3, 60 + i * 100);
            t.exit(2, 70 + i * 100);
        }
        t.exit(1, 400);
        let n = t.nodes();
        assert_eq!(n.len(), 4);
        let (main, work, leaf) = (&n[1], &n[2], &n[3]);
        assert_eq!((main.calls, main.callees, main.level), (1, 3, 1));
        assert_eq!((work.calls, work.callees, work.level), (3, 6, 2));
        assert_eq!((leaf.calls, leaf.callees, leaf.level), (6, 0, 3));
        assert_eq!(leaf.base_ns, 3 * (10 + 20));
        assert_eq!(leaf.mmax_ns, 20);
        assert_eq!(work.base_ns, 3 * (60 - 30));
        assert_eq!(work.mmax_ns, 60);
        // Exclusive times add up to main's inclusive time.
        assert_eq!(main.base_ns + work.base_ns + leaf.base_ns, 400);
        assert_eq!(leaf.parent_id, work.id);
        assert_eq!(t.current(), 0);
    }

    #[test]
    fn the_same_method_on_another_path_is_another_node() {
        let mut t = CallTree::new(1);
        let mut id = ids();
        t.enter(1, 0, &mut id);
        t.enter(9, 1, &mut id);
        t.exit(9, 2);
        t.exit(1, 3);
        t.enter(2, 4, &mut id);
        t.enter(9, 5, &mut id);
        t.exit(9, 6);
        t.exit(2, 7);
        assert_eq!(t.nodes().len(), 5);
    }

    #[test]
    fn exits_by_exception_unwind_the_calls_above() {
        let mut t = CallTree::new(1);
        let mut id = ids();
        t.enter(1, 0, &mut id);
        t.enter(2, 10, &mut id);
        t.enter(3, 20, &mut id);
        // 3 and 2 exit by exception; only 1's exit is seen by us for 2's frame.
        t.exit(2, 50);
        assert_eq!(t.depth(), 1);
        assert_eq!(t.nodes()[3].base_ns, 30);
        assert_eq!(t.nodes()[2].base_ns, 10);
        assert_eq!(t.exit(7, 60), 1, "an unknown exit changes nothing");
        assert_eq!(t.unmatched_exits(), 1);
    }

    #[test]
    fn idle_counts_go_to_the_current_node() {
        let mut t = CallTree::new(1);
        let mut id = ids();
        t.add_idle(1, 1);
        t.enter(1, 0, &mut id);
        t.add_idle(2, 5);
        t.add_alloc(64);
        assert_eq!((t.nodes()[0].dip, t.nodes()[0].idle), (1, 1));
        assert_eq!((t.nodes()[1].dip, t.nodes()[1].idle), (2, 5));
        assert_eq!((t.nodes()[1].ao, t.nodes()[1].ab), (1, 64));
    }

    #[test]
    fn a_snapshot_includes_open_calls_without_closing_them() {
        let mut t = CallTree::new(1);
        let mut id = ids();
        t.enter(1, 0, &mut id);
        t.enter(2, 10, &mut id);
        let s = t.snapshot(100);
        assert_eq!(s[2].base_ns, 90);
        assert_eq!(s[1].base_ns, 10);
        assert_eq!(t.depth(), 2);
        assert_eq!(t.nodes()[2].base_ns, 0);
    }
}
