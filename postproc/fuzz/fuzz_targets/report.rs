//! Any bytes given to `idleflow report`, `flamegraph` or `script`: an
//! error, a report of a recording cut short, or a report, never a panic,
//! a hang or an allocation the input does not pay for.

#![no_main]

use idleflow_postproc::arcflow::ArcflowOptions;
use idleflow_postproc::flame::{self, Weight};
use idleflow_postproc::{script, text, Analysis, Report};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(a) = Analysis::run(data) {
        let r = Report::new(&a, 5, &ArcflowOptions::default());
        let _ = text::render(&r, "fuzz", &text::TextOptions::default());
        let _ = flame::folded(&a, Weight::IdleNs, true);
    }
    let _ = script::print(data, &mut std::io::sink());
});
