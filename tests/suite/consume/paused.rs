//! The seed's paused holder on the brokers that give a paused consumer's
//! messages to another after a threshold of their own (Redis Streams,
//! Kafka): one check, run through each (`redis.rs`, `kafka.rs`).

use std::process::Command;
use std::time::{Duration, Instant};

use super::{APPEND, Broker, charge, consume, effects_of, spawn_piped, summary};

/// Sends `signal` (`STOP`, `CONT`) to `child`'s whole process group.
fn signal_group(child: &std::process::Child, signal: &str) {
    let group = format!("-{}", child.id());
    let sent = Command::new("kill")
        .args(["-s", signal, "--", &group])
        .status()
        .unwrap();
    assert!(sent.success(), "SIG{signal} sent");
}

/// The seed's paused holder, on a broker that gives a paused consumer's
/// messages to another after a threshold (Redis: the claim threshold,
/// `XAUTOCLAIM`; Kafka: the session, a rebalance): a consumer stopped
/// (SIGSTOP) in the middle of p3's effect, past the threshold, while a
/// second consumer gets p3; then resumed. The broker lets the resumed
/// consumer act; the store does not let it record: its claim lapsed and
/// went to review, its late end is refused. Every effect happens once and
/// every message ends settled.
pub(super) fn a_consumer_paused_past_the_brokers_threshold_is_fenced_when_it_resumes(
    broker: &dyn Broker,
) {
    let dir = tempfile::tempdir().unwrap();
    broker.publish(&(0..6).map(|i| charge(&format!("p{i}"))).collect::<Vec<_>>());
    // p3's effect marks that it started, then takes 4 s before it
    // charges: the consumer is paused in between.
    let slow = r#"op=$(cat); case "$op" in *'"invoice_id":"p3"'*) touch "$LEDGER.p3"; sleep 4 ;; esac; printf '%s\n' "$op" >> "$LEDGER""#;
    let first = spawn_piped({
        let mut c = consume(
            broker,
            dir.path(),
            "billing",
            &["--lease", "1s", "--stop-when-idle", "3s"],
            slow,
        );
        std::os::unix::process::CommandExt::process_group(&mut c, 0);
        c
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    while !dir.path().join("ledger.p3").exists() {
        assert!(Instant::now() < deadline, "p3's effect never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    signal_group(&first, "STOP");
    // The second consumer gets p3 once the broker gives the paused one's
    // messages away (Redis: pending past the 3 s claim threshold; Kafka:
    // the first's 3 s session lapsed and its partitions moved, p3 never
    // committed); the first's 1 s claim has lapsed by then, and the
    // billing policy sends a lapsed charge to review rather than charge
    // again.
    let second = consume(
        broker,
        dir.path(),
        "billing",
        &["--lease", "1s", "--stop-when-idle", "5s"],
        APPEND,
    )
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(0), "{stderr}");
    let taker = summary(&second);
    assert_eq!(
        taker["sent_to_review"], 1,
        "p3 taken over: {taker}; {stderr}"
    );
    assert_eq!(
        effects_of(dir.path(), "p3"),
        0,
        "p3 not charged by the taker"
    );
    // Resumed, the first finishes p3's effect: its end is refused.
    signal_group(&first, "CONT");
    let out = first.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let resumed = summary(&out);
    assert_eq!(
        resumed["fenced"], 1,
        "the late end refused: {resumed}; {stderr}"
    );
    for i in 0..6 {
        assert_eq!(effects_of(dir.path(), &format!("p{i}")), 1, "invoice p{i}");
    }
    assert_eq!(broker.unsettled("billing"), 0, "every message settled");
}
