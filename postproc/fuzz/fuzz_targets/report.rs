//! Any bytes given to `idleflow report`, `flamegraph` or `script`: an
//! error, a report of a recording cut short, or a report, never a panic,
//! a hang or an allocation the input does not pay for.

#![no_main]

use idleflow_postproc::sections::arcflow::ArcflowOptions;
use idleflow_postproc::path::FoldOptions;
use idleflow_postproc::pass::call_tree::ViewOptions;
use idleflow_postproc::render::{flame, script, text};
use idleflow_postproc::{Analysis, AnalysisOptions, Report};
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
            let mut r = Report::new(&a, 5);
            r.keep_views(idleflow_postproc::sections::Views::all());
            let _ = text::render(&r, "fuzz", &text::TextOptions::default());
            for (view, by_reason, user_only) in [
                (flame::View::Paths, false, false),
                (flame::View::Paths, true, true),
                (flame::View::Tree, false, false),
                (flame::View::Java, true, false),
                (flame::View::User, false, true),
                (flame::View::Kernel, false, false),
                (flame::View::Blocking, false, false),
                (flame::View::Blame, false, false),
            ] {
                let source = flame::Source {
                    view,
                    by_reason,
                    user_only,
                };
                let _ = idleflow_postproc::sections::folded::folded(&a, source);
            }
        }
    }
    let _ = script::print(data, &mut std::io::sink());
});
