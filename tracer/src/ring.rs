//! One perf ring buffer: the kernel writes records at `data_head`, we read
//! them up to there and hand the space back by moving `data_tail`.
//!
//! Invariant: `data_head` is loaded with acquire ordering before any record
//! byte is read, and `data_tail` is stored with release ordering after the
//! last byte of the consumed records was read, so the kernel never
//! overwrites a record while it is being read. A record that wraps around the
//! end of the ring is copied into a scratch buffer so that callers always see
//! one contiguous slice.

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
    scratch: Vec<u8>,
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
            scratch: Vec::new(),
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

    /// Calls `f` with every complete record in the ring, oldest first (each
    /// slice starts with the 8-byte `perf_event_header`), then releases them
    /// to the kernel. Returns the number of bytes consumed.
    pub fn drain(&mut self, mut f: impl FnMut(&[u8])) -> usize {
        let mut scratch = std::mem::take(&mut self.scratch);
        let (head_a, tail_a) = self.control();
        let head = head_a.load(Ordering::Acquire);
        let mut tail = tail_a.load(Ordering::Relaxed);
        let start = tail;
        let size = self.data_size as u64;
        // SAFETY: the data area is `data_size` bytes at `data_offset` inside the mapping.
        let data = unsafe {
            std::slice::from_raw_parts(self.map.as_ptr().add(self.data_offset), self.data_size)
        };
        while tail < head {
            let pos = (tail % size) as usize;
            // The header is 8-byte aligned and never wraps; its size field is at byte 6.
            let len = u16::from_ne_bytes([data[pos + 6], data[pos + 7]]) as usize;
            if len < 8 || tail + len as u64 > head {
                // A damaged ring: give everything back rather than loop.
                tail = head;
                break;
            }
            if pos + len <= self.data_size {
                f(&data[pos..pos + len]);
            } else {
                let first = self.data_size - pos;
                scratch.clear();
                scratch.extend_from_slice(&data[pos..]);
                scratch.extend_from_slice(&data[..len - first]);
                f(&scratch);
            }
            tail += len as u64;
        }
        tail_a.store(tail, Ordering::Release);
        let consumed = (tail - start) as usize;
        self.scratch = scratch;
        consumed
    }
}
