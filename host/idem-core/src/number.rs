//! Canonical spelling of JSON numbers.
//!
//! Policies see numbers as text so that no float rounding can ever change a
//! key: `100`, `100.0`, `1e2` and `1.00E+2` are one number and arrive as
//! `100`. The canonical form has no exponent, no leading zeros, no trailing
//! fractional zeros, and zero is `0` (never `-0`).

use thiserror::Error;

/// Longest canonical spelling we produce; beyond it the caller should send the
/// value as a string (a key is no place for `1e400`).
pub const MAX_CANONICAL_NUMBER_LEN: usize = 128;

/// Why a number could not be canonicalised.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum NumberError {
    /// The text is not a JSON number.
    #[error("`{0}` is not a JSON number")]
    Syntax(String),
    /// The number is too large or too small to spell without an exponent.
    #[error("`{0}` spells to more than {MAX_CANONICAL_NUMBER_LEN} digits; send it as a string")]
    OutOfRange(String),
}

/// Canonicalises the text of a JSON number (RFC 8259 grammar).
pub fn canonical_number(text: &str) -> Result<String, NumberError> {
    let syntax = || NumberError::Syntax(text.to_string());
    let (negative, rest) = match text.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, text),
    };
    let (mantissa, exponent) = match rest.find(['e', 'E']) {
        Some(i) => (&rest[..i], Some(&rest[i + 1..])),
        None => (rest, None),
    };
    let (int_part, frac_part) = match mantissa.find('.') {
        Some(i) => (&mantissa[..i], &mantissa[i + 1..]),
        None => (mantissa, ""),
    };
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if int_part.is_empty()
        || !all_digits(int_part)
        || (int_part.len() > 1 && int_part.starts_with('0'))
        || (mantissa.contains('.') && frac_part.is_empty())
        || !all_digits(frac_part)
    {
        return Err(syntax());
    }
    let mut exp: i64 = match exponent {
        None => 0,
        Some(e) => {
            let digits = e.strip_prefix(['+', '-']).unwrap_or(e);
            if digits.is_empty() || !all_digits(digits) {
                return Err(syntax());
            }
            // An exponent this long can only produce an out-of-range number
            // (or zero, handled below by the digit check).
            let value: i64 = digits.parse().unwrap_or(i64::MAX / 4);
            if e.starts_with('-') { -value } else { value }
        }
    };
    let mut digits: String = format!("{int_part}{frac_part}");
    exp -= frac_part.len() as i64;
    let trimmed = digits.trim_start_matches('0');
    if trimmed.is_empty() {
        return Ok("0".to_string());
    }
    digits = trimmed.to_string();
    let without_trailing = digits.trim_end_matches('0');
    exp += (digits.len() - without_trailing.len()) as i64;
    digits.truncate(without_trailing.len());

    let out_of_range = || NumberError::OutOfRange(text.to_string());
    let len = digits.len() as i64;
    let spelled_len = if exp >= 0 {
        len + exp
    } else if len + exp > 0 {
        len + 1
    } else {
        2 + (-(len + exp)) + len
    };
    if spelled_len + i64::from(negative) > MAX_CANONICAL_NUMBER_LEN as i64 {
        return Err(out_of_range());
    }
    let mut out = String::with_capacity(spelled_len as usize + 1);
    if negative {
        out.push('-');
    }
    if exp >= 0 {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', exp as usize));
    } else {
        let point = len + exp;
        if point > 0 {
            out.push_str(&digits[..point as usize]);
            out.push('.');
            out.push_str(&digits[point as usize..]);
        } else {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-point) as usize));
            out.push_str(&digits);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn spellings_of_one_number_agree() {
        for text in ["100", "100.0", "1e2", "1.00E+2", "10000e-2", "0.1e3"] {
            assert_eq!(canonical_number(text).unwrap(), "100", "{text}");
        }
    }

    #[test]
    fn canonical_forms() {
        let cases = [
            ("0", "0"),
            ("-0", "0"),
            ("-0.000", "0"),
            ("0e999999999999999999999", "0"),
            ("1.5", "1.5"),
            ("-1.50", "-1.5"),
            ("0.05", "0.05"),
            ("5e-3", "0.005"),
            ("123.456e1", "1234.56"),
            ("12345678901234567890.125", "12345678901234567890.125"),
        ];
        for (text, want) in cases {
            assert_eq!(canonical_number(text).unwrap(), want, "{text}");
        }
    }

    #[test]
    fn rejects_non_numbers_and_huge_spellings() {
        for bad in [
            "", "-", "01", "1.", ".5", "1e", "+1", "1e+", "0x10", "1_000", "NaN",
        ] {
            assert!(
                matches!(canonical_number(bad), Err(NumberError::Syntax(_))),
                "{bad}"
            );
        }
        for huge in ["1e400", "1e-400", "1e99999999999999999999"] {
            assert!(
                matches!(canonical_number(huge), Err(NumberError::OutOfRange(_))),
                "{huge}"
            );
        }
    }

    proptest! {
        #[test]
        fn integers_match_their_decimal_spelling(n in any::<i64>()) {
            prop_assert_eq!(canonical_number(&n.to_string()).unwrap(), n.to_string());
        }

        #[test]
        fn exponent_shifts_do_not_change_the_number(m in 1u32..1_000_000, shift in 0i64..20) {
            let plain = canonical_number(&m.to_string()).unwrap();
            let shifted = format!("{}e{}", m as u128 * 10u128.pow(shift as u32), -shift);
            prop_assert_eq!(canonical_number(&shifted).unwrap(), plain);
        }

        #[test]
        fn canonical_form_is_a_fixed_point(int in 0u64..u64::MAX, frac in "[0-9]{0,8}", exp in -30i32..30) {
            let text = if frac.is_empty() { format!("{int}e{exp}") } else { format!("{int}.{frac}e{exp}") };
            let once = canonical_number(&text).unwrap();
            prop_assert_eq!(canonical_number(&once).unwrap(), once.clone());
        }
    }
}
