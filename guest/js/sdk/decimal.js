// Canonical decimal amounts: a line-for-line port of the Rust SDK's
// `canonical_decimal` (guest/sdk/src/decimal.rs). Amounts often arrive as
// strings ("10.50") because JSON numbers lose precision in many clients; a
// fingerprint over the raw text would make "10.50" and "10.5" two requests.
// This spells every decimal the way the host spells JSON numbers, so a field
// sent as 10.5 or as "10.50" is one value. Never through a JS Number: a float
// would round, and a rounded amount is another key.

import { utf8Length, utf8Prefix, allAscii } from './utf8.js';

/** The longest decimal text accepted, in UTF-8 bytes (the host's limit for a number's canonical spelling). */
export const MAX_DECIMAL_LEN = 128;

/** How much of an offending text an error quotes, in bytes: enough to recognise it, never a whole huge field. */
const QUOTE_LIMIT = 40;

/** Why a text is not a decimal. `String(e)` and `e.message` read as Rust's `Display`. */
export class DecimalError extends Error {
  /**
   * @param {string} text the offending text, already cut by `quote`
   * @param {string} why what is wrong with it
   */
  constructor(text, why) {
    super(`\`${text}\` is not a decimal: ${why}`);
    this.name = 'DecimalError';
    /** @type {string} */
    this.text = text;
    /** @type {string} */
    this.why = why;
  }

  toString() {
    return this.message;
  }
}

/** @param {string} text */
function quote(text) {
  if (utf8Length(text) <= QUOTE_LIMIT) return text;
  return `${utf8Prefix(text, QUOTE_LIMIT)}…`;
}

const DIGIT = /[0-9]/;

/**
 * The canonical spelling of a decimal given as text: an optional `-`,
 * digits, and an optional `.` followed by digits; anything else (other
 * signs, spaces, exponents, thousands separators, `NaN`, an empty side of
 * the point) throws a {@link DecimalError}.
 *
 *     canonicalDecimal("0010.00") === "10"; canonicalDecimal("-0.0") === "0"
 *
 * @param {string} text
 * @returns {string}
 * @throws {DecimalError}
 */
export function canonicalDecimal(text) {
  const fail = (why) => {
    throw new DecimalError(quote(text), why);
  };
  if (text.length === 0) fail('it is empty');
  if (utf8Length(text) > MAX_DECIMAL_LEN) fail('it is longer than 128 characters');
  const negative = text.startsWith('-');
  const unsigned = negative ? text.slice(1) : text;
  const point = unsigned.indexOf('.');
  let intPart = point < 0 ? unsigned : unsigned.slice(0, point);
  let fracPart = point < 0 ? undefined : unsigned.slice(point + 1);
  if (!allAscii(intPart, DIGIT) || (fracPart !== undefined && !allAscii(fracPart, DIGIT))) {
    fail('only digits, one `.` and a leading `-` are allowed');
  }
  if (intPart === '') fail('it needs a digit before the `.`');
  if (fracPart === '') fail('it needs a digit after the `.`');
  intPart = intPart.replace(/^0+/, '');
  fracPart = (fracPart ?? '').replace(/0+$/, '');
  if (intPart === '' && fracPart === '') return '0';
  return `${negative ? '-' : ''}${intPart === '' ? '0' : intPart}${fracPart === '' ? '' : `.${fracPart}`}`;
}
