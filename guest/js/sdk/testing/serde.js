// Reading typed records out of parsed JSON the way serde's derive does for
// the host's structs: unknown members refused, repeated members refused,
// missing required members named, integers range-checked. Messages follow
// serde's wording; the line and column serde adds are not reproduced.

import { JsonNumber, JsonObject } from './json.js';

/** A value that does not fit the expected shape. */
export class ShapeError extends Error {
  constructor(message) {
    super(message);
    this.name = 'ShapeError';
  }
}

/** serde's name for what a JSON value is, in `invalid type` messages. */
export function describeJson(v) {
  if (v === null) return 'null';
  if (typeof v === 'boolean') return `boolean \`${v}\``;
  if (typeof v === 'string') return `string ${JSON.stringify(v)}`;
  if (v instanceof JsonNumber) return /^-?[0-9]+$/.test(v.text) ? `integer \`${v.text}\`` : `floating point \`${v.text}\``;
  if (Array.isArray(v)) return 'sequence';
  return 'map';
}

const invalidType = (v, expected) => new ShapeError(`invalid type: ${describeJson(v)}, expected ${expected}`);

export const string = (v) => {
  if (typeof v !== 'string') throw invalidType(v, 'a string');
  return v;
};

export const boolean = (v) => {
  if (typeof v !== 'boolean') throw invalidType(v, 'a boolean');
  return v;
};

/**
 * An integer decoder for a Rust integer type. A fraction or an exponent is
 * a float to serde, never an integer, even when its value is whole.
 * @param {'u16' | 'u32' | 'u64' | 'i32'} type
 * @returns {(v: unknown) => bigint}
 */
export function integer(type) {
  const [min, max] = {
    u16: [0n, 0xffffn],
    u32: [0n, 0xffff_ffffn],
    u64: [0n, (1n << 64n) - 1n],
    i32: [-(1n << 31n), (1n << 31n) - 1n],
  }[type];
  return (v) => {
    if (!(v instanceof JsonNumber) || !/^-?(0|[1-9][0-9]*)$/.test(v.text)) throw invalidType(v, type);
    const n = BigInt(v.text);
    if (n < min || n > max) throw new ShapeError(`invalid value: integer \`${v.text}\`, expected ${type}`);
    return n;
  };
}

/** `Option<T>`: null is None. */
export const optional = (decode) => (v) => (v === null ? undefined : decode(v));

/** A string naming one of an enum's variants. */
export const oneOf = (variants) => (v) => {
  const s = string(v);
  if (!variants.includes(s)) {
    throw new ShapeError(`unknown variant \`${s}\`, expected one of ${variants.map((x) => `\`${x}\``).join(', ')}`);
  }
  return s;
};

/**
 * A struct with `deny_unknown_fields`. `spec` maps each member to
 * `[decode, defaultThunk?]`; without a default the member is required.
 * @param {unknown} v
 * @param {Record<string, [(v: any) => any, (() => any)?]>} spec
 * @returns {Record<string, any>}
 */
export function struct(v, spec) {
  if (!(v instanceof JsonObject)) throw invalidType(v, 'a struct');
  const names = Object.keys(spec);
  const out = {};
  const seen = new Set();
  for (const [k, x] of v.entries) {
    if (!Object.hasOwn(spec, k)) {
      throw new ShapeError(`unknown field \`${k}\`, expected one of ${names.map((n) => `\`${n}\``).join(', ')}`);
    }
    if (seen.has(k)) throw new ShapeError(`duplicate field \`${k}\``);
    seen.add(k);
    try {
      out[k] = spec[k][0](x);
    } catch (e) {
      if (e instanceof ShapeError && !e.message.includes(' (in ')) e.message += ` (in \`${k}\`)`;
      throw e;
    }
  }
  for (const n of names) {
    if (seen.has(n)) continue;
    const fallback = spec[n][1];
    if (!fallback) throw new ShapeError(`missing field \`${n}\``);
    out[n] = fallback();
  }
  return out;
}
