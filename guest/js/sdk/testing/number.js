// The host's canonical spelling of JSON numbers: a port of
// host/idem-core/src/number.rs. `100`, `100.0`, `1e2` and `1.00E+2` are one
// number and arrive as `100`: no exponent, no leading zeros, no trailing
// fractional zeros, zero is `0` (never `-0`). Digits stay text and the
// exponent is a BigInt, so no spelling is ever rounded.

export const MAX_CANONICAL_NUMBER_LEN = 128;

/** Why a number could not be canonicalised (Rust's `NumberError`). */
export class NumberError extends Error {
  /** @param {'syntax' | 'out-of-range'} kind @param {string} text */
  constructor(kind, text) {
    super(
      kind === 'syntax'
        ? `\`${text}\` is not a JSON number`
        : `\`${text}\` spells to more than ${MAX_CANONICAL_NUMBER_LEN} digits; send it as a string`,
    );
    this.name = 'NumberError';
    this.kind = kind;
  }
}

const DIGITS = /^[0-9]*$/;
const I64_MAX = (1n << 63n) - 1n;

/**
 * Canonicalises the text of a JSON number (RFC 8259 grammar).
 * @param {string} text
 * @returns {string}
 * @throws {NumberError}
 */
export function canonicalNumber(text) {
  const syntax = () => new NumberError('syntax', text);
  const negative = text.startsWith('-');
  const rest = negative ? text.slice(1) : text;
  const e = rest.search(/[eE]/);
  const mantissa = e < 0 ? rest : rest.slice(0, e);
  const exponent = e < 0 ? undefined : rest.slice(e + 1);
  const point = mantissa.indexOf('.');
  const intPart = point < 0 ? mantissa : mantissa.slice(0, point);
  const fracPart = point < 0 ? '' : mantissa.slice(point + 1);
  if (
    intPart === '' ||
    !DIGITS.test(intPart) ||
    (intPart.length > 1 && intPart.startsWith('0')) ||
    (point >= 0 && fracPart === '') ||
    !DIGITS.test(fracPart)
  ) {
    throw syntax();
  }
  let exp = 0n;
  if (exponent !== undefined) {
    const digits = /^[+-]/.test(exponent) ? exponent.slice(1) : exponent;
    if (digits === '' || !DIGITS.test(digits)) throw syntax();
    // Rust parses an i64 and takes i64::MAX / 4 when it overflows; past
    // i64::MAX only an out-of-range number (or zero) can result either way.
    let value = BigInt(digits);
    if (value > I64_MAX) value = I64_MAX / 4n;
    exp = exponent.startsWith('-') ? -value : value;
  }
  let digits = `${intPart}${fracPart}`;
  exp -= BigInt(fracPart.length);
  digits = digits.replace(/^0+/, '');
  if (digits === '') return '0';
  const withoutTrailing = digits.replace(/0+$/, '');
  exp += BigInt(digits.length - withoutTrailing.length);
  digits = withoutTrailing;

  const len = BigInt(digits.length);
  const spelledLen = exp >= 0n ? len + exp : len + exp > 0n ? len + 1n : 2n + -(len + exp) + len;
  if (spelledLen + (negative ? 1n : 0n) > BigInt(MAX_CANONICAL_NUMBER_LEN)) {
    throw new NumberError('out-of-range', text);
  }
  const sign = negative ? '-' : '';
  if (exp >= 0n) return `${sign}${digits}${'0'.repeat(Number(exp))}`;
  const at = Number(len + exp);
  if (at > 0) return `${sign}${digits.slice(0, at)}.${digits.slice(at)}`;
  return `${sign}0.${'0'.repeat(-at)}${digits}`;
}
