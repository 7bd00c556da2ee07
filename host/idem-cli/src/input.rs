//! Reading the documents commands take: a file, or `-` for standard input.

use std::io::Read;
use std::path::PathBuf;

use crate::exit::Failure;

/// Reads an operation document from a path or `-`.
pub fn read_op_bytes(path: &PathBuf) -> Result<Vec<u8>, Failure> {
    if path.as_os_str() == "-" {
        let mut buf = Vec::new();
        std::io::stdin()
            .read_to_end(&mut buf)
            .map_err(|e| Failure::input(format!("cannot read standard input: {e}")))?;
        Ok(buf)
    } else {
        std::fs::read(path)
            .map_err(|e| Failure::input(format!("cannot read {}: {e}", path.display())))
    }
}

/// Input text as a message shows it: at most 200 characters, in backticks.
pub fn shown(text: &str) -> String {
    const MAX: usize = 200;
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("`{}…`", &text[..cut]),
        None => format!("`{text}`"),
    }
}
