// The host's canonical operation: a port of host/idem-core/src/operation.rs,
// reading an operation the way the cases runner hands it over (a parsed
// case's `op`, respelt as JSON and read again).
// - every string (kind, tenant, field names, text values, run id) in NFC;
// - fields sorted by name bytewise (UTF-8 byte order: UTF-16 order differs
//   past U+FFFF), a name repeated once NFC-normalised refused;
// - numbers in canonical spelling, from their exact source text;
// - an unknown member anywhere refused.

import { JsonNumber, JsonObject, toCompactJson } from './json.js';
import { canonicalNumber } from './number.js';
import { struct, string, integer, optional, oneOf, describeJson, ShapeError } from './serde.js';
import { utf8Length } from '../utf8.js';

export const OPERATION_LIMITS = Object.freeze({ maxBytes: 64 * 1024, maxFields: 256, maxNameBytes: 256 });
export const TRIGGERS = ['scheduled', 'retry', 'manual', 'client'];

/** Why an operation was refused, worded as Rust's `OpError`. */
export class OpError extends Error {
  constructor(message) {
    super(message);
    this.name = 'OpError';
  }
}

/**
 * A canonical operation, as the host holds it.
 * @typedef {{ tag: 'text' | 'number', val: string } | { tag: 'boolean', val: boolean }} Value
 * @typedef {{ kind: string, tenant: string, fields: Array<[string, Value]>,
 *   run: { runId: string, trigger: string, attempt: number } | undefined, nowMs: bigint | undefined }} HostOperation
 */

/** Bytewise UTF-8 order, as Rust's `str::cmp` and a BTreeMap<String, _>. */
export const byteOrder = (a, b) => Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));

/** Rust's `char::is_control`: general category Cc. */
const CONTROL = /\p{Cc}/u;

function checkName(what, value, limits) {
  const v = value.normalize('NFC');
  if (v === '') throw new OpError(`operation ${what}: must not be empty`);
  const n = utf8Length(v);
  if (n > limits.maxNameBytes) throw new OpError(`operation ${what}: is ${n} bytes; the limit is ${limits.maxNameBytes}`);
  if (CONTROL.test(v)) throw new OpError(`operation ${what}: must not contain control characters`);
  return v;
}

/** Fields as written, values typed; a repeat is refused (serde_json would keep the last). */
function rawFields(v) {
  if (!(v instanceof JsonObject)) {
    throw new ShapeError(`invalid type: ${describeJson(v)}, expected an object of fields whose values are strings, numbers or booleans`);
  }
  const out = [];
  for (const [name, x] of v.entries) {
    if (out.some(([n]) => n === name)) throw new ShapeError(`field \`${name}\` appears twice`);
    let value;
    if (typeof x === 'string') value = { tag: 'text', val: x };
    else if (typeof x === 'boolean') value = { tag: 'boolean', val: x };
    else if (x instanceof JsonNumber) value = { tag: 'number', val: x.text };
    else {
      const what = x === null ? 'null' : Array.isArray(x) ? 'an array' : 'an object';
      throw new ShapeError(`field \`${name}\` is ${what}; field values must be strings, numbers or booleans`);
    }
    out.push([name, value]);
  }
  return out;
}

/**
 * Reads and canonicalises an operation from a parsed JSON value.
 * @param {import('./json.js').JsonValue} value
 * @param {typeof OPERATION_LIMITS} [limits]
 * @returns {HostOperation}
 * @throws {OpError}
 */
export function canonicalOperation(value, limits = OPERATION_LIMITS) {
  const size = utf8Length(toCompactJson(value));
  if (size > limits.maxBytes) throw new OpError(`operation is ${size} bytes; the limit is ${limits.maxBytes} bytes`);
  if (!(value instanceof JsonObject)) throw new OpError('operation document: must be a JSON object');
  let raw;
  try {
    raw = struct(value, {
      kind: [string],
      tenant: [string],
      fields: [rawFields, () => []],
      run: [
        optional((r) =>
          struct(r, { run_id: [string], trigger: [oneOf(TRIGGERS)], attempt: [integer('u32'), () => 1n] }),
        ),
        () => undefined,
      ],
      now_ms: [optional(integer('u64')), () => undefined],
    });
  } catch (e) {
    if (e instanceof ShapeError) throw new OpError(`operation is not valid: ${e.message}`);
    throw e;
  }
  const kind = checkName('`kind`', raw.kind, limits);
  const tenant = checkName('`tenant`', raw.tenant, limits);
  if (raw.fields.length > limits.maxFields) {
    throw new OpError(`operation \`fields\`: has ${raw.fields.length} fields; the limit is ${limits.maxFields}`);
  }
  const fields = new Map();
  for (const [rawName, rawValue] of raw.fields) {
    const name = checkName(`field name \`${rawName}\``, rawName, limits);
    let v = rawValue;
    if (v.tag === 'text') v = { tag: 'text', val: v.val.normalize('NFC') };
    else if (v.tag === 'number') {
      try {
        v = { tag: 'number', val: canonicalNumber(v.val) };
      } catch (e) {
        throw new OpError(`operation field \`${name}\`: ${e.message}`);
      }
    }
    if (fields.has(name)) {
      throw new OpError(`operation field \`${name}\`: appears twice once names are normalised to Unicode NFC`);
    }
    fields.set(name, v);
  }
  let run;
  if (raw.run !== undefined) {
    if (raw.run.attempt === 0n) throw new OpError('operation `run.attempt`: starts at 1');
    run = {
      runId: checkName('`run.run_id`', raw.run.run_id, limits),
      trigger: raw.run.trigger,
      attempt: Number(raw.run.attempt),
    };
  }
  return {
    kind,
    tenant,
    fields: [...fields.entries()].sort(([a], [b]) => byteOrder(a, b)),
    run,
    nowMs: raw.now_ms,
  };
}
