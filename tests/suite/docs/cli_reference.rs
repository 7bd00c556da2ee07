//! `docs/reference/cli.md` is generated from the CLI itself: every
//! command's `--help`, as a user sees it. The test regenerates it and fails
//! when the committed page differs (`IDEM_UPDATE_DOCS=1` writes it instead).
//! A second test checks that each command also has a page of the book that
//! explains it, not only its help.

use std::process::Command;

use idem_tests::{idem_bin, workspace_root};

use super::{UPDATE_ENV, markdown, read, updating};

const REFERENCE: &str = "docs/reference/cli.md";

/// `idem ARGS… --help`, with no `IDEM_*` variable set: clap prints an
/// environment variable's value beside its flag, and the page must not
/// depend on who generated it.
fn help(args: &[&str]) -> String {
    let mut cmd = Command::new(idem_bin());
    // clap wraps help to the terminal, at most 100 columns; the page is
    // always made at 100.
    cmd.args(args).arg("--help").env("COLUMNS", "100");
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("IDEM_") {
            cmd.env_remove(key);
        }
    }
    let out = cmd.output().expect("idem runs");
    assert!(
        out.status.success(),
        "idem {} --help failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("help is UTF-8")
}

/// The `Commands:` section of a help text: each subcommand's name and its
/// one-line summary (clap wraps a long one onto further-indented lines),
/// without clap's own `help`.
fn subcommands(help: &str) -> Vec<(String, String)> {
    let mut lines = help.lines().skip_while(|l| l.trim_end() != "Commands:");
    lines.next();
    let mut found: Vec<(String, String)> = Vec::new();
    for line in lines.take_while(|l| !l.trim().is_empty()) {
        let text = line.trim();
        if line.starts_with("  ") && !line[2..].starts_with(' ') {
            let (name, summary) = text.split_once(char::is_whitespace).unwrap_or((text, ""));
            found.push((name.to_string(), summary.trim().to_string()));
        } else if let Some((_, summary)) = found.last_mut() {
            summary.push(' ');
            summary.push_str(text);
        }
    }
    found.retain(|(name, _)| name != "help");
    found
}

/// Every command path below `prefix`, depth first, with its summary and
/// help text.
fn walk(prefix: &[String], out: &mut Vec<(Vec<String>, String, String)>) {
    let args: Vec<&str> = prefix.iter().map(String::as_str).collect();
    for (name, summary) in subcommands(&help(&args)) {
        let mut path = prefix.to_vec();
        path.push(name);
        let args: Vec<&str> = path.iter().map(String::as_str).collect();
        out.push((path.clone(), summary, help(&args)));
        walk(&path, out);
    }
}

fn render() -> String {
    let mut commands = Vec::new();
    walk(&[], &mut commands);
    let mut page = String::new();
    page.push_str("# The `idem` command line\n\n");
    page.push_str(&format!(
        "<!-- Generated from `idem … --help` by tests/suite/docs/cli_reference.rs: do not edit by hand.\n     Regenerate with `{UPDATE_ENV}=1 cargo test -p idem-tests --test suite docs::cli_reference`. -->\n\n"
    ));
    page.push_str(
        "Every command and flag, exactly as `idem COMMAND --help` prints it. The guides say when to\n\
         use each (see the [table of contents](../SUMMARY.md)); what each exit status means is on\n\
         [its own page](exit-codes.md), and the operation JSON the commands read\n\
         [on another](operation.md).\n\n",
    );
    page.push_str("| command | what it does |\n|---|---|\n");
    for (path, summary, _) in &commands {
        let title = format!("idem {}", path.join(" "));
        let anchor = markdown::slug(&format!("`{title}`"));
        page.push_str(&format!("| [`{title}`](#{anchor}) | {summary} |\n"));
    }
    page.push_str("\n## `idem`\n\n```text\n");
    page.push_str(help(&[]).trim_end());
    page.push_str("\n```\n");
    for (path, _, text) in &commands {
        page.push_str(&format!("\n## `idem {}`\n\n```text\n", path.join(" ")));
        page.push_str(text.trim_end());
        page.push_str("\n```\n");
    }
    page
}

#[test]
fn the_cli_reference_is_what_the_cli_prints() {
    let generated = render();
    let path = workspace_root().join(REFERENCE);
    if updating() {
        std::fs::write(&path, &generated).expect("the reference is writable");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != generated {
        let first = committed
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| committed.lines().count().min(generated.lines().count()));
        panic!(
            "{REFERENCE} differs from `idem … --help` from line {} on:\n  committed: {:?}\n  the CLI:   {:?}\nregenerate it with `{UPDATE_ENV}=1 cargo test -p idem-tests --test suite docs::cli_reference`",
            first + 1,
            committed.lines().nth(first).unwrap_or("(end of file)"),
            generated.lines().nth(first).unwrap_or("(end of file)"),
        );
    }
}

#[test]
fn every_command_is_explained_in_a_page_of_the_book() {
    let docs = workspace_root().join("docs");
    let reference = workspace_root().join(REFERENCE);
    let pages: Vec<String> = super::markdown_files()
        .into_iter()
        .filter(|f| f.starts_with(&docs) && *f != reference)
        .map(|f| read(&f))
        .collect();
    let mut commands = Vec::new();
    walk(&[], &mut commands);
    let unexplained: Vec<String> = commands
        .iter()
        .map(|(path, _, _)| format!("idem {}", path.join(" ")))
        .filter(|name| !pages.iter().any(|p| mentions(p, name)))
        .collect();
    assert!(
        unexplained.is_empty(),
        "no page of docs/ but the generated reference explains {}",
        unexplained.join(", ")
    );
}

/// Whether `text` names the command `name` as a whole word (`idem run`,
/// not `idem runner`).
fn mentions(text: &str, name: &str) -> bool {
    text.match_indices(name).any(|(i, _)| {
        !text[i + name.len()..]
            .chars()
            .next()
            .is_some_and(|c| c.is_alphanumeric() || c == '-' || c == '_')
    })
}
