//! Canonical decimal amounts.
//!
//! Amounts often arrive as strings (`"10.50"`), because JSON numbers lose
//! precision in many clients. A fingerprint over the raw text would make
//! `"10.50"` and `"10.5"` two different requests; [`canonical_decimal`]
//! spells every decimal one way, the same way the host spells JSON numbers
//! (no leading zeros, no trailing fractional zeros, `0` never `-0`), so a
//! field sent as `10.5` or as `"10.50"` is one value.

use core::fmt;

/// The longest decimal text accepted, in bytes (the host's limit for a
/// number's canonical spelling).
pub const MAX_DECIMAL_LEN: usize = 128;

/// How much of an offending text an error quotes: enough to recognise it,
/// never the whole of a huge field.
const QUOTE_LIMIT: usize = 40;

/// Why a text is not a decimal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecimalError {
    /// The offending text, cut to a few dozen characters.
    pub text: String,
    /// What is wrong with it.
    pub why: &'static str,
}

impl fmt::Display for DecimalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` is not a decimal: {}", self.text, self.why)
    }
}

impl std::error::Error for DecimalError {}

/// The canonical spelling of a decimal given as text.
///
/// Accepts an optional `-`, digits, and an optional `.` followed by digits;
/// refuses anything else (signs other than `-`, spaces, exponents, thousands
/// separators, `NaN`, an empty part on either side of the point).
///
/// ```
/// use idem_policy::canonical_decimal;
///
/// assert_eq!(canonical_decimal("10.50").unwrap(), "10.5");
/// assert_eq!(canonical_decimal("10.5").unwrap(), "10.5");
/// assert_eq!(canonical_decimal("0010.00").unwrap(), "10");
/// assert_eq!(canonical_decimal("-0.0").unwrap(), "0");
/// assert_eq!(canonical_decimal("0.050").unwrap(), "0.05");
/// for garbage in ["", "ten", "1,000.00", "1e3", "+5", " 5", "5.", ".5", "--5", "NaN"] {
///     assert!(canonical_decimal(garbage).is_err(), "{garbage}");
/// }
/// assert_eq!(
///     canonical_decimal("12,50").unwrap_err().to_string(),
///     "`12,50` is not a decimal: only digits, one `.` and a leading `-` are allowed"
/// );
/// ```
pub fn canonical_decimal(text: &str) -> Result<String, DecimalError> {
    let fail = |why| {
        Err(DecimalError {
            text: quote(text),
            why,
        })
    };
    if text.is_empty() {
        return fail("it is empty");
    }
    if text.len() > MAX_DECIMAL_LEN {
        return fail("it is longer than 128 characters");
    }
    let (negative, unsigned) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (int_part, frac_part) = match unsigned.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (unsigned, None),
    };
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if !digits(int_part) || !frac_part.is_none_or(digits) {
        return fail("only digits, one `.` and a leading `-` are allowed");
    }
    if int_part.is_empty() {
        return fail("it needs a digit before the `.`");
    }
    if frac_part == Some("") {
        return fail("it needs a digit after the `.`");
    }
    let int_part = int_part.trim_start_matches('0');
    let frac_part = frac_part.unwrap_or("").trim_end_matches('0');
    let mut out = String::with_capacity(text.len());
    if int_part.is_empty() && frac_part.is_empty() {
        return Ok("0".into());
    }
    if negative {
        out.push('-');
    }
    out.push_str(if int_part.is_empty() { "0" } else { int_part });
    if !frac_part.is_empty() {
        out.push('.');
        out.push_str(frac_part);
    }
    Ok(out)
}

/// The start of `text`, cut at a character boundary, with `…` when cut.
fn quote(text: &str) -> String {
    if text.len() <= QUOTE_LIMIT {
        return text.to_string();
    }
    let mut end = QUOTE_LIMIT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;

    /// Where the host's JSON-number spelling and this one both apply (no
    /// exponent, no leading zeros), they agree: a field sent as a number
    /// and one sent as a string give one fingerprint.
    #[test]
    fn agrees_with_the_host_spelling_of_json_numbers() {
        let mut texts = Vec::new();
        for int in ["0", "1", "10", "100", "12345678901234567890"] {
            for frac in ["", ".0", ".5", ".50", ".05", ".000", ".125"] {
                for sign in ["", "-"] {
                    texts.push(format!("{sign}{int}{frac}"));
                }
            }
        }
        for text in texts {
            assert_eq!(
                canonical_decimal(&text).unwrap(),
                idem_core::number::canonical_number(&text).unwrap(),
                "{text}"
            );
        }
    }

    /// The vectors every SDK reads (guest/testdata/decimals.json): this
    /// function is the truth they write down, so a JavaScript or Python SDK
    /// that parts from it fails its own test of the same file. Where the text
    /// is a JSON number too, the host spells it the same; JSON numbers with
    /// exponents reach a policy already spelt by the host.
    #[test]
    fn the_shared_vectors_are_this_function() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/decimals.json");
        let vectors: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let decimals = vectors["decimals"].as_array().unwrap();
        assert!(!decimals.is_empty());
        for v in decimals {
            let text = v["text"].as_str().unwrap();
            match (canonical_decimal(text), v["canonical"].as_str()) {
                (Ok(got), Some(want)) => {
                    assert_eq!(got, want, "{text:?}");
                    if let Ok(host) = idem_core::number::canonical_number(text) {
                        assert_eq!(host, want, "the host spells {text:?} otherwise");
                    }
                }
                (Err(e), None) => {
                    assert_eq!(Some(e.why), v["refused"].as_str(), "{text:?}");
                    if let Some(message) = v["message"].as_str() {
                        assert_eq!(e.to_string(), message, "{text:?}");
                    }
                }
                (got, _) => panic!("{text:?}: the vector says {v}, the SDK says {got:?}"),
            }
        }
        let numbers = vectors["numbers"].as_array().unwrap();
        assert!(!numbers.is_empty());
        for v in numbers {
            let (json, want) = (
                v["json"].as_str().unwrap(),
                v["canonical"].as_str().unwrap(),
            );
            let host = idem_core::number::canonical_number(json).unwrap();
            assert_eq!(host, want, "{json}");
            assert_eq!(canonical_decimal(&host).unwrap(), want, "{json}");
        }
    }

    #[test]
    fn errors_quote_a_bounded_text() {
        let long = format!("{}x", "9".repeat(100));
        let err = canonical_decimal(&long).unwrap_err();
        assert!(err.text.chars().count() <= QUOTE_LIMIT + 1, "{err}");
        let huge = "9".repeat(MAX_DECIMAL_LEN + 1);
        assert_eq!(
            canonical_decimal(&huge).unwrap_err().why,
            "it is longer than 128 characters"
        );
        let accents = "é".repeat(50);
        assert!(canonical_decimal(&accents).unwrap_err().text.ends_with('…'));
    }
}
