//! A hostile or broken policy, and a tampered cache, as the CLI reports
//! them: bounded echoes of policy text, a cache another user could write
//! refused, and messages that say what happened.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use idem_tests::{idem_bin, policy_path};

fn idem(cache: &Path, args: &[&str], stdin: &str) -> Output {
    use std::io::Write;
    let mut child = Command::new(idem_bin())
        .args(args)
        .env("IDEM_CACHE_DIR", cache)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn key_of(kind: &str, extra: &[&str]) -> Output {
    let cache = tempfile::tempdir().unwrap();
    let policy = policy_path("fixture-misbehaving");
    let mut args = vec!["key", "--policy", policy.to_str().unwrap()];
    args.extend_from_slice(extra);
    idem(
        cache.path(),
        &args,
        &format!(r#"{{"kind":"{kind}","tenant":"t","fields":{{}}}}"#),
    )
}

#[test]
fn a_policy_error_is_echoed_bounded() {
    let out = key_of("huge-error", &[]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let message = v["error"]["message"].as_str().unwrap();
    let field = v["error"]["field"].as_str().unwrap();
    assert!(message.len() < 1100, "{} bytes", message.len());
    assert!(
        message.ends_with("…(1048576 bytes)"),
        "{}",
        &message[1000..]
    );
    assert!(field.len() < 200, "{} bytes", field.len());
    assert!(field.ends_with("…(10000 bytes)"), "{field}");
}

#[test]
fn failures_say_what_happened() {
    let out = key_of("stack-overflow", &[]);
    assert_eq!(out.status.code(), Some(4));
    assert!(
        text(&out.stderr).contains("stack overflow"),
        "{}",
        text(&out.stderr)
    );

    // Fuel enough for an hour: the wall-clock deadline stops it, and says
    // which deadline.
    let out = key_of("loop", &["--fuel", "100000000000"]);
    assert_eq!(out.status.code(), Some(4));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("exceeded its wall-clock deadline of 1000 ms (interrupted after"),
        "{stderr}"
    );

    let cache = tempfile::tempdir().unwrap();
    let policy = policy_path("fixture-wasi-import");
    let out = idem(
        cache.path(),
        &["describe", "--policy", policy.to_str().unwrap()],
        "",
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(
            "imports `wasi:clocks/wall-clock@0.2.0`, `wasi:clocks/monotonic-clock@0.2.0`"
        ),
        "{stderr}"
    );
}

#[cfg(unix)]
#[test]
fn a_cache_another_user_could_write_is_not_used() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let policy = policy_path("billing-charge");
    let cases = idem_tests::workspace_root().join("guest/policies/billing-charge/cases.json");
    let test = |cache: &Path| {
        let out = idem(
            cache,
            &[
                "test",
                "--policy",
                policy.to_str().unwrap(),
                cases.to_str().unwrap(),
            ],
            "",
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        (text(&out.stdout), text(&out.stderr))
    };
    std::fs::create_dir(&cache).unwrap();
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (stdout, stderr) = test(&cache);
    assert!(stdout.contains("compiled in"), "{stdout}");
    assert!(
        stderr.contains("warning: not using the compiled-policy cache, compiling instead")
            && stderr.contains("is writable by other users (mode 0777"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_dir(&cache).unwrap().count(),
        0,
        "nothing cached in it"
    );

    // Made private, it caches; the second load comes from it.
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o700)).unwrap();
    let (stdout, stderr) = test(&cache);
    assert!(
        stdout.contains("compiled in") && !stderr.contains("warning"),
        "{stderr}"
    );
    let (stdout, _) = test(&cache);
    assert!(stdout.contains("loaded from cache"), "{stdout}");

    // An artifact others may write is refused, though the directory is fine.
    let artifact = std::fs::read_dir(&cache)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::set_permissions(&artifact, std::fs::Permissions::from_mode(0o666)).unwrap();
    let (stdout, stderr) = test(&cache);
    assert!(stdout.contains("compiled in"), "{stdout}");
    assert!(stderr.contains("the cached artifact"), "{stderr}");
    std::fs::set_permissions(&artifact, std::fs::Permissions::from_mode(0o600)).unwrap();

    // An artifact another user owns is refused (checkable only where this
    // test may give a file away, i.e. as root).
    match std::os::unix::fs::chown(&artifact, Some(4242), None) {
        Ok(()) => {
            let (stdout, stderr) = test(&cache);
            assert!(stdout.contains("compiled in"), "{stdout}");
            assert!(
                stderr.contains("belongs to uid 4242, not to this user"),
                "{stderr}"
            );
        }
        Err(e) => eprintln!("not checking a foreign owner: cannot chown here ({e})"),
    }
}

/// The compiled-policy cache keeps to its bound (`$IDEM_CACHE_MAX_SIZE`):
/// the least recently used artifacts go after each write, the one just
/// written stays; `idem cache prune` empties it on demand; a bound that is
/// not a size is refused, not ignored.
#[test]
fn the_cache_keeps_to_its_bound_and_is_pruned_on_demand() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let artifacts = || {
        std::fs::read_dir(&cache)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".cwasm"))
            .count()
    };
    let describe = |policy: &str, bound: Option<&str>| {
        let mut c = Command::new(idem_bin());
        c.args(["describe", "--policy"])
            .arg(policy_path(policy))
            .env("IDEM_CACHE_DIR", &cache);
        match bound {
            Some(b) => c.env("IDEM_CACHE_MAX_SIZE", b),
            None => c.env_remove("IDEM_CACHE_MAX_SIZE"),
        };
        c.output().unwrap()
    };
    for policy in ["billing-charge", "http-idempotency-key"] {
        let out = describe(policy, Some("1"));
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(artifacts(), 1, "only the artifact just written stays");
    }
    let out = describe("provider-charge", None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(artifacts(), 2, "1 GiB by default");

    let out = Command::new(idem_bin())
        .args(["cache", "prune", "--max-size", "0", "--cache-dir"])
        .arg(&cache)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(said.starts_with("removed 2 compiled policies ("), "{said}");
    assert!(said.contains("; kept 0 (0 B) in "), "{said}");
    assert_eq!(artifacts(), 0);

    let out = describe("billing-charge", Some("lots"));
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("$IDEM_CACHE_MAX_SIZE: `lots` is not a size"),
        "{}",
        text(&out.stderr)
    );
}
