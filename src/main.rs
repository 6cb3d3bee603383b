//! The `pointact` command line: parses arguments and dispatches to one file per command in
//! `cli/`. Nothing else lives here.

mod cli;

use std::process::ExitCode;

use anyhow::Result;
use clap::Parser;
use cli::{Cli, Command};

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match dispatch(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            cli::end_stream();
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn dispatch(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Run(a) => cli::run::run(*a),
        Command::Point(a) => cli::point::run(a),
        Command::Eval { which } => cli::eval::run(which),
        Command::Serve { which } => cli::serve::run(which),
        Command::Emulate { which } => cli::emulate::run(which),
        Command::Calibrate { which } => cli::calibrate::run(which),
        Command::Capture(a) => cli::capture::run(a),
        Command::Fit { which } => cli::fit::run(which),
        Command::Train { which } => cli::train::run(which),
        Command::Bench { which } => cli::bench::run(which),
        Command::Print { which } => cli::reference::run(which),
    }
}
