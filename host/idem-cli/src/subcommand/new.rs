//! `idem new`: a policy crate and its cases file, from a template embedded
//! in the binary, ready for `idem build` and `idem test`.
//!
//! The crate depends on the idem-policy SDK by path. Which SDK: `--sdk DIR`,
//! else `$IDEM_SDK`, else the `guest/sdk` of the source tree this binary was
//! built from, when it is still there. A path, not a copy: the SDK is one
//! crate per idem checkout (it brings the contract's WIT with it), so a
//! policy builds against exactly the contract the host it was built beside
//! speaks, and an SDK fix reaches every policy on its next build.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};

use crate::exit::{Failure, SUCCESS};

/// `idem new`'s flags.
#[derive(Args, Debug)]
pub struct NewArgs {
    /// The crate's directory; its last component is the package and policy
    /// name (lower-case letters, digits and `-`, starting with a letter).
    #[arg(value_name = "NAME")]
    pub path: PathBuf,
    /// What the policy deduplicates.
    #[arg(long, value_enum, default_value_t = Kind::Charge)]
    pub kind: Kind,
    /// The idem-policy SDK's directory (`guest/sdk` of an idem checkout)
    /// [default: $IDEM_SDK, else the tree this idem was built from].
    #[arg(long, value_name = "DIR")]
    pub sdk: Option<PathBuf>,
}

/// The templates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Kind {
    /// One charge per tenant, customer and invoice; the amount (a canonical
    /// decimal) and currency must match for a replay.
    Charge,
    /// The `Idempotency-Key` HTTP header: one effect per client key and
    /// tenant; method, path and body digest must match.
    Http,
}

const CARGO_TOML: &str = include_str!("../../templates/common/Cargo.toml");
const GITIGNORE: &str = include_str!("../../templates/common/gitignore");
const CHARGE_LIB: &str = include_str!("../../templates/charge/lib.rs");
const CHARGE_CASES: &str = include_str!("../../templates/charge/cases.json");
const HTTP_LIB: &str = include_str!("../../templates/http/lib.rs");
const HTTP_CASES: &str = include_str!("../../templates/http/cases.json");

/// The SDK of the tree this binary was built from.
const BUILT_FROM_SDK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../guest/sdk");

/// Runs `idem new`.
pub fn run(args: NewArgs) -> Result<u8, Failure> {
    let name = package_name(&args.path)?;
    if args.path.exists() {
        return Err(Failure::input(format!(
            "{} already exists; idem new writes a new crate and overwrites nothing",
            args.path.display()
        )));
    }
    let sdk = find_sdk(args.sdk.as_deref())?;
    let (lib, cases) = match args.kind {
        Kind::Charge => (CHARGE_LIB, CHARGE_CASES),
        Kind::Http => (HTTP_LIB, HTTP_CASES),
    };
    let fill = |template: &str| {
        template
            .replace("{{name}}", &name)
            .replace("{{Type}}", &type_name(&name))
            .replace("{{sdk}}", &toml_string_body(&sdk.display().to_string()))
    };
    let files = [
        ("Cargo.toml", fill(CARGO_TOML)),
        ("src/lib.rs", fill(lib)),
        ("cases.json", fill(cases)),
        (".gitignore", GITIGNORE.to_string()),
    ];
    for (file, text) in &files {
        let path = args.path.join(file);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| Failure::input(format!("cannot create {}: {e}", dir.display())))?;
        }
        std::fs::write(&path, text)
            .map_err(|e| Failure::input(format!("cannot write {}: {e}", path.display())))?;
    }
    let dir = args.path.display();
    println!("created policy `{name}` in {dir} (SDK: {})", sdk.display());
    println!("next:");
    println!("  idem build {dir}");
    println!("  idem test --policy <the .wasm idem build printed> {dir}/cases.json");
    println!("  cargo test --manifest-path {dir}/Cargo.toml   # the same cases, natively");
    Ok(SUCCESS)
}

/// The package name: the path's last component, as cargo and the policy's
/// `describe` both accept it.
fn package_name(path: &Path) -> Result<String, Failure> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| Failure::input(format!("{} does not end in a name", path.display())))?;
    let valid = name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.ends_with('-');
    if !valid {
        return Err(Failure::input(format!(
            "`{name}` is not a policy name: use lower-case letters, digits and `-`, starting with a letter (at most 64), e.g. `refunds`"
        )));
    }
    Ok(name.to_string())
}

/// `my-refunds` → `MyRefunds`, the policy's type.
fn type_name(name: &str) -> String {
    name.split('-')
        .filter(|w| !w.is_empty())
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

/// The SDK directory: `--sdk`, `$IDEM_SDK`, or the tree this binary was
/// built from, made absolute (the crate may be built from anywhere).
fn find_sdk(flag: Option<&Path>) -> Result<PathBuf, Failure> {
    let (dir, from) = match (flag, std::env::var_os("IDEM_SDK")) {
        (Some(dir), _) => (dir.to_path_buf(), "--sdk"),
        (None, Some(dir)) => (PathBuf::from(dir), "$IDEM_SDK"),
        (None, None) => {
            let built_from = PathBuf::from(BUILT_FROM_SDK);
            if !built_from.join("Cargo.toml").is_file() {
                return Err(Failure::input(format!(
                    "cannot find the idem-policy SDK: this idem was built from {}, which is gone; pass --sdk DIR or set IDEM_SDK to the guest/sdk directory of an idem checkout",
                    built_from.display()
                )));
            }
            (built_from, "the tree idem was built from")
        }
    };
    let manifest = dir.join("Cargo.toml");
    let is_sdk = std::fs::read_to_string(&manifest)
        .map(|t| t.contains("name = \"idem-policy\""))
        .unwrap_or(false);
    if !is_sdk {
        return Err(Failure::input(format!(
            "{} (from {from}) is not the idem-policy SDK: it should be the guest/sdk directory of an idem checkout",
            dir.display()
        )));
    }
    dir.canonicalize()
        .map_err(|e| Failure::input(format!("cannot resolve {}: {e}", dir.display())))
}

/// `text` as the inside of a TOML basic string.
fn toml_string_body(text: &str) -> String {
    text.replace('\\', "\\\\").replace('"', "\\\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(
            package_name(Path::new("a/refunds")).ok().as_deref(),
            Some("refunds")
        );
        for bad in ["Refunds", "1abc", "my_policy", "x-", "", "..", "a b"] {
            assert!(package_name(Path::new(bad)).is_err(), "{bad}");
        }
        assert_eq!(type_name("my-refunds-2"), "MyRefunds2");
    }

    #[test]
    fn templates_have_no_unfilled_placeholders_after_filling() {
        for t in [CARGO_TOML, CHARGE_LIB, CHARGE_CASES, HTTP_LIB, HTTP_CASES] {
            let filled = t
                .replace("{{name}}", "x")
                .replace("{{Type}}", "X")
                .replace("{{sdk}}", "/sdk");
            assert!(!filled.contains("{{"), "{filled}");
        }
    }
}
