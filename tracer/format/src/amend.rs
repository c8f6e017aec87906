//! Records added after a finished recording's stream: a flight recorder's
//! dump gets the JVMs' waits of its window once it is complete (asking the
//! JVMs for them takes longer than writing the dump). The recording is
//! copied record by record ([`Reader::next_raw`], [`Writer::write_raw`])
//! into a new private file beside it (`files::stage`; from its first compressed block on, compressed
//! again), the new records are written after its stream and before its end
//! record, and the copy replaces it.
//!
//! Invariant: the recording at `path` is complete before and after: a
//! failure leaves it as it was and removes the copy.

use std::io::{BufReader, BufWriter};
use std::path::Path;

use crate::{files, FormatError, Reader, Record, RunSummary, Writer};

/// Writes `records` into the finished recording at `path`, after its
/// stream and before its end record, whose summary `edit` may change.
pub fn add_after_stream(
    path: &Path,
    records: &[Record],
    edit: impl FnOnce(&mut RunSummary),
) -> Result<(), FormatError> {
    let (out, staged) = files::stage(path).map_err(std::io::Error::from)?;
    let copied = copy_adding(path, out, records, edit);
    if copied.is_err() {
        staged.discard();
        return copied;
    }
    staged.commit().inspect_err(|_| staged.discard())?;
    Ok(())
}

fn copy_adding(
    path: &Path,
    out: std::fs::File,
    records: &[Record],
    edit: impl FnOnce(&mut RunSummary),
) -> Result<(), FormatError> {
    let mut reader = Reader::new(BufReader::with_capacity(
        1 << 20,
        std::fs::File::open(path)?,
    ))?;
    let mut writer = Writer::new(BufWriter::with_capacity(1 << 20, out), reader.info())?;
    loop {
        // A dump's compressed segments stay compressed (from the record
        // after the first block's first).
        if reader.blocks_opened() > 0 && !writer.compressing() {
            writer.compress_blocks()?;
        }
        let Some(raw) = reader.next_raw()? else {
            break;
        };
        writer.write_raw(&raw)?;
    }
    let mut summary = reader.summary().cloned().ok_or(FormatError::Truncated {
        offset: reader.offset(),
        what: "the end record",
    })?;
    edit(&mut summary);
    for r in records {
        writer.write(r)?;
    }
    let file = writer
        .finish(&summary)?
        .into_inner()
        .map_err(|e| e.into_error())?;
    file.sync_all()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Dispatch, JvmWaits, NodeTag, PrevState, RunInfo};

    fn recording(path: &Path) {
        let info = RunInfo::minimal(vec![0, 1], 1_000);
        let mut w = Writer::new(std::fs::File::create(path).unwrap(), &info).unwrap();
        for i in 0..3u64 {
            w.write(&Record::Dispatch(Dispatch {
                time: 1_000 + i * 10,
                cpu: (i % 2) as u32,
                prev_tid: 7,
                prev_state: PrevState::Sleeping,
                next_tid: 0,
                prev_node: NodeTag::Untraced,
            }))
            .unwrap();
        }
        let summary = RunSummary {
            stop_ns: 2_000,
            dispatches: 3,
            ..Default::default()
        };
        w.finish(&summary).unwrap();
    }

    fn read_all(path: &Path) -> (Vec<Record>, RunSummary) {
        let mut r = Reader::new(std::fs::File::open(path).unwrap()).unwrap();
        let mut v = Vec::new();
        while let Some(rec) = r.next_record().unwrap() {
            v.push(rec);
        }
        (v, r.summary().cloned().unwrap())
    }

    #[test]
    fn added_records_come_after_the_stream_and_the_rest_is_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dump.idleflow");
        recording(&path);
        let (before, summary) = read_all(&path);
        let waits = Record::JvmWaits(Box::new(JvmWaits {
            pid: 42,
            source: "jfr".into(),
            ..Default::default()
        }));
        add_after_stream(&path, std::slice::from_ref(&waits), |s| {
            s.java_notes.push("JVM 42: a note".into())
        })
        .unwrap();
        let (after, summary_after) = read_all(&path);
        assert_eq!(after.len(), before.len() + 1);
        assert_eq!(
            format!("{:?}", &after[..before.len()]),
            format!("{before:?}")
        );
        assert!(matches!(&after[before.len()], Record::JvmWaits(h) if h.pid == 42));
        assert_eq!(summary_after.stop_ns, summary.stop_ns);
        assert_eq!(summary_after.java_notes, ["JVM 42: a note"]);
        assert!(!dir.path().join("dump.idleflow.amending").exists());
    }

    #[test]
    fn a_truncated_recording_is_left_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cut.idleflow");
        recording(&path);
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 30]).unwrap();
        assert!(add_after_stream(&path, &[], |_| {}).is_err());
        assert_eq!(std::fs::read(&path).unwrap(), &bytes[..bytes.len() - 30]);
        assert!(!dir.path().join("cut.idleflow.amending").exists());
    }
}
