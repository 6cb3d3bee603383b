//! Scratch folders for tests (used by the workspace's crates' own tests too, through `#[path]`).

use std::path::{Path, PathBuf};

/// A scratch folder under the system temp dir, unique to this process and `tag`, removed when
/// dropped (what a failed test leaves behind is gone at the next run, which clears it first).
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A fresh, empty, existing folder.
    pub fn new(tag: &str) -> Self {
        let d = Self::unmade(tag);
        std::fs::create_dir_all(&d.0).expect("create the temp dir");
        d
    }

    /// The path of a folder that does not exist yet (for code that must create it itself).
    pub fn unmade(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!("pointact-test-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn join(&self, p: impl AsRef<Path>) -> PathBuf {
        self.0.join(p)
    }
}

/// A fresh, empty, existing folder that stays after the test (for helpers that hand its path on);
/// the next run of the same test clears it first.
pub fn temp_dir(tag: &str) -> PathBuf {
    let d = TempDir::new(tag);
    let path = d.0.clone();
    std::mem::forget(d);
    path
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Every file under `root` by its path relative to `root`, with its bytes (to compare a folder
/// before and after).
pub fn read_tree(root: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}
