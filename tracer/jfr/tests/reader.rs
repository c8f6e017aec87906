//! The bounded JFR reader on a chunk written here: it reads back what was
//! written, and every cut and flipped byte gives an error or a value,
//! never a panic.

mod common;

use idleflow_jfr::reader::{Access, Chunks};

#[test]
fn a_constructed_chunk_reads_back() {
    let bytes = common::chunk();
    let len = bytes.len() as u64;
    let mut chunks = Chunks::new(std::io::Cursor::new(bytes), len);
    let c = chunks.next_chunk().unwrap().unwrap();
    assert_eq!(c.header.ticks_per_second, 1_000_000_000);
    let mut events = c.events();
    let e = events.next_where(|n| n == "Ev").unwrap().unwrap();
    assert_eq!(e.class_name, "Ev");
    assert_eq!(e.value.field("n").unwrap().long(), Some(-5));
    assert_eq!(
        e.value.field("sym").unwrap().string().as_deref(),
        Some("hello")
    );
    assert_eq!(e.value.field_key("sym"), Some((3, 7)));
    let xs: Vec<i64> = e
        .value
        .field("xs")
        .unwrap()
        .elements()
        .iter()
        .filter_map(Access::long)
        .collect();
    assert_eq!(xs, [300, 4]);
    assert!(events.next_where(|_| true).is_none());
    assert!(chunks.next_chunk().is_none());
}

#[test]
fn every_cut_and_every_flipped_byte_is_an_error_or_a_value() {
    let good = common::chunk();
    for cut in 0..good.len() {
        let bytes = good[..cut].to_vec();
        let mut chunks = Chunks::new(std::io::Cursor::new(bytes), cut as u64);
        if let Some(Ok(c)) = chunks.next_chunk() {
            panic!("a chunk cut at {cut} read as whole: {:?}", c.header);
        }
    }
    for i in 0..good.len() {
        for flip in [0x01, 0x80, 0xff] {
            let mut bytes = good.clone();
            bytes[i] ^= flip;
            let len = bytes.len() as u64;
            let mut chunks = Chunks::new(std::io::Cursor::new(bytes), len);
            while let Some(Ok(c)) = chunks.next_chunk() {
                let mut ev = c.events();
                while let Some(Ok(e)) = ev.next_where(|_| true) {
                    let _ = e.value.field("sym").and_then(|s| s.string());
                    let _ = e.value.field("xs").map(|x| x.elements());
                }
            }
        }
    }
}
