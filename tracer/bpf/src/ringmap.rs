//! One BPF ring buffer (`BPF_MAP_TYPE_RINGBUF`) mapped for reading without
//! a callback per record: the consumer position (read-write), then the
//! producer position and the data area mapped twice in a row (read-only),
//! as the kernel lays them out (`kernel/bpf/ringbuf.c`), so that every run
//! of records from the consumer position on is one slice, even where it
//! wraps around the end of the ring. The drain copies such a run into its
//! staging memory in one piece ([`crate::RingDrain`]).
//!
//! A record in the ring is an 8-byte header — its length in the low 30 bits
//! of a `u32`, bit 31 set while the program still writes it (busy), bit 30
//! set if the program discarded it, then a `u32` the kernel keeps for
//! itself — and the record, padded to 8 bytes. [`ring_records`] walks runs
//! of them, [`records`] also splits the programs' batches.
//!
//! Invariant: [`RingMap::pending`] hands out only whole committed records
//! (it stops at the first one still busy), in the order the programs
//! reserved them; [`RingMap::consume`] only moves the consumer position
//! forward, over bytes it handed out, after the caller is done with them
//! (a release store: the kernel may write there again once it sees it).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use memmap2::{MmapOptions, MmapRaw};

/// A record's header in the ring, bytes.
pub const HEADER_BYTES: usize = 8;
/// Header bit: the record is still being written.
const BUSY: u32 = 1 << 31;
/// Header bit: the record was discarded by its program.
const DISCARD: u32 = 1 << 30;

/// Bytes a record of `len` bytes takes in a ring (and in a run handed out
/// by [`RingMap::pending`]): its header, itself, padding to 8.
pub fn framed_len(len: usize) -> usize {
    (HEADER_BYTES + len).next_multiple_of(8)
}

/// The records of a run of ring bytes (as [`RingMap::pending`] hands them
/// out), in order: each ring record's ([`ring_records`]), a batch split
/// into its records ([`crate::record::split`]).
pub fn records(run: &[u8]) -> impl Iterator<Item = &[u8]> {
    ring_records(run).flat_map(crate::record::split)
}

/// The ring records of a run of ring bytes, in order, without the
/// discarded ones: what the kernel framed, a batch of records as one. A
/// header that does not fit in the run ends the walk.
pub fn ring_records(run: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut at = 0;
    std::iter::from_fn(move || loop {
        let (next, record) = ring_record_at(run, at)?;
        at = next;
        if record.is_some() {
            return record;
        }
    })
}

/// The ring record framed at offset `at` of a run of ring bytes (`None`
/// for a discarded one) and the offset of the next, for a reader that
/// walks a run in steps; `None` when no whole record starts at `at`.
pub fn ring_record_at(run: &[u8], at: usize) -> Option<(usize, Option<&[u8]>)> {
    let header = u32::from_ne_bytes(run.get(at..at + 4)?.try_into().ok()?);
    let len = (header & !(BUSY | DISCARD)) as usize;
    let record = run.get(at + HEADER_BYTES..at + HEADER_BYTES + len)?;
    let kept = header & (BUSY | DISCARD) == 0;
    Some((at + framed_len(len), kept.then_some(record)))
}

/// One mapped ring.
#[derive(Debug)]
pub struct RingMap {
    /// The consumer page: `consumer_pos` at its start.
    consumer: MmapRaw,
    /// The producer page (`producer_pos` at its start), then the data area
    /// twice.
    producer: MmapRaw,
    page: usize,
    size: usize,
}

impl RingMap {
    /// Maps the ring `fd` of `size` bytes (a power of two, a multiple of
    /// `page`, the page size).
    pub fn new(fd: BorrowedFd<'_>, size: usize, page: usize) -> io::Result<Self> {
        let raw = fd.as_raw_fd();
        let consumer = MmapOptions::new().len(page).map_raw(raw)?;
        let producer = MmapOptions::new()
            .offset(page as u64)
            .len(page + 2 * size)
            .map_raw_read_only(raw)?;
        Ok(RingMap {
            consumer,
            producer,
            page,
            size,
        })
    }

    fn consumer_pos(&self) -> &AtomicU64 {
        // SAFETY: the mapping is a whole page, page-aligned, writable, and
        // lives as long as `self`; the kernel reads the position
        // concurrently, which is what an atomic models.
        unsafe { AtomicU64::from_ptr(self.consumer.as_mut_ptr().cast()) }
    }

    /// The producer position, loaded with acquire ordering: every record
    /// byte before it that is not busy is visible after this load.
    fn producer_pos(&self) -> u64 {
        // SAFETY: the first page of the read-only mapping holds the
        // producer position, aligned, for as long as `self` lives; the
        // kernel writes it concurrently. The atomic is only ever loaded,
        // which on the targets Linux's BPF runs on is a plain load
        // instruction (it never writes the read-only page).
        unsafe { AtomicU64::from_ptr(self.producer.as_mut_ptr().cast()) }.load(Ordering::Acquire)
    }

    /// The data area, twice: `2 * size` bytes.
    fn data(&self) -> *const u8 {
        // SAFETY: the mapping is `page + 2 * size` bytes long.
        unsafe { self.producer.as_ptr().add(self.page) }
    }

    /// The header at ring position `pos`, loaded with acquire ordering (the
    /// kernel clears its busy bit with a release store when the record is
    /// committed).
    fn header(&self, pos: u64) -> u32 {
        let at = (pos as usize) & (self.size - 1);
        // SAFETY: `at` < `size` and headers are 8-byte aligned inside the
        // data area, which lives as long as `self`; loaded only (see
        // `producer_pos`).
        unsafe { AtomicU32::from_ptr(self.data().add(at).cast_mut().cast()) }
            .load(Ordering::Acquire)
    }

    /// The committed records from the consumer position on, at most `max`
    /// bytes of whole records, as one run of ring bytes ([`records`]
    /// walks it), and the position after them (for
    /// [`RingMap::consume`]); `None` when there are none.
    pub fn pending(&self, max: usize) -> Option<(&[u8], u64)> {
        let start = self.consumer_pos().load(Ordering::Relaxed);
        let producer = self.producer_pos();
        let mut end = start;
        while end < producer {
            let header = self.header(end);
            if header & BUSY != 0 {
                break;
            }
            let next = end + framed_len((header & !(BUSY | DISCARD)) as usize) as u64;
            if next - start > max as u64 || next > producer {
                break;
            }
            end = next;
        }
        if end == start {
            return None;
        }
        let at = (start as usize) & (self.size - 1);
        // SAFETY: the data area is mapped twice in a row, so `at + len`
        // with `len` ≤ `size` stays inside the mapping; these bytes are
        // committed records the kernel does not write until `consume`
        // moves the consumer position past them.
        let run =
            unsafe { std::slice::from_raw_parts(self.data().add(at), (end - start) as usize) };
        Some((run, end))
    }

    /// Hands the bytes before `to` (a position [`RingMap::pending`] gave)
    /// back to the kernel.
    pub fn consume(&self, to: u64) {
        let pos = self.consumer_pos();
        if to > pos.load(Ordering::Relaxed) {
            pos.store(to, Ordering::Release);
        }
    }

    /// The ring's size, bytes: the most one run can hold.
    pub fn size(&self) -> usize {
        self.size
    }
}

#[cfg(test)]
mod tests {
    use super::{framed_len, records, ring_records, BUSY, DISCARD};

    fn frame(out: &mut Vec<u8>, record: &[u8], flags: u32) {
        let end = out.len() + framed_len(record.len());
        out.extend_from_slice(&(record.len() as u32 | flags).to_ne_bytes());
        out.extend_from_slice(&0u32.to_ne_bytes());
        out.extend_from_slice(record);
        out.resize(end, 0);
    }

    #[test]
    fn a_run_yields_its_records_in_order_without_the_discarded_ones() {
        let mut run = Vec::new();
        frame(&mut run, &[1; 32], 0);
        frame(&mut run, &[2; 20], DISCARD);
        frame(&mut run, &[3; 36], 0);
        let got: Vec<&[u8]> = ring_records(&run).collect();
        assert_eq!(got, vec![&[1u8; 32][..], &[3u8; 36][..]]);
        assert_eq!(framed_len(36), 48);
        // A busy header (never in a run `pending` handed out) is skipped
        // like a discarded one; a record cut short ends the walk.
        let mut cut = Vec::new();
        frame(&mut cut, &[4; 8], BUSY);
        frame(&mut cut, &[5; 8], 0);
        cut.extend_from_slice(&(64u32).to_ne_bytes());
        cut.extend_from_slice(&[0; 12]);
        assert_eq!(ring_records(&cut).collect::<Vec<_>>(), vec![&[5u8; 8][..]]);
        // A batch of two records is one ring record and two records.
        let mut batch = Vec::new();
        frame(&mut batch, &[1; 64], 0);
        assert_eq!(ring_records(&batch).count(), 1);
        assert_eq!(records(&batch).collect::<Vec<_>>(), vec![&[1u8; 32][..]; 2]);
    }
}
