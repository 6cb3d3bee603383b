//! The documentation checked against the real argument parser, so a renamed flag fails CI instead
//! of a user: docs/cli.md must be exactly what `pointact print cli-reference` prints, every
//! environment variable the code reads must be listed there, and every `pointact …` command line
//! in the project's Markdown must parse.

use std::path::{Path, PathBuf};

use clap::error::ErrorKind;
use clap::Parser;

use super::reference::{cli_reference, ENVIRONMENT};
use super::Cli;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn docs_cli_md_is_the_generated_reference() {
    let path = root().join("docs/cli.md");
    let committed = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let generated = cli_reference();
    if committed != generated {
        let (n, (a, b)) = committed
            .lines()
            .chain(std::iter::repeat("<end of file>"))
            .zip(
                generated
                    .lines()
                    .chain(std::iter::repeat("<end of output>")),
            )
            .enumerate()
            .find(|(_, (a, b))| a != b)
            .expect("texts differ, so some line does");
        panic!(
            "docs/cli.md differs from the parser at line {}:\n  file:      {a}\n  generated: {b}\n\
             regenerate it: cargo run --release -- print cli-reference > docs/cli.md",
            n + 1
        );
    }
}

/// Names the code reads from the environment: `POINTACT_*` anywhere, the Hugging Face and OpenAI
/// variables in the library.
fn names_read(text: &str, out: &mut std::collections::BTreeSet<String>) {
    let re = regex::Regex::new(r"\b(POINTACT_[A-Z0-9_]*[A-Z0-9]|HF_[A-Z_]*[A-Z]|HUGGINGFACE_[A-Z_]*[A-Z]|OPENAI_API_KEY)\b")
        .expect("valid regex");
    for m in re.find_iter(text) {
        out.insert(m.as_str().to_owned());
    }
}

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            if !matches!(
                p.file_name().and_then(|n| n.to_str()),
                Some("node_modules" | "target" | "__pycache__")
            ) {
                files_under(&p, out);
            }
        } else {
            out.push(p);
        }
    }
}

#[test]
fn every_environment_variable_read_is_documented() {
    let mut files = Vec::new();
    for dir in [
        "src", "crates", "tests", "python", "benches", "scripts", ".ci", "sim",
    ] {
        files_under(&root().join(dir), &mut files);
    }
    let this = Path::new(file!()).file_name().expect("a file name");
    let reference = root().join("src/cli/reference.rs");
    let mut read = std::collections::BTreeSet::new();
    for f in &files {
        if f.file_name() == Some(this) || *f == reference {
            continue;
        }
        if let Ok(text) = std::fs::read_to_string(f) {
            names_read(&text, &mut read);
        }
    }
    // Set for a child process (the MKL peer), not read by anything of ours.
    read.remove("POINTACT_PEER_MKL");
    let listed: std::collections::BTreeSet<String> =
        ENVIRONMENT.iter().map(|(n, _, _)| n.to_string()).collect();
    let missing: Vec<&String> = read.difference(&listed).collect();
    assert!(
        missing.is_empty(),
        "read by the code but not listed in cli::reference::ENVIRONMENT: {missing:?}"
    );
    let stale: Vec<&String> = listed
        .iter()
        .filter(|n| n.starts_with("POINTACT_") || n.starts_with("HF_"))
        .filter(|n| !read.contains(*n))
        .collect();
    assert!(
        stale.is_empty(),
        "listed in cli::reference::ENVIRONMENT but read nowhere: {stale:?}"
    );
}

/// A command line written in the docs, where it was found.
#[derive(Debug)]
struct Written {
    file: String,
    line: usize,
    args: Vec<String>,
    /// Inline in prose: may leave out required arguments (`pointact calibrate hand-eye`).
    inline: bool,
}

/// Splits a shell line into words (single and double quotes, backslash escapes), stopping at the
/// first operator or comment: what follows a pipe or redirection is another program's.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                for q in chars.by_ref() {
                    if q == '\'' {
                        break;
                    }
                    word.push(q);
                }
            }
            '"' => {
                in_word = true;
                while let Some(q) = chars.next() {
                    match q {
                        '"' => break,
                        '\\' => word.extend(chars.next()),
                        _ => word.push(q),
                    }
                }
            }
            '\\' => {
                in_word = true;
                word.extend(chars.next());
            }
            '|' | '&' | ';' | '>' | '<' if !in_word || word.is_empty() => break,
            '#' if !in_word => break,
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            _ => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    // A redirection glued to a word (`2>log`) ends the command too.
    if let Some(i) = words
        .iter()
        .position(|w| w.starts_with("2>") || w.starts_with("1>"))
    {
        words.truncate(i);
    }
    words
}

/// The pointact arguments of a shell line (`pointact …` or `cargo run --release [--features …]
/// -- …`, after `$ ` and `VAR=value` prefixes), or None for any other program.
fn pointact_args(line: &str) -> Option<Vec<String>> {
    let mut words = shell_words(line.trim_start().trim_start_matches("$ ")).into_iter();
    let mut first = words.next()?;
    while first.contains('=') && !first.starts_with('-') {
        first = words.next()?;
    }
    let rest: Vec<String> = words.collect();
    match first.as_str() {
        "pointact" => Some(rest),
        "cargo" if rest.first().map(String::as_str) == Some("run") => {
            let sep = rest.iter().position(|w| w == "--")?;
            Some(rest[sep + 1..].to_vec())
        }
        _ => None,
    }
}

/// Every command line of one Markdown text: in shell code blocks (continuation lines joined) and
/// in inline code spans of the prose.
fn written_in(file: &str, text: &str) -> Vec<Written> {
    let mut found = Vec::new();
    let mut fence: Option<bool> = None; // Some(is_shell) inside a block
    let mut pending: Option<(usize, String)> = None;
    let inline = regex::Regex::new(r"`(pointact [^`]+)`").expect("valid regex");
    for (i, raw) in text.lines().enumerate() {
        let trimmed = raw.trim_start();
        if let Some(info) = trimmed.strip_prefix("```") {
            fence = match fence {
                Some(_) => None,
                None => Some(matches!(
                    info.trim(),
                    "" | "sh" | "bash" | "shell" | "console" | "zsh"
                )),
            };
            pending = None;
            continue;
        }
        match fence {
            Some(true) => {
                let (start, mut joined) = pending.take().unwrap_or((i + 1, String::new()));
                if let Some(cont) = raw.trim_end().strip_suffix('\\') {
                    joined.push_str(cont);
                    joined.push(' ');
                    pending = Some((start, joined));
                    continue;
                }
                joined.push_str(raw);
                if let Some(args) = pointact_args(&joined) {
                    found.push(Written {
                        file: file.to_owned(),
                        line: start,
                        args,
                        inline: false,
                    });
                }
            }
            Some(false) => {}
            None => {
                for m in inline.captures_iter(raw) {
                    let span = &m[1];
                    // Syntax notation, not a command line: `pointact <command> --help`.
                    if span.contains(['<', '[', '…']) || span.contains("...") {
                        continue;
                    }
                    if let Some(args) = pointact_args(span) {
                        found.push(Written {
                            file: file.to_owned(),
                            line: i + 1,
                            args,
                            inline: true,
                        });
                    }
                }
            }
        }
    }
    found
}

fn markdown_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    files_under(&root(), &mut files);
    files.retain(|f| {
        f.extension().is_some_and(|e| e == "md")
            && !f
                .strip_prefix(root())
                .is_ok_and(|r| r.starts_with(".git") || r.starts_with("target"))
    });
    files.sort();
    files
}

#[test]
fn every_command_line_in_the_docs_parses() {
    let mut checked = 0;
    let mut broken = Vec::new();
    for path in markdown_files() {
        let text = std::fs::read_to_string(&path).expect("readable Markdown");
        let name = path
            .strip_prefix(root())
            .unwrap_or(&path)
            .display()
            .to_string();
        for w in written_in(&name, &text) {
            checked += 1;
            let argv = std::iter::once("pointact".to_owned()).chain(w.args.iter().cloned());
            let Err(e) = Cli::try_parse_from(argv) else {
                continue;
            };
            let fine = match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => true,
                ErrorKind::MissingRequiredArgument
                | ErrorKind::MissingSubcommand
                | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => w.inline,
                // Prose names a flag without its value: "`pointact point --model` loads it".
                ErrorKind::InvalidValue => {
                    w.inline && w.args.last().is_some_and(|a| a.starts_with("--"))
                }
                _ => false,
            };
            if !fine {
                let first = e.to_string();
                let first = first.lines().next().unwrap_or_default().to_owned();
                broken.push(format!(
                    "{}:{}: pointact {}\n    {first}",
                    w.file,
                    w.line,
                    w.args.join(" ")
                ));
            }
        }
    }
    assert!(
        checked >= 20,
        "only {checked} command lines found in the Markdown files: is the extraction broken?"
    );
    assert!(
        broken.is_empty(),
        "{} of {checked} command lines in the docs do not parse:\n{}",
        broken.len(),
        broken.join("\n")
    );
}

#[test]
fn the_extraction_finds_what_a_user_would_type() {
    let md = "Run `pointact run --dry-run` first, or `pointact calibrate hand-eye`.\n\
              ```sh\n\
              cargo run --release -- run --seed 3   # a comment\n\
              RUST_LOG=info pointact eval sim \\\n  --suite tabletop | tee log\n\
              python3 run.py --server x\n\
              $ pointact --version\n\
              ```\n\
              ```text\npointact run [OPTIONS]\n```\n";
    let w = written_in("x.md", md);
    let got: Vec<(usize, bool, String)> = w
        .iter()
        .map(|w| (w.line, w.inline, w.args.join(" ")))
        .collect();
    assert_eq!(
        got,
        vec![
            (1, true, "run --dry-run".to_owned()),
            (1, true, "calibrate hand-eye".to_owned()),
            (3, false, "run --seed 3".to_owned()),
            (4, false, "eval sim --suite tabletop".to_owned()),
            (7, false, "--version".to_owned()),
        ]
    );
    assert_eq!(
        shell_words(r#"pointact run --instruction "put the pepper in the pan" 'a b' x\ y"#),
        [
            "pointact",
            "run",
            "--instruction",
            "put the pepper in the pan",
            "a b",
            "x y"
        ]
    );
}

#[test]
fn a_renamed_flag_in_the_docs_is_caught() {
    let w = written_in("x.md", "```sh\npointact run --no-such-flag 1\n```\n");
    let argv = std::iter::once("pointact".to_owned()).chain(w[0].args.iter().cloned());
    let e = Cli::try_parse_from(argv)
        .err()
        .expect("an unknown flag is an error");
    assert_eq!(e.kind(), ErrorKind::UnknownArgument);
}

#[test]
fn every_command_and_flag_says_what_it_does() {
    use clap::CommandFactory;
    fn walk(c: &clap::Command, path: &str, missing: &mut Vec<String>) {
        for a in c.get_arguments() {
            let id = a.get_id().as_str();
            if a.is_hide_set() || matches!(id, "help" | "version") {
                continue;
            }
            if a.get_help().is_none_or(|h| h.to_string().trim().is_empty()) {
                missing.push(format!("{path} --{}", a.get_long().unwrap_or(id)));
            }
        }
        for s in c.get_subcommands().filter(|s| !s.is_hide_set()) {
            let sub = format!("{path} {}", s.get_name());
            if s.get_about()
                .is_none_or(|h| h.to_string().trim().is_empty())
            {
                missing.push(sub.clone());
            }
            walk(s, &sub, missing);
        }
    }
    let mut missing = Vec::new();
    walk(&Cli::command(), "pointact", &mut missing);
    assert!(missing.is_empty(), "no help text: {missing:?}");
}
