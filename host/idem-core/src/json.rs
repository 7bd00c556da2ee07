//! One meaning per JSON document: a member name repeated in an object is an
//! error, never "the last one wins".
//!
//! serde_json, like most parsers, keeps the last of two members with the same
//! name. A proxy, a client library or an audit log may keep the first; then
//! the document means one thing to them and another to idem (one invoice
//! charged, another keyed). So every JSON document idem takes from outside is
//! checked here first, at every depth.

use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// A parsed JSON document: `serde_json::Value`, under a name of its own
/// where idem's API takes or holds one ([`crate::Operation::from_value`],
/// [`crate::cases::Case::op`]), so that it is never read as idem's field
/// value, [`crate::Value`]. The same type: pass a `serde_json::Value`.
pub type JsonValue = serde_json::Value;

/// A member name that appears twice in one object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("member `{path}` appears twice")]
pub struct RepeatedMember {
    /// Where, as `a.b[2].c` from the document's root (names longer than 100
    /// characters are cut).
    pub path: String,
}

/// Checks that no object in `bytes` repeats a member name. A document that is
/// not JSON at all is the caller's to report (parse it first): here it is
/// simply not refused.
pub fn unique_members(bytes: &[u8]) -> Result<(), RepeatedMember> {
    let mut found = None;
    let mut reader = serde_json::Deserializer::from_slice(bytes);
    // A syntax error ends the walk; the caller's own parse names it.
    let _ = Walk {
        path: "",
        found: &mut found,
    }
    .deserialize(&mut reader);
    match found {
        Some(path) => Err(RepeatedMember { path }),
        None => Ok(()),
    }
}

/// Visits one value at `path`, recording the first repeated name.
struct Walk<'a> {
    path: &'a str,
    found: &'a mut Option<String>,
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut index = 0usize;
        loop {
            let path = format!("{}[{index}]", self.path);
            let more = seq.next_element_seed(Walk {
                path: &path,
                found: &mut *self.found,
            })?;
            if more.is_none() || self.found.is_some() {
                return stop_if_found(self.found);
            }
            index += 1;
        }
    }

    // (With serde_json's `arbitrary_precision`, a number arrives as a
    // one-member map; it has nothing to repeat.)
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = HashSet::new();
        while let Some(name) = map.next_key::<String>()? {
            let path = if self.path.is_empty() {
                shown(&name)
            } else {
                format!("{}.{}", self.path, shown(&name))
            };
            if !seen.insert(name) {
                *self.found = Some(path);
                return stop_if_found(self.found);
            }
            map.next_value_seed(Walk {
                path: &path,
                found: &mut *self.found,
            })?;
            if self.found.is_some() {
                return stop_if_found(self.found);
            }
        }
        Ok(())
    }
}

/// Ends the walk early once a repeat is found (the error itself is not
/// reported: `found` is).
fn stop_if_found<E: de::Error>(found: &Option<String>) -> Result<(), E> {
    match found {
        Some(_) => Err(E::custom("a member appears twice")),
        None => Ok(()),
    }
}

fn shown(name: &str) -> String {
    name.chars().take(100).collect()
}

#[cfg(test)]
mod tests {
    use super::unique_members;

    fn repeated(text: &str) -> Option<String> {
        unique_members(text.as_bytes()).err().map(|e| e.path)
    }

    #[test]
    fn a_repeat_is_found_at_any_depth() {
        assert_eq!(repeated(r#"{"a":1,"a":2}"#).as_deref(), Some("a"));
        assert_eq!(
            repeated(r#"{"operation":{"fields":{"invoice_id":"d1","invoice_id":"d2"}}}"#)
                .as_deref(),
            Some("operation.fields.invoice_id")
        );
        assert_eq!(
            repeated(r#"{"items":[{"x":1},{"y":1,"y":2}]}"#).as_deref(),
            Some("items[1].y")
        );
        assert_eq!(
            repeated(r#"{"operation":{"kind":"a"},"operation":{"kind":"b"}}"#).as_deref(),
            Some("operation")
        );
    }

    #[test]
    fn distinct_names_and_non_objects_pass() {
        for text in [
            r#"{"a":1,"b":{"a":2},"c":[{"a":1},{"a":2}]}"#,
            r#"{"n":1e400,"m":-0.0,"s":"\u0000"}"#,
            "[1,2,3]",
            "\"text\"",
            // Not JSON: not this check's to refuse.
            "{\"a\":",
        ] {
            assert_eq!(repeated(text), None, "{text}");
        }
        // Names that differ only by escaping are the same name.
        assert_eq!(repeated(r#"{"a":1,"\u0061":2}"#).as_deref(), Some("a"));
    }
}
