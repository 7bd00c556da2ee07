//! A small disk of a test's own, to fill under a SQLite store mid-run: a
//! real ENOSPC from the kernel, not a mocked error.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

/// A tmpfs of a fixed size mounted on a temporary directory. Dropping it
/// unmounts it (lazily, should a file still be open) and removes the
/// directory.
pub struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    /// Mounts a tmpfs of `bytes` (rounded up to whole pages by the kernel).
    /// Mounting needs root (or CAP_SYS_ADMIN); where it cannot mount, it
    /// prints `SKIPPED: <test>: cannot mount a tmpfs (<why>)` and returns
    /// `None`, under CI too: a container may not allow mounts at all.
    pub fn mount(test: &str, bytes: u64) -> Option<SmallDisk> {
        let dir = tempfile::Builder::new()
            .prefix("idem-disk-")
            .tempdir()
            .expect("a temporary directory for the mount point");
        let why = match Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(dir.path())
            .output()
        {
            Ok(out) if out.status.success() => return Some(SmallDisk { dir }),
            // The first line: mount's second is a hint about dmesg.
            Ok(out) => String::from_utf8_lossy(&out.stderr)
                .lines()
                .next()
                .unwrap_or("")
                .trim()
                .to_string(),
            Err(e) => format!("mount does not run: {e}"),
        };
        // Straight to stderr: the harness hides `eprintln!` of a passing test.
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: {test}: cannot mount a tmpfs ({why})"
        );
        None
    }

    /// The mount point: put the store's files here.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes a ballast file until the disk is full (the kernel answers
    /// ENOSPC) and returns its path, for [`SmallDisk::free`].
    pub fn fill(&self) -> PathBuf {
        // A fresh name per call, so a disk can be filled again after a
        // partial free.
        static BALLASTS: AtomicU64 = AtomicU64::new(0);
        let n = BALLASTS.fetch_add(1, Ordering::Relaxed);
        let path = self.path().join(format!("ballast-{n}"));
        let mut file = std::fs::File::create(&path)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
        let chunk = vec![0xa5u8; 64 * 1024];
        loop {
            // `write`, not `write_all`: a short write is the last bytes that
            // fit; the next write is the one that fails.
            match file.write(&chunk) {
                Ok(_) => {}
                Err(e) if is_disk_full(&e) => return path,
                Err(e) => panic!("filling {}: {e}", path.display()),
            }
        }
    }

    /// Removes a ballast file [`SmallDisk::fill`] wrote: the disk takes
    /// writes again.
    pub fn free(&self, ballast: PathBuf) {
        std::fs::remove_file(&ballast)
            .unwrap_or_else(|e| panic!("cannot remove {}: {e}", ballast.display()));
    }
}

/// Whether `e` is the kernel's "No space left on device".
pub fn is_disk_full(e: &std::io::Error) -> bool {
    const ENOSPC: i32 = 28;
    e.kind() == std::io::ErrorKind::StorageFull || e.raw_os_error() == Some(ENOSPC)
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        // Lazy: a store still open on it must not keep it mounted (or make
        // drop fail); the TempDir then removes the empty mount point.
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .output();
    }
}
