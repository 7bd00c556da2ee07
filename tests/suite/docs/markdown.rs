//! Just enough Markdown to check a page: its headings (as GitHub makes
//! anchors of them), its links, its inline code spans and its fenced
//! blocks, each with the line it is on. Fenced blocks are opaque: a link or
//! a path inside one is an example, not a reference.

/// One page, taken apart.
#[derive(Debug, Default)]
pub struct Page {
    /// GitHub's anchor for each heading, in order (repeats numbered).
    pub anchors: Vec<String>,
    /// `(line, target)` of every inline or reference-style link and image.
    pub links: Vec<(usize, String)>,
    /// `(line, text)` of every inline code span.
    pub code_spans: Vec<(usize, String)>,
    /// Every fenced block.
    pub blocks: Vec<Block>,
}

/// A fenced code block.
#[derive(Debug)]
pub struct Block {
    /// The first word of its info string (`sh`, `rust`, `text`, …).
    pub lang: String,
    /// The line of its opening fence (1-based).
    pub line: usize,
    /// Its lines, without the fences.
    pub body: Vec<String>,
    /// The reason given in a `<!-- not run: REASON -->` comment on the
    /// line just before the fence, if any.
    pub not_run: Option<String>,
}

/// Parses `text`.
pub fn parse(text: &str) -> Page {
    let mut page = Page::default();
    let mut fence: Option<(String, Block)> = None;
    let mut previous = "";
    let mut seen: std::collections::HashMap<String, usize> = Default::default();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let trimmed = line.trim_start();
        if let Some((marker, block)) = &mut fence {
            if trimmed.starts_with(marker.as_str()) && trimmed.trim_end() == marker.as_str() {
                let (_, block) = fence.take().expect("inside a fence");
                page.blocks.push(block);
            } else {
                block.body.push(line.to_string());
            }
            previous = line;
            continue;
        }
        if let Some(marker) = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m)) {
            let ticks = trimmed
                .chars()
                .take_while(|c| c == &marker.chars().next().unwrap());
            let marker: String = ticks.collect();
            let info = trimmed[marker.len()..].trim();
            let not_run = previous
                .trim()
                .strip_prefix("<!-- not run:")
                .and_then(|r| r.strip_suffix("-->"))
                .map(|r| r.trim().to_string());
            fence = Some((
                marker,
                Block {
                    lang: info.split_whitespace().next().unwrap_or("").to_string(),
                    line: n,
                    body: Vec::new(),
                    not_run,
                },
            ));
            previous = line;
            continue;
        }
        if let Some(heading) = heading_text(trimmed) {
            let slug = slug(&heading);
            let count = seen.entry(slug.clone()).or_default();
            page.anchors.push(if *count == 0 {
                slug
            } else {
                format!("{slug}-{count}")
            });
            *count += 1;
        }
        scan_inline(line, n, &mut page);
        previous = line;
    }
    page
}

fn heading_text(line: &str) -> Option<String> {
    let hashes = line.chars().take_while(|c| *c == '#').count();
    if hashes == 0 || hashes > 6 || !line[hashes..].starts_with(' ') {
        return None;
    }
    Some(
        line[hashes..]
            .trim()
            .trim_end_matches('#')
            .trim()
            .to_string(),
    )
}

/// GitHub's anchor for a heading: lower case, punctuation dropped (but `-`
/// and `_`), spaces to hyphens.
pub fn slug(heading: &str) -> String {
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

fn scan_inline(line: &str, n: usize, page: &mut Page) {
    // A reference-style definition: `[name]: target`.
    let t = line.trim_start();
    if t.starts_with('[')
        && let Some(end) = t.find("]:")
    {
        let target = t[end + 2..].split_whitespace().next().unwrap_or("");
        if !target.is_empty() {
            page.links.push((n, target.to_string()));
        }
        return;
    }
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'`' => {
                let run = bytes[i..].iter().take_while(|b| **b == b'`').count();
                let delim = &line[i..i + run];
                if let Some(end) = line[i + run..].find(delim) {
                    let span = line[i + run..i + run + end].trim();
                    page.code_spans.push((n, span.to_string()));
                    i += run + end + run;
                } else {
                    i += run;
                }
            }
            b']' if bytes.get(i + 1) == Some(&b'(') => {
                let rest = &line[i + 2..];
                if let Some(end) = rest.find(')') {
                    let target = rest[..end].split_whitespace().next().unwrap_or("");
                    let target = target.trim_start_matches('<').trim_end_matches('>');
                    page.links.push((n, target.to_string()));
                    i += 2 + end;
                } else {
                    i += 2;
                }
            }
            _ => i += 1,
        }
    }
}

#[test]
fn the_parser_reads_what_it_checks() {
    let page = parse(
        "# A `code` title\n\nSee [x](a.md#b) and `host/idem`.\n<!-- not run: slow -->\n```sh\n[y](no.md)\n```\n## A `code` title\n[r]: ref.md\n",
    );
    assert_eq!(page.anchors, ["a-code-title", "a-code-title-1"]);
    assert_eq!(
        page.links,
        [(3, "a.md#b".to_string()), (9, "ref.md".to_string())]
    );
    assert!(page.code_spans.contains(&(3, "host/idem".to_string())));
    assert_eq!(page.blocks.len(), 1);
    assert_eq!(page.blocks[0].lang, "sh");
    assert_eq!(page.blocks[0].not_run.as_deref(), Some("slow"));
    assert_eq!(page.blocks[0].body, ["[y](no.md)"]);
}
