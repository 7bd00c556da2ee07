//! The on-disk cache of compiled policies.
//!
//! Compiling a policy is the slow part of loading it; loading its compiled
//! artifact instead is far cheaper (see `docs/benchmarks.md`). Artifacts
//! are keyed by (policy digest, engine compatibility hash), so a different
//! wasmtime build or engine setting never loads a stale artifact. Only
//! artifacts this cache wrote are ever deserialised: the directory is
//! created private (0700) and idem never accepts precompiled bytes from a
//! caller.
//!
//! An artifact is native code, run as is. So, as ssh does for its keys, the
//! cache is used only when this user owns the directory and the artifact
//! and nobody else can write to either (no group or other write bit): an
//! artifact another user could have planted or swapped is never loaded.
//! A refused cache is not an error: the policy is compiled from its bytes,
//! and the caller is told why the cache was not used.
//!
//! The cache is bounded (`RuntimeConfig::cache_max_bytes`): after each
//! artifact it writes, it removes the least recently used (a load marks an
//! artifact used) until the rest fit; the artifact just written stays,
//! whatever its size. An artifact of another engine build is not removed
//! for that alone: two programs with differently configured engines may
//! share the directory, and each would keep removing the other's.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};

use wasmtime::Engine;
use wasmtime::component::Component;

/// A directory of compiled artifacts.
#[derive(Debug, Clone)]
pub(crate) struct ArtifactCache {
    dir: PathBuf,
    engine_hash: String,
    max_bytes: u64,
}

impl ArtifactCache {
    pub(crate) fn new(dir: &Path, engine: &Engine, max_bytes: u64) -> Self {
        let mut h = DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        ArtifactCache {
            dir: dir.to_path_buf(),
            engine_hash: format!("{:016x}", h.finish()),
            max_bytes,
        }
    }

    fn path(&self, digest_hex: &str) -> PathBuf {
        self.dir
            .join(format!("{digest_hex}-{}.cwasm", self.engine_hash))
    }

    /// Why the cache directory cannot be trusted, if it cannot (see the
    /// module's doc). A directory that does not exist yet is fine: it will
    /// be created private.
    pub(crate) fn refusal(&self) -> Option<String> {
        let meta = std::fs::metadata(&self.dir).ok()?;
        untrusted(&self.dir, &meta, "cache directory")
    }

    /// The cached compilation of the policy with this digest, if any. A
    /// corrupt or incompatible artifact counts as a miss; an artifact or
    /// directory someone else could have written is refused, with why.
    pub(crate) fn load(&self, engine: &Engine, digest_hex: &str) -> Lookup {
        if let Some(why) = self.refusal() {
            return Lookup::Refused(why);
        }
        let path = self.path(digest_hex);
        let Ok(file) = std::fs::File::open(&path) else {
            return Lookup::Miss;
        };
        // The checks read the opened file, so they hold for the bytes read.
        match file.metadata() {
            Ok(meta) => {
                if let Some(why) = untrusted(&path, &meta, "cached artifact") {
                    return Lookup::Refused(why);
                }
            }
            Err(_) => return Lookup::Miss,
        }
        // Read into memory rather than `deserialize_file`: a mapped file that
        // something else truncates later would crash the host (SIGBUS); the
        // copy is paid once per load, not per evaluation.
        let mut bytes = Vec::new();
        if std::io::Read::read_to_end(&mut &file, &mut bytes).is_err() {
            return Lookup::Miss;
        }
        // Used now: the last an eviction removes (best effort).
        let _ = file.set_modified(std::time::SystemTime::now());
        // SAFETY: the file was written by `store` below from
        // `Component::serialize` of a component this host compiled, in a
        // directory only this user can write; wasmtime also checks the
        // artifact's header and engine compatibility.
        match unsafe { Component::deserialize(engine, &bytes) } {
            Ok(c) => Lookup::Hit(c),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %format!("{e:#}"), "ignoring unusable cached artifact");
                Lookup::Miss
            }
        }
    }

    /// Stores a compiled policy, unless the directory is refused. Failure to
    /// cache is not an error: the next load compiles again.
    pub(crate) fn store(&self, digest_hex: &str, component: &Component) {
        if self.refusal().is_some() {
            return;
        }
        if let Err(e) = self.try_store(digest_hex, component) {
            tracing::warn!(dir = %self.dir.display(), error = %e, "cannot cache compiled policy");
        }
    }

    fn try_store(&self, digest_hex: &str, component: &Component) -> std::io::Result<()> {
        let bytes = component
            .serialize()
            .map_err(|e| std::io::Error::other(format!("{e:#}")))?;
        create_private_dir(&self.dir)?;
        // Created just now, or there before: either way it must be ours.
        if let Some(why) = self.refusal() {
            return Err(std::io::Error::other(why));
        }
        // Write then rename: a reader never sees half an artifact.
        let mut tmp = tempfile_in(&self.dir)?;
        tmp.1.write_all(&bytes)?;
        tmp.1.sync_all()?;
        let path = self.path(digest_hex);
        std::fs::rename(&tmp.0, &path)?;
        prune(&self.dir, self.max_bytes, Some(&path));
        Ok(())
    }
}

/// What [`prune_cache`] did: how many compiled policies it removed and how
/// many it kept, with their sizes in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CachePruned {
    /// Artifacts removed.
    pub removed: u64,
    /// Their bytes.
    pub removed_bytes: u64,
    /// Artifacts left.
    pub kept: u64,
    /// Their bytes.
    pub kept_bytes: u64,
}

/// Removes the least recently used compiled policies from the cache `dir`
/// until the rest take at most `max_bytes` (`0` empties it), as the cache
/// does itself after each artifact it writes (`RuntimeConfig::cache_max_bytes`);
/// `idem cache prune` runs it. Only the cache's artifacts (`*.cwasm`) are
/// touched. A directory that does not exist is an empty cache; one this
/// user does not own, or that others can write, is refused (with why), as
/// the cache itself refuses to use it.
pub fn prune_cache(dir: &Path, max_bytes: u64) -> Result<CachePruned, String> {
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(CachePruned::default()),
        Err(e) => {
            return Err(format!(
                "cannot read the cache directory {}: {e}",
                dir.display()
            ));
        }
        Ok(meta) => {
            if let Some(why) = untrusted(dir, &meta, "cache directory") {
                return Err(why);
            }
        }
    }
    Ok(prune(dir, max_bytes, None))
}

/// Removes from `dir` the least recently used artifacts until they take
/// at most `max_bytes`; `keep` (the artifact just written) stays. Best
/// effort: a file that cannot be removed is left, and one another process
/// is loading stays readable to it (it holds the file open).
fn prune(dir: &Path, max_bytes: u64, keep: Option<&Path>) -> CachePruned {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return CachePruned::default();
    };
    let mut ours = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".cwasm") || Some(path.as_path()) == keep {
            continue;
        }
        if let Ok(meta) = entry.metadata() {
            let used = meta.modified().unwrap_or(std::time::UNIX_EPOCH);
            ours.push((used, meta.len(), path));
        }
    }
    let kept = keep.map_or(0, |k| std::fs::metadata(k).map_or(0, |m| m.len()));
    let mut done = CachePruned {
        kept: ours.len() as u64 + u64::from(keep.is_some()),
        kept_bytes: kept + ours.iter().map(|(_, len, _)| len).sum::<u64>(),
        ..CachePruned::default()
    };
    // Oldest use first.
    ours.sort();
    for (_, len, path) in ours {
        if done.kept_bytes <= max_bytes {
            break;
        }
        if std::fs::remove_file(&path).is_ok() {
            done.kept -= 1;
            done.kept_bytes -= len;
            done.removed += 1;
            done.removed_bytes += len;
        }
    }
    done
}

/// What a cache lookup found.
pub(crate) enum Lookup {
    /// The compiled policy.
    Hit(Component),
    /// Nothing usable: compile.
    Miss,
    /// The directory or the artifact is not safe to load from: compile,
    /// and tell the user why.
    Refused(String),
}

/// Why `path` cannot be trusted as part of the cache: not owned by this
/// user, or writable by the group or others.
#[cfg(unix)]
fn untrusted(path: &Path, meta: &std::fs::Metadata, what: &str) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Some(format!(
            "the {what} {} belongs to uid {}, not to this user (uid {me})",
            path.display(),
            meta.uid()
        ));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Some(format!(
            "the {what} {} is writable by other users (mode {mode:04o}; `chmod go-w` it)",
            path.display()
        ));
    }
    None
}

/// Elsewhere there is no owner and mode to check: the cache directory is
/// trusted as it is.
#[cfg(not(unix))]
fn untrusted(_path: &Path, _meta: &std::fs::Metadata, _what: &str) -> Option<String> {
    None
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir)
}

fn tempfile_in(dir: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    let unique = format!(
        ".tmp-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    );
    let path = dir.join(unique);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)?;
    Ok((path, file))
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::{CachePruned, prune, prune_cache};

    /// An artifact of `len` bytes, last used `age` ago.
    fn artifact(dir: &std::path::Path, name: &str, len: usize, age: u64) -> std::path::PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, vec![0u8; len]).unwrap();
        let file = std::fs::File::options().write(true).open(&path).unwrap();
        file.set_modified(SystemTime::now() - Duration::from_secs(age))
            .unwrap();
        path
    }

    #[test]
    fn the_least_recently_used_artifacts_go_until_the_rest_fit() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let oldest = artifact(d, "b-ffffffffffffffff.cwasm", 100, 300);
        let older = artifact(d, "c-0000000000000000.cwasm", 100, 200);
        let recent = artifact(d, "d-ffffffffffffffff.cwasm", 100, 100);
        let other = artifact(d, "notes.txt", 1_000, 400);
        let new = artifact(d, "e-ffffffffffffffff.cwasm", 100, 0);
        let pruned = prune(d, 250, Some(&new));
        assert!(!oldest.exists() && !older.exists(), "used longest ago");
        assert!(recent.exists() && new.exists(), "what fits stays");
        assert!(other.exists(), "only artifacts are the cache's to remove");
        assert_eq!(
            pruned,
            CachePruned {
                removed: 2,
                removed_bytes: 200,
                kept: 2,
                kept_bytes: 200
            }
        );
        // The one just written stays, even alone past the bound.
        prune(d, 10, Some(&new));
        assert!(new.exists() && !recent.exists());
    }

    #[test]
    fn pruning_by_hand_may_empty_the_cache_and_refuses_a_foreign_one() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700)).unwrap();
        }
        artifact(d, "a-ffffffffffffffff.cwasm", 100, 100);
        artifact(d, "b-ffffffffffffffff.cwasm", 100, 0);
        let pruned = prune_cache(d, 150).unwrap();
        assert_eq!(
            (pruned.removed, pruned.kept, pruned.kept_bytes),
            (1, 1, 100)
        );
        assert!(
            d.join("b-ffffffffffffffff.cwasm").exists(),
            "the last used stays"
        );
        let pruned = prune_cache(d, 0).unwrap();
        assert_eq!((pruned.removed, pruned.kept), (1, 0));
        // No cache yet: nothing to do.
        assert_eq!(prune_cache(&d.join("none"), 0), Ok(CachePruned::default()));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777)).unwrap();
            let refused = prune_cache(d, 0).unwrap_err();
            assert!(refused.contains("writable by other users"), "{refused}");
        }
    }
}
