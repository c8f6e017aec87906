//! The compact binary form of the JVM agents' call trees: record kinds
//! `TREE_HEAD` (one per JVM dump: the JVM, its method names) and
//! `TREE_THREAD` (one per thread: its nodes), shared by the agent (which
//! writes them into its dump file), the recorder (which checks them and
//! copies them into the recording) and the [`crate::Reader`].
//!
//! A dump is split per thread so that a reader holds one thread's nodes at a
//! time, never a whole JVM's: memory is bounded by the largest thread tree.
//! A node takes about 15–25 bytes (every field a LEB128 integer, ids as
//! deltas), against about 170 in the JSON of format version 1's kind 9.
//!
//! Invariants: decoding what [`encode_head`] / [`encode_thread`] wrote gives
//! the same values back; decoding foreign bytes never panics and never
//! reserves more memory than the payload could fill.

use serde::{Deserialize, Serialize};

use crate::codec::{put, unzigzag, zigzag, Payload};
use crate::{kind, FormatError};

/// One call-tree node as the JVM agent dumps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeNode {
    /// Unique in the whole recording (several JVMs included).
    pub id: u64,
    /// Id of the parent node (0 for a thread's root).
    pub parent_id: u64,
    /// Index into [`TreeDump::methods`] (`u32::MAX` for a thread's root).
    pub method: u32,
    /// Depth (LV): the root is 0, the thread's first method 1.
    pub level: u32,
    /// Times called along this path (CALLS).
    pub calls: u64,
    /// Calls it made (CEE).
    pub callees: u64,
    /// Exclusive time, ns (BASE).
    pub base_ns: u64,
    /// Longest single call, inclusive, ns (MMAX).
    pub mmax_ns: u64,
    /// Allocated objects, sampled (AO).
    pub ao: u64,
    /// Allocated bytes, sampled (AB).
    pub ab: u64,
    /// Dispatches from idle on the thread's CPU while it was in this node (DIP).
    pub dip: u64,
    /// Dispatches from idle on all CPUs while it was in this node (IDLE).
    pub idle: u64,
}

/// One thread's call tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadTree {
    /// The JVM's process id (absent from version-1 JSON dumps: 0 there).
    #[serde(default)]
    pub pid: u32,
    /// Thread id (kernel tid).
    pub tid: u32,
    /// Java thread name.
    pub name: String,
    /// Nodes, root first, parents before children.
    pub nodes: Vec<TreeNode>,
}

/// The call trees of one JVM, as its agent last dumped them, whole: the
/// JSON payload of the version-1 kind `TREE` (9), still read. Recordings
/// now hold a dump as a [`TreeHead`] and one [`ThreadTree`] per thread
/// ([`TreeDump::split`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeDump {
    /// The JVM's process id.
    pub pid: u32,
    /// Written at VM death (`true`) or a periodic snapshot (`false`: the JVM
    /// did not reach VM death, e.g. it was killed).
    pub final_dump: bool,
    /// When it was written, ns on the recording's clock.
    pub time_ns: u64,
    /// Method names in Java form (`com.example.Pool.take`).
    pub methods: Vec<String>,
    /// One tree per thread.
    pub threads: Vec<ThreadTree>,
    /// Method exits that matched no open call (events enabled mid-call).
    pub unmatched_exits: u64,
    /// The agent's own threads in this JVM (its dump writer): idleflow,
    /// not the program measured.
    #[serde(default)]
    pub agent_tids: Vec<u32>,
}

impl TreeDump {
    /// The head and the thread trees of this dump, as a recording holds them.
    pub fn split(self) -> (TreeHead, Vec<ThreadTree>) {
        let pid = self.pid;
        let threads: Vec<ThreadTree> = self
            .threads
            .into_iter()
            .map(|mut t| {
                t.pid = pid;
                t
            })
            .collect();
        (
            TreeHead {
                pid,
                final_dump: self.final_dump,
                time_ns: self.time_ns,
                unmatched_exits: self.unmatched_exits,
                agent_tids: self.agent_tids,
                threads: threads.len() as u64,
                methods: self.methods,
            },
            threads,
        )
    }
}

/// The head of one JVM's dump: what its thread records share.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TreeHead {
    /// The JVM's process id.
    pub pid: u32,
    /// Written at VM death (`true`) or a periodic snapshot (`false`: the JVM
    /// did not reach VM death, e.g. it was killed).
    pub final_dump: bool,
    /// When it was written, ns on the recording's clock.
    pub time_ns: u64,
    /// Method exits that matched no open call (events enabled mid-call).
    pub unmatched_exits: u64,
    /// The agent's own threads in this JVM: idleflow, not the program measured.
    pub agent_tids: Vec<u32>,
    /// How many `TREE_THREAD` records follow.
    pub threads: u64,
    /// Method names in Java form (`com.example.Pool.take`), indexed by
    /// [`TreeNode::method`].
    pub methods: Vec<String>,
}

/// The smallest encoded node (every field one byte): bounds how many nodes
/// a payload of a given length can hold.
const MIN_NODE_BYTES: usize = 12;

/// Appends the payload of a `TREE_HEAD` record for `h`.
pub fn encode_head(h: &TreeHead, out: &mut Vec<u8>) {
    put(out, h.pid.into());
    out.push(u8::from(h.final_dump));
    put(out, h.time_ns);
    put(out, h.unmatched_exits);
    put(out, h.agent_tids.len() as u64);
    for &t in &h.agent_tids {
        put(out, t.into());
    }
    put(out, h.threads);
    put(out, h.methods.len() as u64);
    for m in &h.methods {
        put(out, m.len() as u64);
        out.extend_from_slice(m.as_bytes());
    }
}

/// Appends the payload of a `TREE_THREAD` record for `t`.
pub fn encode_thread(t: &ThreadTree, out: &mut Vec<u8>) {
    put(out, t.pid.into());
    put(out, t.tid.into());
    put(out, t.name.len() as u64);
    out.extend_from_slice(t.name.as_bytes());
    put(out, t.nodes.len() as u64);
    let mut prev = u64::from(t.pid) << 32;
    for n in &t.nodes {
        put(out, zigzag(n.id.wrapping_sub(prev) as i64));
        prev = n.id;
        put(
            out,
            if n.parent_id == 0 {
                0
            } else {
                zigzag(n.parent_id.wrapping_sub(n.id) as i64)
            },
        );
        put(out, n.method.wrapping_add(1).into());
        put(out, n.level.into());
        for v in [
            n.calls, n.callees, n.base_ns, n.mmax_ns, n.ao, n.ab, n.dip, n.idle,
        ] {
            put(out, v);
        }
    }
}

/// Decodes a `TREE_HEAD` payload.
pub(crate) fn decode_head(p: &mut Payload<'_>) -> Result<TreeHead, FormatError> {
    let pid = p.u32()?;
    let final_dump = p.byte()? != 0;
    let time_ns = p.uint()?;
    let unmatched_exits = p.uint()?;
    let n = p.uint()?;
    let mut agent_tids = Vec::with_capacity((n as usize).min(p.data.len()));
    for _ in 0..n {
        agent_tids.push(p.u32()?);
    }
    let threads = p.uint()?;
    let n = p.uint()?;
    let mut methods = Vec::with_capacity((n as usize).min(p.data.len()));
    for _ in 0..n {
        let len = p.uint()?;
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        methods.push(String::from_utf8_lossy(p.bytes(len)?).into_owned());
    }
    Ok(TreeHead {
        pid,
        final_dump,
        time_ns,
        unmatched_exits,
        agent_tids,
        threads,
        methods,
    })
}

/// A `TREE_THREAD` record whose nodes stay encoded until they are walked
/// ([`EncodedThread::nodes`]): about 16 bytes a node in memory instead of
/// a [`TreeNode`]'s 96, for readers that go through a big tree in passes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedThread {
    /// The JVM's process id.
    pub pid: u32,
    /// Thread id (kernel tid).
    pub tid: u32,
    /// Java thread name.
    pub name: String,
    /// How many nodes the record says it holds.
    pub node_count: u64,
    bytes: Vec<u8>,
    offset: u64,
}

impl EncodedThread {
    /// The nodes, root first, decoded one by one. A damaged record yields
    /// an error (and nothing after it).
    pub fn nodes(&self) -> Nodes<'_> {
        Nodes {
            p: Payload {
                data: &self.bytes,
                offset: self.offset,
            },
            left: self.node_count,
            prev: u64::from(self.pid) << 32,
            failed: false,
        }
    }

    /// All of it as a [`ThreadTree`].
    pub fn decode(&self) -> Result<ThreadTree, FormatError> {
        let mut nodes =
            Vec::with_capacity((self.node_count as usize).min(self.bytes.len() / MIN_NODE_BYTES));
        for n in self.nodes() {
            nodes.push(n?);
        }
        Ok(ThreadTree {
            pid: self.pid,
            tid: self.tid,
            name: self.name.clone(),
            nodes,
        })
    }

    /// The encoded nodes (what follows the header in the payload).
    pub(crate) fn set_node_bytes(&mut self, bytes: Vec<u8>) {
        self.bytes = bytes;
    }

    /// Appends the `TREE_THREAD` payload.
    pub(crate) fn encode_payload(&self, out: &mut Vec<u8>) {
        put(out, self.pid.into());
        put(out, self.tid.into());
        put(out, self.name.len() as u64);
        out.extend_from_slice(self.name.as_bytes());
        put(out, self.node_count);
        out.extend_from_slice(&self.bytes);
    }

    /// The same thread, encoded.
    pub fn encode(t: &ThreadTree) -> Self {
        let mut payload = Vec::new();
        encode_thread(t, &mut payload);
        let mut p = Payload {
            data: &payload,
            offset: 0,
        };
        decode_thread_encoded(&mut p).expect("a tree just encoded decodes")
    }
}

/// Iterator over an [`EncodedThread`]'s nodes.
#[derive(Debug)]
pub struct Nodes<'a> {
    p: Payload<'a>,
    left: u64,
    prev: u64,
    failed: bool,
}

impl Iterator for Nodes<'_> {
    type Item = Result<TreeNode, FormatError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 || self.failed {
            return None;
        }
        self.left -= 1;
        let r = decode_node(&mut self.p, &mut self.prev);
        self.failed = r.is_err();
        Some(r)
    }
}

fn decode_node(p: &mut Payload<'_>, prev: &mut u64) -> Result<TreeNode, FormatError> {
    let id = prev.wrapping_add(unzigzag(p.uint()?) as u64);
    *prev = id;
    let parent = p.uint()?;
    let parent_id = if parent == 0 {
        0
    } else {
        id.wrapping_add(unzigzag(parent) as u64)
    };
    let method = p.u32()?.wrapping_sub(1);
    let level = p.u32()?;
    let mut v = [0u64; 8];
    for x in &mut v {
        *x = p.uint()?;
    }
    let [calls, callees, base_ns, mmax_ns, ao, ab, dip, idle] = v;
    Ok(TreeNode {
        id,
        parent_id,
        method,
        level,
        calls,
        callees,
        base_ns,
        mmax_ns,
        ao,
        ab,
        dip,
        idle,
    })
}

/// Reads a `TREE_THREAD` payload's header; `p` is left at the nodes, which
/// the caller puts into [`EncodedThread::set_node_bytes`].
pub(crate) fn decode_thread_header(p: &mut Payload<'_>) -> Result<EncodedThread, FormatError> {
    let pid = p.u32()?;
    let tid = p.u32()?;
    let len = usize::try_from(p.uint()?).unwrap_or(usize::MAX);
    let name = String::from_utf8_lossy(p.bytes(len)?).into_owned();
    let node_count = p.uint()?;
    Ok(EncodedThread {
        pid,
        tid,
        name,
        node_count,
        bytes: Vec::new(),
        offset: p.offset,
    })
}

/// Reads a `TREE_THREAD` payload and keeps its nodes encoded.
pub(crate) fn decode_thread_encoded(p: &mut Payload<'_>) -> Result<EncodedThread, FormatError> {
    let mut t = decode_thread_header(p)?;
    t.bytes = std::mem::take(&mut p.data).to_vec();
    Ok(t)
}

/// Decodes a `TREE_THREAD` payload.
pub(crate) fn decode_thread(p: &mut Payload<'_>) -> Result<ThreadTree, FormatError> {
    decode_thread_encoded(p)?.decode()
}

/// Appends one framed record (kind, LEB128 payload length, payload), as
/// records stand in a recording: the form of an agent's dump file.
pub fn frame(k: u8, payload: &[u8], out: &mut Vec<u8>) {
    out.push(k);
    put(out, payload.len() as u64);
    out.extend_from_slice(payload);
}

/// One record of a dump file: its kind and payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    /// `kind::TREE_HEAD` or `kind::TREE_THREAD`.
    pub kind: u8,
    /// The payload, checked to decode.
    pub payload: &'a [u8],
}

/// The records of an agent's dump file (framed `TREE_HEAD` and
/// `TREE_THREAD` records, nothing else), each checked to decode. An error
/// names the byte offset in the file.
pub fn dump_frames(mut bytes: &[u8]) -> Result<Vec<Frame<'_>>, FormatError> {
    let total = bytes.len();
    let mut frames = Vec::new();
    while let Some((&k, rest)) = bytes.split_first() {
        let offset = (total - bytes.len()) as u64;
        let corrupt = |what: String| FormatError::Corrupt { offset, what };
        let mut r = rest;
        let len =
            leb128::read::unsigned(&mut r).map_err(|_| corrupt("bad record length".into()))?;
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        if r.len() < len {
            return Err(FormatError::Truncated {
                offset,
                what: "a call-tree record",
            });
        }
        let (payload, next) = r.split_at(len);
        let mut p = Payload {
            data: payload,
            offset,
        };
        match k {
            kind::TREE_HEAD => drop(decode_head(&mut p)?),
            kind::TREE_THREAD => drop(decode_thread(&mut p)?),
            _ => return Err(corrupt(format!("record kind {k} in a call-tree dump"))),
        }
        frames.push(Frame { kind: k, payload });
        bytes = next;
    }
    Ok(frames)
}

/// A whole dump file read back as one [`TreeDump`] (for tests and
/// tools; the recorder copies the records without building one).
pub fn decode_dump(bytes: &[u8]) -> Result<TreeDump, FormatError> {
    let mut head: Option<TreeHead> = None;
    let mut threads = Vec::new();
    for f in dump_frames(bytes)? {
        let mut p = Payload {
            data: f.payload,
            offset: 0,
        };
        if f.kind == kind::TREE_HEAD {
            head = Some(decode_head(&mut p)?);
        } else {
            threads.push(decode_thread(&mut p)?);
        }
    }
    let h = head.ok_or(FormatError::Truncated {
        offset: 0,
        what: "the head of a call-tree dump",
    })?;
    Ok(TreeDump {
        pid: h.pid,
        final_dump: h.final_dump,
        time_ns: h.time_ns,
        methods: h.methods,
        threads,
        unmatched_exits: h.unmatched_exits,
        agent_tids: h.agent_tids,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: u64, parent_id: u64, method: u32, level: u32) -> TreeNode {
        TreeNode {
            id,
            parent_id,
            method,
            level,
            calls: 3,
            callees: 2,
            base_ns: 123_456,
            mmax_ns: 99_999,
            ao: 1,
            ab: 64,
            dip: 7,
            idle: 8,
        }
    }

    #[test]
    fn threads_and_heads_round_trip() {
        let pid = 4242u32;
        let base = u64::from(pid) << 32;
        let t = ThreadTree {
            pid,
            tid: 4300,
            name: "http-nio-8080-exec-1".into(),
            nodes: vec![
                node(base | 10, 0, u32::MAX, 0),
                node(base | 11, base | 10, 0, 1),
                node(base | 90, base | 11, 5, 2),
                node(base | 12, base | 11, 6, 2),
            ],
        };
        let mut b = Vec::new();
        encode_thread(&t, &mut b);
        let mut p = Payload {
            data: &b,
            offset: 0,
        };
        assert_eq!(decode_thread(&mut p).unwrap(), t);
        assert!(p.data.is_empty());
        // Compact: well under the JSON form's ~170 bytes a node.
        assert!(b.len() < 30 * t.nodes.len(), "{} bytes", b.len());

        let h = TreeHead {
            pid,
            final_dump: true,
            time_ns: 1_000_000_007,
            unmatched_exits: 2,
            agent_tids: vec![4301],
            threads: 1,
            methods: vec!["a.B.c".into(), "ü.V.w".into()],
        };
        let mut b = Vec::new();
        encode_head(&h, &mut b);
        let mut p = Payload {
            data: &b,
            offset: 0,
        };
        assert_eq!(decode_head(&mut p).unwrap(), h);
    }

    #[test]
    fn dump_files_are_checked_frame_by_frame() {
        let h = TreeHead {
            pid: 1,
            threads: 1,
            ..Default::default()
        };
        let t = ThreadTree {
            pid: 1,
            tid: 1,
            name: "main".into(),
            nodes: vec![node(1 << 32 | 1, 0, u32::MAX, 0)],
        };
        let (mut hp, mut tp, mut file) = (Vec::new(), Vec::new(), Vec::new());
        encode_head(&h, &mut hp);
        encode_thread(&t, &mut tp);
        frame(kind::TREE_HEAD, &hp, &mut file);
        frame(kind::TREE_THREAD, &tp, &mut file);
        let frames = dump_frames(&file).unwrap();
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[1].payload, &tp[..]);
        // Cut anywhere: an error, never a panic.
        for cut in 0..file.len() {
            let r = dump_frames(&file[..cut]);
            assert!(
                cut == 0 || cut == 1 + 1 + hp.len() || r.is_err(),
                "cut {cut}"
            );
        }
        // A foreign kind is refused.
        let mut bad = file.clone();
        bad[0] = kind::DISPATCH;
        assert!(dump_frames(&bad).is_err());
    }

    #[test]
    fn a_huge_node_count_reserves_nothing() {
        let mut b = Vec::new();
        put(&mut b, 1);
        put(&mut b, 1);
        put(&mut b, 0);
        put(&mut b, u64::MAX);
        let mut p = Payload {
            data: &b,
            offset: 0,
        };
        assert!(decode_thread(&mut p).is_err());
    }
}
