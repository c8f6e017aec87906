//! `idleflow history add|list|show|check`: the CLI over the history store
//! and its check (`idleflow_history`, `idleflow_postproc::compare::history_check`).
//! Recordings are summarized as `diff` reads them ([`crate::report::summarize`]).

use anyhow::Context;
use idleflow_history::Store;
use idleflow_postproc::compare::history_text;

use crate::cli::{Format, HistoryCommand, HistoryStore};
use crate::report::print;

/// Opens the store the options name (the default SQLite file without one).
fn open(store: &HistoryStore) -> anyhow::Result<Store> {
    Store::open_or_default(store.history.as_deref()).context("cannot open the history")
}

fn json(v: &impl serde::Serialize) -> anyhow::Result<String> {
    Ok(serde_json::to_string_pretty(v)? + "\n")
}

/// Runs one `history` subcommand: its exit status (`check`: 1 when a path
/// rose).
pub fn run(cmd: HistoryCommand) -> anyhow::Result<u8> {
    match cmd {
        HistoryCommand::Add(a) => {
            let summary = crate::report::summarize(&a.input)?;
            let mut store = open(&a.store)?;
            let id = store
                .add(&a.job, &summary)
                .with_context(|| format!("cannot add {} to the history", a.input.display()))?;
            eprintln!(
                "idleflow: kept {} as run {id} of job {} in {} ({} paths, {} windows)",
                a.input.display(),
                a.job,
                store.location(),
                summary.paths.len(),
                summary.idle_windows.len()
            );
            Ok(0)
        }
        HistoryCommand::List(a) => {
            let mut store = open(&a.store)?;
            let runs = store.runs(a.job.as_deref(), a.last)?;
            let out = match a.format {
                Format::Json => json(&runs.iter().map(|r| r.list_json()).collect::<Vec<_>>())?,
                Format::Text => {
                    let kept: Vec<_> = runs.iter().map(|r| r.kept()).collect();
                    history_text::render_list(&kept, &store.location())
                }
                Format::Html => anyhow::bail!("history list writes text or JSON"),
            };
            print(&out)?;
            Ok(0)
        }
        HistoryCommand::Show(a) => {
            let mut store = open(&a.store)?;
            let r = store.load(a.id)?;
            let out = match a.format {
                Format::Json => json(&r.show_json())?,
                Format::Text => history_text::render_show(r.kept(), a.paths),
                Format::Html => anyhow::bail!("history show writes text or JSON"),
            };
            print(&out)?;
            Ok(0)
        }
        HistoryCommand::Check(a) => {
            if a.min_change
                .is_some_and(|m| !(m.is_finite() && (0.0..=100.0).contains(&m)))
            {
                anyhow::bail!("--min-change must be points of share between 0 and 100");
            }
            let new = crate::report::summarize(&a.input)?;
            let mut store = open(&a.store)?;
            let Some(c) = store.check(&a.job, &new, a.min_change)? else {
                anyhow::bail!(
                    "job {} has no runs in {} to compare with: keep some first (idleflow history add RUN --job {})",
                    a.job,
                    store.location(),
                    a.job
                );
            };
            let out = match a.format {
                Format::Json => json(&c)?,
                Format::Text => {
                    history_text::render_check(&c, &a.input.display().to_string(), a.paths)
                }
                Format::Html => anyhow::bail!("history check writes text or JSON"),
            };
            print(&out)?;
            Ok(u8::from(!c.rose.is_empty()))
        }
    }
}
