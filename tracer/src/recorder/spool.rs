//! The deferred merge (`IDLEFLOW_DEFER=1`; a measurement of what the
//! default could become, issue 39): while the window is open, the recorder
//! appends each drained round to a spool file beside the recording, as the
//! rings held it (perf's bytes and the eBPF programs', with the round's
//! start and hold-back), and reads from it only what must be known live:
//! the processes that ran `exec` (the JVM watcher looks at them), the
//! watched JVMs' blocking switch-outs (the every-wait policy) and, for the
//! status line, the switches and perf's lost records. When the window
//! closes, [`super::Recorder::stop`] reads the rounds back through the path
//! a live round takes, so the recording is the one the live path writes;
//! the merge, the folds, the stacks and the encoding cost nothing inside
//! the window.
//!
//! Only with the eBPF source, a recording to a file, no flight recorder and
//! no work area (those look at every record as the window runs; the work
//! area is attached before the file is begun).
//!
//! Invariant: rounds are read back in the order they were drained, each with
//! the start and hold-back it was drained with; the spool is private to its
//! owner and removed once read back, or when it is dropped unread (its
//! writing failed: what it held cannot become a recording). Not yet: a
//! recorder killed inside the window leaves the spool, not a readable
//! recording.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, Write};
use std::path::{Path, PathBuf};

use idleflow_bpf::SchedEvent;
use idleflow_format::files::Staged;

use super::{BlockingCount, RecorderError};
use crate::parse::{parse, PerfRecord};
use crate::ring::read_records;

/// Bytes the spool's writer gathers before a `write(2)`.
const BUFFER: usize = 1 << 20;

/// The rounds drained so far, in a file beside the recording.
pub(super) struct Spool {
    /// Its file (`NAME.spool.RANDOM.partial` beside the recording's), never
    /// renamed: removed once read back.
    staged: Staged,
    path: PathBuf,
    /// `None` once read back.
    out: Option<BufWriter<File>>,
    bytes: u64,
    /// Switches spooled (the status line's dispatches).
    pub(super) switches: u64,
    /// perf's lost records seen in the spooled rounds (the status line's).
    pub(super) lost: u64,
}

/// One round read back: its start, its hold-back and its chunks.
pub(super) struct SpooledRound<'a> {
    pub(super) start_ns: u64,
    pub(super) held_from: u64,
    pub(super) chunks: Vec<(usize, &'a [u8])>,
}

/// Reads a spool's rounds back, one at a time.
pub(super) struct SpoolReader {
    staged: Staged,
    path: PathBuf,
    input: BufReader<File>,
    heads: Vec<(usize, usize)>,
    bytes: Vec<u8>,
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> RecorderError + 'a {
    move |source| RecorderError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

impl Spool {
    /// Whether the deferred merge is asked for (`IDLEFLOW_DEFER=1`).
    pub(super) fn asked() -> bool {
        std::env::var_os("IDLEFLOW_DEFER").is_some_and(|v| v == "1")
    }

    /// A new spool beside the recording `recording` is staged as.
    pub(super) fn create(recording: &Staged) -> Result<Spool, RecorderError> {
        let mut name = recording.path().file_name().unwrap_or_default().to_owned();
        name.push(".spool");
        let (file, staged) = recording.dir().stage(&name).map_err(RecorderError::Files)?;
        let path = staged.temp_path();
        Ok(Spool {
            staged,
            out: Some(BufWriter::with_capacity(BUFFER, file)),
            path,
            bytes: 0,
            switches: 0,
            lost: 0,
        })
    }

    /// Bytes spooled so far.
    pub(super) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Appends one round: its start, its hold-back, then each chunk's ring
    /// slot and length, then the chunks' bytes.
    pub(super) fn append(
        &mut self,
        start_ns: u64,
        held_from: u64,
        chunks: &[(usize, &[u8])],
    ) -> Result<(), RecorderError> {
        let mut head = Vec::with_capacity(64);
        head.extend_from_slice(&start_ns.to_le_bytes());
        head.extend_from_slice(&held_from.to_le_bytes());
        head.extend_from_slice(&(chunks.len() as u32).to_le_bytes());
        for &(slot, bytes) in chunks {
            head.extend_from_slice(&(slot as u32).to_le_bytes());
            head.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        }
        let path = &self.path;
        let Some(out) = self.out.as_mut() else {
            unreachable!("a spool is written only before it is read back")
        };
        out.write_all(&head).map_err(io("cannot write", path))?;
        self.bytes += head.len() as u64;
        for &(_, bytes) in chunks {
            out.write_all(bytes).map_err(io("cannot write", path))?;
            self.bytes += bytes.len() as u64;
        }
        Ok(())
    }

    /// Ends the writing; the rounds can be read back.
    pub(super) fn read_back(mut self) -> Result<SpoolReader, RecorderError> {
        let path = self.path.clone();
        // On an error the spool is dropped, and its file with it.
        let Some(out) = self.out.as_mut() else {
            unreachable!("a spool is read back once")
        };
        out.flush().map_err(io("cannot write", &path))?;
        let input = self
            .out
            .take()
            .expect("checked above")
            .into_inner()
            .map_err(|e| e.into_error())
            .and_then(|mut f| f.rewind().map(|()| f))
            .map_err(|e| {
                self.staged.discard();
                io("cannot read", &path)(e)
            })?;
        Ok(SpoolReader {
            staged: self.staged.clone(),
            input: BufReader::with_capacity(BUFFER, input),
            path,
            heads: Vec::new(),
            bytes: Vec::new(),
        })
    }
}

impl SpoolReader {
    /// The next round, or `None` after the last.
    pub(super) fn next_round(&mut self) -> Result<Option<SpooledRound<'_>>, RecorderError> {
        let mut fixed = [0u8; 20];
        match self.input.read_exact(&mut fixed) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(io("cannot read", &self.path)(e)),
        }
        let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
        let start_ns = u64_at(&fixed, 0);
        let held_from = u64_at(&fixed, 8);
        let n = u32::from_le_bytes(fixed[16..20].try_into().unwrap()) as usize;
        let mut heads = vec![0u8; n * 12];
        self.input
            .read_exact(&mut heads)
            .map_err(io("cannot read", &self.path))?;
        self.heads.clear();
        let mut total = 0usize;
        for h in heads.chunks_exact(12) {
            let slot = u32::from_le_bytes(h[..4].try_into().unwrap()) as usize;
            let len = u64_at(h, 4) as usize;
            self.heads.push((slot, len));
            total += len;
        }
        self.bytes.resize(total, 0);
        self.input
            .read_exact(&mut self.bytes)
            .map_err(io("cannot read", &self.path))?;
        let mut at = 0;
        let mut chunks = Vec::with_capacity(n);
        for &(slot, len) in &self.heads {
            chunks.push((slot, &self.bytes[at..at + len]));
            at += len;
        }
        Ok(Some(SpooledRound {
            start_ns,
            held_from,
            chunks,
        }))
    }
}

impl Drop for SpoolReader {
    fn drop(&mut self) {
        self.staged.discard();
    }
}

impl Drop for Spool {
    /// A spool dropped before it was read back (its writing or the replay's
    /// start failed) leaves no file: its rounds cannot become a recording.
    fn drop(&mut self) {
        if self.out.take().is_some() {
            self.staged.discard();
        }
    }
}

impl super::Recorder {
    /// Appends drained `round` to the spool, reading from it what must be
    /// known live (see the module's comment).
    pub(super) fn spool_round(&mut self, round: &crate::drain::Round) -> Result<(), RecorderError> {
        let perf_rings = self.rings.len();
        let Some(spool) = self.spool.as_mut() else {
            return Ok(());
        };
        let (layout, renamed, blocking) = (&self.layout, &mut self.renamed, &mut self.blocking);
        let mut scratch = Vec::new();
        let chunks: Vec<(usize, &[u8])> = round.chunks().collect();
        for &(slot, bytes) in &chunks {
            if slot < perf_rings {
                read_records(bytes, 0, bytes.len() as u64, &mut scratch, |r| {
                    match parse(r, layout) {
                        // Bounded for a caller that never asks.
                        Some(PerfRecord::Comm { pid, tid, .. })
                            if pid == tid && renamed.len() < 1 << 16 =>
                        {
                            renamed.push(pid)
                        }
                        Some(PerfRecord::Lost { count, .. }) => spool.lost += count,
                        _ => {}
                    }
                });
                continue;
            }
            for r in idleflow_bpf::records(bytes) {
                if let Ok(SchedEvent::Switch(sw)) = idleflow_bpf::decode(r) {
                    spool.switches += 1;
                    if !sw.preempt && sw.prev_tid != 0 && !blocking.is_empty() {
                        BlockingCount::count(blocking, sw.prev_tgid, sw.prev_tid);
                    }
                }
            }
        }
        spool.append(round.start_ns(), round.held_from(), &chunks)
    }

    /// Reads the spooled rounds back through the live path, in the order
    /// drained, and ends the deferral (nothing to do without a spool).
    pub(super) fn replay_spool(&mut self) -> Result<(), RecorderError> {
        let Some(spool) = self.spool.take() else {
            return Ok(());
        };
        let cpu_from = crate::sys::thread_cpu_ns();
        let bytes = spool.bytes();
        let mut rounds = spool.read_back()?;
        while let Some(r) = rounds.next_round()? {
            let SpooledRound {
                start_ns,
                held_from,
                chunks,
            } = r;
            self.process(start_ns, held_from, &chunks)?;
        }
        self.summary.deferred_merge = Some(idleflow_format::DeferredMerge {
            cpu_ns: crate::sys::thread_cpu_ns().saturating_sub(cpu_from),
            bytes,
        });
        Ok(())
    }

    /// perf's records lost so far, on every CPU (those still in the spool
    /// included).
    pub fn lost_so_far(&self) -> u64 {
        self.rings.iter().map(|r| r.lost).sum::<u64>() + self.spool.as_ref().map_or(0, |s| s.lost)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rounds come back in the order spooled, with their starts, hold-backs
    /// and ring slots; the file is gone once read back.
    #[test]
    fn rounds_come_back_in_order_and_the_file_goes() {
        let dir = tempfile::tempdir().unwrap();
        let (_, recording) = idleflow_format::files::stage(&dir.path().join("r.idleflow")).unwrap();
        let mut spool = Spool::create(&recording).unwrap();
        let file = spool.path.clone();
        assert!(file.to_str().unwrap().contains("/r.idleflow.spool."));
        type Round = (u64, u64, Vec<(usize, Vec<u8>)>);
        let rounds: Vec<Round> = (0..5u8)
            .map(|i| {
                let bytes = |n: usize| {
                    (0..n)
                        .map(|k| i.wrapping_mul(31).wrapping_add(k as u8))
                        .collect()
                };
                (
                    1000 + i as u64,
                    900 + i as u64,
                    vec![(i as usize, bytes(40 + 30 * i as usize)), (9, bytes(7))],
                )
            })
            .collect();
        for (start, held, chunks) in &rounds {
            let borrowed: Vec<(usize, &[u8])> =
                chunks.iter().map(|(s, b)| (*s, b.as_slice())).collect();
            spool.append(*start, *held, &borrowed).unwrap();
        }
        let total: usize = rounds
            .iter()
            .map(|(_, _, c)| 20 + c.iter().map(|(_, b)| 12 + b.len()).sum::<usize>())
            .sum();
        assert_eq!(spool.bytes(), total as u64);
        assert!(file.exists());
        let mut reader = spool.read_back().unwrap();
        for (start, held, chunks) in &rounds {
            let r = reader.next_round().unwrap().expect("a round");
            assert_eq!((r.start_ns, r.held_from), (*start, *held));
            let got: Vec<(usize, Vec<u8>)> =
                r.chunks.iter().map(|(s, b)| (*s, b.to_vec())).collect();
            assert_eq!(&got, chunks);
        }
        assert!(reader.next_round().unwrap().is_none());
        assert!(file.exists(), "read while the reader lives");
        drop(reader);
        assert!(!file.exists());
    }

    /// A spool dropped unread (a failed write, a failed replay) leaves no
    /// file behind.
    #[test]
    fn a_spool_dropped_unread_leaves_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let (_, recording) = idleflow_format::files::stage(&dir.path().join("r.idleflow")).unwrap();
        let mut spool = Spool::create(&recording).unwrap();
        let file = spool.path.clone();
        assert!(file.to_str().unwrap().contains("/r.idleflow.spool."));
        spool.append(1, 0, &[(0, &[1, 2, 3][..])]).unwrap();
        assert!(file.exists());
        drop(spool);
        assert!(!file.exists());
    }
}
