//! The README's Rust snippets are excerpts of the book's, which compile as
//! doctests (`tests/src/book.rs`): each README block's lines, comments and
//! spacing aside, appear in that order and together in one ```rust block
//! of a guide page. So a reader who copies one gets code that compiles in
//! its context, and a change of API that breaks the book breaks the README's
//! check too.

use idem_tests::workspace_root;

/// The ```rust blocks of a Markdown text, each as its lines; with
/// `visible_only`, without the lines the book hides (`# `).
fn rust_blocks(text: &str, visible_only: bool) -> Vec<Vec<String>> {
    let mut blocks = Vec::new();
    let mut current: Option<Vec<String>> = None;
    for line in text.lines() {
        match &mut current {
            None if line.starts_with("```rust") => current = Some(Vec::new()),
            None => {}
            Some(_) if line.trim_end() == "```" => blocks.extend(current.take()),
            Some(block) => {
                let hidden = line.trim_start() == "#" || line.trim_start().starts_with("# ");
                if !(visible_only && hidden) {
                    block.push(line.to_string());
                }
            }
        }
    }
    blocks
}

/// A line as compared: without its `//` comment (outside string
/// literals), runs of white space as one space; comment-only and blank
/// lines vanish.
fn code_of(line: &str) -> Option<String> {
    let mut in_string = false;
    let mut end = line.len();
    let bytes = line.as_bytes();
    for i in 0..bytes.len() {
        match bytes[i] {
            b'"' if i == 0 || bytes[i - 1] != b'\\' => in_string = !in_string,
            b'/' if !in_string && bytes.get(i + 1) == Some(&b'/') => {
                end = i;
                break;
            }
            _ => {}
        }
    }
    let code = line[..end].split_whitespace().collect::<Vec<_>>().join(" ");
    (!code.is_empty()).then_some(code)
}

fn code_lines(block: &[String]) -> Vec<String> {
    block.iter().filter_map(|l| code_of(l)).collect()
}

#[test]
fn readme_snippets_are_excerpts_of_compiled_book_snippets() {
    let root = workspace_root();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let mut book = Vec::new();
    for entry in std::fs::read_dir(root.join("docs/guide")).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        for block in rust_blocks(&text, true) {
            book.push((path.clone(), code_lines(&block)));
        }
    }
    let snippets = rust_blocks(&readme, false);
    assert!(
        !snippets.is_empty(),
        "the README has Rust snippets to check"
    );
    for snippet in snippets {
        let wanted = code_lines(&snippet);
        let found = book.iter().find(|(_, lines)| {
            lines
                .windows(wanted.len())
                .any(|window| window == wanted.as_slice())
        });
        assert!(
            found.is_some(),
            "this README snippet is not an excerpt of any guide page's ```rust block \
             (those compile as doctests); make it one:\n{}",
            snippet.join("\n")
        );
    }
}

#[test]
fn the_comparison_ignores_comments_and_spacing_only() {
    assert_eq!(
        code_of(r#"    let a  =  f("x // y"); // why"#).as_deref(),
        Some(r#"let a = f("x // y");"#)
    );
    assert_eq!(code_of("    // only a comment"), None);
    assert_eq!(code_of("   "), None);
    let text = "```rust\nvisible();\n# hidden();\n```\n```sh\nnot rust\n```\n";
    assert_eq!(
        rust_blocks(text, true),
        vec![vec!["visible();".to_string()]]
    );
    assert_eq!(rust_blocks(text, false)[0].len(), 2);
}
