//! Stream entries read from Redis's raw replies. An entry's field names
//! and values are bytes, in the order they were written: parsed into
//! strings (as redis-rs's stream types do), one entry whose field name is
//! not UTF-8 would fail its whole reply, and the entries already moved
//! into this consumer's pending list with it would wait a claim threshold;
//! parsed as bytes, it is one more entry refused.

use redis::Value;

/// One stream entry.
pub(super) struct Entry {
    /// Its id (`1764979200000-1`).
    pub(super) id: String,
    /// Its fields, names and values, as written.
    pub(super) fields: Vec<(Vec<u8>, Vec<u8>)>,
}

/// The entries of an `XREADGROUP` reply (nil when none came in time).
pub(super) fn read(reply: Value) -> Vec<Entry> {
    let Value::Array(streams) = reply else {
        return Vec::new();
    };
    streams
        .into_iter()
        .flat_map(|stream| match stream {
            // [stream name, entries]
            Value::Array(mut pair) if pair.len() == 2 => entries(pair.pop().expect("two")),
            _ => Vec::new(),
        })
        .collect()
}

/// The cursor for the next scan and the entries of an `XAUTOCLAIM` reply.
pub(super) fn autoclaim(reply: Value) -> (String, Vec<Entry>) {
    let Value::Array(parts) = reply else {
        return ("0-0".into(), Vec::new());
    };
    let mut parts = parts.into_iter();
    let cursor = parts.next().and_then(text).unwrap_or_else(|| "0-0".into());
    let claimed = parts.next().map(entries).unwrap_or_default();
    (cursor, claimed)
}

/// The entries of an array of them (`XCLAIM`'s reply); a nil in place of
/// an entry (one deleted from the stream) is left out.
pub(super) fn entries(reply: Value) -> Vec<Entry> {
    match reply {
        Value::Array(items) => items.into_iter().filter_map(entry).collect(),
        _ => Vec::new(),
    }
}

/// `[id, [name, value, …]]`.
fn entry(value: Value) -> Option<Entry> {
    let Value::Array(parts) = value else {
        return None;
    };
    let mut parts = parts.into_iter();
    let id = text(parts.next()?)?;
    let mut fields = Vec::new();
    if let Some(Value::Array(flat)) = parts.next() {
        let mut flat = flat.into_iter();
        while let (Some(name), Some(value)) = (flat.next(), flat.next()) {
            fields.push((bytes(name), bytes(value)));
        }
    }
    Some(Entry { id, fields })
}

fn text(value: Value) -> Option<String> {
    String::from_utf8(bytes(value)).ok()
}

fn bytes(value: Value) -> Vec<u8> {
    match value {
        Value::BulkString(b) => b,
        Value::SimpleString(s) => s.into_bytes(),
        Value::Int(i) => i.to_string().into_bytes(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(b: &[u8]) -> Value {
        Value::BulkString(b.to_vec())
    }

    #[test]
    fn a_field_name_that_is_not_utf8_is_one_entry_not_a_failed_reply() {
        let reply = Value::Array(vec![Value::Array(vec![
            bulk(b"orders"),
            Value::Array(vec![
                Value::Array(vec![
                    bulk(b"1-0"),
                    Value::Array(vec![bulk(b"\xff"), bulk(b"x")]),
                ]),
                Value::Array(vec![
                    bulk(b"1-1"),
                    Value::Array(vec![
                        bulk(b"operation"),
                        bulk(b"{}"),
                        bulk(b"b"),
                        bulk(b"\x00\x01"),
                    ]),
                ]),
            ]),
        ])]);
        let got = read(reply);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].fields, [(b"\xff".to_vec(), b"x".to_vec())]);
        assert_eq!(got[1].id, "1-1");
        assert_eq!(
            got[1].fields,
            [
                (b"operation".to_vec(), b"{}".to_vec()),
                (b"b".to_vec(), b"\x00\x01".to_vec())
            ],
            "in order, as bytes"
        );
        assert!(read(Value::Nil).is_empty(), "nothing came in time");
    }

    #[test]
    fn an_autoclaim_reply_gives_its_cursor_and_leaves_out_deleted_entries() {
        let reply = Value::Array(vec![
            bulk(b"5-0"),
            Value::Array(vec![
                Value::Nil,
                Value::Array(vec![bulk(b"2-0"), Value::Array(vec![])]),
            ]),
            Value::Array(vec![bulk(b"3-0")]),
        ]);
        let (cursor, claimed) = autoclaim(reply);
        assert_eq!(cursor, "5-0");
        assert_eq!(claimed.len(), 1);
        assert_eq!(claimed[0].id, "2-0");
    }
}
