//! `idem consume`'s broker flags: a flag of another broker, a missing
//! one, a value out of range or a scheme not read is refused, naming it,
//! before any store or broker is opened; a store not there at the start is
//! waited for within `--store-outage`.

use std::process::Command;

use idem_tests::{idem_bin, policy_path};

#[test]
fn a_broker_flag_that_does_not_fit_is_refused_before_anything_opens() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("idem.db");
    for (flags, says) in [
        (
            &[
                "--from",
                "amqp://127.0.0.1:5672",
                "--queue",
                "q",
                "--stream",
                "S",
            ][..],
            "--stream is not a flag for RabbitMQ",
        ),
        (
            &[
                "--from",
                "nats://127.0.0.1:4222",
                "--stream",
                "S",
                "--queue",
                "q",
            ][..],
            "--queue is not a flag for NATS",
        ),
        (
            &["--from", "nats://127.0.0.1:4222", "--stream", "S"][..],
            "needs --stream and --consumer",
        ),
        (&["--from", "amqp://127.0.0.1:5672"][..], "needs --queue"),
        (
            &[
                "--from",
                "amqp://127.0.0.1:5672",
                "--queue",
                "q",
                "--shard",
                "0/2",
            ][..],
            "--shard and --members are for NATS",
        ),
        (
            &[
                "--from",
                "amqp://127.0.0.1:5672",
                "--queue",
                "q",
                "--prefetch",
                "0",
            ][..],
            "--prefetch must be at least 1",
        ),
        (
            &["--from", "amqps://127.0.0.1:5671", "--queue", "q"][..],
            "amqps:// (TLS) is not supported yet",
        ),
        (
            &["--from", "redis://127.0.0.1:6379", "--queue", "q"][..],
            "--queue is not a flag for Redis",
        ),
        (
            &["--from", "kafka://127.0.0.1:9092", "--topic", "t"][..],
            "needs --topic and --consumer",
        ),
        (
            &[
                "--from",
                "kafka://127.0.0.1:9092",
                "--topic",
                "t",
                "--consumer",
                "g",
                "--stream",
                "s",
            ][..],
            "--stream is not a flag for Kafka",
        ),
        (
            &[
                "--from",
                "kafka://127.0.0.1:9092",
                "--topic",
                "t",
                "--consumer",
                "g",
                "--shard",
                "0/2",
            ][..],
            "--shard and --members are for NATS",
        ),
        (
            &[
                "--from",
                "nats://127.0.0.1:4222",
                "--stream",
                "S",
                "--consumer",
                "c",
                "--topic",
                "t",
            ][..],
            "--topic is not a flag for NATS",
        ),
        (
            &["--from", "redis://127.0.0.1:6379", "--stream", "s"][..],
            "needs --stream and --consumer",
        ),
        (
            &[
                "--from",
                "redis://127.0.0.1:6379",
                "--stream",
                "s",
                "--consumer",
                "g",
                "--shard",
                "0/2",
            ][..],
            "each shard a stream of its own",
        ),
        (
            &[
                "--from",
                "nats://127.0.0.1:4222",
                "--stream",
                "s",
                "--consumer",
                "c",
                "--dead-letter",
                "d",
            ][..],
            "--dead-letter is not a flag for NATS",
        ),
        (
            &[
                "--from",
                "rediss://127.0.0.1:6380",
                "--stream",
                "s",
                "--consumer",
                "g",
            ][..],
            "rediss:// (TLS) is not supported yet",
        ),
        (
            &["--from", "kafka://127.0.0.1:9092", "--queue", "q"][..],
            "--queue is not a flag for Kafka",
        ),
    ] {
        let out = Command::new(idem_bin())
            .args(["consume", "--policy"])
            .arg(policy_path("billing-charge"))
            .arg("--store")
            .arg(format!("sqlite:{}", store.display()))
            .args(flags)
            .args(["--", "true"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {stderr}");
        assert!(stderr.contains(says), "{flags:?}: {stderr}");
        assert!(!store.exists(), "{flags:?}: no store was opened");
    }
}

/// A store that is not there when the consumer starts (a server still
/// starting, here a port nobody listens on) is waited for within
/// `--store-outage`, as `idem run` and `idem exec` wait: past it the
/// consumer exits 69, saying so, and no broker was read.
#[test]
fn a_store_not_there_at_the_start_is_waited_for_then_69() {
    let dir = tempfile::tempdir().unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let out = Command::new(idem_bin())
        .args(["consume", "--policy"])
        .arg(policy_path("billing-charge"))
        .args([
            "--store",
            &format!("postgres://postgres@127.0.0.1:{port}/test"),
            "--store-outage",
            "1s",
            "--from",
            "amqp://127.0.0.1:1",
            "--queue",
            "q",
            "--",
            "true",
        ])
        .env("IDEM_CACHE_DIR", dir.path().join("cache"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{stderr}");
    assert!(stderr.contains("the store is unavailable"), "{stderr}");
    assert!(
        stderr.contains("stayed unavailable past --store-outage"),
        "{stderr}"
    );
}
