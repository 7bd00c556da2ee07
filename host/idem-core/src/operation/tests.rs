use super::*;

const SEED_OP: &str = r#"{"kind":"charge","tenant":"acme","fields":{"customer":"c1","billing_period":"2026-11","invoice_id":"i1","amount":"100","currency":"EUR"},"run":{"run_id":"nightly-2026-11-30","trigger":"scheduled","attempt":1}}"#;

fn parse(text: &str) -> Result<Operation, OpError> {
    Operation::from_json(text, &OperationLimits::default())
}

#[test]
fn reads_the_documented_example() {
    let op = parse(SEED_OP).unwrap();
    assert_eq!(op.kind, "charge");
    assert_eq!(op.fields.len(), 5);
    assert_eq!(op.run.as_ref().unwrap().trigger, Trigger::Scheduled);
    assert_eq!(op.fields.keys().next().unwrap(), "amount");
}

#[test]
fn the_business_digest_ignores_the_run_and_the_time_but_not_the_fields() {
    let op = parse(SEED_OP).unwrap();
    let rerun = Operation {
        run: None,
        now_ms: Some(5),
        ..op.clone()
    };
    assert_eq!(op.business_digest(), rerun.business_digest());
    let other = parse(&SEED_OP.replace("\"i1\"", "\"i2\"")).unwrap();
    assert_ne!(op.business_digest(), other.business_digest());
    // Pinned: the digest names an operation across versions of idem.
    let mut text = String::from("idem-operation-v1\n");
    text.push_str(&rerun.canonical_json().replace(",\"now_ms\":5", ""));
    assert_eq!(
        op.business_digest(),
        crate::Digest::of_bytes(text.as_bytes())
    );
}

#[test]
fn the_kept_json_reads_back_as_the_operation_without_its_run() {
    let op = parse(SEED_OP).unwrap();
    assert!(op.run.is_some());
    let kept = parse(&op.kept_json()).unwrap();
    assert_eq!(
        kept,
        Operation {
            run: None,
            ..op.clone()
        }
    );
    let timed = Operation {
        now_ms: Some(7),
        ..op.clone()
    };
    assert_eq!(parse(&timed.kept_json()).unwrap().now_ms, Some(7));
    assert_eq!(kept.business_digest(), op.business_digest());
}

#[test]
fn one_logical_operation_is_one_canonical_spelling() {
    let a =
        parse(r#"{"kind":"charge","tenant":"acme","fields":{"b":1.50,"a":"e\u0301"}}"#).unwrap();
    let b =
        parse(r#"{ "fields": {"a":"é", "b":15e-1}, "tenant":"acme", "kind":"charge" }"#).unwrap();
    assert_eq!(a, b);
    assert_eq!(a.canonical_json(), b.canonical_json());
    assert_eq!(
        a.canonical_json(),
        r#"{"kind":"charge","tenant":"acme","fields":{"a":"é","b":1.5}}"#
    );
    assert_eq!(parse(&a.canonical_json()).unwrap(), a);
}

#[test]
fn refuses_unknown_members_everywhere() {
    let err = parse(r#"{"kind":"k","tenant":"t","color":"red"}"#)
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown field `color`"), "{err}");
    let err = parse(r#"{"kind":"k","tenant":"t","run":{"run_id":"r","trigger":"manual","x":1}}"#)
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown field `x`"), "{err}");
}

#[test]
fn refuses_repeated_and_colliding_names() {
    let err = parse(r#"{"kind":"k","tenant":"t","fields":{"a":1,"a":2}}"#)
        .unwrap_err()
        .to_string();
    assert!(err.contains("field `a` appears twice"), "{err}");
    let err = parse(r#"{"kind":"k","tenant":"t","fields":{"é":1,"e\u0301":2}}"#)
        .unwrap_err()
        .to_string();
    assert!(err.contains("NFC"), "{err}");
    let err = parse(r#"{"kind":"k","kind":"j","tenant":"t"}"#)
        .unwrap_err()
        .to_string();
    assert!(err.contains("duplicate field `kind`"), "{err}");
}

#[test]
fn refuses_bad_values() {
    for (doc, needle) in [
        (
            r#"{"kind":"k","tenant":"t","fields":{"a":null}}"#,
            "field `a` is null",
        ),
        (
            r#"{"kind":"k","tenant":"t","fields":{"a":[1]}}"#,
            "field `a` is an array",
        ),
        (
            r#"{"kind":"k","tenant":"t","fields":{"a":{}}}"#,
            "field `a` is an object",
        ),
        (
            r#"{"kind":"k","tenant":"t","fields":{"a":1e999}}"#,
            "send it as a string",
        ),
        (r#"{"kind":"","tenant":"t"}"#, "`kind`: must not be empty"),
        (
            r#"{"kind":"k","tenant":"t","run":{"run_id":"r","trigger":"cron"}}"#,
            "unknown variant `cron`",
        ),
        (
            r#"{"kind":"k","tenant":"t","run":{"run_id":"r","trigger":"retry","attempt":0}}"#,
            "starts at 1",
        ),
        (r#"{"kind":"k"}"#, "missing field `tenant`"),
        (r#"{"kind":"k","tenant":"t""#, "EOF"),
        ("[]", "must be a JSON object"),
    ] {
        let err = parse(doc).unwrap_err().to_string();
        assert!(err.contains(needle), "{doc}: {err}");
    }
}

#[test]
fn refuses_oversized_documents_before_parsing() {
    let limits = OperationLimits {
        max_bytes: 64,
        ..Default::default()
    };
    let err = Operation::from_json(SEED_OP, &limits).unwrap_err();
    assert!(matches!(err, OpError::TooLarge { limit: 64, .. }), "{err}");
}

#[test]
fn a_nul_is_refused_wherever_it_is_naming_where() {
    let cases = [
        (
            r#""invoice_id":"i1""#,
            r#""invoice_id":"i\u0000 1""#,
            "field `invoice_id`",
        ),
        (
            r#""invoice_id":"i1""#,
            r#""invoice\u0000id":"i1""#,
            "field name `invoice\\u{0}id`",
        ),
        (r#""kind":"charge""#, r#""kind":"char\u0000ge""#, "`kind`"),
        (r#""tenant":"acme""#, r#""tenant":"\u0000""#, "`tenant`"),
        (
            r#""run_id":"nightly-2026-11-30""#,
            r#""run_id":"n\u0000""#,
            "`run.run_id`",
        ),
    ];
    for (from, to, named) in cases {
        let text = SEED_OP.replace(from, to);
        assert_ne!(text, SEED_OP, "{from} is in the seed");
        let e = parse(&text).unwrap_err().to_string();
        assert!(e.starts_with(&format!("operation {named}: ")), "{to}: {e}");
        // The message itself never carries the raw character.
        assert!(!e.contains('\0'), "{e:?}");
    }
    // Other control characters are text like any other in a value.
    let tab = SEED_OP.replace(r#""i1""#, r#""i\t1""#);
    assert!(parse(&tab).is_ok());
}

/// A field's number is canonicalised from the digits it was written with:
/// no f64 in between, whatever features serde_json is built with (this
/// crate's own tests build it without `arbitrary_precision`; the workspace's
/// with it, through the sidecar).
#[test]
fn numbers_keep_the_digits_they_were_written_with() {
    let op = parse(
        r#"{"kind":"k","tenant":"t","fields":{"a": 12.50 , "b":123456789012345678901234567890,"c":1e1,"d":-0.000000000000000000000000001,"e": true ,"f":"x"}}"#,
    )
    .unwrap();
    let number = |name: &str| match &op.fields[name] {
        Value::Number(n) => n.clone(),
        other => panic!("{name}: {other:?}"),
    };
    assert_eq!(number("a"), "12.5");
    assert_eq!(number("b"), "123456789012345678901234567890");
    assert_eq!(number("c"), "10");
    assert_eq!(number("d"), "-0.000000000000000000000000001");
    assert_eq!(op.fields["e"], Value::Boolean(true));
    assert_eq!(op.fields["f"], Value::Text("x".into()));
    for (doc, what) in [
        (r#"{"kind":"k","tenant":"t","fields":{"a":null}}"#, "null"),
        (
            r#"{"kind":"k","tenant":"t","fields":{"a":[1]}}"#,
            "an array",
        ),
        (
            r#"{"kind":"k","tenant":"t","fields":{"a":{"b":1}}}"#,
            "an object",
        ),
    ] {
        let e = parse(doc).unwrap_err().to_string();
        assert!(e.contains(&format!("field `a` is {what}")), "{e}");
    }
}
