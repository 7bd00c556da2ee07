//! The custom sections a policy component carries beside its code: its
//! lifecycle manifest and its golden vectors (see
//! [`idem_core::lifecycle`]). Only the component's own top-level sections
//! count, never one inside a nested core module (a module's sections are
//! the compiler's, not the policy author's).

use idem_core::Lifecycle;
use idem_core::lifecycle::{CASES_SECTION, LIFECYCLE_SECTION};
use wasmparser::{Parser, Payload};

use super::error::LoadError;

/// What a component says about itself beside its code.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sections {
    /// The lifecycle manifest (the defaults when the component has none).
    pub lifecycle: Lifecycle,
    /// The golden vectors: a cases file's text, when the component ships
    /// one.
    pub cases: Option<String>,
}

/// Reads the sections of a component's bytes. A section given twice, a
/// manifest that does not read, or vectors that are not UTF-8 are refused,
/// naming the section: a policy must not be ambiguous about its own life.
pub fn read(bytes: &[u8]) -> Result<Sections, LoadError> {
    let bad = |section: &str, why: String| LoadError::BadSection {
        section: section.to_string(),
        why,
    };
    let mut lifecycle: Option<Lifecycle> = None;
    let mut cases: Option<String> = None;
    // Every component and module starts with its version and ends with
    // `End`: depth 1 is the outer component's own level.
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(bytes) {
        let payload = payload.map_err(|e| LoadError::Invalid(e.to_string()))?;
        match payload {
            Payload::Version { .. } => depth += 1,
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::CustomSection(section) if depth == 1 => match section.name() {
                LIFECYCLE_SECTION => {
                    if lifecycle.is_some() {
                        return Err(bad(LIFECYCLE_SECTION, "it appears twice".into()));
                    }
                    lifecycle = Some(
                        Lifecycle::from_json(section.data())
                            .map_err(|e| bad(LIFECYCLE_SECTION, e))?,
                    );
                }
                CASES_SECTION => {
                    if cases.is_some() {
                        return Err(bad(CASES_SECTION, "it appears twice".into()));
                    }
                    let text = std::str::from_utf8(section.data())
                        .map_err(|e| bad(CASES_SECTION, format!("not UTF-8: {e}")))?;
                    cases = Some(text.to_string());
                }
                _ => {}
            },
            _ => {}
        }
    }
    Ok(Sections {
        lifecycle: lifecycle.unwrap_or_default(),
        cases,
    })
}
