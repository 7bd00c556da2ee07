//! Policy-supplied text, cut to a bound before the host echoes it.
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
