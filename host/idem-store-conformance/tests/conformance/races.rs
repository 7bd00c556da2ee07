//! Real concurrent connections and processes racing on one SQLite file:
//! one claim, one take-over winner, shared fences.

use super::*;

/// Separate connections (each its own store, as separate processes would
/// have), on separate OS threads, race to open a brand-new file and claim
/// the same key: every open succeeds and exactly one claim wins.
#[test]
fn racing_connections_claim_exactly_once() {
    const RACERS: usize = 8;
    for round in 0..5 {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = Arc::new(dir.path().join("race.db"));
        let barrier = Arc::new(Barrier::new(RACERS));
        let handles: Vec<_> = (0..RACERS)
            .map(|who| {
                let (path, barrier) = (path.clone(), barrier.clone());
                std::thread::spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .build()
                        .expect("runtime");
                    barrier.wait();
                    let opened = open(&path);
                    // Everyone reaches the second barrier, even after a
                    // failed open, so a failure cannot hang the test.
                    barrier.wait();
                    let store = opened.map_err(|e| format!("open: {e}"))?;
                    let k = conformance::key(round);
                    runtime
                        .block_on(store.claim(request(&k, 1, 60_000, 60_000, who as u32)))
                        .map_err(|e| format!("claim: {e}"))
                })
            })
            .collect();
        let outcomes: Vec<ClaimOutcome> = handles
            .into_iter()
            .map(|h| h.join().expect("racer").expect("open and claim"))
            .collect();
        let winners: Vec<_> = outcomes
            .iter()
            .filter_map(|o| match o {
                ClaimOutcome::Claimed(c) => Some(c.fence),
                ClaimOutcome::Existing(_) => None,
            })
            .collect();
        assert_eq!(winners.len(), 1, "round {round}: {outcomes:?}");
        for o in &outcomes {
            if let ClaimOutcome::Existing(e) = o {
                assert_eq!(
                    e.view.record.fence, winners[0],
                    "losers see the winner's record"
                );
            }
        }
    }
}

/// Racing take-overs of one expired lease through separate connections:
/// exactly one wins, the others are fenced.
#[test]
fn racing_take_overs_have_one_winner() {
    const RACERS: usize = 6;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("race.db");
    let clock = ManualClock::new(conformance::START_MS);
    let options = || StoreOptions {
        clock: clock.store_clock(),
        ..StoreOptions::default()
    };
    let k = conformance::key(1);
    let first = {
        let store = SqliteStore::open(&path, SqliteOptions::default(), options()).expect("open");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        match runtime
            .block_on(store.claim(request(&k, 1, 1_000, 60_000, 0)))
            .expect("claim")
        {
            ClaimOutcome::Claimed(c) => c,
            other => panic!("expected a claim, got {other:?}"),
        }
    };
    clock.advance(Duration::from_millis(1_000));
    let barrier = Arc::new(Barrier::new(RACERS));
    let handles: Vec<_> = (0..RACERS)
        .map(|who| {
            let (path, barrier, k, store_options) =
                (path.clone(), barrier.clone(), k.clone(), options());
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .expect("runtime");
                let store = SqliteStore::open(&path, SqliteOptions::default(), store_options)
                    .expect("open");
                barrier.wait();
                runtime.block_on(store.take_over(
                    &k,
                    first.fence,
                    Duration::from_millis(1_000),
                    conformance::holder(who as u32),
                    None,
                ))
            })
        })
        .collect();
    let results: Vec<_> = handles
        .into_iter()
        .map(|h| h.join().expect("racer"))
        .collect();
    let winners: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    for r in &results {
        match r {
            Ok(c) => assert!(c.fence > first.fence && c.attempt == 2),
            Err(StoreError::Fenced { current, .. }) => assert_eq!(*current, winners[0].fence),
            Err(other) => panic!("unexpected {other}"),
        }
    }
}

/// A record written through one connection is seen, and fenced, through
/// another: the state lives in the file, not in a connection.
#[tokio::test]
async fn two_connections_share_fences() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("shared.db");
    let clock = ManualClock::new(conformance::START_MS);
    let options = || StoreOptions {
        clock: clock.store_clock(),
        ..StoreOptions::default()
    };
    let a = SqliteStore::open(&path, SqliteOptions::default(), options()).expect("open a");
    let b = SqliteStore::open(&path, SqliteOptions::default(), options()).expect("open b");
    let k = conformance::key(1);
    let ClaimOutcome::Claimed(claim) = a
        .claim(request(&k, 1, 1_000, 60_000, 1))
        .await
        .expect("claim")
    else {
        panic!("expected a claim")
    };
    clock.advance(Duration::from_millis(1_000));
    let taken = b
        .take_over(
            &k,
            claim.fence,
            Duration::from_millis(1_000),
            conformance::holder(2),
            None,
        )
        .await
        .expect("take");
    match a
        .complete(&k, claim.fence, Outcome::new(200, Vec::new()))
        .await
    {
        Err(StoreError::Fenced { current, .. }) => assert_eq!(current, taken.fence),
        other => panic!("expected Fenced, got {other:?}"),
    }
    b.complete(&k, taken.fence, Outcome::new(200, b"ok".to_vec()))
        .await
        .expect("complete");
    let seen = a.get(&k).await.expect("get").expect("record");
    assert_eq!(
        (seen.record.state, seen.record.fence),
        (RecordState::Completed, taken.fence)
    );
}

/// The child side of [`processes_race_claims_exactly_once`]: opens the store
/// named by the environment, says `ready`, waits for `go` on stdin, claims
/// and reports.
#[test]
#[ignore = "a child process of processes_race_claims_exactly_once"]
fn race_child() {
    let path = std::env::var(RACE_CHILD_ENV).expect("run by processes_race_claims_exactly_once");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let store = match open(Path::new(&path)) {
        Ok(store) => store,
        Err(e) => {
            println!("RACE:error open: {e}");
            return;
        }
    };
    println!("RACE:ready");
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).expect("read go");
    let k = conformance::key(0);
    match runtime.block_on(store.claim(request(&k, 1, 60_000, 60_000, std::process::id()))) {
        Ok(ClaimOutcome::Claimed(c)) => println!("RACE:claimed {}", c.fence),
        Ok(ClaimOutcome::Existing(e)) => println!("RACE:existing {}", e.view.record.fence),
        Err(e) => println!("RACE:error claim: {e}"),
    }
}

const RACE_CHILD_ENV: &str = "IDEM_STORE_RACE_CHILD_DB";

/// Separate processes open a brand-new file at once, then race to claim one
/// key (released together through their stdin): exactly one wins.
#[test]
fn processes_race_claims_exactly_once() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command, Stdio};
    const PROCESSES: usize = 4;
    let exe = std::env::current_exe().expect("the test binary");
    for round in 0..3 {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("processes.db");
        let mut children: Vec<_> = (0..PROCESSES)
            .map(|_| {
                Command::new(&exe)
                    .args([
                        "races::race_child",
                        "--exact",
                        "--ignored",
                        "--nocapture",
                        "--test-threads=1",
                    ])
                    .env(RACE_CHILD_ENV, &path)
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::inherit())
                    .spawn()
                    .expect("spawn a child")
            })
            .collect();
        let mut readers: Vec<_> = children
            .iter_mut()
            .map(|c| BufReader::new(c.stdout.take().expect("child stdout")))
            .collect();
        // Reads a child's stdout up to its next `RACE:` line.
        let next = |reader: &mut BufReader<std::process::ChildStdout>| -> String {
            let mut line = String::new();
            loop {
                line.clear();
                let n = reader.read_line(&mut line).expect("read child stdout");
                assert!(n > 0, "round {round}: a child exited without reporting");
                // The harness may print `test race_child ... ` first.
                if let Some(at) = line.find("RACE:") {
                    return line[at + "RACE:".len()..].trim().to_string();
                }
            }
        };
        for reader in &mut readers {
            assert_eq!(next(reader), "ready", "round {round}");
        }
        for child in &mut children {
            let mut stdin = child.stdin.take().expect("child stdin");
            writeln!(stdin, "go").expect("release a child");
        }
        let reports: Vec<String> = readers.iter_mut().map(next).collect();
        for mut child in children {
            assert!(
                child.wait().expect("wait").success(),
                "round {round}: a child failed"
            );
        }
        let claimed: Vec<&String> = reports
            .iter()
            .filter(|r| r.starts_with("claimed "))
            .collect();
        assert_eq!(claimed.len(), 1, "round {round}: {reports:?}");
        let fence = claimed[0].trim_start_matches("claimed ");
        for report in &reports {
            assert!(
                report == claimed[0] || report == &format!("existing {fence}"),
                "round {round}: {reports:?}"
            );
        }
    }
}
