//! The project speaks for itself: no file narrates how it was made (periods of work, issue numbers
//! as history), cites a document that is not in the repository, or names an absolute path outside
//! it (other than the standard system folders). The history belongs in `git log`; the facts, with
//! their primary sources, in the files and docs/references.md.
//!
//! The patterns are data of this file, so this file is the one it does not scan.

use std::path::{Path, PathBuf};
use std::process::Command;

use regex::Regex;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The project's files: what git tracks plus new files it does not ignore; without git (a source
/// tarball) every file outside `target/` and `.git/`.
fn project_files() -> Vec<PathBuf> {
    let listed = Command::new("git")
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .current_dir(root())
        .output()
        .ok()
        .filter(|o| o.status.success());
    let mut files: Vec<PathBuf> = match listed {
        Some(o) => o
            .stdout
            .split(|b| *b == 0)
            .filter(|p| !p.is_empty())
            .map(|p| root().join(String::from_utf8_lossy(p).as_ref()))
            .collect(),
        None => {
            let mut all = Vec::new();
            walk(&root(), &mut all);
            all
        }
    };
    files.retain(|f| f.is_file());
    files.sort();
    files
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        let name = e.file_name();
        if p.is_dir() {
            if name != "target" && name != ".git" {
                walk(&p, out);
            }
        } else {
            out.push(p);
        }
    }
}

/// A rule: what it finds, and what the finding means.
struct Rule {
    re: Regex,
    why: &'static str,
    /// Upstream numbers are citations, not history: `opencv/opencv PR #24897`.
    upstream_ok: bool,
}

/// Whether the text just before a match names an upstream repository (`owner/repo`).
fn after_upstream_repo(before: &str) -> bool {
    let re = Regex::new(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+\s*$").expect("valid regex");
    re.is_match(before)
}

fn rules() -> Vec<Rule> {
    let r = |pattern: &str, why: &'static str| Rule {
        re: Regex::new(pattern).expect("valid regex"),
        why,
        upstream_ok: false,
    };
    vec![
        r(
            r"\.\./shared\b|\bshared[/ ]reference\b",
            "cites a folder outside the repository",
        ),
        r(
            r"(?i)\bsessions?\s+\d+\b|\bperiods? of work\b",
            "narrates a period of work (the history is in git log)",
        ),
        Rule {
            upstream_ok: true,
            ..r(
                r"(?i)\b(?:issues?|tasks?|PR|pull request)\s+#?\d+\b|(?:^|[\s(\[,;])#\d{1,4}\b",
                "gives an issue number as history",
            )
        },
        r(
            r#"(?:^|[\s"'`(=:,\[])/(?:work|root|home|Users|old_root|farm|scratch)/"#,
            "names an absolute path outside the repository (use ~ or a path relative to the repository)",
        ),
    ]
}

/// The notes the project was first built from (their names without `.md`); they are not part of
/// it.
const NOTES: [&str; 8] = [
    "robots",
    "simplerenv",
    "planning",
    "grpo",
    "qwen25vl",
    "cpu_inference",
    "embodied_r1_prompts",
    "DESIGN",
];

/// Markdown names that must be files of the repository when a file cites them: a section cited
/// by `NAME.md §…`, or one of the notes' names, without a folder; resolved beside the citing file
/// or at the root (elsewhere a citation names its folder: `docs/references.md §3`). Upstream
/// documents cited by their own file name (UFACTORY's `p05communication-format.md`) are fine.
fn unresolved_markdown(file: &Path, text: &str) -> Vec<(usize, String)> {
    let re = Regex::new(r"(?:^|[^A-Za-z0-9_./-])([A-Za-z0-9_-]+\.(?:md|json))\b(`?\s*§)?")
        .expect("valid regex");
    let dir = file.parent().unwrap_or(Path::new("."));
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        for c in re.captures_iter(line) {
            let name = &c[1];
            let a_note = name
                .strip_suffix(".md")
                .is_some_and(|stem| NOTES.contains(&stem))
                || name == "layers.json";
            if c.get(2).is_none() && !a_note {
                continue;
            }
            let exists = [dir.join(name), root().join(name)]
                .iter()
                .any(|p| p.is_file());
            if !exists {
                out.push((i + 1, name.to_owned()));
            }
        }
    }
    out
}

fn scan(path: &Path, text: &str, rules: &[Rule]) -> Vec<String> {
    let shown = path.strip_prefix(root()).unwrap_or(path).display();
    let mut found = Vec::new();
    for (i, line) in text.lines().enumerate() {
        for rule in rules {
            let found_here = rule
                .re
                .find_iter(line)
                .find(|m| !(rule.upstream_ok && after_upstream_repo(&line[..m.start()])));
            if let Some(m) = found_here {
                found.push(format!(
                    "{shown}:{}: {} (`{}`)",
                    i + 1,
                    rule.why,
                    m.as_str().trim()
                ));
            }
        }
    }
    for (line, name) in unresolved_markdown(path, text) {
        found.push(format!(
            "{shown}:{line}: cites {name}, which is not a file of the repository"
        ));
    }
    found
}

#[test]
fn no_project_file_narrates_its_making_or_cites_outside_the_repository() {
    let this = root().join(file!());
    let rules = rules();
    let mut found = Vec::new();
    let mut scanned = 0;
    for path in project_files() {
        if path == this {
            continue;
        }
        let Ok(bytes) = std::fs::read(&path) else {
            continue;
        };
        // Text only: weights, images and other binary fixtures have nothing to say.
        if bytes.contains(&0) {
            continue;
        }
        let Ok(text) = String::from_utf8(bytes) else {
            continue;
        };
        scanned += 1;
        found.extend(scan(&path, &text, &rules));
    }
    assert!(
        scanned > 100,
        "only {scanned} text files scanned: is the listing broken?"
    );
    assert!(
        found.is_empty(),
        "{} finding(s):\n{}",
        found.len(),
        found.join("\n")
    );
}

#[test]
fn each_rule_catches_what_it_is_for() {
    let rules = rules();
    let fake = root().join("src/fake.rs");
    let hits = |line: &str| scan(&fake, line, &rules).len();
    for bad in [
        "// see ../shared/DESIGN.md",
        "as the shared reference says",
        "Measured in session 16 on the AVX-512 box.",
        "fixed in issue #15",
        "Under realistic conditions (issue 15)",
        "a regression since #10",
        "venv at /root/.cache/x/bin/python",
        "cd /work/main && cargo test",
        "the xArm frame layout (qwen25vl.md §1.5)",
        "SimplerEnv's controller (simplerenv.md §3)",
        "the layering rules (layers.json)",
        "see `grpo.md`",
        "as decided in PR #12",
    ] {
        assert_eq!(hits(bad), 1, "not caught: {bad}");
    }
    for good in [
        "#[derive(Debug)]",
        "# 1 Mbps as shipped",
        "see docs/references.md and README.md",
        "cargo install --path .",
        "librealsense2 in /usr/lib/x86_64-linux-gnu/",
        "the cache in ~/.cache/pointact/pyenv",
        "color = \"#1f77b4\"",
        "20 sessions of the trainer's own shuffle",
        "since 4.10 (opencv/opencv PR #24897)",
        "python-pillow/Pillow#9549 changed it",
        "UFACTORY `p05communication-format.md`",
        "the detector's `PARITY.md`",
    ] {
        assert_eq!(hits(good), 0, "false hit: {good}");
    }
}

/// GitHub's anchor for a heading: lower case, spaces to hyphens, punctuation other than `-` and
/// `_` dropped; a repeated heading gets `-1`, `-2`, ….
fn anchors(markdown: &str) -> std::collections::HashSet<String> {
    let mut seen = std::collections::HashMap::<String, usize>::new();
    let mut out = std::collections::HashSet::new();
    let mut fenced = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let Some(title) = line.strip_prefix('#') else {
            continue;
        };
        if fenced {
            continue;
        }
        let title = title.trim_start_matches('#').trim();
        let slug: String = title
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        let n = seen.entry(slug.clone()).or_insert(0);
        out.insert(if *n == 0 {
            slug.clone()
        } else {
            format!("{slug}-{n}")
        });
        *n += 1;
    }
    out
}

#[test]
fn every_relative_link_in_the_markdown_resolves() {
    let link = Regex::new(r"\]\(([^)\s]+)\)").expect("valid regex");
    let mut broken = Vec::new();
    let mut checked = 0;
    for path in project_files() {
        if path.extension().is_none_or(|e| e != "md") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("Markdown is UTF-8");
        let shown = path
            .strip_prefix(root())
            .unwrap_or(&path)
            .display()
            .to_string();
        for (i, line) in text.lines().enumerate() {
            for c in link.captures_iter(line) {
                let target = &c[1];
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                checked += 1;
                let (file, anchor) = target.split_once('#').unwrap_or((target, ""));
                let dest = if file.is_empty() {
                    path.clone()
                } else {
                    path.parent().unwrap_or(Path::new(".")).join(file)
                };
                if !dest.exists() {
                    broken.push(format!("{shown}:{}: {target}: no such file", i + 1));
                    continue;
                }
                if !anchor.is_empty() && dest.extension().is_some_and(|e| e == "md") {
                    let text = std::fs::read_to_string(&dest).unwrap_or_default();
                    if !anchors(&text).contains(anchor) {
                        broken.push(format!("{shown}:{}: {target}: no such heading", i + 1));
                    }
                }
            }
        }
    }
    assert!(
        checked > 20,
        "only {checked} links found: is the parsing broken?"
    );
    assert!(
        broken.is_empty(),
        "{} broken link(s):\n{}",
        broken.len(),
        broken.join("\n")
    );
}

#[test]
fn anchors_follow_githubs_rule() {
    let a = anchors("# pointact run\n## What is verified, and against what\n```sh\n# not a heading\n```\n## Run\n## Run\n");
    for want in [
        "pointact-run",
        "what-is-verified-and-against-what",
        "run",
        "run-1",
    ] {
        assert!(a.contains(want), "{want} missing from {a:?}");
    }
    assert!(!a.contains("not-a-heading"));
}

/// The packages after the first `sudo apt-get install -y` in a text.
fn first_apt_line(text: &str) -> Option<Vec<String>> {
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("sudo apt-get install -y "))?;
    let packages = line.trim_start()["sudo apt-get install -y ".len()..]
        .split('#')
        .next()?;
    Some(packages.split_whitespace().map(str::to_owned).collect())
}

/// The README's prerequisites are what the fresh-machine check installs, so the check tests the
/// README a new user follows.
#[test]
fn the_fresh_machine_check_installs_the_readmes_prerequisites() {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let script = std::fs::read_to_string(root().join("scripts/fresh-debian-check.sh"))
        .expect("scripts/fresh-debian-check.sh");
    let wanted = first_apt_line(&readme).expect("the README names its prerequisites");
    let re = Regex::new(r#"(?m)^PREREQS="([^"]*)""#).expect("valid regex");
    let checked: Vec<String> = re.captures(&script).expect("the script sets PREREQS=\"…\"")[1]
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    assert_eq!(
        checked, wanted,
        "scripts/fresh-debian-check.sh's PREREQS differ from the README's prerequisites line"
    );
    assert!(
        wanted.iter().any(|p| p == "build-essential"),
        "the C toolchain is a prerequisite: {wanted:?}"
    );
}
