//! Errors of reading and writing recordings.

use std::io;

/// What can go wrong with a recording. Offsets are byte offsets in the file.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// The underlying file could not be read or written.
    #[error("I/O error")]
    Io(#[from] io::Error),
    /// The file does not start with the idleflow magic.
    #[error("not an idleflow recording (the file does not start with \"IDLEFLOW\")")]
    NotARecording,
    /// The file was written by a format version this build does not read.
    #[error("recording format version {found} is not supported (this idleflow reads version {supported})")]
    UnsupportedVersion {
        /// Version in the file.
        found: u32,
        /// Version this build reads.
        supported: u32,
    },
    /// The file ends in the middle of a record or before the end record.
    #[error("the recording is truncated at byte {offset} ({what}); was the recorder killed before it finished?")]
    Truncated {
        /// Where the data ran out.
        offset: u64,
        /// What was being read.
        what: &'static str,
    },
    /// A record could not be decoded.
    #[error("corrupt record at byte {offset}: {what}")]
    Corrupt {
        /// Start of the bad record.
        offset: u64,
        /// What is wrong with it.
        what: String,
    },
}
