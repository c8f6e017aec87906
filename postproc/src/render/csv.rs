//! The root causes of idle as CSV (`export --format csv`), for a
//! spreadsheet or a script: one row per root cause, most idle first, as the
//! report's root-cause section holds them ([`RootCausesSection`]).
//!
//! Columns: `share_pct`, `idle_ns`, `kind` (`path`, `device`,
//! `contention`, `unknown`), `device`, `process`, `threads` (the thread or
//! pool), `thread_count`, `reason`, `object`, `frame` (the program's first
//! frame, else the first outside the kernel), `release` (where the root
//! released the waiters, if sampled), `chain` (the heaviest chain into the
//! root, victims first, links joined by ` ← `), `chains`.
//!
//! Invariant: the rows' `idle_ns` add up to the section's roots (the
//! report's "Root causes of idle"), and quoting is the `csv` crate's.

use std::io::Write;

use crate::path::PathFrame;
use crate::render::text::frame_words;
use crate::sections::root_causes::{RootCausesSection, RootKind};

/// The header row.
const HEADER: [&str; 13] = [
    "share_pct",
    "idle_ns",
    "kind",
    "device",
    "process",
    "threads",
    "thread_count",
    "reason",
    "object",
    "frame",
    "release",
    "chain",
    "chains",
];

fn frame(f: Option<&PathFrame>) -> String {
    f.map(|f| frame_words(&f.frame)).unwrap_or_default()
}

fn kind(k: RootKind) -> &'static str {
    match k {
        RootKind::Path => "path",
        RootKind::Device => "device",
        RootKind::Contention => "contention",
        RootKind::Unknown => "unknown",
    }
}

/// Writes the root causes of `rc` to `out` as CSV.
pub fn write_root_causes(rc: &RootCausesSection, out: impl Write) -> Result<(), csv::Error> {
    let mut w = csv::Writer::from_writer(out);
    w.write_record(HEADER)?;
    for r in &rc.roots {
        let chain = r
            .chain
            .iter()
            .map(|l| {
                let at = frame(l.frame());
                let at = if at.is_empty() {
                    String::new()
                } else {
                    format!(" in {at}")
                };
                format!("{} ({}){at}", l.threads.name, l.reason)
            })
            .collect::<Vec<_>>()
            .join(" ← ");
        w.write_record([
            format!("{:.2}", r.share_pct),
            r.idle_ns.to_string(),
            kind(r.kind).to_string(),
            r.device.clone().unwrap_or_default(),
            r.process.clone(),
            r.threads.name.clone(),
            r.threads.count.to_string(),
            r.reason.clone(),
            r.object.clone(),
            frame(r.frame()),
            frame(r.release.as_ref().and_then(|s| s.frame())),
            chain,
            r.chains.to_string(),
        ])?;
    }
    w.flush()?;
    Ok(())
}
