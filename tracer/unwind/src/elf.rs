//! The parts of an ELF file the resolver needs: its unwind sections (for
//! framehop), its loadable segments (to turn a mapping's address into the
//! file's own addresses) and its build id. Each file is read once
//! ([`ElfCache`]); the unwind sections are shared by every process that
//! maps it.
//!
//! Invariant: a loaded file's sections are copies held in `Arc`s, so the
//! file may change or vanish afterwards without affecting the unwinding.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use object::{Object, ObjectSection, ObjectSegment, SegmentFlags};
use rustc_hash::FxHashMap;

/// Section bytes, shared.
pub type Bytes = Arc<[u8]>;

/// A loadable segment: file offset, virtual address and file size.
#[derive(Debug, Clone, Copy)]
struct Segment {
    offset: u64,
    vaddr: u64,
    filesz: u64,
    exec: bool,
}

/// What the resolver keeps of one ELF file.
#[derive(Debug)]
pub struct ElfFile {
    /// Where it was read.
    pub path: PathBuf,
    /// The GNU build id (empty if the file has none).
    pub build_id: Vec<u8>,
    /// Its inode.
    pub ino: u64,
    /// `.text`'s addresses.
    pub text_svma: Option<Range<u64>>,
    /// `.eh_frame`'s addresses and bytes.
    pub eh_frame: Option<(Range<u64>, Bytes)>,
    /// `.eh_frame_hdr`'s addresses and bytes.
    pub eh_frame_hdr: Option<(Range<u64>, Bytes)>,
    /// `.debug_frame`'s bytes.
    pub debug_frame: Option<Bytes>,
    /// `.got`'s addresses.
    pub got_svma: Option<Range<u64>>,
    segments: Vec<Segment>,
}

/// The longest ELF file of a user other than root that is read.
pub const LIMIT: u64 = 1 << 30;

impl ElfFile {
    /// Reads `path`: a regular file (a FIFO or a device put where a mapped
    /// file was is refused, never waited on); mapped when root owns it,
    /// read whole (at most [`LIMIT`] bytes) when another user does, who
    /// could truncate a mapped file under the reader.
    pub fn open(path: &Path) -> Result<Self, String> {
        use std::io::Read;
        use std::os::unix::fs::MetadataExt;
        let file = idleflow_format::files::open_regular(path).map_err(|e| e.to_string())?;
        let meta = file.metadata().map_err(|e| e.to_string())?;
        let ino = meta.ino();
        let mut read = Vec::new();
        let map: memmap2::Mmap;
        let bytes: &[u8] = if meta.uid() == 0 {
            // SAFETY: the map is read-only and dropped before this returns;
            // the sections kept are copied out of it. Root's files are
            // replaced by rename, not rewritten in place.
            map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| e.to_string())?;
            &map
        } else {
            (&file)
                .take(LIMIT + 1)
                .read_to_end(&mut read)
                .map_err(|e| e.to_string())?;
            if read.len() as u64 > LIMIT {
                return Err(format!("over {LIMIT} bytes"));
            }
            &read
        };
        let obj = object::File::parse(bytes).map_err(|e| format!("not an ELF file: {e}"))?;
        let range = |name: &str| {
            obj.section_by_name(name)
                .map(|s| s.address()..s.address() + s.size())
        };
        let bytes = |name: &str| -> Option<Bytes> {
            let s = obj.section_by_name(name)?;
            let d = s.uncompressed_data().ok()?;
            (!d.is_empty()).then(|| Arc::from(&*d))
        };
        let with_range =
            |name: &str| -> Option<(Range<u64>, Bytes)> { Some((range(name)?, bytes(name)?)) };
        let segments = obj
            .segments()
            .map(|s| {
                let (offset, filesz) = s.file_range();
                let exec = match s.flags() {
                    SegmentFlags::Elf { p_flags } => p_flags & object::elf::PF_X != 0,
                    _ => false,
                };
                Segment {
                    offset,
                    vaddr: s.address(),
                    filesz,
                    exec,
                }
            })
            .collect();
        Ok(ElfFile {
            path: path.to_path_buf(),
            ino,
            build_id: obj.build_id().ok().flatten().unwrap_or_default().to_vec(),
            text_svma: range(".text"),
            eh_frame: with_range(".eh_frame"),
            eh_frame_hdr: with_range(".eh_frame_hdr"),
            debug_frame: bytes(".debug_frame"),
            got_svma: range(".got"),
            segments,
        })
    }

    /// What to add to the file's virtual addresses to get the addresses of
    /// a process that mapped file offset `pgoff` at `start` (the load
    /// bias), from the segment that holds that offset.
    pub fn bias(&self, start: u64, pgoff: u64) -> Option<u64> {
        let seg = self
            .segments
            .iter()
            .filter(|s| s.offset <= pgoff + 4095 && pgoff < s.offset + s.filesz.max(1))
            .max_by_key(|s| (s.exec, s.offset))?;
        // The mapping starts at `pgoff`, which may lie before the segment's
        // own (unaligned) offset: the address of `pgoff` in the file's
        // numbering is the segment's address moved back as far.
        let vaddr_at_pgoff = seg.vaddr.wrapping_sub(seg.offset.wrapping_sub(pgoff));
        Some(start.wrapping_sub(vaddr_at_pgoff))
    }
}

/// Every ELF file read so far, by path, with why one could not be.
#[derive(Debug, Default)]
pub struct ElfCache {
    files: FxHashMap<PathBuf, Result<Arc<ElfFile>, String>>,
}

impl ElfCache {
    /// The file at `path` (read on first use), tried as `/proc/PID/root`
    /// sees it too (a process in another mount namespace), and through the
    /// process's own mapping `range` (`/proc/PID/map_files`: a file deleted
    /// or replaced since, while the process lives).
    pub fn get(&mut self, path: &str, pid: u32, range: Range<u64>) -> Result<Arc<ElfFile>, String> {
        let key = PathBuf::from(path);
        if let Some(r) = self.files.get(&key) {
            return r.clone();
        }
        let r = ElfFile::open(&key)
            .or_else(|e| {
                ElfFile::open(&PathBuf::from(format!("/proc/{pid}/root{path}"))).map_err(|_| e)
            })
            .or_else(|e| {
                let mapped = format!("/proc/{pid}/map_files/{:x}-{:x}", range.start, range.end);
                ElfFile::open(Path::new(&mapped)).map_err(|_| e)
            })
            .map(Arc::new);
        self.files.insert(key, r.clone());
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_running_test_binary_has_unwind_information_and_a_bias() {
        let exe = std::env::current_exe().unwrap();
        let elf = ElfFile::open(&exe).unwrap();
        assert!(elf.eh_frame.is_some(), "Rust binaries carry .eh_frame");
        assert!(elf.text_svma.is_some());
        // Our own mapping of the executable segment gives the bias that
        // turns this function's address into the file's.
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let here =
            the_running_test_binary_has_unwind_information_and_a_bias as *const () as usize as u64;
        let line = maps
            .lines()
            .find(|l| {
                let (r, _) = l.split_once(' ').unwrap();
                let (a, b) = r.split_once('-').unwrap();
                let (a, b) = (
                    u64::from_str_radix(a, 16).unwrap(),
                    u64::from_str_radix(b, 16).unwrap(),
                );
                (a..b).contains(&here)
            })
            .unwrap();
        let f: Vec<&str> = line.split_ascii_whitespace().collect();
        let start = u64::from_str_radix(f[0].split_once('-').unwrap().0, 16).unwrap();
        let pgoff = u64::from_str_radix(f[2], 16).unwrap();
        let bias = elf.bias(start, pgoff).unwrap();
        let svma = here - bias;
        assert!(
            elf.text_svma.as_ref().unwrap().contains(&svma),
            "{svma:#x} not in .text {:?}",
            elf.text_svma
        );
    }
}
