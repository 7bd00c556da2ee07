//! What a file is, and whether it is a policy this host will run: a
//! component (not a core module, not a precompiled artifact, not garbage)
//! that imports nothing but the contract's own `diagnostics` and exports
//! `idem:policy/policy` at a compatible version.

use wasmtime::Engine;
use wasmtime::component::Component;

use super::diagnostics;
use super::error::LoadError;

/// The interface every policy exports, as this host speaks it.
pub const POLICY_INTERFACE: &str = "idem:policy/policy@0.1.0";
const POLICY_INTERFACE_PREFIX: &str = "idem:policy/policy@";
const COMPATIBLE_PREFIX: &str = "idem:policy/policy@0.1.";

/// Checks the header before anything parses the bytes, so that the common
/// mistakes get an error that says what the file actually is.
pub(crate) fn classify(bytes: &[u8]) -> Result<(), LoadError> {
    if bytes.starts_with(b"\x7fELF") {
        return Err(LoadError::Precompiled);
    }
    if bytes.len() < 8 {
        return Err(LoadError::NotWasm {
            why: format!("only {} bytes: truncated or empty", bytes.len()),
        });
    }
    if &bytes[..4] != b"\0asm" {
        return Err(LoadError::NotWasm {
            why: "it does not start with the \\0asm magic".into(),
        });
    }
    match bytes[4..8] {
        [1, 0, 0, 0] => Err(LoadError::CoreModule),
        [0x0d, 0, 1, 0] => Ok(()),
        [a, b, c, d] => Err(LoadError::NotWasm {
            why: format!(
                "unknown WebAssembly version/layer {:#04x} {:#04x} {:#04x} {:#04x}",
                a, b, c, d
            ),
        }),
        _ => unreachable!("slice of length 4"),
    }
}

/// Refuses any import but `diagnostics`, and any export set that is not the
/// policy world.
pub(crate) fn check_world(engine: &Engine, component: &Component) -> Result<(), LoadError> {
    let ty = component.component_type();
    // Every import, not the first: a policy built against WASI imports a
    // dozen interfaces, and the list says where they come from.
    let imports: Vec<String> = ty
        .imports(engine)
        .map(|(name, _)| name.to_string())
        .filter(|name| !name.starts_with(diagnostics::COMPATIBLE_PREFIX))
        .collect();
    if !imports.is_empty() {
        return Err(LoadError::ForbiddenImport { imports });
    }
    let exports: Vec<String> = ty
        .exports(engine)
        .map(|(name, _)| name.to_string())
        .collect();
    if exports.iter().any(|e| e.starts_with(COMPATIBLE_PREFIX)) {
        return Ok(());
    }
    if let Some(found) = exports
        .iter()
        .find(|e| e.starts_with(POLICY_INTERFACE_PREFIX))
    {
        return Err(LoadError::IncompatibleVersion {
            found: found.clone(),
            supported: POLICY_INTERFACE.into(),
        });
    }
    Err(LoadError::WrongWorld {
        supported: POLICY_INTERFACE.into(),
        exports: if exports.is_empty() {
            "nothing".into()
        } else {
            exports.join(", ")
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_headers() {
        assert!(matches!(classify(b""), Err(LoadError::NotWasm { .. })));
        assert!(matches!(
            classify(b"hello world, not wasm"),
            Err(LoadError::NotWasm { .. })
        ));
        assert!(matches!(
            classify(b"\x7fELF\x02\x01\x01\0\0\0"),
            Err(LoadError::Precompiled)
        ));
        assert!(matches!(
            classify(b"\0asm\x01\0\0\0"),
            Err(LoadError::CoreModule)
        ));
        assert!(classify(b"\0asm\x0d\0\x01\0").is_ok());
        assert!(matches!(
            classify(b"\0asm\x02\0\0\0"),
            Err(LoadError::NotWasm { .. })
        ));
    }
}
