//! The guide's command under `idem exec` (docs/guide/effects-in-the-store.md,
//! "A command under `idem run` or `idem exec`"): `psql` writes a business row
//! and calls the store's SQL function `complete` with `$IDEM_KEY` and
//! `$IDEM_FENCE` in one transaction, and `idem exec` finds its own end
//! already recorded.

use idem::store::{AttemptEvent, Outcome, RecordState, StoreOptions};
use idem_store_conformance::{drop_postgres_schema, fresh_schema};
use idem_tests::postgres_url;

use super::{connect, events, schema_url};

/// The guide's `charge.sh` (docs/guide/effects-in-the-store.md), run by
/// `idem exec` on a PostgreSQL store: `psql` writes the ledger row and
/// calls `complete` with `$IDEM_KEY` and `$IDEM_FENCE` in one transaction;
/// `idem exec` then finds its own end already recorded. The row exists
/// once, the record is completed with one `completed` entry, and a second
/// run replays without running the command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guides_command_completes_in_its_own_transaction_under_idem_exec() {
    let test = "the_guides_command_completes_in_its_own_transaction_under_idem_exec";
    let Some(url) = postgres_url(test) else {
        return;
    };
    if !idem_tests::tool_available(test, "psql") {
        return;
    }
    let schema = fresh_schema();
    let store_url = schema_url(&url, &schema);
    let store = idem::store::open(&store_url, StoreOptions::default())
        .await
        .unwrap();
    let service = connect(&url).await;
    service
        .batch_execute(&format!(
            "CREATE TABLE \"{schema}\".ledger (invoice text, fence bigint)"
        ))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    // The page's script, with this test's schema for `idem`'s.
    let script = guide_script().replace("idem.complete(", &format!("\"{schema}\".complete("));
    let path = dir.path().join("charge.sh");
    std::fs::write(&path, script).unwrap();
    std::fs::write(
        dir.path().join("op.json"),
        r#"{"kind":"charge","tenant":"acme","fields":{"customer":"c1","billing_period":"2026-11","invoice_id":"inv-1","amount":"100","currency":"EUR"}}"#,
    )
    .unwrap();
    let exec = || {
        let out = std::process::Command::new(idem_tests::idem_bin())
            .args(["exec", "--policy"])
            .arg(idem_tests::policy_path("billing-charge"))
            .args(["--store", &store_url, "--op"])
            .arg(dir.path().join("op.json"))
            .args(["--", "sh"])
            .arg(&path)
            .env("IDEM_CACHE_DIR", dir.path().join("cache"))
            .env("SHOP_DATABASE_URL", &url)
            // The unqualified `ledger` of the script is this test's.
            .env("PGOPTIONS", format!("-c search_path={schema}"))
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "idem exec: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let rows = async || -> i64 {
        service
            .query_one(&format!("SELECT count(*) FROM \"{schema}\".ledger"), &[])
            .await
            .unwrap()
            .get(0)
    };
    exec();
    assert_eq!(rows().await, 1);
    let records = store.records().list(Default::default()).await.unwrap();
    let [view] = &records[..] else {
        panic!("{records:?}");
    };
    let record = &view.record;
    assert_eq!(record.state, RecordState::Completed);
    assert_eq!(record.outcome, Some(Outcome::new(0, Vec::new())));
    assert_eq!(
        events(&store, &record.key).await,
        [AttemptEvent::Executed, AttemptEvent::Completed]
    );
    exec();
    assert_eq!(rows().await, 1, "a second run ran the command");
    drop_postgres_schema(&store_url);
}

/// The `sh` block of the guide that holds `charge.sh`.
fn guide_script() -> String {
    let page = idem_tests::workspace_root().join("docs/guide/effects-in-the-store.md");
    let text = std::fs::read_to_string(page).unwrap();
    text.split("```sh\n")
        .skip(1)
        .map(|block| &block[..block.find("```").expect("the block ends")])
        .find(|block| block.contains("charge.sh"))
        .expect("the guide shows charge.sh")
        .to_string()
}
