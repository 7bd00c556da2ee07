use proptest::prelude::*;

use super::*;
use crate::Value;

/// A field's value as a caller has it.
#[derive(Debug, Clone)]
enum Given {
    Text(String),
    /// A number's spelling, written into the JSON as it is.
    Number(String),
    Signed(i64),
    Unsigned(u64),
    Boolean(bool),
}

/// Pieces of names and text that exercise normalisation: precomposed and
/// decomposed letters (one after NFC), the Angstrom sign (NFC `Å`), a
/// letter NFC decomposes (U+0958), plus characters refused or escaped.
const PIECES: &[&str] = &[
    "a", "b", "x", "_", "1", "-", "é", "e\u{301}", "Å", "A\u{30a}", "\u{212b}", "\u{958}", "€",
];
const ODD_PIECES: &[&str] = &["\u{7}", "\n", "\0", "\"", "\\", " "];

fn string(pieces: std::ops::RangeInclusive<usize>, odd: bool) -> impl Strategy<Value = String> {
    let chosen: Vec<&'static str> = if odd {
        PIECES.iter().chain(ODD_PIECES).copied().collect()
    } else {
        PIECES.to_vec()
    };
    prop::collection::vec(prop::sample::select(chosen), pieces).prop_map(|parts| parts.concat())
}

/// Mostly a name the reader accepts; now and then one it refuses (empty,
/// or holding a control character).
fn name() -> impl Strategy<Value = String> {
    prop_oneof![12 => string(1..=3, false), 1 => string(0..=3, true)]
}

fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => "-?(0|[1-9][0-9]{0,24})(\\.[0-9]{1,12})?([eE][+-]?[0-9]{1,3})?",
        1 => prop::sample::select(vec!["1.", "+1", ".5", "01", "NaN", "1e", "-"])
            .prop_map(String::from),
    ]
}

fn value() -> impl Strategy<Value = Given> {
    prop_oneof![
        string(0..=4, true).prop_map(Given::Text),
        number().prop_map(Given::Number),
        any::<i64>().prop_map(Given::Signed),
        any::<u64>().prop_map(Given::Unsigned),
        any::<bool>().prop_map(Given::Boolean),
    ]
}

fn trigger() -> impl Strategy<Value = Trigger> {
    prop::sample::select(vec![
        Trigger::Scheduled,
        Trigger::Retry,
        Trigger::Manual,
        Trigger::Client,
    ])
}

/// One operation's parts, given alike to the builder and the JSON.
#[derive(Debug, Clone)]
struct Parts {
    kind: String,
    tenant: String,
    fields: Vec<(String, Given)>,
    run: Option<(String, Trigger, u32)>,
    now_ms: Option<u64>,
}

fn parts() -> impl Strategy<Value = Parts> {
    (
        name(),
        name(),
        prop::collection::vec((name(), value()), 0..6),
        prop::option::of((name(), trigger(), 0u32..3)),
        prop::option::of(any::<u64>()),
    )
        .prop_map(|(kind, tenant, fields, run, now_ms)| Parts {
            kind,
            tenant,
            fields,
            run,
            now_ms,
        })
}

fn built(parts: &Parts) -> Result<Operation, OpError> {
    let mut b = Operation::builder(&parts.kind, &parts.tenant);
    for (name, value) in &parts.fields {
        b = match value {
            Given::Text(t) => b.text(name, t),
            Given::Number(n) => b.number(name, n),
            Given::Signed(i) => b.integer(name, *i),
            Given::Unsigned(u) => b.integer(name, *u),
            Given::Boolean(v) => b.boolean(name, *v),
        };
    }
    if let Some((run_id, trigger, attempt)) = &parts.run {
        b = b.run(run_id, *trigger, *attempt);
    }
    if let Some(now) = parts.now_ms {
        b = b.now_ms(now);
    }
    b.build()
}

/// The JSON document a caller would write for `parts`.
fn json(parts: &Parts) -> String {
    let s = |v: &str| serde_json::to_string(v).unwrap();
    let fields: Vec<String> = parts
        .fields
        .iter()
        .map(|(name, value)| {
            let value = match value {
                Given::Text(t) => s(t),
                Given::Number(n) => n.clone(),
                Given::Signed(i) => i.to_string(),
                Given::Unsigned(u) => u.to_string(),
                Given::Boolean(v) => v.to_string(),
            };
            format!("{}:{value}", s(name))
        })
        .collect();
    let mut doc = format!(
        "{{\"kind\":{},\"tenant\":{},\"fields\":{{{}}}",
        s(&parts.kind),
        s(&parts.tenant),
        fields.join(",")
    );
    if let Some((run_id, trigger, attempt)) = &parts.run {
        doc.push_str(&format!(
            ",\"run\":{{\"run_id\":{},\"trigger\":\"{}\",\"attempt\":{attempt}}}",
            s(run_id),
            trigger.as_str()
        ));
    }
    if let Some(now) = parts.now_ms {
        doc.push_str(&format!(",\"now_ms\":{now}"));
    }
    doc.push('}');
    doc
}

proptest! {
    /// The builder and the JSON reader agree on every input: the same
    /// operation (and canonical JSON) when both accept it, the same part
    /// at fault when both refuse a value, and never one without the other.
    #[test]
    fn the_builder_makes_what_the_json_reader_makes(parts in parts()) {
        let doc = json(&parts);
        let built = built(&parts);
        let read = Operation::from_json(&doc, &OperationLimits::default());
        match (built, read) {
            (Ok(b), Ok(r)) => {
                prop_assert_eq!(b.canonical_json(), r.canonical_json());
                prop_assert_eq!(b, r);
            }
            // The same part at fault (the message may quote a number as
            // each read it: serde_json respells `1E130` as `1e+130`).
            (Err(OpError::Invalid { what: b, .. }), Err(OpError::Invalid { what: r, .. })) => {
                prop_assert_eq!(b, r);
            }
            (Err(_), Err(_)) => {}
            (b, r) => prop_assert!(false, "builder {:?}, JSON {:?} for {}", b, r, doc),
        }
    }
}

#[test]
fn integers_are_exact_at_their_extremes() {
    let op = Operation::builder("charge", "acme")
        .integer("max", u64::MAX)
        .integer("min", i64::MIN)
        .integer("zero", 0u8)
        .build()
        .unwrap();
    let number = |n: &str| Some(Value::Number(n.into()));
    assert_eq!(op.field("max").cloned(), number("18446744073709551615"));
    assert_eq!(op.field("min").cloned(), number("-9223372036854775808"));
    assert_eq!(op.field("zero").cloned(), number("0"));
}

#[test]
fn a_number_too_long_to_spell_is_refused_as_in_json() {
    let built = Operation::builder("charge", "acme")
        .number("amount", "1E130")
        .build()
        .unwrap_err();
    let read = Operation::from_json(
        r#"{"kind":"charge","tenant":"acme","fields":{"amount":1E130}}"#,
        &OperationLimits::default(),
    )
    .unwrap_err();
    for refused in [built, read] {
        assert!(
            refused
                .to_string()
                .contains("spells to more than 128 digits; send it as a string"),
            "{refused}"
        );
    }
}

#[test]
fn a_name_given_twice_is_refused_as_in_json() {
    let twice = Operation::builder("charge", "acme")
        .text("invoice", "a")
        .boolean("invoice", true)
        .build()
        .unwrap_err();
    assert_eq!(
        twice.to_string(),
        "operation field `invoice`: appears twice"
    );
    let after_nfc = Operation::builder("charge", "acme")
        .text("caf\u{e9}", "a")
        .text("cafe\u{301}", "b")
        .build()
        .unwrap_err();
    assert!(
        after_nfc.to_string().contains("once names are normalised"),
        "{after_nfc}"
    );
}

#[test]
fn the_size_limit_applies_to_the_canonical_json() {
    let op = Operation::builder("charge", "acme").text("note", "x".repeat(40));
    let size = op.clone().build().unwrap().canonical_json().len();
    let limits = |max_bytes| OperationLimits {
        max_bytes,
        ..OperationLimits::default()
    };
    assert!(op.clone().build_with(&limits(size)).is_ok());
    match op.build_with(&limits(size - 1)) {
        Err(OpError::TooLarge { size: s, limit }) => assert_eq!((s, limit), (size, size - 1)),
        other => panic!("expected TooLarge, got {other:?}"),
    }
}

#[test]
fn the_other_limits_are_the_readers() {
    let limits = OperationLimits {
        max_fields: 1,
        ..OperationLimits::default()
    };
    let two = Operation::builder("charge", "acme")
        .boolean("a", true)
        .boolean("b", true)
        .build_with(&limits)
        .unwrap_err();
    let read = Operation::from_json(
        r#"{"kind":"charge","tenant":"acme","fields":{"a":true,"b":true}}"#,
        &limits,
    )
    .unwrap_err();
    assert_eq!(two.to_string(), read.to_string());
}
