//! The JVM wire: what the recorder and the JVM agent share while a
//! recording runs, as opposed to what ends up in the recording
//! (`idleflow-format`).
//!
//! - [`twa`]: the thread work area, a shared-memory file in which the agent
//!   publishes each Java thread's current call-tree node and the recorder
//!   writes the thread's running idle counts;
//! - [`handoff`]: the Unix socket over which the recorder hands that file to
//!   a JVM that runs as another user, and takes the agents' notes;
//! - [`clock`]: the one clock both sides stamp time with, which is also the
//!   clock of every timestamp in a recording.
//!
//! Invariant: both sides of the wire build against this one crate, so the
//! layout (magic and version in the work area's header) and the protocol
//! cannot disagree between the recorder and the agent it injects; a file or
//! peer from another version is refused with an error, never misread
//! into undefined behaviour. The layout is documented in `docs/format.md`.

pub mod clock;
pub mod handoff;
pub mod twa;
