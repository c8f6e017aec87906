//! `idleflow report`, `script`, `flamegraph`, `export` and `diff`: read
//! recordings through the post-processor, print or write what it renders.

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use idleflow_postproc::compare::summary::RunSummary;
use idleflow_postproc::pass::call_tree::ViewOptions;
use idleflow_postproc::pass::file::{self, RecordingFile};
use idleflow_postproc::pass::handler::Handler;
use idleflow_postproc::path::FoldOptions;
use idleflow_postproc::render::flame::{self, Weight};
use idleflow_postproc::render::text;
use idleflow_postproc::sections::arcflow::{ArcflowOptions, SortBy};
use idleflow_postproc::{Analysis, AnalysisOptions, Report, Window};

use crate::cli::{
    DiffArgs, ExportArgs, ExportFormat, FlamegraphArgs, Format, ReportArgs, ScriptArgs, SortArg,
    ViewArg, WeightArg, WindowArgs,
};
use idleflow_postproc::path::Fold;
use idleflow_postproc::sections::idle_paths::MergedPaths;

/// Reads and analyses the recording at `path` (the part `w` asks for),
/// building the call-tree `views`, splitting the idle into time windows
/// with `windows`, telling `observer` what the pass sees, with a progress
/// bar on a terminal.
fn analyse(
    path: &Path,
    w: &WindowArgs,
    views: ViewOptions,
    windows: bool,
    observer: Option<&mut dyn Handler>,
) -> anyhow::Result<Analysis> {
    let asked = Window {
        from_s: w.from,
        to_s: w.to,
        after_startup: w.skip_startup,
    };
    let window = file::window(path, asked)?;
    let opts = AnalysisOptions {
        window,
        views,
        windows,
    };
    let recording = RecordingFile::open(path)?;
    let bar = crate::progress::bytes_bar(recording.bytes, "reading");
    let analysis = recording.analyse(&opts, |bytes| bar.set_position(bytes), observer)?;
    bar.finish_and_clear();
    Ok(analysis)
}

pub fn run(args: ReportArgs) -> anyhow::Result<()> {
    let path = &args.input;
    if !(0.0..=100.0).contains(&args.min_share) {
        anyhow::bail!("--min-share must be a percentage between 0 and 100");
    }
    let arcflow = ArcflowOptions {
        per_thread: args.per_thread,
        sort: match args.sort {
            SortArg::IdleNs => SortBy::IdleNs,
            SortArg::IdleDispatches => SortBy::IdleDispatches,
            SortArg::Base => SortBy::Base,
            SortArg::Calls => SortBy::Calls,
        },
        min_share_pct: args.min_share,
    };
    let html = matches!(args.format, Format::Html);
    let views = ViewOptions {
        arcflow,
        fold: None,
    };
    let analysis = analyse(path, &args.window, views, html, None)?;
    let mut report = Report::new(&analysis, args.causes);
    report.keep_views(report_views(&args.view));
    // One screen unless more was asked for.
    let asked_more = args.paths.is_some()
        || args.per_cpu
        || args.threads.is_some()
        || args.view.iter().any(|v| !matches!(v, ViewArg::Paths));
    let text_opts = text::TextOptions {
        max_threads: args.threads.unwrap_or(0),
        per_cpu: args.per_cpu,
        max_paths: args.paths.unwrap_or(text::DEFAULT_PATHS),
        max_roots: text::DEFAULT_ROOTS,
        fit_lines: (!asked_more).then_some(text::SCREEN_LINES),
    };
    let source = path.display().to_string();
    let out = match args.format {
        Format::Json => serde_json::to_string_pretty(&report)? + "\n",
        Format::Text => text::render(&report, &source, &text_opts),
        Format::Html => {
            use idleflow_postproc::render::html;
            let lines = MergedPaths::all(&analysis).folded_lines(html::FOLD);
            html::render(&report, &source, &lines).context("cannot draw the flame graph")?
        }
    };
    match &args.output {
        Some(file) => write_output(file, |w| Ok(w.write_all(out.as_bytes())?)),
        None => print(&out),
    }
}

/// Writes an output named with `-o` through `write`: a new private file
/// renamed into place when complete (`idleflow_format::files::create_output`:
/// no link is written through, an existing file is replaced), or a
/// terminal or pipe (`/dev/stdout`) as it is. A failure leaves no file.
fn write_output(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let out = idleflow_format::files::create_output(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    let mut buffered = std::io::BufWriter::new(&out.file);
    let written = write(&mut buffered)
        .and_then(|()| Ok(buffered.flush()?))
        .and_then(|()| Ok(out.commit()?))
        .with_context(|| format!("cannot write {}", path.display()));
    if written.is_err() {
        drop(buffered);
        out.discard();
    }
    written
}

/// Writes `text` to standard output.
pub fn print(text: &str) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()?;
    Ok(())
}

/// The per-source sections `--view` asks for.
fn report_views(asked: &[ViewArg]) -> idleflow_postproc::sections::Views {
    let mut v = idleflow_postproc::sections::Views::default();
    for a in asked {
        match a {
            ViewArg::All => v = idleflow_postproc::sections::Views::all(),
            ViewArg::Paths => {}
            ViewArg::Tree => v.tree = true,
            ViewArg::Java => v.java = true,
            ViewArg::User => v.user = true,
            ViewArg::Kernel => v.kernel = true,
            ViewArg::Blocking => v.blocking = true,
        }
    }
    v
}

pub fn script(args: ScriptArgs) -> anyhow::Result<()> {
    let path = &args.input;
    let file = RecordingFile::open(path)?.file;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let cut = match idleflow_postproc::render::script::print(file, &mut out) {
        Err(idleflow_postproc::render::script::ScriptError::Output(e)) => Err(e.into()),
        other => other.with_context(|| format!("cannot read {}", path.display())),
    }?;
    out.flush()?;
    if let Some(c) = cut {
        eprintln!(
            "idleflow: warning: {} was cut short: printed up to its last complete record (byte {}: {})",
            path.display(),
            c.offset,
            c.reason
        );
    }
    Ok(())
}

pub fn flamegraph(args: FlamegraphArgs) -> anyhow::Result<()> {
    let weight = match args.weight {
        WeightArg::IdleNs => Weight::IdleNs,
        WeightArg::Dispatches => Weight::Dispatches,
    };
    let views = ViewOptions {
        fold: Some(FoldOptions {
            dispatches: weight == Weight::Dispatches,
            merge_threads: !args.per_thread,
        }),
        ..Default::default()
    };
    let analysis = analyse(&args.input, &args.window, views, false, None)?;
    if args.blame && weight == Weight::Dispatches {
        anyhow::bail!("--blame weighs by idle time only (--weight idle-ns)");
    }
    let view = match args.view {
        _ if args.blame => flame::View::Blame,
        _ if args.blocked => flame::View::Blocking,
        _ if args.stacks => flame::View::User,
        ViewArg::Paths => flame::View::Paths,
        ViewArg::Tree => flame::View::Tree,
        ViewArg::Java => flame::View::Java,
        ViewArg::User => flame::View::User,
        ViewArg::Kernel => flame::View::Kernel,
        ViewArg::Blocking => flame::View::Blocking,
        ViewArg::All => {
            anyhow::bail!("flamegraph draws one view: --view paths|tree|java|user|kernel|blocking")
        }
    };
    let source = flame::Source {
        view,
        by_reason: args.by_reason,
        user_only: args.user_only,
    };
    let lines = idleflow_postproc::sections::folded::folded(&analysis, source)
        .with_context(|| format!("{}", args.input.display()))?;
    write_output(&args.output, |out| {
        if args.folded {
            for line in lines {
                writeln!(out, "{line}")?;
            }
        } else {
            flame::svg(&lines, weight, view, out)?;
        }
        Ok(())
    })
}

pub fn export(args: ExportArgs) -> anyhow::Result<()> {
    let out_path = args
        .output
        .clone()
        .unwrap_or_else(|| args.format.default_output().into());
    if args.format == ExportFormat::Perfetto {
        let out = idleflow_format::files::create_output(&out_path)
            .with_context(|| format!("cannot create {}", out_path.display()))?;
        let file = out.file.try_clone()?;
        let mut writer = idleflow_postproc::render::perfetto::PerfettoWriter::new(file)
            .context("cannot create a temporary file for the samples")?;
        let observer = Some(&mut writer as &mut dyn Handler);
        let analysis = analyse(
            &args.input,
            &args.window,
            Default::default(),
            false,
            observer,
        )?;
        let written = writer
            .finish(&analysis)
            .and_then(|_| out.commit())
            .with_context(|| format!("cannot write {}", out_path.display()));
        if written.is_err() {
            out.discard();
        }
        return written;
    }
    let analysis = analyse(&args.input, &args.window, Default::default(), false, None)?;
    let report = Report::new(&analysis, 0);
    write_output(&out_path, |mut out| {
        match args.format {
            ExportFormat::Perfetto => unreachable!("written above"),
            ExportFormat::Pprof => {
                let profile = idleflow_postproc::render::pprof::profile(&report);
                idleflow_postproc::render::pprof::write_gz(&profile, &mut out)?
            }
            ExportFormat::Csv => {
                idleflow_postproc::render::csv::write_root_causes(&report.root_causes, out)?
            }
        }
        Ok(())
    })
}

/// The analysis of a whole recording with its time windows, as `diff` and
/// `history` compare it.
fn whole(path: &Path) -> anyhow::Result<Analysis> {
    analyse(path, &WindowArgs::default(), Default::default(), true, None)
}

/// The summary of a whole recording (its paths' idle per time window).
pub fn summarize(path: &Path) -> anyhow::Result<RunSummary> {
    RunSummary::of_analysis(path.display().to_string(), &whole(path)?)
        .context("internal: the analysis kept no time windows")
}

pub fn diff(args: DiffArgs) -> anyhow::Result<()> {
    if !(args.min_change.is_finite() && (0.0..=100.0).contains(&args.min_change)) {
        anyhow::bail!("--min-change must be points of share between 0 and 100");
    }
    let (base_a, new_a) = (whole(&args.base)?, whole(&args.new)?);
    if args.svg {
        let lines = idleflow_postproc::compare::diff::differential_of(&base_a, &new_a)?;
        if lines.is_empty() {
            anyhow::bail!("neither recording has idle-causing paths to draw");
        }
        return write_output(&args.output, |out| {
            Ok(flame::differential_svg(&lines, out)?)
        });
    }
    let base_run = RunSummary::of_analysis(args.base.display().to_string(), &base_a);
    let new_run = RunSummary::of_analysis(args.new.display().to_string(), &new_a);
    let (Some(base_run), Some(new_run)) = (base_run, new_run) else {
        anyhow::bail!("internal: the analyses kept no time windows");
    };
    let d = idleflow_postproc::compare::diff::diff(&base_run, &new_run, args.min_change);
    let out = match args.format {
        Format::Json => serde_json::to_string_pretty(&d)? + "\n",
        Format::Text => idleflow_postproc::compare::diff_text::render_diff(&d, args.paths),
        Format::Html => anyhow::bail!("diff writes text or JSON (--svg for a flame graph)"),
    };
    print(&out)
}
