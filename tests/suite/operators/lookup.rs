//! Records found by their operation's fields: `idem inspect`, `idem
//! review` and `idem report` take `--field NAME=VALUE` (and `--state`),
//! one filter for the three.

use super::{Env, fails_with, op, text};

/// An invoice found by its field: `--field invoice_id=i7` lists that one
/// record among seventeen (not i17, whose id contains it), with another
/// field too, and a malformed filter is refused naming the form.
#[test]
fn inspect_finds_a_record_by_its_operations_fields() {
    let env = Env::new();
    env.run_invoices(17);
    let invoices = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let out = env.inspect(&all);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let listed: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
        listed
            .iter()
            .map(|r| {
                r["operation"]["fields"]["invoice_id"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect()
    };
    assert_eq!(invoices(&["--field", "invoice_id=i7"]), ["i7"]);
    assert_eq!(
        invoices(&["--field", "invoice_id=i7", "--field", "currency=EUR"]),
        ["i7"]
    );
    assert!(invoices(&["--field", "invoice_id=i7", "--field", "currency=USD"]).is_empty());
    assert_eq!(invoices(&["--field", "currency=EUR"]).len(), 17);
    fails_with(
        &env.inspect(&["--field", "invoice_id"]),
        2,
        "is not NAME=VALUE",
    );
}

/// `idem review` and `idem report` take the filter `inspect` takes: among
/// five completed invoices and two whose holder was killed mid-effect,
/// `--field invoice_id=w2` finds the one waiting, `--state` narrows to a
/// state (review refuses one that never waits), and the report is about
/// the selected keys only, pointing at the review that lists them.
#[test]
fn review_and_report_find_records_by_their_fields_and_state() {
    let env = Env::new();
    env.run_invoices(5);
    for invoice in ["w1", "w2"] {
        let op = env.write(&format!("{invoice}.json"), &op(invoice));
        let killed = env
            .exec(
                "billing-charge",
                &op,
                &["--lease", "1s"],
                "kill -9 $PPID; sleep 1",
            )
            .output()
            .unwrap();
        assert_eq!(killed.status.code(), None, "{}", text(&killed.stderr));
    }
    let store = env.store();
    let json = |args: &[&str]| -> serde_json::Value {
        let out = env.idem(args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let review = |extra: &[&str]| -> Vec<String> {
        let mut args = vec!["review", "--store", &store, "--json"];
        args.extend_from_slice(extra);
        let listed = json(&args);
        listed
            .as_array()
            .unwrap()
            .iter()
            .map(|w| {
                w["operation"]["fields"]["invoice_id"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect()
    };
    // Both wait once their one-second leases have run out (the store's
    // clock decides; polled, no time assumed).
    let mut tries = 0;
    while review(&[]).len() < 2 {
        tries += 1;
        assert!(
            tries < 600,
            "the killed holders' records never waited: {:?}",
            review(&[])
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(review(&["--field", "invoice_id=w2"]), ["w2"]);
    assert_eq!(
        review(&["--state", "in-progress", "--field", "invoice_id=w1"]),
        ["w1"]
    );
    assert!(review(&["--state", "outcome-unknown"]).is_empty());
    assert!(
        review(&["--field", "invoice_id=i3"]).is_empty(),
        "completed: nothing waits"
    );
    let said = env
        .idem(&["review", "--store", &store, "--field", "invoice_id=i3"])
        .output()
        .unwrap();
    assert!(
        text(&said.stdout).contains("nothing that matches waits for review"),
        "{}",
        text(&said.stdout)
    );
    fails_with(
        &env.idem(&["review", "--store", &store, "--state", "completed"])
            .output()
            .unwrap(),
        2,
        "no record in that state waits for review",
    );

    let report = json(&[
        "report",
        "--store",
        &store,
        "--json",
        "--field",
        "invoice_id=w2",
    ]);
    assert_eq!(report["keys"], 1, "{report:#}");
    let waiting = &report["waiting_for_review"];
    assert_eq!(waiting["total"], 1, "{report:#}");
    assert_eq!(
        waiting["first"][0]["operation"]["fields"]["invoice_id"],
        "w2"
    );
    assert!(
        waiting["command"]
            .as_str()
            .unwrap()
            .ends_with("--field invoice_id=w2"),
        "{report:#}"
    );
    let said = env
        .idem(&[
            "report",
            "--store",
            &store,
            "--field",
            "invoice_id=w2",
            "--state",
            "in-progress",
        ])
        .output()
        .unwrap();
    assert!(
        text(&said.stdout).contains(
            "(records with invoice_id=w2, state in-progress): 1 attempt-log entries about 1 keys"
        ),
        "{}",
        text(&said.stdout)
    );
    let completed = json(&[
        "report",
        "--store",
        &store,
        "--json",
        "--state",
        "completed",
    ]);
    assert_eq!(completed["keys"], 5, "{completed:#}");
    assert_eq!(completed["waiting_for_review"]["total"], 0, "{completed:#}");
    fails_with(
        &env.idem(&["report", "--store", &store, "--field", "invoice_id"])
            .output()
            .unwrap(),
        2,
        "is not NAME=VALUE",
    );
}
