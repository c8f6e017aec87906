//! `idleflow history add|list|show|check`: the CLI over the history store
//! (`idleflow_history`) and the check (`idleflow_postproc::compare::history_check`).
//! Recordings are summarized as `diff` reads them ([`crate::report::summarize`]).

use std::io::Write;

use anyhow::Context;
use idleflow_history::Store;
use idleflow_postproc::compare::history_check::{self, MAX_BASELINE};
use idleflow_postproc::compare::history_text::{self, Kept};

use crate::cli::{Format, HistoryCommand, HistoryStore};

/// Opens the store the options name (the default SQLite file without one).
fn open(store: &HistoryStore) -> anyhow::Result<Store> {
    let spec = store
        .history
        .clone()
        .unwrap_or_else(|| idleflow_history::default_path().display().to_string());
    Store::open(&spec).context("cannot open the history")
}

fn print(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
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
                Format::Json => json(
                    &runs
                        .iter()
                        .map(|r| {
                            serde_json::json!({
                                "id": r.id, "job": r.job, "added_unix_ns": r.added_unix_ns,
                                "file": r.summary.file, "host": r.summary.host,
                                "kernel": r.summary.kernel, "cpus": r.summary.cpus,
                                "command": r.summary.command,
                                "start_unix_ns": r.summary.start_unix_ns,
                                "duration_ns": r.summary.duration_ns,
                                "idle_ns": r.summary.idle_ns,
                                "idle_pct": r.summary.idle_pct(),
                                "paths": r.summary.paths.len(),
                            })
                        })
                        .collect::<Vec<_>>(),
                )?,
                Format::Text => {
                    let kept: Vec<Kept> = runs
                        .iter()
                        .map(|r| Kept {
                            id: r.id,
                            job: &r.job,
                            run: &r.summary,
                        })
                        .collect();
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
                Format::Json => json(&serde_json::json!({
                    "id": r.id, "job": r.job, "added_unix_ns": r.added_unix_ns,
                    "run": r.summary,
                }))?,
                Format::Text => history_text::render_show(
                    Kept {
                        id: r.id,
                        job: &r.job,
                        run: &r.summary,
                    },
                    a.paths,
                ),
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
            // Enough of the newest runs to find the similar ones among.
            let runs = store.runs(Some(&a.job), 10 * MAX_BASELINE)?;
            let history: Vec<_> = runs.into_iter().map(|r| (r.id, r.summary)).collect();
            let Some(c) = history_check::check(&a.job, &history, &new, a.min_change) else {
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
