//! Decoding ahead: a recording's records are decoded on a second thread, in
//! batches, while the analysis consumes the batches before them, so that a
//! report on a machine with two CPUs uses both (decoding is about half of
//! a report's work).
//!
//! Invariants: records arrive in file order, every one exactly once; at
//! most [`DEPTH`] batches of at most [`BATCH`] records or [`BATCH_BYTES`]
//! of the file (and one record more) wait between the threads, so memory
//! stays bounded whatever the recording's length; the reader comes
//! back to the caller at the end (for later passes), with what it found
//! (end record, cut, unknown kinds) as if the caller had read it.

use std::io::{Read, Seek};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

use idleflow_format::{FormatError, Position, Reader, Record};

/// Records per batch at most.
pub const BATCH: usize = 4096;
/// Bytes of the file a batch covers at most (and one record more): a
/// call-tree record is one thread's whole tree, so a batch is also bounded
/// by what it holds, not only by how many records.
pub const BATCH_BYTES: u64 = 256 << 10;
/// Batches decoded ahead of the analysis at most.
pub const DEPTH: usize = 4;

/// A run of records in file order, and the file offset after them.
#[derive(Debug)]
pub struct Batch {
    pub records: Vec<Record>,
    pub offset: u64,
}

/// What the decoding thread hands back: the reader, and where the first
/// call-tree record began (the views' passes start there).
#[derive(Debug)]
pub struct Decoded<R: Read> {
    pub reader: Reader<R>,
    pub trees_at: Option<Position>,
}

/// Reads `reader` to its end on a scoped thread of `scope`, calling
/// `consume` on this thread with each batch in order. Returns the reader
/// and what the decoding found, or the first read error (after the batches
/// before it were consumed).
pub fn read_ahead<'scope, 'env, R>(
    scope: &'scope std::thread::Scope<'scope, 'env>,
    reader: Reader<R>,
    mut consume: impl FnMut(Batch),
) -> Result<Decoded<R>, FormatError>
where
    R: Read + Seek + Send + 'scope,
{
    let (tx, rx) = sync_channel(DEPTH);
    let decoder = scope.spawn(move || decode(reader, tx));
    drain(rx, &mut consume);
    match decoder.join() {
        Ok(result) => result,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

fn drain(rx: Receiver<Batch>, consume: &mut impl FnMut(Batch)) {
    for batch in rx {
        consume(batch);
    }
}

/// The decoding thread: batches to `tx` until the end, an error, or a
/// consumer that hung up.
fn decode<R: Read + Seek>(
    mut reader: Reader<R>,
    tx: SyncSender<Batch>,
) -> Result<Decoded<R>, FormatError> {
    let mut trees_at = None;
    loop {
        let mut records = Vec::with_capacity(BATCH);
        let mut done = false;
        let start = reader.offset();
        while records.len() < BATCH && reader.offset().saturating_sub(start) < BATCH_BYTES {
            let before = reader.position();
            match reader.next_complete_record()? {
                Some(rec) => {
                    if matches!(rec, Record::TreeHead(_)) {
                        trees_at.get_or_insert(before);
                    }
                    records.push(rec);
                }
                None => {
                    done = true;
                    break;
                }
            }
        }
        let offset = reader.offset();
        if !records.is_empty() && tx.send(Batch { records, offset }).is_err() {
            done = true;
        }
        if done {
            return Ok(Decoded { reader, trees_at });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idleflow_format::{Dispatch, NodeTag, PrevState, RunInfo, RunSummary, Writer};

    fn info() -> RunInfo {
        RunInfo::minimal(vec![0, 1], 1)
    }

    #[test]
    fn every_record_arrives_once_in_order_and_the_reader_comes_back() {
        let mut w = Writer::new(Vec::new(), &info()).unwrap();
        let n = BATCH as u64 * 3 + 17;
        for i in 0..n {
            w.write(&Record::Dispatch(Dispatch {
                time: 10 + i,
                cpu: (i % 2) as u32,
                prev_tid: i as u32,
                prev_state: PrevState::Sleeping,
                next_tid: 0,
                prev_node: NodeTag::Untraced,
            }))
            .unwrap();
        }
        let bytes = w
            .finish(&RunSummary {
                stop_ns: 10 + n,
                ..Default::default()
            })
            .unwrap();
        let reader = Reader::new(std::io::Cursor::new(&bytes[..])).unwrap();
        let mut seen = Vec::new();
        let mut offsets = Vec::new();
        let back = std::thread::scope(|s| {
            read_ahead(s, reader, |b| {
                offsets.push(b.offset);
                seen.extend(b.records.into_iter().map(|r| match r {
                    Record::Dispatch(d) => d.prev_tid,
                    _ => u32::MAX,
                }));
            })
        })
        .unwrap();
        assert_eq!(seen, (0..n as u32).collect::<Vec<_>>());
        assert_eq!(offsets.len(), 4);
        assert!(offsets.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(back.reader.summary().unwrap().stop_ns, 10 + n);
        assert!(back.trees_at.is_none());
    }

    #[test]
    fn a_recording_cut_short_comes_back_cut_after_every_record_before_the_cut() {
        let mut w = Writer::new(Vec::new(), &info()).unwrap();
        for i in 0..10u32 {
            w.write(&Record::Dispatch(Dispatch {
                time: 10 + u64::from(i),
                cpu: 0,
                prev_tid: i,
                prev_state: PrevState::Sleeping,
                next_tid: 0,
                prev_node: NodeTag::Untraced,
            }))
            .unwrap();
        }
        let mut bytes = w.finish(&RunSummary::default()).unwrap();
        // Damage the end record's JSON: the recording reads as cut there.
        let end = bytes.len() - idleflow_format::WAITS_TRAILER_LEN - 3;
        bytes[end] = b'#';
        let reader = Reader::new(std::io::Cursor::new(&bytes[..])).unwrap();
        let mut count = 0;
        let back =
            std::thread::scope(|s| read_ahead(s, reader, |b| count += b.records.len())).unwrap();
        assert_eq!(count, 10);
        assert!(back.reader.cut_short().is_some());
        assert!(back.reader.summary().is_none());
    }
}
