//! Embeds the schema migrations: every `migrations/<dialect>/NNN_name.sql`
//! becomes an element of a constant list in `$OUT_DIR/migrations.rs`, in
//! version order. A file out of sequence (a gap, a repeat, a bad name)
//! fails the build, so a migration can neither be skipped nor applied
//! twice.

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    // Read when the script runs, not when it was compiled: a target dir
    // shared between checkouts must not embed another checkout's files.
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let root = Path::new(&manifest).join("migrations");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut out = String::new();
    for (dialect, constant) in [("sqlite", "SQLITE"), ("postgres", "POSTGRES")] {
        let dir = root.join(dialect);
        println!("cargo:rerun-if-changed={}", dir.display());
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
            .map(|entry| entry.expect("a directory entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "sql"))
            .collect();
        files.sort();
        writeln!(
            out,
            "/// The {dialect} migrations: element `i` takes the schema from version `i` to `i + 1`."
        )
        .unwrap();
        writeln!(out, "#[cfg(feature = {dialect:?})]").unwrap();
        writeln!(out, "pub const {constant}: &[Migration] = &[").unwrap();
        for (i, path) in files.iter().enumerate() {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let version: usize = name
                .split('_')
                .next()
                .filter(|n| n.len() == 3)
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("{dialect}/{name}: a migration is named NNN_what.sql"));
            assert_eq!(
                version,
                i + 1,
                "{dialect}/{name}: migrations are numbered 001, 002, … without gaps or repeats"
            );
            println!("cargo:rerun-if-changed={}", path.display());
            writeln!(
                out,
                "    Migration {{ name: {name:?}, sql: include_str!({:?}) }},",
                path.display().to_string()
            )
            .unwrap();
        }
        writeln!(out, "];").unwrap();
    }
    let dest = Path::new(&std::env::var("OUT_DIR").unwrap()).join("migrations.rs");
    std::fs::write(&dest, out).unwrap_or_else(|e| panic!("writing {}: {e}", dest.display()));
}
