//! The outputs: each reads the report's data and writes one format —
//! [`text`] for people, [`html`] one page to share, [`flame`] the flame
//! graphs, [`pprof`] and [`perfetto`] for the tools people already use,
//! [`script`] every record of a recording, [`csv`] the root causes for a
//! spreadsheet.

pub mod csv;
pub mod flame;
pub mod html;
pub mod perfetto;
pub mod pprof;
pub mod script;
pub mod text;
