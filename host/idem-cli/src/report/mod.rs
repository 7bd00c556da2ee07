//! The faces of the report model ([`idem::forensics::report`]): what
//! `idem report`, `idem review` and `idem inspect` print, as text
//! ([`text`]), JSON ([`json`]) and the self-contained page of `idem report
//! --html` ([`page`]). The model is read once in the library; these only
//! render it, so every view names the same events, callers and causes.

pub mod json;
pub mod page;
pub mod text;

/// How much of an operation a line shows.
pub const OPERATION_CHARS: usize = 160;

/// A short form of a `namespace/key` for tables.
pub fn short_key(key: &str) -> String {
    match key.split_once('/') {
        // By characters: a namespace may hold a `/` and what follows it
        // need not be ASCII.
        Some((ns, hex)) => format!("{ns}/{}…", hex.chars().take(12).collect::<String>()),
        None => key.to_string(),
    }
}
