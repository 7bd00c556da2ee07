//! The quick start runs as written. Every fenced `sh` block of
//! `docs/quick-start.md` and of the README is run, command by command, in
//! a scratch directory laid out like a built checkout (`target/release/idem`
//! is this build's CLI, `target/policies/` its policies, `guest/` and
//! `examples/` the tree's). A comment line right under a command is the
//! output the page promises: it must be a line the command printed, `…`
//! standing for any text. A block the suite cannot run says why in a
//! `<!-- not run: REASON -->` line just above it.

use std::path::Path;
use std::process::{Command, Stdio};

use idem_tests::{idem_bin, policies_dir, workspace_root};

use super::markdown::{self, Block};
use super::{read, shown};

const RUN: &[&str] = &["docs/quick-start.md", "README.md"];

/// One command of a block and the output promised under it.
#[derive(Debug, Default, PartialEq)]
struct Step {
    line: usize,
    command: String,
    expect: Vec<String>,
}

/// A block's commands: a command runs on over lines ending in `\`; the
/// comment lines directly under it are its promised output; a comment
/// before any command, or after a blank line, only explains.
fn steps(block: &Block) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let mut continued = false;
    let mut expecting = false;
    for (i, raw) in block.body.iter().enumerate() {
        let line = raw.trim();
        if line.is_empty() {
            expecting = false;
            continued = false;
        } else if continued {
            let step = steps.last_mut().expect("a continued command");
            step.command.push('\n');
            step.command.push_str(raw);
            continued = line.ends_with('\\');
        } else if let Some(comment) = line.strip_prefix('#') {
            if expecting {
                let step = steps.last_mut().expect("output under a command");
                step.expect.push(comment.trim().to_string());
            }
        } else {
            steps.push(Step {
                line: block.line + 1 + i,
                command: raw.to_string(),
                expect: Vec::new(),
            });
            continued = line.ends_with('\\');
            expecting = true;
        }
    }
    steps
}

/// `pattern` matches `line` with `…` standing for any text.
fn matches(pattern: &str, line: &str) -> bool {
    let parts: Vec<&str> = pattern.split('…').collect();
    let (first, rest) = parts.split_first().expect("split yields one part");
    let Some(mut tail) = line.strip_prefix(first) else {
        return false;
    };
    if rest.is_empty() {
        return tail.is_empty();
    }
    let (last, middle) = rest.split_last().expect("rest is not empty");
    for part in middle {
        match tail.find(part) {
            Some(at) => tail = &tail[at + part.len()..],
            None => return false,
        }
    }
    tail.ends_with(last)
}

/// A directory laid out like a checkout after `cargo xtask build`.
fn checkout() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = workspace_root();
    let link = |target: &Path, at: &Path| {
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, at).unwrap();
    };
    // The CLI itself is a hard link (a copy across file systems), not a
    // symlink: `idem demo` finds `target/policies/` beside its own path.
    let cli = dir.path().join("target/release/idem");
    std::fs::create_dir_all(cli.parent().unwrap()).unwrap();
    if std::fs::hard_link(idem_bin(), &cli).is_err() {
        std::fs::copy(idem_bin(), &cli).unwrap();
    }
    link(&policies_dir(), &dir.path().join("target/policies"));
    for tree in ["guest", "examples", "wit"] {
        link(&root.join(tree), &dir.path().join(tree));
    }
    dir
}

fn run_page(rel: &str) -> usize {
    let path = workspace_root().join(rel);
    let page = markdown::parse(&read(&path));
    let dir = checkout();
    let bin_dir = dir.path().join("target/release");
    let path_var = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut ran = 0;
    for block in page
        .blocks
        .iter()
        .filter(|b| b.lang == "sh" || b.lang == "bash")
    {
        if block.not_run.is_some() {
            continue;
        }
        for step in steps(block) {
            let out = Command::new("bash")
                .args(["-euo", "pipefail", "-c", &step.command])
                .current_dir(dir.path())
                .env("PATH", &path_var)
                .env("HOME", dir.path())
                .env("IDEM_CACHE_DIR", dir.path().join("cache"))
                .env_remove("IDEM_STORE")
                .stdin(Stdio::null())
                .output()
                .expect("bash runs");
            let printed = format!(
                "{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            let at = format!("{}:{}", shown(&path), step.line);
            assert!(
                out.status.success(),
                "{at}: `{}` failed ({}):\n{printed}",
                step.command,
                out.status
            );
            for want in &step.expect {
                assert!(
                    printed.lines().any(|l| matches(want, l.trim())),
                    "{at}: `{}` did not print the line the page promises:\n  promised: {want}\n  printed:\n{printed}",
                    step.command
                );
            }
            ran += 1;
        }
    }
    ran
}

#[test]
fn the_quick_start_runs_as_written() {
    let ran = run_page(RUN[0]);
    assert!(ran >= 5, "{} ran only {ran} commands", RUN[0]);
}

#[test]
fn the_readme_commands_run_as_written_or_say_why_not() {
    run_page(RUN[1]);
}

#[test]
fn a_block_splits_into_commands_and_their_promised_output() {
    let block = Block {
        lang: "sh".into(),
        line: 10,
        body: [
            "# builds it",
            "echo a \\",
            "  b   # both",
            "# a b",
            "",
            "# explains",
            "true",
        ]
        .map(String::from)
        .to_vec(),
        not_run: None,
    };
    let got = steps(&block);
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].command, "echo a \\\n  b   # both");
    assert_eq!(got[0].expect, ["a b"]);
    assert_eq!(got[0].line, 12);
    assert_eq!(got[1].expect, Vec::<String>::new());
    assert!(matches(
        r#"{"key":"7a…","x":1…}"#,
        r#"{"key":"7abc","x":1,"y":2}"#
    ));
    assert!(matches("executed 40", "executed 40"));
    assert!(!matches("executed 40", "executed 41"));
    assert!(!matches("a…c", "ab"));
}
