//! The `idem` binary's own surface: usage, versions, and input errors that
//! need no policy. (The suites in `tests/` drive it against real policies and
//! stores; this file also makes cargo build the binary for them.)

use std::process::{Command, Output};

fn idem(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(args)
        .output()
        .expect("idem runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn version_and_help_name_every_command() {
    let out = idem(&["--version"]);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("idem {}", env!("CARGO_PKG_VERSION"))
    );
    let help = String::from_utf8_lossy(&idem(&["--help"]).stdout).into_owned();
    for command in [
        "key", "test", "describe", "exec", "run", "inspect", "gc", "migrate",
    ] {
        assert!(
            help.contains(command),
            "--help does not mention {command}:\n{help}"
        );
    }
}

#[test]
fn usage_errors_exit_2_and_say_what_is_missing() {
    for (args, needle) in [
        (&[][..], "Usage"),
        (&["key"][..], "--policy"),
        (&["frobnicate"][..], "unrecognized subcommand"),
        (
            &[
                "exec", "--policy", "p.wasm", "--store", "memory:", "--op", "op.json",
            ][..],
            "CMD",
        ),
        (
            &[
                "run", "--policy", "p.wasm", "--store", "memory:", "--ops", "x", "--lease", "soon",
                "--", "true",
            ][..],
            "soon",
        ),
    ] {
        let out = idem(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(needle),
            "{args:?} should mention {needle:?}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn input_errors_name_the_culprit() {
    let out = idem(&["key", "--policy", "/no/such/policy.wasm", "-"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("/no/such/policy.wasm"),
        "{}",
        stderr(&out)
    );

    let out = idem(&["inspect", "--store", "mysql://db/x"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("mysql://db/x"), "{}", stderr(&out));

    let dir = tempfile::tempdir().unwrap();
    let out = idem(&["gc", "--store", &format!("sqlite:{}", dir.path().display())]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("directory"), "{}", stderr(&out));
}

#[test]
fn gc_and_inspect_work_on_a_new_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("idem.db").display());
    let out = idem(&["gc", "--store", &store]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "removed 0 records past their retention"
    );
    let out = idem(&["inspect", "--json", "--store", &store]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "[]");
}
