//! What a bad night leaves for a person, with real processes: a holder
//! stopped past its lease and a scheduler retry, a killed run re-run by
//! hand, each classified by `idem report`, then `idem review` and `idem
//! resolve` settling what was left unknown (and amending a mistake), on
//! SQLite and PostgreSQL; bad input to the three commands refused.

use serde_json::Value;

use crate::report_cli::{Env, causes, on_every_store, op, output, signal, text};

// A holder stopped (SIGSTOP) past its lease while its command runs; the
// scheduler's retry finds the claim expired and the policy sends it to
// review; the holder resumes and its completion is refused. The report
// names a scheduler retry; review lists the record; resolve refuses it for
// good, then amends that to a completion (which cannot be amended), so it
// is settled once; a later duplicate replays the amended resolution.
#[test]
fn a_stopped_holder_and_a_retry_are_named_reviewed_and_resolved() {
    on_every_store("stopped_holder", |env| {
        let op = env.write("op.json", &op(1));
        let mut first = env
            .exec(
                &op,
                &["--run-id", "nightly-1", "--lease", "1s"],
                r#"touch "$DIR/started"; while [ ! -f "$DIR/go" ]; do sleep 0.05; done; echo charged"#,
            )
            .spawn()
            .unwrap();
        while !env.path("started").exists() {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        signal(&first, "-STOP");
        env.until_every_lease_expired();
        let retry = output(env.exec(
            &op,
            &["--run-id", "nightly-1-retry", "--trigger", "retry"],
            "echo charged again",
        ));
        assert_eq!(retry.status.code(), Some(77), "{}", text(&retry.stderr));
        std::fs::write(env.path("go"), "").unwrap();
        signal(&first, "-CONT");
        let code = first.wait().unwrap().code();
        assert_eq!(code, Some(76), "the stopped holder was deposed");
        let _ = first.stdout.take();

        let report = env.report(&[]);
        assert_eq!(
            causes(&report),
            vec![("scheduler-retry".to_string(), 1)],
            "{report:#}"
        );
        let dup = &report["duplicates"][0];
        assert_eq!(
            dup["runs"],
            serde_json::json!(["nightly-1", "nightly-1-retry"])
        );
        // The late completion (and a heartbeat, if one fired first).
        assert!(dup["fenced"].as_u64() >= Some(1), "{report:#}");

        // The review queue holds it, with its timeline.
        let out = output(env.idem(&["review", "--store", &env.store, "--json"]));
        assert!(out.status.success(), "{}", text(&out.stderr));
        let waiting: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(waiting.as_array().unwrap().len(), 1, "{waiting:#}");
        assert_eq!(waiting[0]["state"], "outcome-unknown");
        let events: Vec<&str> = waiting[0]["timeline"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["event"].as_str().unwrap())
            .collect();
        assert_eq!(
            events[..4],
            ["executed", "marked-unknown", "rejected", "fenced"],
            "{waiting:#}"
        );
        assert!(events[4..].iter().all(|e| *e == "fenced"), "{events:?}");
        let key = waiting[0]["key"].as_str().unwrap().to_string();
        let body = env.write("receipt", "ch_123");
        let resolve = |extra: &[&str]| {
            let mut args = vec![
                "resolve",
                "--store",
                &env.store,
                &key,
                "--reason",
                "provider shows ch_123",
            ];
            args.extend_from_slice(extra);
            output(env.idem(&args))
        };
        // Refused for good, by mistake: the provider shows the charge. The
        // rejection is amended from the shell; a completion never is.
        let rejected = resolve(&["--reject", "--json"]);
        assert!(rejected.status.success(), "{}", text(&rejected.stderr));
        let fence = serde_json::from_slice::<Value>(&rejected.stdout).unwrap()["fence"].to_string();
        // An amendment names the resolution it amends: never "whatever is
        // current", which could be a colleague's amendment.
        let unfenced = resolve(&["--amend", "--release"]);
        assert_eq!(
            unfenced.status.code(),
            Some(2),
            "{}",
            text(&unfenced.stderr)
        );
        assert!(
            text(&unfenced.stderr).contains("--fence"),
            "{}",
            text(&unfenced.stderr)
        );
        let done = resolve(&[
            "--amend",
            "--fence",
            &fence,
            "--completed",
            "--body-file",
            body.to_str().unwrap(),
        ]);
        assert!(done.status.success(), "{}", text(&done.stderr));
        assert!(
            text(&done.stdout).contains("amended: recorded as completed"),
            "{}",
            text(&done.stdout)
        );
        // A stale amendment (the rejection's fence, moved on since) is refused.
        let stale = resolve(&["--amend", "--fence", &fence, "--release"]);
        assert_eq!(stale.status.code(), Some(1));
        assert!(
            text(&stale.stderr).contains("moved on since"),
            "{}",
            text(&stale.stderr)
        );
        let completed = text(&done.stdout);
        let completed = completed
            .split("(fence ")
            .nth(1)
            .and_then(|rest| rest.split(')').next())
            .expect("the completion's fence")
            .to_string();
        let amend_again = resolve(&["--amend", "--fence", &completed, "--release"]);
        assert_eq!(amend_again.status.code(), Some(1));
        assert!(
            text(&amend_again.stderr).contains("cannot be amended"),
            "{}",
            text(&amend_again.stderr)
        );
        // Once: the record no longer waits, and nothing changes.
        let again = resolve(&["--release"]);
        assert_eq!(again.status.code(), Some(1));
        assert!(
            text(&again.stderr).contains("not waiting for review"),
            "{}",
            text(&again.stderr)
        );
        let out = output(env.idem(&["review", "--store", &env.store, "--json"]));
        assert_eq!(
            serde_json::from_slice::<Value>(&out.stdout).unwrap(),
            serde_json::json!([])
        );
        // A later duplicate replays what the person recorded.
        let replay = output(env.exec(&op, &["--run-id", "nightly-2"], "echo never"));
        assert_eq!(replay.status.code(), Some(0), "{}", text(&replay.stderr));
        assert_eq!(text(&replay.stdout), "ch_123");
        let timeline = env.report(&["--key", &key]);
        let last = timeline["timeline"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .clone();
        assert_eq!(last["event"], "replayed");
        let resolved = timeline["timeline"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["event"] == "resolved-completed")
            .expect("the resolution is in the log")
            .clone();
        assert_eq!(resolved["actor"], "alice");
        let detail = resolved["detail"].as_str().unwrap();
        assert!(
            detail.starts_with("amends resolved-rejected at fence")
                && detail.ends_with(": provider shows ch_123"),
            "{detail}"
        );
        // Both decisions are kept.
        assert!(
            timeline["timeline"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["event"] == "resolved-rejected" && e["actor"] == "alice"),
            "{timeline:#}"
        );
    });
}

// A run killed after c2's effect (its idem process with it), re-run by
// hand once the leases expired: the re-run replays c1, sends c2 to review
// and charges c3. c1 and c2 were asked for twice: a manual re-run.
#[test]
fn a_killed_run_re_run_by_hand_is_named_a_manual_rerun() {
    on_every_store("manual", |env| {
        let ops = env.write("ops.jsonl", &format!("{}\n{}\n{}\n", op(1), op(2), op(3)));
        let killed = output(env.run(
            "billing-charge",
            &ops,
            &[
                "--run-id",
                "nightly-7",
                "--lease",
                "1s",
                "--concurrency",
                "1",
            ],
            r#"if grep -q '"c2"'; then kill -9 $PPID; sleep 1; fi; echo ok"#,
        ));
        assert_eq!(killed.status.code(), None, "{}", text(&killed.stderr));
        env.until_every_lease_expired();
        let rerun = output(env.run(
            "billing-charge",
            &ops,
            &["--run-id", "nightly-7-rerun", "--trigger", "manual"],
            "echo ok",
        ));
        assert_eq!(rerun.status.code(), Some(1), "c2 went to review");
        let said = text(&rerun.stdout);
        // What waits for a person comes first, with the command to see it.
        // (c2, and c1 too when the kill came before c1's end was written.)
        let first = said.lines().next().unwrap_or_default();
        assert!(
            first.contains("of this run wait")
                && first.contains("(outcome unknown 0, sent to review ")
                && first.contains("): idem review --store"),
            "{said}"
        );
        assert!(said.contains("rejected 0, sent to review "), "{said}");
        // The summary says why it found work asked for before.
        assert!(
            said.contains(
                "why: 2 duplicates prevented: a re-run by hand after the first run had stopped"
            ),
            "{said}"
        );
        let report = env.report(&[]);
        assert_eq!(
            causes(&report),
            vec![("manual-rerun".to_string(), 2)],
            "{report:#}"
        );
        // --run-id narrows to the keys that run asked for.
        let narrowed = env.report(&["--run-id", "nightly-7-rerun"]);
        assert_eq!(narrowed["keys"], 3);
        the_bad_night_is_settled_and_reported(env, &report);
    });
}

/// The rest of the bad night: the report leads with what waits, with the
/// invoice behind it; review shows it; a mistyped fence is named as such;
/// resolve settles it and says which charge it was; the report then names
/// the two runs (the resolution is a person's act, not a run), who settled
/// what, and draws every event.
fn the_bad_night_is_settled_and_reported(env: &Env, report: &Value) {
    let waiting = &report["waiting_for_review"];
    let n = waiting["total"].as_u64().unwrap();
    assert!((1..=2).contains(&n), "{report:#}");
    let lead = |n: u64| match n {
        1 => "1 record waits for review".to_string(),
        n => format!("{n} records wait for review"),
    };
    let i2 = waiting["first"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["operation"]["fields"]["invoice_id"] == "i2")
        .expect("c2's charge waits");
    assert_eq!(i2["operation"]["fields"]["amount"], "100");
    let rerun = report["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["run"] == "nightly-7-rerun")
        .expect("the re-run");
    assert_eq!(
        (rerun["sent_to_review"].as_u64(), rerun["refused"].as_u64()),
        (Some(n), Some(0))
    );
    let out = output(env.idem(&["report", "--store", &env.store]));
    let shown = text(&out.stdout);
    assert!(
        shown.starts_with(&format!("{}: idem review --store", lead(n))),
        "{shown}"
    );
    assert!(shown.contains("charge for acme-i2: amount=100"), "{shown}");
    let page = env.path("night.html");
    let out = output(env.idem(&[
        "report",
        "--store",
        &env.store,
        "--html",
        page.to_str().unwrap(),
    ]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let html = std::fs::read_to_string(&page).unwrap();
    // (A replay only where c1's end was written before the kill.)
    for drawn in [
        "mark executed",
        "mark marked-unknown",
        "mark sent-to-review",
    ] {
        assert!(html.contains(drawn), "{drawn} is not drawn");
    }
    assert!(html.contains(&lead(n)));

    let out = output(env.idem(&["review", "--store", &env.store]));
    let review = text(&out.stdout);
    assert!(review.starts_with(&lead(n)), "{review}");
    assert!(
        review.contains("operation: charge for acme-i2: amount=100 billing_period=2026-11 currency=EUR customer=c2 invoice_id=i2"),
        "{review}"
    );
    assert!(review.contains("sent-to-review"), "{review}");
    let record = env
        .records()
        .into_iter()
        .find(|r| r["state"] == "outcome-unknown" && r["operation"]["fields"]["invoice_id"] == "i2")
        .expect("the record in review");
    let key = record["key"].as_str().unwrap().to_string();
    let fence = record["fence"].as_u64().unwrap();
    let typo = (fence + 5).to_string();
    let resolve = |fence: &str| {
        output(env.idem(&[
            "resolve",
            "--store",
            &env.store,
            &key,
            "--completed",
            "--fence",
            fence,
            "--reason",
            "the provider shows the charge",
        ]))
    };
    let out = resolve(&typo);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains(&format!("has no fence {typo} yet (it is at fence {fence})")),
        "{}",
        text(&out.stderr)
    );
    let out = resolve(&fence.to_string());
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("operation: charge for acme-i2: amount=100"),
        "{}",
        text(&out.stdout)
    );

    let after = env.report(&[]);
    let runs: Vec<&str> = after["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run"].as_str().unwrap())
        .collect();
    assert_eq!(runs, ["nightly-7", "nightly-7-rerun"], "{after:#}");
    assert_eq!(after["settled"][0]["by"], "alice");
    assert_eq!(after["settled"][0]["resolution"], "resolved-completed");
    assert_eq!(after["waiting_for_review"]["total"], n - 1);
    let out = output(env.idem(&["report", "--store", &env.store]));
    let shown = text(&out.stdout);
    let now = if n == 1 {
        "nothing waits for review".to_string()
    } else {
        lead(n - 1)
    };
    assert!(shown.starts_with(&now), "{shown}");
    assert!(shown.contains("settled by a person:"), "{shown}");
    assert!(
        shown.contains("by alice: the provider shows the charge"),
        "{shown}"
    );
}

// Bad input to the forensics commands: named, and nothing is written.
#[test]
fn report_review_and_resolve_refuse_bad_input() {
    let env = Env::sqlite();
    // A store that does not exist is not created.
    for args in [
        vec!["report", "--store", env.store.as_str()],
        vec!["review", "--store", env.store.as_str()],
    ] {
        let out = output(env.idem(&args));
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            text(&out.stderr).contains("no store at"),
            "{}",
            text(&out.stderr)
        );
    }
    assert!(!env.path("idem.db").exists());
    // A completed record is not waiting for review: refused, unchanged.
    let op = env.write("op.json", &op(1));
    assert!(output(env.exec(&op, &[], "echo ok")).status.success());
    let key = env.records()[0]["key"].as_str().unwrap().to_string();
    let stored = |env: &Env| {
        let r = &env.records()[0];
        (
            r["state"].clone(),
            r["fence"].clone(),
            r["updated_ms"].clone(),
        )
    };
    let before = stored(&env);
    let out = output(env.idem(&[
        "resolve",
        "--store",
        &env.store,
        &key[..16],
        "--reject",
        "--reason",
        "no",
    ]));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("is completed and not waiting for review"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(stored(&env), before);
    for (args, says) in [
        (vec!["--reject"], "--reason"),
        (vec!["--reason", "x"], "--completed"),
        (
            vec!["--completed", "--release", "--reason", "x"],
            "cannot be used with",
        ),
    ] {
        let mut all = vec!["resolve", "--store", env.store.as_str(), key.as_str()];
        all.extend(args);
        let out = output(env.idem(&all));
        assert_eq!(out.status.code(), Some(2), "{all:?}");
        assert!(
            text(&out.stderr).contains(says),
            "{all:?}: {}",
            text(&out.stderr)
        );
    }
    let out = output(env.idem(&["report", "--store", &env.store, "--since", "yesterday"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--since: `yesterday` is not a time"));
    let out = output(env.idem(&["report", "--store", &env.store, "--key", "xyz"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("is not a key"));
}
