//! A panic's message and place, told to the host before the trap.
//!
//! On wasm a panic aborts with a bare `unreachable` trap, which carries no
//! text: the message would be lost. The export glue ([`export_policy!`])
//! therefore installs a panic hook at the start of every call (each call is
//! a fresh instance, so there is no earlier one to rely on) that hands the
//! message and its `file:line:column` to the contract's
//! `diagnostics.failing`, as the JavaScript and Python SDKs do for an
//! uncaught exception. The host shows it as the failure's cause; nothing
//! comes back, so the policy stays deterministic.
//!
//! [`export_policy!`]: crate::export_policy

use std::panic::PanicHookInfo;

/// The most of a panic's message the guest passes on: the host keeps the
/// first 2 KiB of what it is told, and the place comes after the message,
/// so a long message is cut here to leave room for the place.
const MAX_MESSAGE_BYTES: usize = 1024;

/// Installs the hook. Called by the export glue before the policy runs.
pub fn report_panics() {
    std::panic::set_hook(Box::new(|info| {
        crate::bindings::idem::policy::diagnostics::failing(&describe(info));
    }));
}

/// `panic: MESSAGE at FILE:LINE:COLUMN`, the shape of the other SDKs'
/// `TYPE: MESSAGE at PLACE`.
fn describe(info: &PanicHookInfo<'_>) -> String {
    let message = match info.payload_as_str() {
        Some(text) => cut(text),
        // `panic_any` with a value that is not text.
        None => "a panic without a message".into(),
    };
    match info.location() {
        Some(at) => format!(
            "panic: {message} at {}:{}:{}",
            at.file(),
            at.line(),
            at.column()
        ),
        None => format!("panic: {message}"),
    }
}

/// `text` cut to [`MAX_MESSAGE_BYTES`] on a character boundary, an ellipsis
/// saying so.
fn cut(text: &str) -> String {
    if text.len() <= MAX_MESSAGE_BYTES {
        return text.into();
    }
    let mut end = MAX_MESSAGE_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}
