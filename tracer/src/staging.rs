//! The drain's staging memory: one anonymous mapping that the real-time
//! drain thread copies ring bytes into and the recorder reads them from, so
//! that the drain never asks the kernel for memory while it runs.
//!
//! Why a mapping of its own: a thread that maps, unmaps, grows or frees
//! memory may wait for the process's memory-map lock, and the recorder, at
//! ordinary priority, may hold that lock (its own allocations do) when a
//! saturated machine preempts it: the drain then waits a whole scheduler
//! round (≈ 200 ms among 130 runnable threads, longer than a ring lasts).
//! Here the memory is mapped once, before the drain starts. `MADV_DONTFORK`
//! gives the mapping flags no other mapping has, so the kernel never merges
//! a neighbour into it, and `MADV_NOHUGEPAGE` keeps khugepaged off it: a
//! page fault in it takes only its own area's lock, which nothing else
//! takes. The bytes the caller expects to use first are touched at once.
//!
//! The writer keeps to the pages already touched while it can: a region
//! that would reach past them starts at the beginning again when nothing is
//! in flight, so a recording whose reader keeps up faults no page after the
//! first ones (a first pass through the
//! whole mapping cost the recorder a page fault and a page clear per 4 KiB
//! written, 15 % of its time on `perf bench sched pipe`).
//!
//! Invariant: the writer fills the mapping in one direction, round and round;
//! it writes only bytes that are free (its position is never more than the
//! mapping's length ahead of the released position), and a region is freed
//! only when the reader releases a position past it. Regions never wrap
//! around the end (the writer skips the tail instead), so every region is
//! one slice. The hand-over between the threads (a channel) orders the
//! writer's copy before the reader's reads.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use memmap2::{Advice, MmapOptions, MmapRaw};

use crate::sys::SysError;

#[derive(Debug)]
struct Mem {
    map: MmapRaw,
    /// Every byte before this position (counted from the first byte ever
    /// written) is free again.
    released: AtomicU64,
}

impl Mem {
    fn len(&self) -> u64 {
        self.map.len() as u64
    }
}

/// Bytes the writer placed: `len` bytes at `start` (a position that grows
/// without bound; the offset in the mapping is `start % length`).
#[derive(Debug, Clone, Copy)]
pub struct Region {
    start: u64,
    len: usize,
}

/// The writing half (the drain thread).
#[derive(Debug)]
pub struct Writer {
    mem: Arc<Mem>,
    written: u64,
    /// Offsets below this were touched (prefaulted or written before).
    touched: u64,
}

/// The reading half: reads regions and frees them.
#[derive(Debug, Clone)]
pub struct Reader {
    mem: Arc<Mem>,
}

/// Maps `len` bytes (rounded up to whole pages) of staging memory and
/// touches the first `prefault` of them.
pub fn new(len: usize, prefault: usize) -> Result<(Writer, Reader), SysError> {
    let page = crate::ring::page_size();
    let len = len.max(page).div_ceil(page) * page;
    let err = |what: &str, source| SysError {
        call: format!("{what} of {} MiB of staging memory", len >> 20),
        source,
    };
    let map = MmapOptions::new()
        .len(len)
        .no_reserve_swap()
        .map_anon()
        .map_err(|e| err("mmap", e))?;
    map.advise(Advice::DontFork)
        .map_err(|e| err("madvise(MADV_DONTFORK)", e))?;
    // Without transparent huge pages the advice is refused; nothing to do.
    let _ = map.advise(Advice::NoHugePage);
    let map = MmapRaw::from(map);
    let touched = len.min(prefault);
    // SAFETY: the mapping is `len` bytes, writable, and not shared yet.
    unsafe {
        let p = map.as_mut_ptr();
        for off in (0..touched).step_by(page) {
            p.add(off).write_volatile(0xa5);
        }
    }
    let mem = Arc::new(Mem {
        map,
        released: AtomicU64::new(0),
    });
    Ok((
        Writer {
            mem: Arc::clone(&mem),
            written: 0,
            touched: touched as u64,
        },
        Reader { mem },
    ))
}

impl Writer {
    /// The mapping's length: the most bytes in flight.
    pub fn capacity(&self) -> usize {
        self.mem.len() as usize
    }

    /// Bytes written and not released yet.
    pub fn in_flight(&self) -> u64 {
        self.written - self.mem.released.load(Ordering::Acquire)
    }

    /// The position after everything written so far: release it once every
    /// region written before it was read.
    pub fn position(&self) -> u64 {
        self.written
    }

    /// `n` contiguous free bytes to fill, and where they are, or `None` while
    /// the reader holds too much for them. The region counts as written
    /// whether or not the caller fills it all.
    pub fn place(&mut self, n: usize) -> Option<(Region, &mut [u8])> {
        let len = self.mem.len();
        if n == 0 || n as u64 > len {
            return None;
        }
        let off = self.written % len;
        let mut released = self.mem.released.load(Ordering::Acquire);
        // A region that would cross the end starts at the beginning again;
        // the skipped tail is freed with the region after it.
        let skip = if off + n as u64 > len {
            len - off
        } else if off + n as u64 > self.touched && off > 0 && released == self.written {
            // One that would reach untouched pages does too when nothing is
            // in flight; the skipped tail, holding nothing, is freed at once
            // (so it never takes room from a burst that follows).
            released = self.written + (len - off);
            self.mem.released.fetch_max(released, Ordering::AcqRel);
            len - off
        } else {
            0
        };
        if self.written + skip + n as u64 - released > len {
            return None;
        }
        self.written += skip;
        let start = self.written;
        self.written += n as u64;
        let at = (start % len) as usize;
        self.touched = self.touched.max((at + n) as u64);
        // SAFETY: [at, at + n) lies inside the mapping (no wrap, by `skip`),
        // and is free: the reader released every position up to
        // `written - len`, and no earlier region handed out overlaps it
        // (they all lie in [released, start)). `&mut self` keeps this the
        // only mutable view the writer gives out.
        let bytes = unsafe { std::slice::from_raw_parts_mut(self.mem.map.as_mut_ptr().add(at), n) };
        Some((Region { start, len: n }, bytes))
    }
}

impl Reader {
    /// The bytes of a region this mapping's writer placed.
    ///
    /// The caller keeps the region unreleased while it reads: a
    /// [`Reader::release`] past it lets the writer fill it again.
    pub fn bytes(&self, r: &Region) -> &[u8] {
        let len = self.mem.len();
        let at = (r.start % len) as usize;
        debug_assert!(at + r.len <= len as usize);
        // SAFETY: the writer placed [at, at + r.len) inside the mapping and
        // handed it over through a channel after filling it; it does not
        // write it again before a release past `r.start + r.len`.
        unsafe { std::slice::from_raw_parts(self.mem.map.as_ptr().add(at), r.len) }
    }

    /// Frees every byte before `position` (a [`Writer::position`]); positions
    /// only move on.
    pub fn release(&self, position: u64) {
        self.mem.released.fetch_max(position, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_never_wrap_and_never_overlap_unreleased_bytes() {
        let page = crate::ring::page_size();
        let (mut w, r) = new(4 * page, page).unwrap();
        assert_eq!(w.capacity(), 4 * page);
        let (a, bytes) = w.place(3 * page).unwrap();
        bytes.fill(1);
        // Only one page is free, and the next 2 pages would cross the end.
        assert!(w.place(2 * page).is_none());
        let end_a = w.position();
        assert!(r.bytes(&a).iter().all(|&b| b == 1));
        r.release(end_a);
        // Now the tail page is skipped and the region starts at offset 0.
        let (b, bytes) = w.place(2 * page).unwrap();
        bytes.fill(2);
        assert_eq!(b.start % (4 * page) as u64, 0);
        assert_eq!(w.in_flight(), 3 * page as u64);
        assert!(r.bytes(&b).iter().all(|&x| x == 2));
        assert!(w.place(2 * page + 1).is_none());
        assert!(w.place(5 * page).is_none(), "larger than the mapping");
        r.release(w.position());
        assert_eq!(w.in_flight(), 0);
    }

    #[test]
    fn a_reader_that_keeps_up_keeps_the_writer_on_touched_pages() {
        let page = crate::ring::page_size();
        let (mut w, r) = new(8 * page, 2 * page).unwrap();
        let mut offsets = Vec::new();
        for _ in 0..20 {
            let (region, bytes) = w.place(page).unwrap();
            bytes.fill(3);
            offsets.push(region.start % (8 * page) as u64 / page as u64);
            r.release(w.position());
        }
        assert!(offsets.iter().all(|&o| o < 2), "{offsets:?}");
        // A reader that holds bytes pushes the writer onto new pages, and
        // those stay in use afterwards.
        let (held, _) = w.place(page).unwrap();
        let (_, _) = w.place(page).unwrap();
        let (third, _) = w.place(page).unwrap();
        assert!(third.start % (8 * page) as u64 >= 2 * page as u64);
        r.release(held.start + page as u64);
        r.release(w.position());
        let mut high = 0;
        for _ in 0..20 {
            let (region, _) = w.place(page).unwrap();
            high = high.max(region.start % (8 * page) as u64 / page as u64);
            r.release(w.position());
        }
        assert!(high < 4, "touched pages only: {high}");
    }
}
