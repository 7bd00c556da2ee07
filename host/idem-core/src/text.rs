//! Text the host keeps or shows: policy-supplied text cut to a bound
//! before it is echoed ([`bounded`]), untrusted text escaped before a
//! person sees it ([`escaped`]), and the one character no store keeps
//! ([`unstorable`]).
//!
//! A policy is trusted to be correct, not to be well-behaved: its error
//! messages, field names and self-description end up in logs, terminals and
//! JSON answers, so none of them may be arbitrarily long. Rejection reasons
//! are refused past [`MAX_REASON_BYTES`](crate::duplicate::MAX_REASON_BYTES) by the
//! safety gate; everything else the host repeats is cut by [`bounded`].

/// The most of a policy error's message the host repeats, in bytes (the
/// bound of a rejection's reason).
pub const MAX_MESSAGE_BYTES: usize = 1024;

/// The most of a name (a field, a policy name quoted in an error) the host
/// repeats, in bytes.
pub const MAX_NAME_BYTES: usize = 128;

/// `text` unchanged when it fits in `max` bytes; otherwise its first bytes
/// up to a character boundary, and `…(N bytes)` saying how long it was.
///
/// ```
/// use idem_core::text::bounded;
/// assert_eq!(bounded("short", 10), "short");
/// assert_eq!(bounded(&"x".repeat(20), 4), "xxxx…(20 bytes)");
/// assert_eq!(bounded("ééé", 3), "é…(6 bytes)");
/// ```
pub fn bounded(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…({} bytes)", &text[..end], text.len())
}

/// Why `text` cannot be kept by a store, if it cannot: it holds a NUL
/// (`U+0000`), which PostgreSQL's text refuses and which cannot cross a
/// process's arguments or environment. idem refuses it everywhere (an
/// operation's names and values, run ids, error texts, reasons, names), on
/// every store alike, before anything is claimed.
///
/// ```
/// use idem_core::text::unstorable;
/// assert_eq!(unstorable("R-189"), None);
/// assert_eq!(
///     unstorable("R-\u{0}189").as_deref(),
///     Some("holds a NUL character (U+0000) at byte 2, which no store keeps")
/// );
/// ```
pub fn unstorable(text: &str) -> Option<String> {
    text.find('\0')
        .map(|at| format!("holds a NUL character (U+0000) at byte {at}, which no store keeps"))
}

/// Whether `c` would change how a terminal or a page shows the text around
/// it: a control character (C0, DEL, C1: escape sequences, carriage
/// returns, new lines that forge a log line) or a bidirectional formatting
/// character (`U+202E` makes `"\u{202e}RUE 0001"` read as "1000 EUR").
pub fn is_disguising(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061C}'                  // Arabic letter mark
            | '\u{200E}' | '\u{200F}'   // left-to-right and right-to-left marks
            | '\u{202A}'..='\u{202E}'   // embeddings and overrides
            | '\u{2066}'..='\u{2069}'   // isolates
            | '\u{2028}' | '\u{2029}'   // line and paragraph separators
        )
}

/// `text` as it may be shown to a person (a terminal line, a page, a log
/// line): every [`is_disguising`] character spelt `\u{…}`, so untrusted
/// text (an operation's field, a message id, a person's reason) can neither
/// move the cursor, forge a line nor reorder what surrounds it. Borrowed
/// when nothing needed escaping.
///
/// ```
/// use idem_core::text::escaped;
/// assert_eq!(escaped("R-189"), "R-189");
/// assert_eq!(escaped("a\u{1b}[2Jb"), "a\\u{1b}[2Jb");
/// assert_eq!(escaped("\u{202e}RUE 0001"), "\\u{202e}RUE 0001");
/// assert_eq!(escaped("one\nidem: forged"), "one\\u{a}idem: forged");
/// ```
pub fn escaped(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(is_disguising) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if is_disguising(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever the input, what is shown holds no character that
        /// disguises, and text without one is shown as it is.
        #[test]
        fn nothing_disguising_is_ever_shown(text in any::<String>()) {
            let shown = escaped(&text);
            prop_assert!(!shown.chars().any(is_disguising));
            if !text.chars().any(is_disguising) {
                prop_assert_eq!(shown.as_ref(), text.as_str());
            }
        }
    }
}
