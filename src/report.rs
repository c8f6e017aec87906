//! `idleflow report` and `idleflow script`: read a recording, print it.

use std::fs::File;
use std::io::Write;

use anyhow::Context;
use idleflow_postproc::{text, Analysis, Report};

use crate::cli::{Format, ReportArgs, ScriptArgs};

pub fn run(args: ReportArgs) -> anyhow::Result<()> {
    let path = &args.input;
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let bar = crate::progress::bytes_bar(size, "reading");
    let analysis = Analysis::run_with_progress(file, |bytes| bar.set_position(bytes))
        .with_context(|| format!("cannot read {}", path.display()))?;
    bar.finish_and_clear();
    let report = Report::new(&analysis, args.causes);
    let out = match args.format {
        Format::Json => serde_json::to_string_pretty(&report)? + "\n",
        Format::Text => text::render(
            &report,
            &path.display().to_string(),
            &text::TextOptions {
                max_threads: args.threads,
            },
        ),
    };
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(out.as_bytes())?;
    stdout.flush()?;
    Ok(())
}

pub fn script(args: ScriptArgs) -> anyhow::Result<()> {
    let path = &args.input;
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    match idleflow_postproc::script::print(file, &mut out) {
        Err(idleflow_postproc::script::ScriptError::Output(e)) => Err(e.into()),
        other => other.with_context(|| format!("cannot read {}", path.display())),
    }?;
    out.flush()?;
    Ok(())
}
