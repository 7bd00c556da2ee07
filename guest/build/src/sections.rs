//! The policy's own words beside its code, in the component: its lifecycle
//! manifest and its golden vectors, as custom sections (whatever language
//! the policy is written in).

use std::path::Path;

use anyhow::{Context, Result};

use crate::BuiltGuest;

/// The custom section of the policy's lifecycle manifest (see
/// `idem_core::lifecycle`).
pub const LIFECYCLE_SECTION: &str = "idem-lifecycle";

/// The custom section of the policy's golden vectors.
pub const CASES_SECTION: &str = "idem-cases";

/// Appends the lifecycle manifest and the golden vectors to a component as
/// custom sections of its own (after componentising: a core module's
/// sections would sit inside the component, where the host does not look).
/// They are part of the component's bytes, hence of its digest.
pub fn add_sections(
    mut component: Vec<u8>,
    lifecycle: Option<&str>,
    cases: Option<&[u8]>,
) -> Vec<u8> {
    use std::borrow::Cow;
    use wasm_encoder::{ComponentSection, CustomSection};
    if let Some(manifest) = lifecycle {
        CustomSection {
            name: Cow::Borrowed(LIFECYCLE_SECTION),
            data: Cow::Borrowed(manifest.as_bytes()),
        }
        .append_to_component(&mut component);
    }
    if let Some(cases) = cases {
        CustomSection {
            name: Cow::Borrowed(CASES_SECTION),
            data: Cow::Borrowed(cases),
        }
        .append_to_component(&mut component);
    }
    component
}

/// The end of a JavaScript or Python build: the component componentize-js
/// or componentize-py wrote at `component`, with its sections added, as
/// `<out_dir>/<name>.wasm`.
pub(crate) fn finish_component(
    component: &Path,
    name: &str,
    lifecycle: Option<&str>,
    cases: Option<&[u8]>,
    out_dir: &Path,
) -> Result<BuiltGuest> {
    let bytes =
        std::fs::read(component).with_context(|| format!("cannot read {}", component.display()))?;
    let bytes = add_sections(bytes, lifecycle, cases);
    std::fs::create_dir_all(out_dir)
        .with_context(|| format!("cannot create {}", out_dir.display()))?;
    let out = out_dir.join(format!("{name}.wasm"));
    write_if_changed(&out, &bytes)?;
    Ok(BuiltGuest {
        package: name.to_string(),
        component: out,
        core_module: None,
    })
}

/// Writes `bytes` to `path` unless it already holds them (so a rebuild that
/// changes nothing leaves the file's time alone).
pub(crate) fn write_if_changed(path: &Path, bytes: &[u8]) -> Result<()> {
    if std::fs::read(path).ok().as_deref() == Some(bytes) {
        return Ok(());
    }
    std::fs::write(path, bytes).with_context(|| format!("cannot write {}", path.display()))
}
