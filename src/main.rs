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
            eprintln!("error: {}", error_chain(&e));
            if e.downcast_ref::<cli::Interrupted>().is_some() {
                ExitCode::from(cli::INTERRUPTED)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

fn dispatch(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Run(a) => cli::run::run(*a),
        Command::Point(a) => cli::point::run(a),
        Command::Ask(a) => cli::ask::run(*a),
        Command::Keyframes(a) => cli::ask::keyframes(a),
        Command::Eval { which } => cli::eval::run(which),
        Command::Dataset { which } => cli::dataset::run(which),
        Command::Serve { which } => cli::serve::run(which),
        Command::Emulate { which } => cli::emulate::run(which),
        Command::Calibrate { which } => cli::calibrate::run(which),
        Command::Capture(a) => cli::capture::run(a),
        Command::Fit { which } => cli::fit::run(which),
        Command::Train { which } => cli::train::run(which),
        Command::Bench { which } => pointact_bench::run(which),
        Command::Print { which } => cli::reference::run(which),
    }
}

/// The error and its causes on one line, each cause once: many library errors already write their
/// source into their own message (`pointer (reg): {source}`) and also expose it as the source, so
/// anyhow's `{:#}` would print it twice.
fn error_chain(e: &anyhow::Error) -> String {
    let mut line = e.to_string();
    for cause in e.chain().skip(1) {
        let text = cause.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::error_chain;

    /// An error that writes its source into its message and also exposes it, as many do.
    #[derive(Debug)]
    struct Outer(std::io::Error);

    impl std::fmt::Display for Outer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "pointer (reg): {}", self.0)
        }
    }

    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn each_cause_is_printed_once() {
        let io = std::io::Error::other("the model's answer is unusable: no points");
        let e = anyhow::Error::new(Outer(io)).context("the run stopped during motion");
        assert_eq!(
            error_chain(&e),
            "the run stopped during motion: pointer (reg): the model's answer is unusable: no points"
        );
        // A source the message does not repeat is still printed.
        let e = anyhow::Error::new(std::io::Error::other("refused")).context("cannot connect");
        assert_eq!(error_chain(&e), "cannot connect: refused");
    }
}
