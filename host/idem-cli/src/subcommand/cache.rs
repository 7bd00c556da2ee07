//! `idem cache`: the cache of compiled policies. `prune` removes the least
//! recently used ones until the rest fit a size; the cache also does it
//! itself after each policy it compiles, to `$IDEM_CACHE_MAX_SIZE` (1 GiB
//! by default). A JavaScript or Python policy's compiled form is tens of MB,
//! and every build is a new one.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use idem::policy::{DEFAULT_CACHE_MAX_BYTES, default_cache_dir, prune_cache};

use crate::exit::{Failure, SUCCESS};
use crate::shown::say;

/// The environment variable that bounds the cache.
pub const MAX_SIZE_ENV: &str = "IDEM_CACHE_MAX_SIZE";

/// `idem cache`'s subcommands.
#[derive(Args, Debug)]
pub struct CacheArgs {
    #[command(subcommand)]
    pub command: CacheCommand,
}

/// What to do.
#[derive(Subcommand, Debug)]
pub enum CacheCommand {
    /// Remove the least recently used compiled policies until the rest fit
    /// a size (a policy is compiled again on its next load).
    Prune(PruneArgs),
}

/// `idem cache prune`'s flags.
#[derive(Args, Debug)]
pub struct PruneArgs {
    /// Where compiled policies are cached [default: $IDEM_CACHE_DIR, else ~/.cache/idem].
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// The most to keep, e.g. `200MB`, `1GiB`; `0` empties the cache
    /// [default: $IDEM_CACHE_MAX_SIZE, else 1GiB].
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub max_size: Option<u64>,
}

/// Runs `idem cache`.
pub fn run(args: CacheArgs) -> Result<u8, Failure> {
    match args.command {
        CacheCommand::Prune(args) => prune(args),
    }
}

fn prune(args: PruneArgs) -> Result<u8, Failure> {
    let max_bytes = match args.max_size {
        Some(bytes) => bytes,
        None => max_bytes_from_env()?,
    };
    let Some(dir) = args.cache_dir.or_else(default_cache_dir) else {
        return Err(Failure::input(
            "no cache directory: give --cache-dir DIR or set $IDEM_CACHE_DIR",
        ));
    };
    let done = prune_cache(&dir, max_bytes)
        .map_err(|why| Failure::input(format!("refusing to prune the cache: {why}")))?;
    say!(
        "removed {} compiled polic{} ({}); kept {} ({}) in {}",
        done.removed,
        if done.removed == 1 { "y" } else { "ies" },
        shown_size(done.removed_bytes),
        done.kept,
        shown_size(done.kept_bytes),
        dir.display()
    );
    Ok(SUCCESS)
}

/// The cache's bound: `$IDEM_CACHE_MAX_SIZE`, else 1 GiB. A value that is
/// not a size is refused, not ignored: the bound is what keeps the disk.
pub fn max_bytes_from_env() -> Result<u64, Failure> {
    match std::env::var(MAX_SIZE_ENV) {
        Ok(text) => parse_size(&text).map_err(|e| Failure::input(format!("${MAX_SIZE_ENV}: {e}"))),
        Err(std::env::VarError::NotPresent) => Ok(DEFAULT_CACHE_MAX_BYTES),
        Err(std::env::VarError::NotUnicode(_)) => {
            Err(Failure::input(format!("${MAX_SIZE_ENV} is not UTF-8")))
        }
    }
}

/// A size in bytes: digits, then a unit (`B`, `KB`, `MB`, `GB` in powers
/// of 1000; `KiB`, `MiB`, `GiB` in powers of 1024; none: bytes).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(digits);
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        _ => {
            return Err(format!(
                "`{text}` is not a size (e.g. `200MB`, `1GiB`, `0`)"
            ));
        }
    };
    number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(|| format!("`{text}` is not a size (e.g. `200MB`, `1GiB`, `0`)"))
}

/// Bytes for a person: `0 B`, `812 KB`, `41.9 MB`, `1.2 GB`.
fn shown_size(bytes: u64) -> String {
    match bytes {
        0..1_000 => format!("{bytes} B"),
        1_000..1_000_000 => format!("{} KB", bytes / 1_000),
        1_000_000..1_000_000_000 => format!("{:.1} MB", bytes as f64 / 1e6),
        _ => format!("{:.1} GB", bytes as f64 / 1e9),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_read_in_either_unit_and_shown_in_decimal_ones() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("512"), Ok(512));
        assert_eq!(parse_size("200MB"), Ok(200_000_000));
        assert_eq!(parse_size("200 mb"), Ok(200_000_000));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        for bad in [
            "",
            "MB",
            "1.5GB",
            "-1",
            "10 parsecs",
            "99999999999999999999GB",
        ] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
        assert_eq!(shown_size(999), "999 B");
        assert_eq!(shown_size(41_900_000), "41.9 MB");
    }
}
