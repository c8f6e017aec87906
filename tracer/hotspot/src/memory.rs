//! Reading a process's memory from outside: [`ProcessMemory`] reads a live
//! process through `/proc/PID/mem` (positioned reads: the process is never
//! stopped, no ptrace attach), [`Snapshot`] replays regions captured
//! earlier (unit tests on real structures). Both implement [`Memory`],
//! which is all the readers above use.
//!
//! Invariant: every read is bounded by the caller's buffer; a C string is
//! read at most [`MAX_STRING`] bytes; nothing read is trusted (a target
//! can write anything into its own memory), so a failed or short read is
//! an error, never a panic.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

/// The longest C string read (a HotSpot type or field name, a symbol).
pub const MAX_STRING: usize = 4096;

/// Why memory could not be read.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// `/proc/PID/mem` could not be opened (the process is gone, or we may
    /// not read it).
    #[error("cannot open {}: {source}", .path.display())]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The range is not mapped (or the process is gone).
    #[error("cannot read {len} bytes at {addr:#x}")]
    Unmapped {
        /// Where.
        addr: u64,
        /// How many.
        len: usize,
    },
    /// A C string had no NUL within [`MAX_STRING`] bytes.
    #[error("no string end within {MAX_STRING} bytes at {0:#x}")]
    Unterminated(u64),
}

/// A source of another process's memory.
pub trait Memory {
    /// Fills `buf` with the bytes at `addr`, all of them or an error.
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError>;

    /// The little-endian u64 at `addr`.
    fn u64(&self, addr: u64) -> Result<u64, MemoryError> {
        let mut b = [0; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// The little-endian u32 at `addr`.
    fn u32(&self, addr: u64) -> Result<u32, MemoryError> {
        let mut b = [0; 4];
        self.read(addr, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    /// The little-endian u16 at `addr`.
    fn u16(&self, addr: u64) -> Result<u16, MemoryError> {
        let mut b = [0; 2];
        self.read(addr, &mut b)?;
        Ok(u16::from_le_bytes(b))
    }

    /// The NUL-terminated string at `addr` (lossy UTF-8), at most
    /// [`MAX_STRING`] bytes. Read in small chunks, so that a string near
    /// the end of a mapping is still read.
    fn c_string(&self, addr: u64) -> Result<String, MemoryError> {
        let mut out = Vec::new();
        let mut chunk = [0u8; 64];
        while out.len() < MAX_STRING {
            let at = addr
                .checked_add(out.len() as u64)
                .ok_or(MemoryError::Unterminated(addr))?;
            // Up to the next 64-byte boundary (never across a page); where
            // that fails (a snapshot's region ends sooner), a byte.
            let mut n = 64 - (at % 64) as usize;
            if self.read(at, &mut chunk[..n]).is_err() {
                n = 1;
                self.read(at, &mut chunk[..1])?;
            }
            if let Some(end) = chunk[..n].iter().position(|&b| b == 0) {
                out.extend_from_slice(&chunk[..end]);
                return Ok(String::from_utf8_lossy(&out).into_owned());
            }
            out.extend_from_slice(&chunk[..n]);
        }
        Err(MemoryError::Unterminated(addr))
    }
}

/// A live process's memory, through `/proc/PID/mem`.
#[derive(Debug)]
pub struct ProcessMemory {
    pid: u32,
    mem: File,
}

impl ProcessMemory {
    /// Opens `pid`'s memory (root, or the process's own user where ptrace
    /// is allowed).
    pub fn open(pid: u32) -> Result<Self, MemoryError> {
        let path = PathBuf::from(format!("/proc/{pid}/mem"));
        let mem = File::open(&path).map_err(|source| MemoryError::Open { path, source })?;
        Ok(Self { pid, mem })
    }

    /// The process.
    pub fn pid(&self) -> u32 {
        self.pid
    }
}

impl Memory for ProcessMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        // Addresses above i64::MAX are not a user process's.
        if addr > i64::MAX as u64 {
            return Err(MemoryError::Unmapped {
                addr,
                len: buf.len(),
            });
        }
        self.mem
            .read_exact_at(buf, addr)
            .map_err(|_| MemoryError::Unmapped {
                addr,
                len: buf.len(),
            })
    }
}

/// Regions of a process's memory captured earlier: `(address, bytes)`.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    regions: Vec<(u64, Vec<u8>)>,
}

impl Snapshot {
    /// An empty snapshot.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the bytes found at `addr`.
    pub fn add(&mut self, addr: u64, bytes: Vec<u8>) {
        self.regions.push((addr, bytes));
    }
}

impl Memory for Snapshot {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        let unmapped = MemoryError::Unmapped {
            addr,
            len: buf.len(),
        };
        let end = addr.checked_add(buf.len() as u64).ok_or(unmapped)?;
        for (start, bytes) in &self.regions {
            let stop = start + bytes.len() as u64;
            if *start <= addr && end <= stop {
                let from = (addr - start) as usize;
                buf.copy_from_slice(&bytes[from..from + buf.len()]);
                return Ok(());
            }
        }
        Err(MemoryError::Unmapped {
            addr,
            len: buf.len(),
        })
    }
}

/// A live process's memory with one range as it was earlier: a thread's
/// stack copied at a switch-out over the process's memory now. A read
/// inside the range is the copy's bytes; one across its edge is the live
/// bytes with the copy's laid over them. With `stale_below`, the rest of
/// the thread's stack above the copy, up to that address (its base), is
/// not read: the thread ran since, and what is there now may not be what
/// was there then.
#[derive(Debug)]
pub struct Overlay<'a, M: Memory> {
    /// The memory now.
    pub base: &'a M,
    /// Where the copy starts.
    pub start: u64,
    /// The copy.
    pub bytes: &'a [u8],
    /// The stack's base, when the stack above the copy is stale.
    pub stale_below: Option<u64>,
}

impl<M: Memory> Memory for Overlay<'_, M> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        let unmapped = MemoryError::Unmapped {
            addr,
            len: buf.len(),
        };
        let end = addr.checked_add(buf.len() as u64).ok_or(unmapped)?;
        let stop = self.start.saturating_add(self.bytes.len() as u64);
        if let Some(base) = self.stale_below {
            if end > stop && addr < base {
                return Err(MemoryError::Unmapped {
                    addr: addr.max(stop),
                    len: buf.len(),
                });
            }
        }
        let (from, to) = (addr.max(self.start), end.min(stop));
        if from >= to {
            return self.base.read(addr, buf);
        }
        if (from, to) != (addr, end) {
            self.base.read(addr, buf)?;
        }
        let (src, dst) = ((from - self.start) as usize, (from - addr) as usize);
        let n = (to - from) as usize;
        buf[dst..dst + n].copy_from_slice(&self.bytes[src..src + n]);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_overlay_lays_its_copy_over_the_memory_now() {
        let mut now = Snapshot::new();
        now.add(0x1000, vec![1; 32]);
        let copy = [9u8; 8];
        let o = Overlay {
            base: &now,
            start: 0x1008,
            bytes: &copy,
            stale_below: None,
        };
        assert_eq!(o.u64(0x1000).unwrap(), u64::from_le_bytes([1; 8]));
        assert_eq!(o.u64(0x1008).unwrap(), u64::from_le_bytes([9; 8]));
        // Across the copy's edges: live bytes around the copy's.
        assert_eq!(
            o.u64(0x1004).unwrap(),
            u64::from_le_bytes([1, 1, 1, 1, 9, 9, 9, 9])
        );
        assert_eq!(
            o.u64(0x100c).unwrap(),
            u64::from_le_bytes([9, 9, 9, 9, 1, 1, 1, 1])
        );
        let mut all = [0u8; 32];
        o.read(0x1000, &mut all).unwrap();
        assert_eq!(&all[8..16], &[9; 8]);
        assert_eq!(&all[16..], &[1; 16]);
        // Outside the memory, even next to the copy: an error.
        assert!(o.u64(0x1020).is_err());
        assert!(o.u64(u64::MAX - 3).is_err());
        // Inside the copy where nothing lives now: the copy.
        let empty = Snapshot::new();
        let o = Overlay {
            base: &empty,
            start: 0x1008,
            bytes: &copy,
            stale_below: None,
        };
        assert_eq!(o.u32(0x100a).unwrap(), u32::from_le_bytes([9; 4]));
        // The stack above the copy stale (its thread ran since): not read
        // up to the stack's base, read above it.
        let o = Overlay {
            base: &now,
            start: 0x1008,
            bytes: &copy,
            stale_below: Some(0x1018),
        };
        assert_eq!(o.u64(0x1008).unwrap(), u64::from_le_bytes([9; 8]));
        assert_eq!(o.u64(0x1000).unwrap(), u64::from_le_bytes([1; 8]));
        assert!(o.u64(0x100c).is_err(), "across the copy's end");
        assert!(o.u64(0x1010).is_err(), "above the copy");
        assert_eq!(o.u64(0x1018).unwrap(), u64::from_le_bytes([1; 8]));
    }

    #[test]
    fn a_snapshot_reads_inside_its_regions_only() {
        let mut s = Snapshot::new();
        s.add(0x1000, b"abc\0def".to_vec());
        assert_eq!(s.c_string(0x1000).unwrap(), "abc");
        assert_eq!(
            s.c_string(0x1004).unwrap_err().to_string(),
            "cannot read 1 bytes at 0x1007"
        );
        assert_eq!(s.u32(0x1000).unwrap(), u32::from_le_bytes(*b"abc\0"));
        assert!(s.u64(0x1000).is_err());
        assert!(s.u64(u64::MAX - 3).is_err());
    }

    #[test]
    fn our_own_memory_reads_as_it_is_and_a_hole_is_an_error() {
        let me = ProcessMemory::open(std::process::id()).unwrap();
        let word: u64 = 0x1234_5678_9abc_def0;
        let name = c"a c string";
        assert_eq!(me.u64(&word as *const u64 as u64).unwrap(), word);
        assert_eq!(me.c_string(name.as_ptr() as u64).unwrap(), "a c string");
        assert!(me.u64(8).is_err());
        assert!(me.u64(u64::MAX - 7).is_err());
    }
}
