//! Any bytes given to `idleflow report`, `flamegraph` or `script`: an
//! error, a report of a recording cut short, or a report, never a panic,
//! a hang or an allocation the input does not pay for.

#![no_main]

use idleflow_postproc::arcflow::ArcflowOptions;
use idleflow_postproc::views::{FoldOptions, ViewOptions};
use idleflow_postproc::{flame, script, text, Analysis, AnalysisOptions, Report};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Both views: merged (and the folded stacks), and per thread.
    for per_thread in [false, true] {
        let opts = AnalysisOptions {
            views: ViewOptions {
                arcflow: ArcflowOptions {
                    per_thread,
                    ..Default::default()
                },
                fold: Some(FoldOptions {
                    dispatches: per_thread,
                    merge_threads: !per_thread,
                }),
            },
            ..Default::default()
        };
        if let Ok(a) = Analysis::run_with_progress(std::io::Cursor::new(data), &opts, |_| {}) {
            let r = Report::new(&a, 5);
            let _ = text::render(&r, "fuzz", &text::TextOptions::default());
            for (by_reason, stacks, user_only, blocked) in [
                (false, false, false, false),
                (true, false, false, false),
                (false, true, false, false),
                (false, true, true, false),
                (false, false, false, true),
            ] {
                let source = flame::Source {
                    by_reason,
                    stacks,
                    user_only,
                    blocked,
                };
                let _ = flame::folded(&a, source);
            }
        }
    }
    let _ = script::print(data, &mut std::io::sink());
});
