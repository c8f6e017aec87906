//! Perf maps (`/tmp/perf-PID.map`): the names a JIT compiler gives the code
//! it generates (one line per blob: `START SIZE name`, hex), written by the
//! JVM agent's light mode or by any runtime that follows perf's
//! convention. blazesym reads them only for a live process; the resolver
//! runs after the window, when a JVM may have exited, so it reads the file.
//!
//! Invariant: lookups see the last blob written for an address (a JIT
//! reuses code space), as perf does. The JVM agent writes, after a compiled
//! method's line, lines for the call sites inside methods it inlined, named
//! `Outer.m()->Inner.n()` ([`INLINED`]): later, so they win where they lie.

use std::path::Path;

use idleflow_format::files::{self, Untrusted};

/// The longest perf map read: a JVM that compiled a million methods writes
/// about 100 MB.
pub const LIMIT: u64 = 512 << 20;

/// What joins a chain of inlined methods in a perf-map name, outermost
/// first (the JVM agent's `perfmap::INLINED`).
pub const INLINED: &str = "->";

/// One process's perf map.
#[derive(Debug, Default)]
pub struct PerfMap {
    /// Sorted by start, then line.
    blobs: Vec<Blob>,
    /// `reach[i]`: the largest end of `blobs[..=i]`, so that a lookup
    /// stops where no earlier blob reaches the address.
    reach: Vec<u64>,
}

/// One line of a perf map: a blob of generated code.
#[derive(Debug)]
struct Blob {
    start: u64,
    end: u64,
    /// Its line number: a later line wins where blobs overlap.
    line: usize,
    name: String,
}

impl PerfMap {
    /// Reads `path`, written by process `pid` (a runtime that may be
    /// hostile: `idleflow_format::files::read_untrusted`): never through a
    /// link, a regular file of root's, idleflow's or `pid`'s user, at most
    /// [`LIMIT`] bytes (as perf reads only maps of root's or its user's);
    /// why not otherwise. Bytes that are not UTF-8 are replaced.
    pub fn read_untrusted(path: &Path, pid: u32) -> Result<Self, Untrusted> {
        let owners: Vec<u32> = files::process_uid(pid).into_iter().collect();
        let bytes = files::read_untrusted(path, &owners, LIMIT)?;
        Ok(Self::parse(&String::from_utf8_lossy(&bytes)))
    }

    /// Parses a perf map's text; lines that do not parse are skipped.
    pub fn parse(text: &str) -> Self {
        let mut blobs: Vec<Blob> = text
            .lines()
            .enumerate()
            .filter_map(|(line, l)| {
                let mut f = l.splitn(3, ' ');
                let start = u64::from_str_radix(f.next()?.trim_start_matches("0x"), 16).ok()?;
                let size = u64::from_str_radix(f.next()?.trim_start_matches("0x"), 16).ok()?;
                let name = f.next()?.trim().to_string();
                Some(Blob {
                    start,
                    end: start.checked_add(size)?,
                    line,
                    name,
                })
            })
            .collect();
        blobs.sort_by_key(|b| (b.start, b.line));
        let reach = blobs
            .iter()
            .scan(0, |r, b| {
                *r = b.end.max(*r);
                Some(*r)
            })
            .collect();
        PerfMap { blobs, reach }
    }

    /// The name of the blob that holds `addr`, and the blob's start: of the
    /// blobs that hold it, the one written last.
    pub fn find(&self, addr: u64) -> Option<(u64, &str)> {
        let i = self.blobs.partition_point(|b| b.start <= addr);
        // Back from the last blob that starts at or before `addr`, as long
        // as some blob before reaches past it (a method's line lies behind
        // the lines of its inlined call sites).
        (0..i)
            .rev()
            .take_while(|&j| self.reach[j] > addr)
            .map(|j| &self.blobs[j])
            .filter(|b| addr < b.end)
            .max_by_key(|b| b.line)
            .map(|b| (b.start, b.name.as_str()))
    }

    /// Number of blobs.
    pub fn len(&self) -> usize {
        self.blobs.len()
    }

    /// Whether it names nothing.
    pub fn is_empty(&self) -> bool {
        self.blobs.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blobs_are_found_by_address() {
        let m = PerfMap::parse(
            "7f0000001000 80 Interpreter\n\
             7f0000002000 40 LWaits$Ledger;::post\n\
             garbage line\n\
             7f0000002010 10 Lshort;::inner\n",
        );
        assert_eq!(m.len(), 3);
        assert_eq!(
            m.find(0x7f0000001010),
            Some((0x7f0000001000, "Interpreter"))
        );
        assert_eq!(m.find(0x7f0000001080), None);
        assert_eq!(m.find(0x7f0000002014).unwrap().1, "Lshort;::inner");
        assert_eq!(m.find(0x7f0000002030).unwrap().1, "LWaits$Ledger;::post");
        assert_eq!(m.find(0x10), None);
    }

    #[test]
    fn a_blob_written_later_wins_where_code_space_was_reused() {
        // A small method at 0x2010, flushed; a larger one then compiled
        // over its space from 0x2000.
        let m = PerfMap::parse(
            "2010 10 Old.small()\n\
             2000 100 New.large()\n\
             3000 10 Stub\n",
        );
        assert_eq!(m.find(0x2014), Some((0x2000, "New.large()")));
        assert_eq!(m.find(0x2004).unwrap().1, "New.large()");
        assert_eq!(m.find(0x3004).unwrap().1, "Stub");
    }

    #[test]
    fn a_method_is_found_behind_many_inlined_call_sites() {
        // A method with 200 call sites inside inlined methods, then a blob
        // past its end.
        let mut text = String::from("1000 1000 Outer.run()\n");
        for k in 0..200u64 {
            text.push_str(&format!(
                "{:x} 8 Outer.run()->Inner.get()\n",
                0x1000 + k * 16
            ));
        }
        text.push_str("3000 10 Stub\n");
        let m = PerfMap::parse(&text);
        assert_eq!(
            m.find(0x1000 + 199 * 16 + 4).unwrap().1,
            "Outer.run()->Inner.get()"
        );
        // Between call sites and after the last: the method itself.
        assert_eq!(m.find(0x1000 + 199 * 16 + 8), Some((0x1000, "Outer.run()")));
        assert_eq!(m.find(0x1f00), Some((0x1000, "Outer.run()")));
        assert_eq!(m.find(0x2000), None);
        assert_eq!(m.find(0x3008).unwrap().1, "Stub");
    }
}
