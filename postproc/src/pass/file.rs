//! A recording file as `idleflow` reads it: opened (naming the recorder's
//! `.partial` file when only that one is there), the part asked for
//! checked (`--from`, `--to`) or found (`--skip-startup`, where
//! [`crate::pass::startup`] says the program's start-up ends), then read in
//! the one pass ([`Analysis::run_observed`]) with its progress in bytes.
//!
//! Invariant: every error names the file or the option at fault, in the
//! words the command line prints (`idleflow: error: …` with its causes);
//! the window is checked before the file is opened.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use idleflow_format::{FormatError, Reader};

use crate::pass::handler::Handler;
use crate::pass::startup::{startup_end, StartupEnd};
use crate::pass::{Analysis, AnalysisOptions, Window};

/// How long the program must go without a new thread for its start-up to
/// be over (`--skip-startup`).
pub const STARTUP_QUIET_NS: u64 = 1_000_000_000;

/// Why a recording file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// It could not be opened (`what` names it, and its `.partial` if that exists).
    #[error("{what}")]
    Open {
        /// The message.
        what: String,
        /// Why.
        source: std::io::Error,
    },
    /// It is not a readable recording.
    #[error("cannot read {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: FormatError,
    },
    /// The window asked for cannot be: the message names the option.
    #[error("{0}")]
    Window(String),
}

/// An open recording file and its size.
#[derive(Debug)]
pub struct RecordingFile {
    /// Its path, as given.
    pub path: PathBuf,
    /// The file.
    pub file: File,
    /// Its size in bytes (0 when unknown).
    pub bytes: u64,
}

impl RecordingFile {
    /// Opens the recording at `path`; a missing one whose temporary file
    /// (`NAME.RANDOM.partial`) exists (a recorder that was killed, or one
    /// still running) says so.
    pub fn open(path: &Path) -> Result<Self, FileError> {
        let file = File::open(path).map_err(|source| {
            let partial = idleflow_format::files::partials_of(path).pop();
            let what = if let Some(partial) = partial {
                format!(
                    "cannot open {}; {} exists: the recorder did not finish (killed, or an error); \
                     `idleflow report {}` reads it up to its last complete record",
                    path.display(),
                    partial.display(),
                    partial.display()
                )
            } else {
                format!("cannot open {}", path.display())
            };
            FileError::Open { what, source }
        })?;
        let bytes = file.metadata().map(|m| m.len()).unwrap_or(0);
        Ok(RecordingFile {
            path: path.to_path_buf(),
            file,
            bytes,
        })
    }

    /// Reads and analyses the whole file in one pass with `opts`, calling
    /// `progress` with the bytes read so far and telling `observer` what
    /// the pass sees ([`Analysis::run_observed`]).
    pub fn analyse(
        self,
        opts: &AnalysisOptions,
        progress: impl FnMut(u64),
        observer: Option<&mut dyn Handler>,
    ) -> Result<Analysis, FileError> {
        // Buffered: the call trees are read in passes of small records.
        let input = BufReader::with_capacity(1 << 16, self.file);
        Analysis::run_observed(input, opts, progress, observer).map_err(|source| FileError::Read {
            path: self.path,
            source,
        })
    }
}

/// The window `asked` for the recording at `path`, checked: `from_s` and
/// `to_s` seconds from its start, in order; with `after_startup`, from
/// where the recorded program's start-up ends (its longest stretch without
/// a new thread or process, of at least [`STARTUP_QUIET_NS`]).
pub fn window(path: &Path, asked: Window) -> Result<Window, FileError> {
    let bad = |m: String| Err(FileError::Window(m));
    for (name, v) in [("--from", asked.from_s), ("--to", asked.to_s)] {
        if let Some(v) = v {
            if !(v.is_finite() && v >= 0.0) {
                return bad(format!(
                    "{name} must be a number of seconds from the recording's start, not {v}"
                ));
            }
        }
    }
    if let (Some(f), Some(t)) = (asked.from_s, asked.to_s) {
        if f >= t {
            return bad(format!("--from {f} must come before --to {t}"));
        }
    }
    if !asked.after_startup {
        return Ok(asked);
    }
    let read = |source| FileError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = BufReader::new(RecordingFile::open(path)?.file);
    let start = Reader::new(RecordingFile::open(path)?.file)
        .map_err(read)?
        .info()
        .start_ns;
    let from = match startup_end(file, STARTUP_QUIET_NS).map_err(read)? {
        StartupEnd::At(ns) => ns.saturating_sub(start) as f64 / 1e9,
        StartupEnd::NoProgram => {
            return bad(format!(
                "--skip-startup needs a recorded program ({} was recorded system-wide, without a \
                 command or --pid); give --from SECONDS instead",
                path.display()
            ))
        }
        StartupEnd::NeverQuiet { last_new_ns } => {
            return bad(format!(
                "--skip-startup: the program never went a second without starting a thread or \
                 process (the last started {:.3} s into the recording); give --from SECONDS instead",
                last_new_ns.saturating_sub(start) as f64 / 1e9
            ))
        }
    };
    if let Some(to) = asked.to_s {
        if from >= to {
            return bad(format!(
                "--skip-startup: the start-up ends at {from:.3} s, after --to {to}"
            ));
        }
    }
    Ok(Window {
        from_s: Some(from),
        ..asked
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(from_s: Option<f64>, to_s: Option<f64>) -> Window {
        Window {
            from_s,
            to_s,
            after_startup: false,
        }
    }

    #[test]
    fn a_window_is_checked_before_any_file_is_read() {
        let nowhere = Path::new("/nonexistent/run.idleflow");
        let w = asked(Some(0.5), Some(1.5));
        assert_eq!(window(nowhere, w).unwrap(), w);
        let err = |w| window(nowhere, w).unwrap_err().to_string();
        assert_eq!(
            err(asked(Some(f64::NAN), None)),
            "--from must be a number of seconds from the recording's start, not NaN"
        );
        assert_eq!(
            err(asked(None, Some(f64::INFINITY))),
            "--to must be a number of seconds from the recording's start, not inf"
        );
        assert_eq!(
            err(asked(Some(2.0), Some(1.0))),
            "--from 2 must come before --to 1"
        );
    }

    #[test]
    fn a_missing_recording_names_its_partial_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.idleflow");
        let err = RecordingFile::open(&path).unwrap_err().to_string();
        assert_eq!(err, format!("cannot open {}", path.display()));
        std::fs::write(dir.path().join("run.idleflow.k3x9q2ab.partial"), b"").unwrap();
        let err = RecordingFile::open(&path).unwrap_err().to_string();
        assert!(
            err.contains("run.idleflow.k3x9q2ab.partial exists"),
            "{err}"
        );
    }
}
