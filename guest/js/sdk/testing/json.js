// A JSON parser that keeps what JSON.parse throws away and the host keeps:
// each number's exact source text (the host reads cases files with
// serde_json's `arbitrary_precision`, so `100.0`, `1e2` and
// 12345678901234567890.125 reach canonicalisation as written, never as a
// rounded double) and each object's members in order, repeated names
// included (the host decides what a repeat means, case by case). Grammar and
// limits follow serde_json: RFC 8259, no BOM, no lone surrogates, nesting at
// most 128 deep.

/** A JSON number, as its source text. */
export class JsonNumber {
  /** @param {string} text */
  constructor(text) {
    /** @type {string} */
    this.text = text;
  }
}

/** A JSON object: members in document order, repeats kept. */
export class JsonObject {
  /** @param {Array<[string, JsonValue]>} entries */
  constructor(entries) {
    /** @type {Array<[string, JsonValue]>} */
    this.entries = entries;
  }
}

/** @typedef {null | boolean | string | JsonNumber | JsonValue[] | JsonObject} JsonValue */

/** Why a text is not JSON; the message ends with serde_json's `at line L column C`. */
export class JsonSyntaxError extends Error {
  constructor(message) {
    super(message);
    this.name = 'JsonSyntaxError';
  }
}

const RECURSION_LIMIT = 128;
const NUMBER = /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/y;
const WS = /[ \t\n\r]*/y;

/**
 * Parses JSON text, keeping number spellings and repeated members.
 * @param {string} text
 * @returns {JsonValue}
 * @throws {JsonSyntaxError}
 */
export function parseJson(text) {
  let i = 0;
  let depth = 0;

  const fail = (why, at = i) => {
    const before = text.slice(0, at).split('\n');
    throw new JsonSyntaxError(`${why} at line ${before.length} column ${before[before.length - 1].length + 1}`);
  };
  const ws = () => {
    WS.lastIndex = i;
    WS.exec(text);
    i = WS.lastIndex;
  };
  const nest = () => {
    if (++depth > RECURSION_LIMIT) fail('recursion limit exceeded');
  };

  /** @returns {JsonValue} */
  const value = () => {
    ws();
    const c = text[i];
    if (c === undefined) fail('EOF while parsing a value');
    if (c === '{') return object();
    if (c === '[') return array();
    if (c === '"') return string();
    if (c === '-' || (c >= '0' && c <= '9')) return number();
    for (const [word, v] of [['true', true], ['false', false], ['null', null]]) {
      if (text.startsWith(word, i)) {
        i += word.length;
        return v;
      }
    }
    return fail('expected value');
  };

  const number = () => {
    NUMBER.lastIndex = i;
    const m = NUMBER.exec(text);
    if (!m) return fail('invalid number');
    i = NUMBER.lastIndex;
    // `01`, `1.`, `1e`: the longest valid prefix is not the whole token.
    if (/[0-9.eE+-]/.test(text[i] ?? '')) fail('invalid number');
    return new JsonNumber(m[0]);
  };

  const hex4 = () => {
    const h = text.slice(i, i + 4);
    if (!/^[0-9A-Fa-f]{4}$/.test(h)) fail('invalid escape');
    i += 4;
    return parseInt(h, 16);
  };

  const string = () => {
    i++; // the opening quote
    let out = '';
    for (;;) {
      const c = text[i];
      if (c === undefined) fail('EOF while parsing a string');
      if (c === '"') {
        i++;
        return out;
      }
      if (c < ' ') fail('control character (\\u0000-\\u001F) found while parsing a string');
      if (c !== '\\') {
        out += c;
        i++;
        continue;
      }
      const e = text[i + 1];
      i += 2;
      const simple = { '"': '"', '\\': '\\', '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' }[e];
      if (simple !== undefined) {
        out += simple;
        continue;
      }
      if (e !== 'u') fail('invalid escape', i - 1);
      const unit = hex4();
      if (unit >= 0xdc00 && unit <= 0xdfff) fail('lone leading surrogate in hex escape');
      if (unit >= 0xd800 && unit <= 0xdbff) {
        if (text[i] !== '\\' || text[i + 1] !== 'u') fail('unexpected end of hex escape');
        i += 2;
        const low = hex4();
        if (low < 0xdc00 || low > 0xdfff) fail('lone leading surrogate in hex escape');
        out += String.fromCharCode(unit, low);
      } else {
        out += String.fromCharCode(unit);
      }
    }
  };

  const array = () => {
    nest();
    i++;
    const out = [];
    ws();
    if (text[i] === ']') {
      i++;
      depth--;
      return out;
    }
    for (;;) {
      out.push(value());
      ws();
      if (text[i] === ',') {
        i++;
        continue;
      }
      if (text[i] === ']') {
        i++;
        depth--;
        return out;
      }
      fail(text[i] === undefined ? 'EOF while parsing a list' : 'expected `,` or `]`');
    }
  };

  const object = () => {
    nest();
    i++;
    const entries = [];
    ws();
    if (text[i] === '}') {
      i++;
      depth--;
      return new JsonObject(entries);
    }
    for (;;) {
      ws();
      if (text[i] !== '"') fail(text[i] === undefined ? 'EOF while parsing an object' : 'key must be a string');
      const key = string();
      ws();
      if (text[i] !== ':') fail(text[i] === undefined ? 'EOF while parsing an object' : 'expected `:`');
      i++;
      entries.push([key, value()]);
      ws();
      if (text[i] === ',') {
        i++;
        continue;
      }
      if (text[i] === '}') {
        i++;
        depth--;
        return new JsonObject(entries);
      }
      fail(text[i] === undefined ? 'EOF while parsing an object' : 'expected `,` or `}`');
    }
  };

  const result = value();
  ws();
  if (i < text.length) fail('trailing characters');
  return result;
}

/**
 * What serde_json's `Value` makes of an object: one member per name, the
 * last one winning, in bytewise name order (its map is a BTreeMap). The host
 * reads a case's `op` through a `Value`, so a repeated field name inside a
 * cases file is collapsed there, not refused.
 * @param {JsonObject} obj
 * @returns {JsonObject}
 */
export function collapseLikeSerdeValue(obj) {
  const map = new Map();
  for (const [k, v] of obj.entries) map.set(k, v instanceof JsonObject ? collapseLikeSerdeValue(v) : collapseArray(v));
  const entries = [...map.entries()].sort(([a], [b]) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
  return new JsonObject(entries);
}

/** @param {JsonValue} v @returns {JsonValue} */
function collapseArray(v) {
  if (!Array.isArray(v)) return v;
  return v.map((x) => (x instanceof JsonObject ? collapseLikeSerdeValue(x) : collapseArray(x)));
}

/**
 * serde_json's compact spelling of a value (`to_string`): no white space,
 * numbers as their source text, only `"`, `\` and control characters
 * escaped. The host measures an operation's size on this spelling.
 * @param {JsonValue} v
 * @returns {string}
 */
export function toCompactJson(v) {
  if (v === null) return 'null';
  if (typeof v === 'boolean') return v ? 'true' : 'false';
  if (typeof v === 'string') return quoteJson(v);
  if (v instanceof JsonNumber) return v.text;
  if (Array.isArray(v)) return `[${v.map(toCompactJson).join(',')}]`;
  return `{${v.entries.map(([k, x]) => `${quoteJson(k)}:${toCompactJson(x)}`).join(',')}}`;
}

const SHORT_ESCAPES = { '"': '\\"', '\\': '\\\\', '\b': '\\b', '\f': '\\f', '\n': '\\n', '\r': '\\r', '\t': '\\t' };

/** @param {string} s */
export function quoteJson(s) {
  // eslint-disable-next-line no-control-regex
  return `"${s.replace(/["\\\u0000-\u001f]/g, (c) => SHORT_ESCAPES[c] ?? `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)}"`;
}
