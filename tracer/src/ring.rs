//! One perf ring buffer: the kernel writes records at `data_head`, we read
//! them up to there and hand the space back by moving `data_tail`.
//!
//! Invariant: `data_head` is loaded with acquire ordering before any record
//! byte is read, and `data_tail` is stored with release ordering after the
//! last byte of the consumed records was read, so the kernel never
//! overwrites a record while it is being read. The drain thread copies the
//! bytes out whole ([`Ring::drain_into`]); [`read_records`] walks them, and
//! copies a record that wraps around the end of a ring into a scratch
//! buffer so that callers always see one contiguous slice.

use std::sync::atomic::{AtomicU64, Ordering};

use memmap2::{MmapOptions, MmapRaw};
use perf_event_open_sys::bindings::perf_event_mmap_page;

use crate::sys::{PerfEvent, SysError};

/// A mapped ring buffer.
#[derive(Debug)]
pub struct Ring {
    map: MmapRaw,
    data_offset: usize,
    data_size: usize,
}

/// The page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory effects.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

impl Ring {
    /// Maps the ring of `event` with `data_bytes` of data (a power of two
    /// number of pages) after the control page.
    pub fn map(event: &PerfEvent, data_bytes: usize) -> Result<Self, SysError> {
        let page = page_size();
        let map = MmapOptions::new()
            .len(page + data_bytes)
            .map_raw(event.fd())
            .map_err(|source| SysError {
                call: format!("mmap of a {} KiB perf ring", data_bytes / 1024),
                source,
            })?;
        let header = map.as_mut_ptr() as *const perf_event_mmap_page;
        // SAFETY: the first page of the mapping is the kernel's control page,
        // valid for as long as `map` lives; these fields are set once at mmap.
        let (off, size) = unsafe { ((*header).data_offset, (*header).data_size) };
        let (data_offset, data_size) = if size == 0 {
            (page, data_bytes)
        } else {
            (off as usize, size as usize)
        };
        Ok(Ring {
            map,
            data_offset,
            data_size,
        })
    }

    fn control(&self) -> (&AtomicU64, &AtomicU64) {
        let header = self.map.as_mut_ptr() as *mut perf_event_mmap_page;
        // SAFETY: the control page lives as long as `self.map`; `data_head`
        // and `data_tail` are naturally aligned u64s shared with the kernel,
        // which is exactly what AtomicU64 models.
        unsafe {
            (
                AtomicU64::from_ptr(std::ptr::addr_of_mut!((*header).data_head)),
                AtomicU64::from_ptr(std::ptr::addr_of_mut!((*header).data_tail)),
            )
        }
    }

    /// Moves the bytes of every complete record in the ring, oldest first,
    /// into the buffer `place` gives for their length, then releases them
    /// to the kernel. Returns the number of bytes moved: 0 when the ring is
    /// empty or `place` had no room (the bytes then stay in the ring).
    /// (The drain thread's copy: [`read_records`] walks them later, as a
    /// ring that does not wrap.)
    pub fn drain_into<'a>(&mut self, place: impl FnOnce(usize) -> Option<&'a mut [u8]>) -> usize {
        let (head_a, tail_a) = self.control();
        let head = head_a.load(Ordering::Acquire);
        let tail = tail_a.load(Ordering::Relaxed);
        let size = self.data_size as u64;
        let n = head.saturating_sub(tail).min(size) as usize;
        if n == 0 {
            return 0;
        }
        let Some(out) = place(n).filter(|o| o.len() >= n) else {
            return 0;
        };
        // SAFETY: the data area is `data_size` bytes at `data_offset` inside
        // the mapping; only bytes before `head` (published by the acquire
        // load above) are read, and the kernel does not write them until the
        // tail store below releases them.
        let data = unsafe {
            std::slice::from_raw_parts(self.map.as_ptr().add(self.data_offset), self.data_size)
        };
        let pos = (tail % size) as usize;
        let first = n.min(data.len() - pos);
        out[..first].copy_from_slice(&data[pos..pos + first]);
        out[first..n].copy_from_slice(&data[..n - first]);
        tail_a.store(tail + n as u64, Ordering::Release);
        n
    }

    /// The ring's data size in bytes: the most one [`Ring::drain_into`]
    /// moves.
    pub fn data_size(&self) -> usize {
        self.data_size
    }
}

/// Walks the records of a ring's data area from `tail` to `head` (positions
/// that grow without bound; the data area is indexed modulo its length),
/// calls `f` with each, and returns the new tail. A record that wraps around
/// the end is copied into `scratch` first. A damaged header (size under 8 or
/// past `head`) ends the walk at `head`, so a bad ring is skipped, never
/// looped on.
pub fn read_records(
    data: &[u8],
    mut tail: u64,
    head: u64,
    scratch: &mut Vec<u8>,
    mut f: impl FnMut(&[u8]),
) -> u64 {
    let size = data.len() as u64;
    if size == 0 {
        return head;
    }
    while tail < head {
        let pos = (tail % size) as usize;
        // The header is 8-byte aligned and never wraps; its size field is at byte 6.
        let len = match data.get(pos + 6..pos + 8) {
            Some(b) => u16::from_ne_bytes([b[0], b[1]]) as usize,
            None => 0,
        };
        if len < 8 || tail + len as u64 > head || len > data.len() {
            return head;
        }
        if pos + len <= data.len() {
            f(&data[pos..pos + len]);
        } else {
            let first = data.len() - pos;
            scratch.clear();
            scratch.extend_from_slice(&data[pos..]);
            scratch.extend_from_slice(&data[..len - first]);
            f(scratch);
        }
        tail += len as u64;
    }
    tail
}

#[cfg(test)]
mod tests {
    use super::read_records;

    /// Writes a record of `len` bytes (header + filler `tag`) at `pos` of a ring.
    fn put(ring: &mut [u8], pos: u64, len: u16, tag: u8) {
        let n = ring.len() as u64;
        let mut rec = vec![tag; len as usize];
        rec[0..4].copy_from_slice(&9u32.to_ne_bytes());
        rec[6..8].copy_from_slice(&len.to_ne_bytes());
        for (i, b) in rec.iter().enumerate() {
            ring[((pos + i as u64) % n) as usize] = *b;
        }
    }

    #[test]
    fn records_are_read_in_order_including_one_that_wraps() {
        let mut ring = vec![0u8; 64];
        // Positions run past the ring size: 40..56 fits, 56..80 wraps to 0..16.
        put(&mut ring, 40, 16, 1);
        put(&mut ring, 56, 24, 2);
        put(&mut ring, 80, 8, 3);
        let mut seen = Vec::new();
        let mut scratch = Vec::new();
        let tail = read_records(&ring, 40, 88, &mut scratch, |r| seen.push((r.len(), r[4])));
        assert_eq!(tail, 88);
        assert_eq!(seen, vec![(16, 1), (24, 2), (8, 3)]);
    }

    #[test]
    fn a_record_running_past_head_is_damage_and_skipped() {
        let mut ring = vec![0u8; 64];
        put(&mut ring, 0, 16, 1);
        put(&mut ring, 16, 32, 2);
        let mut n = 0;
        // The kernel publishes whole records only, so a record that runs
        // past head means a damaged ring: the walk stops at head.
        let tail = read_records(&ring, 0, 40, &mut Vec::new(), |_| n += 1);
        assert_eq!((tail, n), (40, 1));
    }

    #[test]
    fn a_damaged_header_skips_to_head_instead_of_looping() {
        let ring = vec![0u8; 64];
        let mut n = 0;
        assert_eq!(read_records(&ring, 8, 48, &mut Vec::new(), |_| n += 1), 48);
        assert_eq!(n, 0);
    }
}
