//! Links and paths: what the README and the book point at exists.

use std::path::{Path, PathBuf};

use idem_tests::workspace_root;

use super::markdown::{self, Page};
use super::{markdown_files, read, shown};

/// The README is a front page: the reference lives in the book.
const README_MAX_BYTES: usize = 10 * 1024;
/// A line a reader can take in; tables included.
const LINE_MAX_CHARS: usize = 300;

fn pages() -> Vec<(PathBuf, Page)> {
    markdown_files()
        .into_iter()
        .map(|f| {
            let page = markdown::parse(&read(&f));
            (f, page)
        })
        .collect()
}

/// Why each broken reference is broken, one line each; the test fails on
/// any.
fn report(kind: &str, broken: Vec<String>) {
    assert!(
        broken.is_empty(),
        "{} broken {kind}:\n  {}",
        broken.len(),
        broken.join("\n  ")
    );
}

#[test]
fn every_relative_link_resolves_to_a_file_and_its_anchor() {
    let mut broken = Vec::new();
    for (file, page) in pages() {
        for (line, target) in &page.links {
            if let Some(why) = check_link(&file, &page, target) {
                broken.push(format!("{}:{line}: ({target}) {why}", shown(&file)));
            }
        }
    }
    report("links", broken);
}

fn check_link(file: &Path, page: &Page, target: &str) -> Option<String> {
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (path, anchor) = match target.split_once('#') {
        Some((p, a)) => (p, Some(a)),
        None => (target, None),
    };
    let (resolved, anchors) = if path.is_empty() {
        (file.to_path_buf(), page.anchors.clone())
    } else {
        let resolved = file.parent().expect("a file has a folder").join(path);
        if !resolved.exists() {
            return Some(format!("{} does not exist", shown(&resolved)));
        }
        let anchors = if resolved.extension().is_some_and(|e| e == "md") && anchor.is_some() {
            markdown::parse(&read(&resolved)).anchors
        } else {
            Vec::new()
        };
        (resolved, anchors)
    };
    match anchor {
        Some(a)
            if resolved.extension().is_some_and(|e| e == "md")
                && !anchors.iter().any(|x| x == a) =>
        {
            Some(format!(
                "{} has no heading with anchor #{a}",
                shown(&resolved)
            ))
        }
        _ => None,
    }
}

/// The top-level folders of the repository: a code span starting with one
/// of them and a `/` names a repository path.
fn top_level_folders() -> Vec<String> {
    std::fs::read_dir(workspace_root())
        .expect("the workspace root is readable")
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "target" && n != ".git")
        .collect()
}

#[test]
fn every_repository_path_named_in_the_docs_exists() {
    let folders = top_level_folders();
    let root = workspace_root();
    let mut broken = Vec::new();
    for (file, page) in pages() {
        for (line, span) in &page.code_spans {
            let Some(path) = repository_path(span, &folders) else {
                continue;
            };
            if !root.join(path).exists() {
                broken.push(format!("{}:{line}: `{span}` does not exist", shown(&file)));
            }
        }
    }
    report("repository paths", broken);
}

/// The path a code span names, if it names one: `host/idem-store/src/`,
/// `tests/suite/chaos.rs` (a `:LINE` suffix dropped), `guest/policies/*`
/// (the part before the wildcard). Spans that are commands, placeholders
/// (`<…>`, `{…}`, `…`) or names with spaces are not paths.
fn repository_path<'a>(span: &'a str, folders: &[String]) -> Option<&'a str> {
    if span.contains(char::is_whitespace)
        || span.contains(['<', '{', '…', '$'])
        || span.contains("...")
    {
        return None;
    }
    let (first, _) = span.split_once('/')?;
    if !folders.iter().any(|f| f == first) {
        return None;
    }
    let path = span.split('*').next().unwrap_or(span);
    let path = match path.rsplit_once(':') {
        Some((p, n)) if n.chars().all(|c| c.is_ascii_digit()) => p,
        _ => path,
    };
    Some(path)
}

#[test]
fn every_page_of_the_book_is_in_its_table_of_contents() {
    let docs = workspace_root().join("docs");
    let summary = docs.join("SUMMARY.md");
    let listed: Vec<PathBuf> = markdown::parse(&read(&summary))
        .links
        .into_iter()
        .map(|(_, t)| docs.join(t.split('#').next().unwrap_or("")))
        .collect();
    let mut missing = Vec::new();
    for file in markdown_files() {
        if file.starts_with(&docs) && file != summary && !listed.contains(&file) {
            missing.push(shown(&file));
        }
    }
    report("pages missing from docs/SUMMARY.md", missing);
}

#[test]
fn the_front_page_is_short_and_no_line_runs_on() {
    let readme = read(&workspace_root().join("README.md"));
    assert!(
        readme.len() <= README_MAX_BYTES,
        "README.md is {} bytes, over {README_MAX_BYTES}: move the detail to a page of the book in docs/",
        readme.len()
    );
    let mut long = Vec::new();
    for file in markdown_files() {
        for (i, line) in read(&file).lines().enumerate() {
            let chars = line.chars().count();
            if chars > LINE_MAX_CHARS {
                long.push(format!("{}:{}: {chars} characters", shown(&file), i + 1));
            }
        }
    }
    report(&format!("lines over {LINE_MAX_CHARS} characters"), long);
}

#[test]
fn a_path_is_told_from_a_command_or_a_placeholder() {
    let folders: Vec<String> = ["host", "tests", "docs"].map(String::from).to_vec();
    assert_eq!(
        repository_path("host/idem/src", &folders),
        Some("host/idem/src")
    );
    assert_eq!(
        repository_path("tests/suite/chaos.rs:12", &folders),
        Some("tests/suite/chaos.rs")
    );
    assert_eq!(repository_path("guest/x", &folders), None);
    assert_eq!(repository_path("docs/*.md", &folders), Some("docs/"));
    assert_eq!(repository_path("host/<crate>/src", &folders), None);
    assert_eq!(repository_path("cargo test -p host/x", &folders), None);
    assert_eq!(repository_path("a/b", &folders), None);
}
