//! The pool-level wait-for graph of the root causes, weighted by idle, and
//! its knots (wPerf's bottleneck): pools that, once edges to devices, CPU
//! and unknown are dropped, wait only on each other.
//!
//! Invariant: an edge's idle is the idle of the chains that went through it;
//! a knot is a sink of the graph without those edges.

use rustc_hash::{FxHashMap, FxHashSet};
use serde::Serialize;

use crate::share::pct;

/// One edge of the wait-for graph: idle of chains in which `from`'s
/// threads waited for `to` (a pool, or a device: `timer`, `disk`,
/// `network`, `interrupt`; `CPU` for runnable roots, `unknown`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WaitEdge {
    pub from: String,
    pub to: String,
    /// Idle of the chains through this edge, ns (a chain's idle counts on
    /// each of its edges, as wPerf's cascaded weights).
    pub idle_ns: u64,
}

/// A knot (wPerf's bottleneck): pools that, once edges to devices, CPU,
/// unknown and edges under 1 % of the idle are left out, wait only for
/// each other (a strongly connected set with no edge out).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Knot {
    /// Its pools (`process: pool`).
    pub pools: Vec<String>,
    /// Idle of the chains that end in it, ns, and its share of all idle.
    pub idle_ns: u64,
    pub share_pct: f64,
    /// What the knot's own threads waited for outside it (devices, CPU,
    /// unknown; edges of at least 1 % of the idle), most idle first.
    pub waits_on: Vec<String>,
}

/// The pool-level wait-for graph (JSON `root_causes.wait_graph`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct WaitGraph {
    /// Edges, most idle first.
    pub edges: Vec<WaitEdge>,
    /// Knots, most idle first (at least 1 % of the idle).
    pub knots: Vec<Knot>,
}

/// Nodes that are not pools: a knot never contains them.
fn outside(node: &str) -> bool {
    matches!(
        node,
        "timer" | "disk" | "network" | "interrupt" | "CPU" | "unknown"
    )
}

impl WaitGraph {
    /// The graph of `chains`: per chain its nodes from the victims' pool to
    /// the root's (then the device, CPU or unknown), and its idle.
    pub(crate) fn new(chains: &[(Vec<String>, u64)], total_idle_ns: u64) -> Self {
        use petgraph::graph::DiGraph;
        let mut weights: FxHashMap<(String, String), u64> = FxHashMap::default();
        // Idle of chains whose last pool is each node (where they end).
        let mut ends: FxHashMap<String, u64> = FxHashMap::default();
        for (nodes, ns) in chains {
            for w in nodes.windows(2) {
                let e = weights.entry((w[0].clone(), w[1].clone())).or_default();
                *e = e.saturating_add(*ns);
            }
            if let Some(last) = nodes.iter().rev().find(|n| !outside(n)) {
                let e = ends.entry(last.clone()).or_default();
                *e = e.saturating_add(*ns);
            }
        }
        let mut edges: Vec<WaitEdge> = weights
            .into_iter()
            .map(|((from, to), idle_ns)| WaitEdge { from, to, idle_ns })
            .collect();
        edges.sort_by(|x, y| {
            y.idle_ns
                .cmp(&x.idle_ns)
                .then_with(|| (&x.from, &x.to).cmp(&(&y.from, &y.to)))
        });
        // wPerf's knot: strongly connected components without an edge out,
        // once edges out of the program (devices, CPU, unknown) and edges
        // under 1 % of the idle are left out.
        let min = total_idle_ns / 100;
        let mut g: DiGraph<&str, ()> = DiGraph::new();
        let mut index: FxHashMap<&str, petgraph::graph::NodeIndex> = FxHashMap::default();
        fn node<'a>(
            g: &mut DiGraph<&'a str, ()>,
            index: &mut FxHashMap<&'a str, petgraph::graph::NodeIndex>,
            name: &'a str,
        ) -> petgraph::graph::NodeIndex {
            *index.entry(name).or_insert_with(|| g.add_node(name))
        }
        for n in ends.keys() {
            node(&mut g, &mut index, n);
        }
        for e in &edges {
            if e.idle_ns >= min && !outside(&e.from) && !outside(&e.to) && e.from != e.to {
                let a = node(&mut g, &mut index, &e.from);
                let b = node(&mut g, &mut index, &e.to);
                g.add_edge(a, b, ());
            }
        }
        let mut knots = Vec::new();
        for scc in petgraph::algo::tarjan_scc(&g) {
            let inside: FxHashSet<_> = scc.iter().copied().collect();
            let exits = scc
                .iter()
                .any(|&n| g.neighbors(n).any(|m| !inside.contains(&m)));
            if exits {
                continue;
            }
            let mut pools: Vec<String> = scc.iter().map(|&n| g[n].to_string()).collect();
            pools.sort();
            let idle_ns = pools.iter().fold(0u64, |s, p| {
                s.saturating_add(ends.get(p).copied().unwrap_or(0))
            });
            if idle_ns < min.max(1) {
                continue;
            }
            let mut waits_on: Vec<(&str, u64)> = edges
                .iter()
                .filter(|e| pools.contains(&e.from) && outside(&e.to) && e.idle_ns >= min)
                .map(|e| (e.to.as_str(), e.idle_ns))
                .collect();
            waits_on.sort_by_key(|w| std::cmp::Reverse(w.1));
            knots.push(Knot {
                pools,
                idle_ns,
                share_pct: pct(idle_ns, total_idle_ns),
                waits_on: waits_on.into_iter().map(|(n, _)| n.to_string()).collect(),
            });
        }
        knots.sort_by(|x, y| {
            y.idle_ns
                .cmp(&x.idle_ns)
                .then_with(|| x.pools.cmp(&y.pools))
        });
        WaitGraph { edges, knots }
    }
}
