//! Writes the commit this binary is built from into `OUT_DIR/commit.txt`, for `pointact
//! --version`: a bug report then names the exact source. Outside a git checkout (a source
//! tarball, `cargo install` from a registry) it says "unknown commit". The file is read only by
//! the binary (`include_str!`), and the script reruns only when HEAD moves.

use std::path::PathBuf;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .filter(|s| !s.is_empty())
}

fn main() {
    let commit = match (
        git(&["rev-parse", "--short=12", "HEAD"]),
        git(&["log", "-1", "--format=%cs"]),
    ) {
        (Some(hash), Some(date)) => format!("commit {hash}, {date}"),
        (Some(hash), None) => format!("commit {hash}"),
        _ => "unknown commit".to_owned(),
    };
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(out.join("commit.txt"), commit).expect("OUT_DIR is writable");

    // HEAD names a branch; the branch's file (or packed-refs) moves with each commit.
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        let dir = PathBuf::from(dir);
        println!("cargo:rerun-if-changed={}", dir.join("HEAD").display());
        println!(
            "cargo:rerun-if-changed={}",
            dir.join("packed-refs").display()
        );
        if let Some(head_ref) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={}", dir.join(head_ref).display());
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
