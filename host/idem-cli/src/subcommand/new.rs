//! `idem new`: a policy project and its cases file, in Rust, JavaScript or
//! Python, from a template embedded in the binary, ready for `idem build`,
//! `idem test` and the language's own test runner.
//!
//! A Rust project depends on `idem-policy` by version, the version of this
//! idem (crates.io), and also by path when an SDK directory is found:
//! `--sdk DIR` (the idem checkout, or the language's SDK directory in it),
//! else `$IDEM_SDK`, else the source tree this binary was built from, when
//! it is still there; `--registry` asks for the version alone. With both, a
//! policy builds against exactly the contract the host it was built beside
//! speaks, and deleting the path switches it to the registry. The
//! JavaScript and Python SDKs are on no registry yet: those projects depend
//! by path (an npm `file:` dependency, a PEP 508 `file://` URL), and need a
//! directory.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};

use crate::exit::{Failure, SUCCESS};

/// `idem new`'s flags.
#[derive(Args, Debug)]
pub struct NewArgs {
    /// The project's directory; its last component is the package and
    /// policy name (lower-case letters, digits and `-`, starting with a
    /// letter).
    #[arg(value_name = "NAME")]
    pub path: PathBuf,
    /// What the policy deduplicates.
    #[arg(long, value_enum, default_value_t = Kind::Charge)]
    pub kind: Kind,
    /// The language it is written in.
    #[arg(long, value_enum, default_value_t = Lang::Rust)]
    pub lang: Lang,
    /// The SDK: an idem checkout, or its `guest/sdk`, `guest/js/sdk` or
    /// `guest/python/sdk` [default: $IDEM_SDK, else the tree this idem was
    /// built from].
    #[arg(long, value_name = "DIR")]
    pub sdk: Option<PathBuf>,
    /// Rust only: depend on `idem-policy` by version alone (crates.io), even
    /// when an SDK directory is found.
    #[arg(long, conflicts_with = "sdk")]
    pub registry: bool,
}

/// The languages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Lang {
    /// A crate using the `idem-policy` SDK; `cargo test` runs its cases.
    Rust,
    /// A package using `@idem/policy` (Node.js 20 or later); `npm test`
    /// runs its cases.
    Js,
    /// A project using `idem_policy` (Python 3.11 or later); `python3 -m
    /// idem_policy.cases` runs its cases.
    Python,
}

impl Lang {
    /// The SDK's directory in an idem checkout, and a file only it has.
    fn sdk_in_checkout(self) -> (&'static str, &'static str) {
        match self {
            Lang::Rust => ("guest/sdk", "Cargo.toml"),
            Lang::Js => ("guest/js/sdk", "index.js"),
            Lang::Python => ("guest/python/sdk", "idem_policy/__init__.py"),
        }
    }
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

const CASES_CHARGE: &str = include_str!("../../templates/cases/charge.json");
const CASES_HTTP: &str = include_str!("../../templates/cases/http.json");

/// A template: a file's path in the new project and its text.
type Template = (&'static str, &'static str);

/// The files of a project in `lang` for `kind` (the cases file aside).
fn templates(lang: Lang, kind: Kind) -> Vec<Template> {
    match (lang, kind) {
        (Lang::Rust, kind) => vec![
            (
                "Cargo.toml",
                include_str!("../../templates/rust/Cargo.toml.template"),
            ),
            (".gitignore", include_str!("../../templates/rust/gitignore")),
            (
                "src/lib.rs",
                match kind {
                    Kind::Charge => include_str!("../../templates/rust/charge.rs"),
                    Kind::Http => include_str!("../../templates/rust/http.rs"),
                },
            ),
        ],
        (Lang::Js, kind) => vec![
            (
                "package.json",
                include_str!("../../templates/js/package.json"),
            ),
            (".gitignore", include_str!("../../templates/js/gitignore")),
            (
                "policy.js",
                match kind {
                    Kind::Charge => include_str!("../../templates/js/charge.js"),
                    Kind::Http => include_str!("../../templates/js/http.js"),
                },
            ),
            // `npm test`: the cases natively, then through the component.
            (
                "policy.test.js",
                include_str!("../../templates/js/policy.test.js"),
            ),
        ],
        (Lang::Python, kind) => vec![
            (
                "pyproject.toml",
                include_str!("../../templates/python/pyproject.toml"),
            ),
            (
                ".gitignore",
                include_str!("../../templates/python/gitignore"),
            ),
            (
                "app.py",
                match kind {
                    Kind::Charge => include_str!("../../templates/python/charge.py"),
                    Kind::Http => include_str!("../../templates/python/http.py"),
                },
            ),
            // `pytest`: the cases natively, then through the component.
            (
                "tests/test_policy.py",
                include_str!("../../templates/python/test_policy.py"),
            ),
        ],
    }
}

/// The tree this binary was built from.
const BUILT_FROM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// Runs `idem new`.
pub fn run(args: NewArgs) -> Result<u8, Failure> {
    let name = package_name(&args.path)?;
    if args.path.exists() {
        return Err(Failure::input(format!(
            "{} already exists; idem new writes a new crate and overwrites nothing",
            args.path.display()
        )));
    }
    if args.registry && args.lang != Lang::Rust {
        return Err(Failure::input(format!(
            "--registry is for Rust policies: the {} SDK is on no registry yet",
            lang_name(args.lang)
        )));
    }
    let sdk = if args.registry {
        None
    } else {
        find_sdk(args.lang, args.sdk.as_deref())?
    };
    // What the templates' `{{sdk…}}` placeholders become, and the SDK as
    // the summary line names it.
    let (placeholders, sdk_shown) = match (args.lang, &sdk) {
        (Lang::Rust, sdk) => {
            let (dependency, comment, shown) = rust_dependency(sdk.as_deref());
            (
                vec![
                    ("{{sdk_dependency}}", dependency),
                    ("{{sdk_comment}}", comment),
                ],
                shown,
            )
        }
        (lang, Some(sdk)) => {
            let text = sdk.display().to_string();
            let text = match lang {
                Lang::Js => json_string_body(&text),
                // Inside a file:// URL in a TOML string: a space or quote
                // would need escaping twice over; refuse rather than guess.
                _ => url_path(&text)?,
            };
            (vec![("{{sdk}}", text)], sdk.display().to_string())
        }
        (lang, None) => return Err(no_sdk(lang)),
    };
    let cases = match args.kind {
        Kind::Charge => CASES_CHARGE,
        Kind::Http => CASES_HTTP,
    };
    let mut files: Vec<(&str, String)> = templates(args.lang, args.kind)
        .iter()
        .map(|(file, text)| (*file, fill(text, &name, &placeholders)))
        .collect();
    files.push(("cases.json", fill(cases, &name, &placeholders)));
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
    println!(
        "created policy `{name}` in {dir} ({}; SDK: {sdk_shown})",
        lang_name(args.lang),
    );
    println!("next:");
    match args.lang {
        Lang::Rust => {
            println!("  idem build {dir}");
            println!("  idem test --policy <the .wasm idem build printed> {dir}/cases.json");
            println!("  cargo test --manifest-path {dir}/Cargo.toml   # the same cases, natively");
        }
        Lang::Js => {
            println!(
                "  cd {dir} && npm install && npm test   # links the SDK; the cases natively, then through the component"
            );
            println!("  idem build {dir}");
            println!("  idem test --policy {dir}/dist/{name}.wasm {dir}/cases.json");
        }
        Lang::Python => {
            println!(
                "  cd {dir} && pytest   # the cases natively, then through the component (idem build, idem test)"
            );
            println!("  idem build {dir}");
            println!("  idem test --policy {dir}/dist/{name}.wasm {dir}/cases.json");
        }
    }
    Ok(SUCCESS)
}

fn lang_name(lang: Lang) -> &'static str {
    match lang {
        Lang::Rust => "Rust",
        Lang::Js => "JavaScript",
        Lang::Python => "Python",
    }
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

/// A template's text with the project's name, its type name and the SDK's
/// placeholders filled in.
fn fill(template: &str, name: &str, sdk: &[(&str, String)]) -> String {
    let mut text = template
        .replace("{{name}}", name)
        .replace("{{Type}}", &type_name(name));
    for (placeholder, value) in sdk {
        text = text.replace(placeholder, value);
    }
    text
}

/// The version of `idem-policy` this idem speaks: the workspace's version.
const SDK_VERSION: &str = env!("CARGO_PKG_VERSION");

/// A Rust project's dependency on the SDK: by version, and by path when a
/// directory was found; the comment above it; the SDK as the summary names
/// it.
fn rust_dependency(sdk: Option<&Path>) -> (String, String, String) {
    match sdk {
        Some(dir) => (
            format!(
                "{{ version = \"{SDK_VERSION}\", path = \"{}\" }}",
                toml_string_body(&dir.display().to_string())
            ),
            "# The path is the idem tree `idem new` found (its --sdk flag, $IDEM_SDK,\n\
             # or the tree the idem CLI was built from); delete it to take the\n\
             # version from crates.io."
                .to_string(),
            format!("idem-policy {SDK_VERSION} at {}", dir.display()),
        ),
        None => (
            format!("\"{SDK_VERSION}\""),
            "# From crates.io; `idem new --sdk DIR` points it at an idem checkout.".to_string(),
            format!("idem-policy {SDK_VERSION} from crates.io"),
        ),
    }
}

/// Why a JavaScript or Python project cannot be made: no SDK directory.
fn no_sdk(lang: Lang) -> Failure {
    Failure::input(format!(
        "cannot find the {} SDK: this idem was built from {BUILT_FROM}, which is gone; pass --sdk DIR or set IDEM_SDK to an idem checkout",
        lang_name(lang)
    ))
}

/// The SDK directory: `--sdk`, `$IDEM_SDK`, or the tree this binary was
/// built from, made absolute (the project may be built from anywhere); none
/// when none was named and the tree is gone. A checkout's root stands for
/// its SDK in `lang`.
fn find_sdk(lang: Lang, flag: Option<&Path>) -> Result<Option<PathBuf>, Failure> {
    let (sdk_dir, marker) = lang.sdk_in_checkout();
    let (dir, from) = match (flag, std::env::var_os("IDEM_SDK")) {
        (Some(dir), _) => (dir.to_path_buf(), "--sdk"),
        (None, Some(dir)) => (PathBuf::from(dir), "$IDEM_SDK"),
        (None, None) => {
            let built_from = Path::new(BUILT_FROM).join(sdk_dir);
            if !built_from.join(marker).is_file() {
                return Ok(None);
            }
            (built_from, "the tree idem was built from")
        }
    };
    // The checkout's root, or the SDK itself.
    let dir = if dir.join(sdk_dir).join(marker).is_file() {
        dir.join(sdk_dir)
    } else {
        dir
    };
    let is_sdk = match lang {
        Lang::Rust => std::fs::read_to_string(dir.join(marker))
            .map(|t| t.contains("name = \"idem-policy\""))
            .unwrap_or(false),
        Lang::Js => std::fs::read_to_string(dir.join("package.json"))
            .map(|t| t.contains("\"name\": \"@idem/policy\""))
            .unwrap_or(false),
        Lang::Python => dir.join(marker).is_file(),
    };
    if !is_sdk {
        return Err(Failure::input(format!(
            "{} (from {from}) is not the {} SDK: it should be an idem checkout or its {sdk_dir} directory",
            dir.display(),
            lang_name(lang)
        )));
    }
    dir.canonicalize()
        .map(Some)
        .map_err(|e| Failure::input(format!("cannot resolve {}: {e}", dir.display())))
}

/// `text` as the inside of a JSON string.
fn json_string_body(text: &str) -> String {
    let quoted = serde_json::to_string(text).unwrap_or_default();
    quoted[1..quoted.len() - 1].to_string()
}

/// An absolute path as the path of a `file://` URL, refused when it would
/// need escaping.
fn url_path(path: &str) -> Result<String, Failure> {
    let plain = path
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"/-_.~+@".contains(&b));
    if !plain {
        return Err(Failure::input(format!(
            "the SDK's path {path} holds characters a file:// URL would have to escape; move the checkout, or pass --sdk with a plain path"
        )));
    }
    Ok(path.to_string())
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
        for lang in [Lang::Rust, Lang::Js, Lang::Python] {
            for kind in [Kind::Charge, Kind::Http] {
                let sdk: Vec<Vec<(&str, String)>> = match lang {
                    Lang::Rust => [None, Some(Path::new("/sdk"))]
                        .into_iter()
                        .map(|dir| {
                            let (dependency, comment, _) = rust_dependency(dir);
                            vec![
                                ("{{sdk_dependency}}", dependency),
                                ("{{sdk_comment}}", comment),
                            ]
                        })
                        .collect(),
                    _ => vec![vec![("{{sdk}}", "/sdk".to_string())]],
                };
                let all: Vec<&str> = templates(lang, kind).into_iter().map(|(_, t)| t).collect();
                for t in all.iter().chain([&CASES_CHARGE, &CASES_HTTP]) {
                    for sdk in &sdk {
                        let filled = fill(t, "x", sdk);
                        assert!(!filled.contains("{{"), "{filled}");
                    }
                }
            }
        }
    }

    #[test]
    fn paths_in_manifests() {
        assert_eq!(json_string_body(r#"/a "b"\c"#), r#"/a \"b\"\\c"#);
        assert_eq!(
            url_path("/work/idem/guest/python/sdk").ok().as_deref(),
            Some("/work/idem/guest/python/sdk")
        );
        assert!(url_path("/my checkout/sdk").is_err());
        assert!(url_path("/a%20b").is_err());
    }
}
