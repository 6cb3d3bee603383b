//! `pointact print cli-reference`: the command-line reference (docs/cli.md) written from the
//! argument parser itself, so the page cannot drift from the flags. A test compares the committed
//! page with this output; the environment variables and exit codes are tables here, next to the
//! parser, and a test checks the variables against the names the code and scripts read.

use std::fmt::Write as _;

use clap::{Arg, ArgAction, Command as ClapCommand, CommandFactory, Subcommand};

use super::Cli;

/// `pointact print …`: reference material generated from this binary.
#[derive(Subcommand)]
pub enum PrintCommand {
    /// The command-line reference as Markdown: every command and flag, the environment variables
    /// and the exit codes (the source of docs/cli.md).
    CliReference,
}

pub fn run(which: PrintCommand) -> anyhow::Result<std::process::ExitCode> {
    match which {
        PrintCommand::CliReference => print!("{}", cli_reference()),
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// Who reads an environment variable.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Reader {
    /// The `pointact` binary.
    Binary,
    /// `python/pointact_rewards.py`, the reward client for verl / EasyR1.
    RewardClient,
    /// The test suite (`bash .ci/run` sets the ones it needs).
    Tests,
}

/// Every environment variable pointact, its Python reward client and its tests read.
pub const ENVIRONMENT: &[(&str, Reader, &str)] = &[
    ("RUST_LOG", Reader::Binary, "Log filter for the messages on stderr (tracing's `EnvFilter` syntax, e.g. `info` or `pointact=debug`). Default: `warn`."),
    ("HF_HOME", Reader::Binary, "Root of the Hugging Face cache (default `~/.cache/huggingface`); repo ids given to `--model` resolve under `HF_HOME/hub` and download there."),
    ("HF_HUB_CACHE", Reader::Binary, "The hub cache folder itself, overriding `HF_HOME/hub` (`HUGGINGFACE_HUB_CACHE` is read too, as its older name)."),
    ("HUGGINGFACE_HUB_CACHE", Reader::Binary, "Older name of `HF_HUB_CACHE`."),
    ("XDG_CACHE_HOME", Reader::Binary, "When `HF_HOME` is unset, the hub cache is `XDG_CACHE_HOME/huggingface` (default `~/.cache`); `bash .ci/run` also keeps its build folder, librealsense2 and venvs under `XDG_CACHE_HOME/pointact`."),
    ("HF_HUB_OFFLINE", Reader::Binary, "`1`: never download; a repo id not in the cache is an error that names the command to fetch it elsewhere and `--model DIR`."),
    ("HF_TOKEN", Reader::Binary, "Access token for gated or private repos (otherwise the token file, below)."),
    ("HF_TOKEN_PATH", Reader::Binary, "The token file (default `HF_HOME/token`, as `huggingface-cli login` writes it)."),
    ("HF_ENDPOINT", Reader::Binary, "The hub's address (default `https://huggingface.co`), for a mirror."),
    ("HF_HUB_DOWNLOAD_TIMEOUT", Reader::Binary, "Seconds a download may take to connect and may stay silent while reading (sets both; defaults 10 and 30)."),
    ("OPENAI_API_KEY", Reader::Binary, "Bearer token of `--pointer openai` when `--api-key` is not given."),
    ("POINTACT_DENSE_F32", Reader::Binary, "`1`: widen a bf16 checkpoint's dense weights to f32 at load instead of holding them bf16 (same numbers, twice the memory); for comparing the two."),
    ("POINTACT_QGEMV_AVX2", Reader::Binary, "`1`: use the AVX2 row kernels (decode) even on an AVX-512 CPU, to compare the two on one machine."),
    ("POINTACT_QGEMM_AVX2", Reader::Binary, "`1`: use the AVX2 quantized tiles (prefill) even where AVX-VNNI is available."),
    ("POINTACT_QGEMM_CANDLE", Reader::Binary, "`1`: multiply quantized weights with candle's kernels instead of ours."),
    ("POINTACT_SGEMM_GEMM", Reader::Binary, "`1`: multiply f32 matrices with the `gemm` crate (candle's) instead of our tiles; dense weights are then widened to f32 at load."),
    ("POINTACT_LLAMA_PEER", Reader::Binary, "Folder of the llama.cpp peer (node-llama-cpp) that `bench vlm` and `crates/bench/src/tests/bench_llama.rs` run; `benches/llama_peer/setup.sh` installs it."),
    ("CC", Reader::Binary, "C compiler for the small MKL shim of `bench vlm --peer-mkl-intel` (default `cc`)."),
    ("POINTACT_REWARDS_URL", Reader::RewardClient, "Base URL of `pointact serve rewards` (default `http://127.0.0.1:8765`)."),
    ("POINTACT_REWARDS_TIMEOUT", Reader::RewardClient, "Seconds per request (default 600)."),
    ("POINTACT_REWARDS_ON_ERROR", Reader::RewardClient, "What a bad item scores: `zero` (default: every component 0) or `raise`."),
    ("POINTACT_PYTHON", Reader::Tests, "Python with the reference packages (xarm-python-sdk, openpi-client); the tests that need it say they were skipped without it. `bash .ci/run` sets it."),
    ("POINTACT_REQUIRE_SDK", Reader::Tests, "Set (as is `CI`): a missing `POINTACT_PYTHON` fails the Python-reference tests instead of skipping them."),
    ("CI", Reader::Tests, "Set by CI: reference tests fail rather than skip when their peer is missing."),
    ("POINTACT_FUZZ_CASES", Reader::Tests, "Cases per fuzz test (the suite's default is small; e.g. 100000 for a long run)."),
    ("POINTACT_FUZZ_SEED", Reader::Tests, "Seed of the fuzz tests' generator, to replay a failure."),
    ("POINTACT_GRPO_CURVE", Reader::Tests, "A file path: `crates/apps/src/tests/grpo_learn.rs` writes its learning curve there (the source of docs/grpo_curve.png)."),
    ("POINTACT_LEROBOT", Reader::Tests, "`1`: `crates/apps/src/tests/dataset_writer.rs` also loads its datasets with the `lerobot` package (`tests/dataset_lerobot.py --lerobot`) and compares lerobot's own statistics with `stats.json`; otherwise only pyarrow, pandas and PyAV read them."),
    ("POINTACT_PYAV_LEROBOT", Reader::Tests, "A folder holding PyAV 15.1 (`pip install --target DIR av==15.1.0`, the PyAV lerobot 0.6.1 pins): the depth video test decodes with it too. `bash .ci/run` sets it; required where `CI` is set."),
    ("POINTACT_LEROBOT_PYTHON", Reader::Tests, "The Python with `lerobot` (and torch) for `POINTACT_LEROBOT=1`; default `POINTACT_PYTHON`."),
    ("POINTACT_RERUN", Reader::Tests, "A `rerun` CLI (`pip install rerun-sdk`): `crates/apps/src/tests/dataset_writer.rs` also has rerun's own LeRobot loader read a dataset it wrote (`rerun DIR --save F.rrd`, then `rerun rrd print`)."),
    ("HF_DATASETS_OFFLINE", Reader::Tests, "Set to `1` by `tests/dataset_lerobot.py` before it imports lerobot, so loading a local dataset never reaches the Hugging Face hub."),
    ("POINTACT_SIMPLERENV", Reader::Tests, "`1`: `tests/simplerenv_maniskill3.rs` runs a real ManiSkill3 episode (`sim/simplerenv/run.py --env maniskill3` against the `serve bridge` binary) with the venv and assets of `sim/simplerenv/setup.sh`; otherwise that test says it was skipped."),
    ("POINTACT_MANISKILL3_PYTHON", Reader::Tests, "The Python of that venv, for that episode (default `~/.cache/pointact/maniskill3/venv/bin/python`)."),
];

/// The exit codes every command shares.
pub const EXIT_CODES: &[(u8, &str)] = &[
    (0, "Success: the task was done (the simulator's judge said so), the command finished, or a dry run planned and checked every motion."),
    (1, "Failure: an error (printed as `error: …` on stderr), a task the judge failed, a plan that was not approved (`not approved: nothing moved`), or a benchmark whose goal was missed."),
    (super::NOT_BUILT, "Every usage error of the argument parser (an unknown flag, a value out of range); also `capture` and `point --camera realsense` in a build without `--features realsense`."),
    (super::INTERRUPTED, "Stopped by Ctrl-C (128 + SIGINT): the arm was stopped first; suites and training save what they finished."),
];

/// The Markdown page: a table of contents, one section per command (deepest last), then the
/// environment variables and exit codes.
pub fn cli_reference() -> String {
    let mut root = Cli::command();
    root.build();
    let mut commands = Vec::new();
    collect(&root, &mut commands);

    let mut out = String::new();
    out.push_str("# Command-line reference\n\n");
    out.push_str(
        "Every command and flag of `pointact`, its environment variables and exit codes. This page is \
         generated from the argument parser (`pointact print cli-reference > docs/cli.md`); a test \
         fails when it differs from the parser, so it is never stale. `pointact <command> --help` \
         prints the same text.\n\n",
    );
    out.push_str("## Commands\n\n");
    for c in &commands {
        let name = c.get_bin_name().unwrap_or(c.get_name());
        let about = c.get_about().map(|a| a.to_string()).unwrap_or_default();
        let _ = writeln!(
            out,
            "- [`{name}`](#{}) — {}",
            anchor(name),
            one_line(&about)
        );
    }
    out.push('\n');
    for c in &commands {
        section(&mut out, c);
    }

    out.push_str("## Environment variables\n\n");
    for (reader, title) in [
        (Reader::Binary, "Read by `pointact`"),
        (Reader::RewardClient, "Read by `python/pointact_rewards.py`"),
        (Reader::Tests, "Read by the tests"),
    ] {
        let _ = writeln!(out, "### {title}\n");
        out.push_str("| variable | effect |\n| --- | --- |\n");
        for (name, _, what) in ENVIRONMENT.iter().filter(|(_, r, _)| *r == reader) {
            let _ = writeln!(out, "| `{name}` | {} |", cell(what));
        }
        out.push('\n');
    }

    out.push_str("## Exit codes\n\n| code | meaning |\n| --- | --- |\n");
    for (code, what) in EXIT_CODES {
        let _ = writeln!(out, "| {code} | {} |", cell(what));
    }
    out
}

/// Every command with something to run, depth first in the parser's order (the root first).
fn collect<'a>(c: &'a ClapCommand, out: &mut Vec<&'a ClapCommand>) {
    if c.is_hide_set() {
        return;
    }
    out.push(c);
    for s in c.get_subcommands() {
        if s.get_name() != "help" {
            collect(s, out);
        }
    }
}

fn section(out: &mut String, c: &ClapCommand) {
    let name = c.get_bin_name().unwrap_or(c.get_name());
    let _ = writeln!(out, "## {name}\n");
    if let Some(about) = c.get_long_about().or(c.get_about()) {
        let _ = writeln!(out, "{}\n", paragraphs(&about.to_string(), ""));
    }
    let usage = c.clone().render_usage().to_string();
    let usage = usage.trim_start_matches("Usage:").trim();
    let _ = writeln!(out, "```text\n{usage}\n```\n");
    let subs: Vec<&ClapCommand> = c
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
        .collect();
    if !subs.is_empty() {
        out.push_str("Subcommands:\n\n");
        for s in subs {
            let full = s.get_bin_name().unwrap_or(s.get_name());
            let about = s.get_about().map(|a| a.to_string()).unwrap_or_default();
            let _ = writeln!(
                out,
                "- [`{}`](#{}) — {}",
                s.get_name(),
                anchor(full),
                one_line(&about)
            );
        }
        out.push('\n');
    }
    let args: Vec<&Arg> = c
        .get_arguments()
        .filter(|a| !a.is_hide_set() && !matches!(a.get_id().as_str(), "help" | "version"))
        .collect();
    if !args.is_empty() {
        out.push_str(if subs_is_empty(c) {
            "Arguments and flags:\n\n"
        } else {
            "Flags:\n\n"
        });
        for a in args {
            arg_item(out, a);
        }
        out.push('\n');
    }
}

fn subs_is_empty(c: &ClapCommand) -> bool {
    c.get_subcommands().all(|s| s.get_name() == "help")
}

/// One list item: the flag as typed, what it does, its choices and its default.
fn arg_item(out: &mut String, a: &Arg) {
    let value = a
        .get_value_names()
        .map(|v| {
            v.iter()
                .map(|n| format!("<{n}>"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| format!("<{}>", a.get_id().as_str().to_uppercase()));
    let takes_value = !matches!(
        a.get_action(),
        ArgAction::SetTrue | ArgAction::SetFalse | ArgAction::Count | ArgAction::Help
    );
    let mut flag = if a.is_positional() {
        value.clone()
    } else {
        let mut names = Vec::new();
        if let Some(s) = a.get_short() {
            names.push(format!("-{s}"));
        }
        if let Some(l) = a.get_long() {
            names.push(format!("--{l}"));
        }
        let mut f = names.join(", ");
        if takes_value {
            f.push(' ');
            f.push_str(&value);
        }
        f
    };
    if matches!(a.get_action(), ArgAction::Append)
        || a.get_num_args().is_some_and(|n| n.max_values() > 1)
    {
        flag.push_str(" …");
    }
    let help = a
        .get_long_help()
        .or(a.get_help())
        .map(|h| h.to_string())
        .unwrap_or_default();
    let mut notes = Vec::new();
    if a.is_required_set() {
        notes.push("Required.".to_owned());
    }
    let choices: Vec<String> = a
        .get_possible_values()
        .iter()
        .filter(|p| !p.is_hide_set())
        .map(|p| match p.get_help() {
            Some(h) => format!("`{}`: {}", p.get_name(), one_line(&h.to_string())),
            None => format!("`{}`", p.get_name()),
        })
        .collect();
    if takes_value && !choices.is_empty() {
        notes.push(format!("One of: {}.", choices.join("; ")));
    }
    let defaults: Vec<String> = a
        .get_default_values()
        .iter()
        .map(|d| d.to_string_lossy().into_owned())
        .collect();
    if takes_value && !defaults.is_empty() {
        notes.push(format!("Default: `{}`.", defaults.join(",")));
    }
    let mut text = paragraphs(&help, "  ");
    // clap drops a one-line help's final period; notes follow as sentences.
    if !text.is_empty() && !text.ends_with(['.', '!', '?']) {
        text.push('.');
    }
    if !notes.is_empty() {
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(&notes.join(" "));
    }
    let _ = writeln!(out, "- `{flag}`: {text}");
}

/// Help text as Markdown: paragraphs kept (indented under a list item), lines within one joined.
fn paragraphs(text: &str, indent: &str) -> String {
    text.trim()
        .split("\n\n")
        .map(one_line)
        .collect::<Vec<_>>()
        .join(&format!("\n\n{indent}"))
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A table cell: one line, pipes escaped.
fn cell(text: &str) -> String {
    one_line(text).replace('|', "\\|")
}

/// GitHub's heading anchor: lower case, spaces to hyphens, other punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}
