//! Why a recording session failed, each cause with the context the user
//! needs: the message of every variant is the one line `idleflow record`
//! prints (with its causes after `: `), so the wording is part of the
//! command's interface (the end-to-end tests check some of it).

use std::path::PathBuf;

use idleflow_format::FormatError;
use idleflow_tracer::RecorderError;
use idleflow_unwind::ResolveError;
use idleflow_wire::twa::TwaError;

/// Why a recording session failed.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// `--duration` is not a positive number of seconds.
    #[error("--duration must be a positive number of seconds, not {seconds}")]
    Duration {
        /// What was given.
        seconds: f64,
    },
    /// `--wait-sample` without `--stacks waits`.
    #[error("--wait-sample {period} samples the stacks of `--stacks waits`; add --stacks waits, or leave --wait-sample out")]
    WaitSample {
        /// What was given.
        period: u32,
    },
    /// `--pid` names no process.
    #[error("--pid {pid}: no such process")]
    NoSuchProcess {
        /// What was given.
        pid: u32,
    },
    /// A threshold in ms is negative or not a number.
    #[error("{option} must be 0 or more ms, not {ms}")]
    Threshold {
        /// The option (`--wait-threshold`, `--monitor-threshold`).
        option: &'static str,
        /// What was given.
        ms: f64,
    },
    /// `--all-waits-below` is negative or not a number.
    #[error("--all-waits-below must be 0 or more waits a second per CPU, not {rate}")]
    AllWaitsBelow {
        /// What was given.
        rate: f64,
    },
    /// `--agent` names no file.
    #[error("--agent {}: no such file", path.display())]
    NoAgent {
        /// What was given.
        path: PathBuf,
    },
    /// A path that `JAVA_TOOL_OPTIONS` or the agent's options would cut.
    #[error("{what} {} contains white space, ',' or '=', which JAVA_TOOL_OPTIONS cannot carry", path.display())]
    NotPlain {
        /// Which path (`the agent library path`, `the temporary directory`).
        what: &'static str,
        /// The path.
        path: PathBuf,
    },
    /// A file, directory, process or thread could not be made or used.
    #[error("{what}")]
    Io {
        /// What was being done, with the file it was done to.
        what: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// The recorder failed (opening the events, enabling them).
    #[error(transparent)]
    Recorder(#[from] RecorderError),
    /// The recorder failed at a step the message names.
    #[error("{what}")]
    RecorderAt {
        /// The step, with what the user may still read (`recording stopped;
        /// what was recorded up to here is in …`).
        what: String,
        /// Why it failed.
        source: RecorderError,
    },
    /// The recording stopped with an error while the recorded command runs
    /// on; the error itself was reported through
    /// [`Progress::error`](crate::Progress::error) before the command was
    /// waited for.
    #[error("recording stopped early (see above)")]
    StoppedEarly,
    /// The thread work area could not be created.
    #[error("cannot create the JVM work area")]
    WorkArea(#[source] TwaError),
    /// The user stacks of a complete recording could not be resolved.
    #[error("cannot resolve the user stacks of {} (the recording itself is complete; its report leaves the user stacks out)", path.display())]
    Resolve {
        /// The recording.
        path: PathBuf,
        /// Why.
        source: ResolveError,
    },
    /// The converter child could not write its recording.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// The converter child could not read a flight recording.
    #[error(transparent)]
    Convert(#[from] idleflow_jfr::Error<FormatError>),
    /// Flight-recorder options that do not go together.
    #[error("{0}")]
    Flight(String),
    /// The converter child was handed spans it cannot read.
    #[error("{0}")]
    Spans(String),
    /// A converter child's arguments are not those [`crate::ConvertJob::args`] gives.
    #[error("__jfr-convert: {0}")]
    ConvertArgs(String),
}

impl SessionError {
    /// An [`SessionError::Io`] maker for `map_err`: `what` failed.
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> SessionError {
        let what = what.into();
        move |source| SessionError::Io { what, source }
    }

    /// A [`SessionError::RecorderAt`] maker for `map_err`.
    pub(crate) fn at(what: impl Into<String>) -> impl FnOnce(RecorderError) -> SessionError {
        let what = what.into();
        move |source| SessionError::RecorderAt { what, source }
    }
}

/// `e` and its causes on one line, each after `: ` (as `idleflow` prints
/// every error).
pub fn one_line(e: &(dyn std::error::Error + 'static)) -> String {
    let mut line = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        line.push_str(": ");
        line.push_str(&c.to_string());
        cause = c.source();
    }
    line
}
