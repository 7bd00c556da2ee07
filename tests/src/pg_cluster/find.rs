//! Where the PostgreSQL binaries are, and whom to run them as.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The first directory holding real (not wrapper-script) `initdb`, `pg_ctl`
/// and `postgres`: `pg_config --bindir` (which may name a newer client-only
/// version), the highest `/usr/lib/postgresql/*/bin`, then PATH (symlinks
/// followed, as `/usr/local/bin/pg_ctl` may be one).
pub(super) fn server_bin_dir() -> Option<PathBuf> {
    let mut candidates = Vec::new();
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output()
        && out.status.success()
    {
        candidates.push(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
    }
    let mut versions: Vec<(Vec<u32>, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let version = name.split('.').map(|p| p.parse().unwrap_or(0)).collect();
            (version, e.path().join("bin"))
        })
        .collect();
    versions.sort_by(|a, b| b.0.cmp(&a.0));
    candidates.extend(versions.into_iter().map(|(_, dir)| dir));
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        if let Some(real) = std::fs::canonicalize(dir.join("initdb"))
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
        {
            candidates.push(real);
        }
    }
    candidates.into_iter().find(|dir| {
        ["initdb", "pg_ctl", "postgres"]
            .iter()
            .all(|b| is_binary(&dir.join(b)))
    })
}

/// A client tool: beside the server's binaries, else on PATH.
pub(super) fn client_bin(bin: &Path, name: &str) -> Option<PathBuf> {
    let beside = bin.join(name);
    if beside.is_file() {
        return Some(beside);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// An executable file that is not a script: Debian's `pg_wrapper` and
/// `pg_ctlcluster` are Perl scripts that want a cluster of their own layout.
fn is_binary(path: &Path) -> bool {
    let Ok(meta) = std::fs::metadata(path) else {
        return false;
    };
    let mut head = [0u8; 2];
    let read =
        std::fs::File::open(path).and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head));
    meta.is_file() && meta.mode() & 0o111 != 0 && read.is_ok() && &head != b"#!"
}

/// The effective uid: `/proc/self` belongs to it; `id -u` where there is
/// no /proc.
pub(super) fn effective_uid() -> u32 {
    if let Ok(meta) = std::fs::metadata("/proc/self") {
        return meta.uid();
    }
    Command::new("id")
        .arg("-u")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(u32::MAX)
}

/// The user a root test runs the server as: `postgres` (the packages create
/// it), else `nobody`.
pub(super) fn unprivileged_user() -> String {
    let postgres = Command::new("id").args(["-u", "postgres"]).output();
    let postgres = postgres.is_ok_and(|o| o.status.success());
    String::from(if postgres { "postgres" } else { "nobody" })
}
