//! The one import a policy may have: `idem:policy/diagnostics`, through
//! which a failing policy says why before it traps. A wasm trap carries no
//! text, so without it a JavaScript exception or a Python traceback reaches
//! the host as a bare `unreachable`.
//!
//! The text is the guest's and untrusted: the host keeps the first message
//! of an evaluation, cut to [`MAX_SAID_BYTES`] and escaped
//! ([`idem_core::text::escaped`]), and shows it only when the call then
//! fails. Nothing flows back to the guest, so a policy that reports is as
//! deterministic as one that does not.

use wasmtime::component::{Linker, WasmStr};

use super::error::LoadError;
use super::limiter::EvalState;

/// The interface, as the host provides it (any compatible 0.1.x import is
/// linked to it).
pub(crate) const DIAGNOSTICS_INTERFACE: &str = "idem:policy/diagnostics@0.1.0";
/// What an import of it starts with at a version this host links.
pub(crate) const COMPATIBLE_PREFIX: &str = "idem:policy/diagnostics@0.1.";

/// The most of a policy's message the host keeps, in bytes: a traceback's
/// last line and a few frames fit; a policy cannot fill the host's memory
/// or a terminal with it.
pub const MAX_SAID_BYTES: usize = 2048;

/// Defines `failing` in `linker`.
pub(crate) fn add_to_linker(linker: &mut Linker<EvalState>) -> Result<(), LoadError> {
    let runtime = |e: wasmtime::Error| LoadError::Runtime(format!("{e:#}"));
    linker
        .instance(DIAGNOSTICS_INTERFACE)
        .map_err(runtime)?
        .func_wrap(
            "failing",
            |mut store: wasmtime::StoreContextMut<'_, EvalState>, (message,): (WasmStr,)| {
                if store.data().said.is_none() {
                    // Only the kept prefix is copied out of the guest's memory.
                    let said = bounded(&message.to_str(&store)?);
                    store.data_mut().said = Some(said);
                }
                Ok(())
            },
        )
        .map_err(runtime)?;
    Ok(())
}

/// `text` cut to [`MAX_SAID_BYTES`] on a character boundary (an ellipsis
/// saying so), then escaped: one line, whatever the policy wrote.
pub(crate) fn bounded(text: &str) -> String {
    let mut end = text.len().min(MAX_SAID_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let cut = &text[..end];
    let mut kept = idem_core::text::escaped(cut.trim_end()).into_owned();
    if end < text.len() {
        kept.push('…');
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_cut_on_a_character_boundary_and_escaped() {
        assert_eq!(
            bounded("TypeError: x (policy.js:3:9)"),
            "TypeError: x (policy.js:3:9)"
        );
        assert_eq!(bounded("one\nidem: forged"), "one\\u{a}idem: forged");
        let long = "é".repeat(MAX_SAID_BYTES);
        let kept = bounded(&long);
        assert!(kept.ends_with('…'), "{kept}");
        assert_eq!(kept.chars().count(), MAX_SAID_BYTES / 2 + 1);
    }
}
