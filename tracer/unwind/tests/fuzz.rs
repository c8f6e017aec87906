//! Runs the fuzz target of the readers of what a recorded program writes
//! for idleflow (`tracer/unwind/fuzz`, cargo-fuzz on the nightly
//! toolchain) for a bounded time: a perf map, the thread work area the JVM
//! agents share with the recorder, an agent's call-tree dump — any bytes
//! give names, refusals or errors, never a panic, a hang or an allocation
//! the input does not pay for (docs/SECURITY.md). Seeds: one valid input
//! of each, made here with the real writers. `IDLEFLOW_FUZZ_SECONDS` sets
//! the time (default 60).

#[path = "../../../tests/support/fuzz.rs"]
mod fuzz;

use std::path::Path;

use idleflow_format::kind;
use idleflow_format::tree::{encode_head, encode_thread, frame, ThreadTree, TreeHead, TreeNode};

/// A seed file: the reader's byte (0 perf map, 1 work area, 2 tree dump),
/// then the input.
fn seed(corpus: &Path, name: &str, which: u8, bytes: &[u8]) {
    let mut v = vec![which];
    v.extend_from_slice(bytes);
    std::fs::write(corpus.join(name), v).unwrap();
}

#[test]
fn the_readers_of_what_a_target_writes_survive_any_bytes() {
    let corpus = tempfile::tempdir().unwrap();
    seed(
        corpus.path(),
        "perfmap",
        0,
        b"7f0000001000 40 Interpreter\n7f0000002000 1a0 LWaits$Ledger;::post\n\
          7f0000002040 20 LWaits$Ledger;::post->LWaits;::compute\n",
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("twa");
    let area = idleflow_wire::twa::WorkArea::create(&path, 4, 8, 1000).unwrap();
    let slot = area.claim(7, 7, 1 << 32 | 1, 100).unwrap();
    slot.publish(1 << 32 | 1, 100, 1 << 32 | 2, 5_000);
    drop(area);
    seed(corpus.path(), "twa", 1, &std::fs::read(&path).unwrap());
    let head = TreeHead {
        pid: 7,
        threads: 1,
        ..Default::default()
    };
    let tree = ThreadTree {
        pid: 7,
        tid: 7,
        name: "main".into(),
        nodes: vec![TreeNode {
            id: 1 << 32 | 1,
            parent_id: 0,
            method: u32::MAX,
            level: 0,
            calls: 1,
            callees: 0,
            base_ns: 10,
            mmax_ns: 10,
            ao: 0,
            ab: 0,
            dip: 1,
            idle: 2,
        }],
    };
    let (mut hp, mut tp, mut dump) = (Vec::new(), Vec::new(), Vec::new());
    encode_head(&head, &mut hp);
    encode_thread(&tree, &mut tp);
    frame(kind::TREE_HEAD, &hp, &mut dump);
    frame(kind::TREE_THREAD, &tp, &mut dump);
    seed(corpus.path(), "tree", 2, &dump);
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    fuzz::run_fuzz_target(
        here,
        "target_files",
        corpus.path(),
        &[
            "-max_len=65536".into(),
            // A hang is a finding (a reader waiting on a writer that died):
            // reported in seconds, not libFuzzer's default 20 minutes.
            "-timeout=10".into(),
            "-rss_limit_mb=1024".into(),
            "-malloc_limit_mb=256".into(),
        ],
        1000,
    );
}
