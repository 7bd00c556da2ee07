//! The on-disk cache of compiled policies.
//!
//! Compiling a policy takes ~20 ms; loading its compiled artifact takes
//! ~0.05 ms. Artifacts are keyed by (policy digest, engine compatibility
//! hash), so a different wasmtime build or engine setting never loads a
//! stale artifact. Only artifacts this cache wrote are ever deserialised:
//! the directory is created private (0700) and idem never accepts
//! precompiled bytes from a caller.

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
}

impl ArtifactCache {
    pub(crate) fn new(dir: &Path, engine: &Engine) -> Self {
        let mut h = DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        ArtifactCache {
            dir: dir.to_path_buf(),
            engine_hash: format!("{:016x}", h.finish()),
        }
    }

    fn path(&self, digest_hex: &str) -> PathBuf {
        self.dir
            .join(format!("{digest_hex}-{}.cwasm", self.engine_hash))
    }

    /// The cached compilation of the policy with this digest, if any. A
    /// corrupt or incompatible artifact counts as a miss.
    pub(crate) fn load(&self, engine: &Engine, digest_hex: &str) -> Option<Component> {
        let path = self.path(digest_hex);
        // Read into memory rather than `deserialize_file`: a mapped file that
        // something else truncates later would crash the host (SIGBUS); the
        // copy costs ~50 µs once per load.
        let bytes = std::fs::read(&path).ok()?;
        // SAFETY: the file was written by `store` below from
        // `Component::serialize` of a component this host compiled, in a
        // directory only this user can write; wasmtime also checks the
        // artifact's header and engine compatibility.
        match unsafe { Component::deserialize(engine, &bytes) } {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %format!("{e:#}"), "ignoring unusable cached artifact");
                None
            }
        }
    }

    /// Stores a compiled policy. Failure to cache is not an error: the next
    /// load compiles again.
    pub(crate) fn store(&self, digest_hex: &str, component: &Component) {
        if let Err(e) = self.try_store(digest_hex, component) {
            tracing::warn!(dir = %self.dir.display(), error = %e, "cannot cache compiled policy");
        }
    }

    fn try_store(&self, digest_hex: &str, component: &Component) -> std::io::Result<()> {
        let bytes = component
            .serialize()
            .map_err(|e| std::io::Error::other(format!("{e:#}")))?;
        create_private_dir(&self.dir)?;
        // Write then rename: a reader never sees half an artifact.
        let mut tmp = tempfile_in(&self.dir)?;
        tmp.1.write_all(&bytes)?;
        tmp.1.sync_all()?;
        std::fs::rename(&tmp.0, self.path(digest_hex))
    }
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
