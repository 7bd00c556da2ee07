//! A JavaScript policy's lines as its author wrote them. esbuild reprints
//! the policy and its imports into one bundle, so a line of the bundle is
//! not a line of `policy.js`; an exception inside the component names the
//! bundle's line. From esbuild's source map this module makes a table, one
//! entry per bundle line (the source file and line its first mapping
//! points at), which the build puts in the bundle for the SDK to name the
//! author's file and line when it reports a failure (`failure.js`).

use std::path::{Component, Path, PathBuf};

use anyhow::{Context, Result, bail};

/// The bundle's lines mapped back to their sources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineTable {
    /// The sources, as an author names them (`policy.js`,
    /// `@idem/policy/operation.js`).
    pub files: Vec<String>,
    /// Per bundle line (the first is line 1): the index in `files` and the
    /// 1-based source line, or `None` where nothing maps.
    pub lines: Vec<Option<(usize, u32)>>,
}

impl LineTable {
    /// The table as the statement the build appends to the bundle: lines as
    /// a flat array of `file, line` pairs (`-1, 0` where nothing maps).
    pub fn to_js(&self, global: &str, bundle_name: &str) -> String {
        let flat: Vec<i64> = self
            .lines
            .iter()
            .flat_map(|l| match l {
                Some((file, line)) => [*file as i64, i64::from(*line)],
                None => [-1, 0],
            })
            .collect();
        let table =
            serde_json::json!({ "bundle": bundle_name, "files": self.files, "lines": flat });
        format!("globalThis[Symbol.for({global:?})] = {table};\n")
    }
}

/// Reads esbuild's source map `map` (its `sources` relative to `map_dir`),
/// naming each source by `name`.
pub fn line_table(map: &str, map_dir: &Path, name: impl Fn(&Path) -> String) -> Result<LineTable> {
    let map: serde_json::Value =
        serde_json::from_str(map).context("esbuild's source map is not JSON")?;
    let files = map["sources"]
        .as_array()
        .context("esbuild's source map has no sources")?
        .iter()
        .map(|s| s.as_str().map(|s| name(&normalise(&map_dir.join(s)))))
        .collect::<Option<Vec<String>>>()
        .context("a source of esbuild's source map is not a string")?;
    let mappings = map["mappings"]
        .as_str()
        .context("esbuild's source map has no mappings")?;
    let lines = first_mappings(mappings)?;
    if let Some(bad) = lines
        .iter()
        .flatten()
        .find(|(file, _)| *file >= files.len())
    {
        bail!(
            "esbuild's source map names source {} of {}",
            bad.0,
            files.len()
        );
    }
    Ok(LineTable { files, lines })
}

/// Per generated line, the source and 1-based source line of its first
/// segment that has one. Segments are base64 VLQ fields, relative to the
/// previous segment (the column to the previous one on the same line).
fn first_mappings(mappings: &str) -> Result<Vec<Option<(usize, u32)>>> {
    let (mut source, mut line) = (0i64, 0i64);
    let mut out = Vec::new();
    for generated in mappings.split(';') {
        let mut first = None;
        for segment in generated.split(',').filter(|s| !s.is_empty()) {
            let fields = vlq(segment)?;
            if fields.len() >= 4 {
                source += fields[1];
                line += fields[2];
                if first.is_none() {
                    let source = usize::try_from(source).context("a negative source index")?;
                    let line = u32::try_from(line + 1).context("a source line out of range")?;
                    first = Some((source, line));
                }
            }
        }
        out.push(first);
    }
    Ok(out)
}

/// The signed numbers one segment spells in base64 VLQ.
fn vlq(segment: &str) -> Result<Vec<i64>> {
    const BASE64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut values = Vec::new();
    let (mut value, mut shift) = (0i64, 0u32);
    for c in segment.bytes() {
        let digit = BASE64
            .iter()
            .position(|&b| b == c)
            .with_context(|| format!("`{}` in a source map segment", c as char))?
            as i64;
        if shift > 60 {
            bail!("a source map number too long");
        }
        value += (digit & 31) << shift;
        if digit & 32 == 0 {
            values.push(if value & 1 == 1 {
                -(value >> 1)
            } else {
                value >> 1
            });
            (value, shift) = (0, 0);
        } else {
            shift += 5;
        }
    }
    Ok(values)
}

/// `path` without `.` and `..` (lexically: the sources may be gone).
fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vlq_reads_signed_numbers() {
        assert_eq!(vlq("AAAA").unwrap(), [0, 0, 0, 0]);
        assert_eq!(vlq("AACA").unwrap(), [0, 0, 1, 0]);
        assert_eq!(vlq("D").unwrap(), [-1]);
        assert_eq!(vlq("gB").unwrap(), [16]);
        assert!(vlq("A*").is_err());
    }

    #[test]
    fn each_line_takes_its_first_mapping() {
        // Line 1 maps nothing; line 2 maps to source 0, line 3; line 3 to
        // source 1, line 1 (its second segment is ignored); line 4 to
        // source 1, line 5.
        let map = r#"{"version":3,"sources":["../p/policy.js","../sdk/x.js"],"mappings":";AAEA;ACFA,AAAC;AAIA"}"#;
        let table = line_table(map, Path::new("/s/b"), |p| p.display().to_string()).unwrap();
        assert_eq!(table.files, ["/s/p/policy.js", "/s/sdk/x.js"]);
        assert_eq!(
            table.lines,
            [None, Some((0, 3)), Some((1, 1)), Some((1, 5))]
        );
        let js = table.to_js("idem.lines", "b.js");
        assert!(js.contains(r#""lines":[-1,0,0,3,1,1,1,5]"#), "{js}");
    }
}
