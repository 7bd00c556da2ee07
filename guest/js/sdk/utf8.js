// Byte-level string helpers. The host measures and compares every string as
// UTF-8 bytes (Rust's `str::len`, `str::cmp`), while a JavaScript string is
// UTF-16: `s.length` and `<` would disagree with the host on any non-ASCII
// text. These helpers need no TextEncoder, so they run the same in Node.js and
// inside the component.

/**
 * UTF-8 length of one code point.
 * @param {number} cp
 */
function codePointBytes(cp) {
  return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
}

/**
 * The UTF-8 length of `s` in bytes (a lone surrogate counts 3, as the
 * U+FFFD it becomes when encoded).
 * @param {string} s
 * @returns {number}
 */
export function utf8Length(s) {
  let n = 0;
  for (const ch of s) n += codePointBytes(ch.codePointAt(0));
  return n;
}

/**
 * The longest prefix of `s` that fits in `max` UTF-8 bytes, cut at a
 * character boundary (Rust's `is_char_boundary` walk-back).
 * @param {string} s
 * @param {number} max
 * @returns {string}
 */
export function utf8Prefix(s, max) {
  let n = 0;
  let end = 0;
  for (const ch of s) {
    n += codePointBytes(ch.codePointAt(0));
    if (n > max) break;
    end += ch.length;
  }
  return s.slice(0, end);
}

/**
 * Whether every character of `s` is one of `allowed` ASCII characters
 * (Rust's `bytes().all(...)` over an ASCII class).
 * @param {string} s
 * @param {RegExp} allowed a one-character class, e.g. /[0-9]/
 */
export function allAscii(s, allowed) {
  for (let i = 0; i < s.length; i++) {
    if (!allowed.test(s[i])) return false;
  }
  return true;
}
