//! The console as a person uses it after a bad night, in a real headless
//! Chromium: among ten thousand charges, find the invoice a customer calls
//! about by its field, page through the list (by place: charges made
//! meanwhile shift no page), open the record's page and
//! refuse it for good (only with its box ticked), then amend that
//! rejection when the provider shows the charge after all — while a tab's
//! form for the same record, shown before a settlement or an amendment,
//! is refused when sent. The screenshots of the list and
//! of a record's page are the book's (`docs/images/console-list.png`,
//! `console-record.png`, refreshed with `IDEM_UPDATE_DOCS=1`).

use std::num::NonZeroUsize;
use std::time::Instant;

use idem::core::{Operation, OperationLimits};
use idem::engine::{Engine, EngineOptions, ExecContext};
use idem::job::{EffectOutcome, JobOptions, JobRunner};
use idem_store::{Outcome, RecordState, StoreOptions};
use idem_tests::{tool_available, workspace_root};

use crate::operator_console::{TOKEN, lapsed, record_of};
use crate::serve::{Server, TestStore};
use crate::webdriver::Driver;

/// How many charges the store holds besides the one waiting.
const CHARGES: usize = 10_000;

/// Charges R-1 to R-`CHARGES` (but R-189), completed, written through the
/// library's job runner (claims and ends in batches, effects in process):
/// the store a night leaves behind, without ten thousand processes.
fn seed(url: &str) {
    charge(url, (1..=CHARGES).filter(|n| *n != 189).collect());
}

/// Charges R-`n` for each of `invoices`, completed, through the job runner.
fn charge(url: &str, invoices: Vec<usize>) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = idem::store::open(url, StoreOptions::default())
            .await
            .unwrap();
        let engine = Engine::new(
            idem_tests::load("billing-charge"),
            store,
            EngineOptions::default(),
        );
        let count = invoices.len() as u64;
        let ops: Vec<Operation> = invoices
            .into_iter()
            .map(|n| {
                let json = format!(
                    r#"{{"kind":"charge","tenant":"acme","fields":{{"customer":"c{}","billing_period":"2026-11","invoice_id":"R-{n}","amount":"{}","currency":"EUR"}}}}"#,
                    n % 97,
                    100 + n % 50
                );
                Operation::from_json(&json, &OperationLimits::default()).unwrap()
            })
            .collect();
        let runner = JobRunner::new(
            engine,
            JobOptions {
                concurrency: NonZeroUsize::new(64).unwrap(),
                ..JobOptions::default()
            },
        );
        let summary = runner
            .run(ops, |_op: Operation, ctx: ExecContext| async move {
                EffectOutcome::Completed(Outcome::new(0, format!("receipt {}", ctx.fence)))
            })
            .await
            .unwrap();
        assert_eq!(summary.executed, count, "{summary:?}");
    });
}

/// The keys of the list's rows, in order.
fn listed(page: &str) -> Vec<String> {
    let table = page
        .split("<table class=\"list\">")
        .nth(1)
        .and_then(|t| t.split("</table>").next())
        .unwrap_or_default();
    table
        .split("href=\"/console/record/")
        .skip(1)
        .map(|row| row.split('"').next().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn a_person_finds_an_invoice_among_ten_thousand_and_settles_it() {
    if !tool_available("operator_lookup::console", "chromedriver") {
        return;
    }
    let store = TestStore::sqlite();
    let started = Instant::now();
    seed(&store.url);
    eprintln!(
        "operator_lookup: {} charges seeded in {:.1} s",
        CHARGES - 1,
        started.elapsed().as_secs_f64()
    );
    let server = Server::start(
        &store.url,
        &["--console", "--lease", "1s"],
        &[("IDEM_SERVE_TOKEN", TOKEN)],
    );
    // The one the customer calls about: its holder went silent mid-charge.
    let (key, fence) = lapsed(&server, &store, "R-189");
    let profile = tempfile::tempdir().unwrap();
    let browser = Driver::start(profile.path());
    let console = format!("http://{}/console", server.addr);
    browser.open(&console);
    browser.type_into("#token", TOKEN);
    browser.click("#sign-in");
    browser.page_showing("1 record waits for review");

    // Every record, a page at a time, by place: charges made while the
    // first page is shown list above it, and neither the next page nor
    // the way back to the first shifts by them.
    browser.open(&format!("{console}?state=all"));
    let first = browser.page_showing("rows 1 to 25 ");
    assert!(first.contains("id=\"next\""), "{first}");
    assert!(!first.contains("id=\"previous\""), "{first}");
    let list_shot = browser.screenshot();
    charge(&store.url, vec![CHARGES + 1, CHARGES + 2, CHARGES + 3]);
    browser.click("#next");
    let second = browser.page_showing("rows 26 to 50 ");
    let (first_rows, second_rows) = (listed(&first), listed(&second));
    assert_eq!((first_rows.len(), second_rows.len()), (25, 25));
    assert!(
        second_rows.iter().all(|k| !first_rows.contains(k)),
        "the next page repeats none of the first: {first_rows:?} {second_rows:?}"
    );
    assert!(second.contains("id=\"previous\""), "{second}");
    browser.click("#previous");
    let back = browser.page_showing("rows 1 to 25 ");
    assert_eq!(listed(&back), first_rows, "back to the same first page");
    assert!(
        back.contains("id=\"previous\""),
        "the three new charges list above it: {back}"
    );

    // The search: exactly that invoice, not R-1890 nor R-18 (typed into the
    // box, sent as the form's query).
    browser.type_into("#q", "invoice_id=R-189");
    browser.click("#search");
    let found = browser.page_showing("matching <code>invoice_id=R-189</code>");
    assert!(found.contains("rows 1 to 1 "), "{found}");
    assert!(found.contains(&format!("/console/record/{key}")), "{found}");
    assert!(!found.contains("invoice_id=R-1890"), "{found}");

    // Its page, in this tab and a second one (a colleague's, say).
    let first_tab = browser.tab();
    browser.click(&format!("a[href=\"/console/record/{key}\"]"));
    let page = browser.page_showing(&format!("Settle at fence {fence}"));
    assert!(page.contains("R-189") && page.contains("4200"), "{page}");
    let record_shot = browser.screenshot();
    browser.new_tab();
    browser.open(&format!("{console}/record/{key}"));
    browser.page_showing(&format!("Settle at fence {fence}"));

    // Refused for good from the second tab (by mistake, it turns out):
    // not without its box ticked, then with it.
    let reject = |confirm: bool| {
        browser.click(&format!("#r-{key} input[value=reject]"));
        if confirm {
            browser.click(&format!("#r-{key} input[name=confirm_reject]"));
        }
        browser.type_into(
            &format!("#reason-{key}"),
            "the customer says it was never made",
        );
        browser.type_into(&format!("#by-{key}"), "ana");
        browser.click(&format!("#settle-{key}"));
    };
    reject(false);
    let unconfirmed = browser.page_showing("refusing for good needs its box ticked");
    assert!(
        unconfirmed.contains(&format!("Settle at fence {fence}")),
        "{unconfirmed}"
    );
    reject(true);
    let settled = browser.page_showing("Settled by");
    assert!(settled.contains("ana (console)"), "{settled}");
    assert!(settled.contains("failed-permanent"), "{settled}");
    let second_tab = browser.tab();

    // The first tab's form still shows the old fence: sent, it is refused,
    // and says who settled it.
    browser.switch_to(&first_tab);
    browser.click(&format!("#r-{key} input[value=release]"));
    browser.type_into(&format!("#reason-{key}"), "never reached the provider");
    browser.type_into(&format!("#by-{key}"), "bob");
    browser.click(&format!("#settle-{key}"));
    let refused = browser.page_showing("the record moved on since this page showed fence");
    assert!(
        refused.contains(
            "ana (console) settled it (resolved-rejected: the customer says it was never made)"
        ),
        "{refused}"
    );

    // The provider shows the charge after all: the rejection is amended
    // from the page as it is now, and both decisions stay.
    assert!(refused.contains("if that was wrong, amend it"), "{refused}");
    browser.click(&format!("#r-{key} input[value=completed]"));
    browser.type_into(&format!("#body-{key}"), "receipt ch_189");
    browser.type_into(&format!("#reason-{key}"), "the provider shows the charge");
    browser.type_into(&format!("#by-{key}"), "bob");
    browser.click(&format!("#amend-{key}"));
    let amended = browser.page_showing("amends resolved-rejected at fence");
    assert!(
        amended.contains("bob (console)") && amended.contains("ana (console)"),
        "{amended}"
    );
    assert!(
        !amended.contains("Amend at fence"),
        "a completion is final: {amended}"
    );

    // The second tab's amend form shows the rejection's fence: stale.
    browser.switch_to(&second_tab);
    browser.click(&format!("#r-{key} input[value=release]"));
    browser.type_into(&format!("#reason-{key}"), "let it run again");
    browser.type_into(&format!("#by-{key}"), "ana");
    browser.click(&format!("#amend-{key}"));
    let stale = browser.page_showing("the record moved on since this page showed fence");
    assert!(stale.contains("it is completed at fence"), "{stale}");

    // The settled list names who and why, both decisions.
    browser.open(&format!("{console}?state=settled&q=invoice_id%3DR-189"));
    let list = browser.page_showing("2 settlements by a person");
    assert!(
        list.contains("resolved-completed by bob (console)")
            && list.contains("the provider shows the charge")
            && list.contains("resolved-rejected by ana (console)"),
        "{list}"
    );

    let (rt, s) = store.open();
    let view = rt.block_on(record_of(&s, &key));
    assert_eq!(view.record.state, RecordState::Completed);
    assert_eq!(view.record.outcome.unwrap().body, b"receipt ch_189");

    for (shot, name) in [
        (&list_shot, "console-list.png"),
        (&record_shot, "console-record.png"),
    ] {
        assert!(shot.starts_with(b"\x89PNG"), "a PNG");
        if std::env::var("IDEM_UPDATE_DOCS").is_ok_and(|v| v == "1") {
            std::fs::write(workspace_root().join("docs/images").join(name), shot).unwrap();
        }
    }
}
