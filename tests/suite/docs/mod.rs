//! The documentation as a reader meets it: the README and the book in
//! `docs/` must not drift from the tree. Every relative link and every
//! repository path they name exists, every page is in the book's table of
//! contents, the CLI reference is what `idem … --help` prints, and the quick
//! start's commands run as written.

mod cli_reference;
mod links;
mod markdown;
mod quick_start;
mod readme_snippets;

use std::path::{Path, PathBuf};

use idem_tests::workspace_root;

/// Every Markdown file a reader may open: the README, the book, and the
/// READMEs beside the code (examples, policies), never build output.
fn markdown_files() -> Vec<PathBuf> {
    let root = workspace_root();
    let mut files = vec![root.join("README.md")];
    for dir in ["docs", "examples", "guest", "host", "tests", "wit"] {
        collect_markdown(&root.join(dir), &mut files);
    }
    files.sort();
    files
}

fn collect_markdown(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if path.is_dir() {
            if name != "target" && name != "node_modules" && !name.starts_with('.') {
                collect_markdown(&path, out);
            }
        } else if name.ends_with(".md") {
            out.push(path);
        }
    }
}

/// `path` relative to the workspace root, for messages.
fn shown(path: &Path) -> String {
    path.strip_prefix(workspace_root())
        .unwrap_or(path)
        .display()
        .to_string()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// Set to regenerate what the docs derive from the code (the CLI
/// reference) instead of failing on a difference.
const UPDATE_ENV: &str = "IDEM_UPDATE_DOCS";

fn updating() -> bool {
    std::env::var_os(UPDATE_ENV).is_some_and(|v| v == "1")
}
