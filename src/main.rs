//! `idleflow`: which code paths make the processors go idle, and why.
//!
//! A thin command line over the recording session (`record`,
//! [`idleflow_session`]) and the post-processor (`report`): parse, call the
//! library, print. Errors are printed as one
//! line with their whole cause chain.

mod cli;
mod history;
mod progress;
mod record;
mod report;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let result = match cli.command {
        cli::Command::Record(args) => record::run(*args),
        cli::Command::Report(args) => report::run(args).map(|()| 0),
        cli::Command::Script(args) => report::script(args).map(|()| 0),
        cli::Command::Flamegraph(args) => report::flamegraph(args).map(|()| 0),
        cli::Command::Export(args) => report::export(args).map(|()| 0),
        cli::Command::Diff(args) => report::diff(args).map(|()| 0),
        cli::Command::History(cmd) => history::run(cmd),
        cli::Command::Trigger(args) => record::trigger(args),
        cli::Command::JfrConvert(args) => record::convert_child(args).map(|()| 0),
        cli::Command::Resolve(args) => record::resolve(args).map(|()| 0),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            if let Some(io) = e.downcast_ref::<std::io::Error>() {
                if io.kind() == std::io::ErrorKind::BrokenPipe {
                    return ExitCode::SUCCESS;
                }
            }
            eprintln!("idleflow: error: {e:#}");
            ExitCode::from(2)
        }
    }
}
