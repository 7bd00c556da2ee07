// Typed access to an operation's fields, mirroring the Rust SDK's
// `Operation` helpers (guest/sdk/src/helpers.rs) message for message.

import { PolicyError } from './errors.js';
import { canonicalDecimal } from './decimal.js';

/**
 * A canonical field value, as componentize-js lifts the WIT `value` variant.
 * @typedef {{ tag: 'text', val: string } | { tag: 'number', val: string } | { tag: 'boolean', val: boolean }} Value
 */
/** @typedef {{ name: string, value: Value }} Field */
/** @typedef {'scheduled' | 'retry' | 'manual' | 'client'} Trigger */
/** @typedef {{ runId: string, trigger: Trigger, attempt: number }} RunContext */
/**
 * The operation record as the host hands it (u64 is a BigInt).
 * @typedef {{ kind: string, tenant: string, fields: Field[], run: RunContext | undefined, nowMs: bigint }} OperationRecord
 */

/**
 * A value as key material: text as is, numbers in their canonical spelling,
 * booleans as `true` / `false`.
 * @param {Value} value
 * @returns {string}
 */
export function material(value) {
  if (value.tag === 'boolean') return value.val ? 'true' : 'false';
  return value.val;
}

/**
 * An operation with typed accessors. The `derive` and `onDuplicate` you hand
 * to `definePolicy` receive one of these; its data are the host's record,
 * unchanged.
 */
export class Operation {
  /** @param {OperationRecord} record */
  constructor(record) {
    /** What the effect is, e.g. `charge`. @type {string} */
    this.kind = record.kind;
    /** Whose effect it is. @type {string} */
    this.tenant = record.tenant;
    /** Sorted by name (bytewise), names unique. @type {Field[]} */
    this.fields = record.fields;
    /** @type {RunContext | undefined} */
    this.run = record.run ?? undefined;
    /** Logical time chosen by the host, ms since the epoch (the policy has no clock). @type {bigint} */
    this.nowMs = record.nowMs;
  }

  /**
   * The field's value, if present. A linear scan, not Rust's binary search:
   * the host sorts by UTF-8 bytes, which JavaScript's UTF-16 `<` does not
   * reproduce, and a policy's handful of fields makes the scan free.
   * @param {string} name
   * @returns {Value | undefined}
   */
  field(name) {
    for (const f of this.fields) if (f.name === name) return f.value;
    return undefined;
  }

  /**
   * A text field; `missing-field` when absent, `invalid-value` when it is not
   * text or is empty.
   * @param {string} name
   * @returns {string}
   */
  text(name) {
    const v = this.field(name);
    if (v === undefined) throw PolicyError.missing(name);
    if (v.tag !== 'text') throw PolicyError.invalid(name, 'must be a string');
    if (v.val === '') throw PolicyError.invalid(name, 'must not be empty');
    return v.val;
  }

  /**
   * A text field, or `undefined` when absent; `invalid-value` when present
   * but not text (an empty string is returned as is, as in Rust).
   * @param {string} name
   * @returns {string | undefined}
   */
  optionalText(name) {
    const v = this.field(name);
    if (v === undefined) return undefined;
    if (v.tag !== 'text') throw PolicyError.invalid(name, 'must be a string');
    return v.val;
  }

  /**
   * Any field as key material (see {@link material}); `missing-field` when
   * absent.
   * @param {string} name
   * @returns {string}
   */
  material(name) {
    const v = this.field(name);
    if (v === undefined) throw PolicyError.missing(name);
    return material(v);
  }

  /**
   * A decimal amount, given as a JSON number (`10.5`) or as a string
   * (`"10.50"`), in its canonical spelling: both give `"10.5"`, one
   * fingerprint. `missing-field` when absent; `invalid-value` for a boolean
   * or a string that is not a decimal (`"ten"`, `"1,000"`, `"1e3"`).
   * @param {string} name
   * @returns {string}
   */
  decimal(name) {
    const v = this.field(name);
    if (v === undefined) throw PolicyError.missing(name);
    if (v.tag === 'boolean') {
      throw PolicyError.invalid(name, 'must be a decimal like 10.50, not a boolean');
    }
    try {
      return canonicalDecimal(v.val);
    } catch (e) {
      throw PolicyError.invalid(name, `must be a decimal like 10.50: ${/** @type {Error} */ (e).message}`);
    }
  }

  /**
   * A number field, as its canonical decimal text (`1.50e2` arrives as
   * `"150"`): a string, never a JS Number, because a float would round and
   * change the key. `missing-field` when absent, `invalid-value` when not a
   * JSON number. (No Rust counterpart: Rust policies match on the value.)
   * @param {string} name
   * @returns {string}
   */
  number(name) {
    const v = this.field(name);
    if (v === undefined) throw PolicyError.missing(name);
    if (v.tag !== 'number') throw PolicyError.invalid(name, 'must be a number');
    return v.val;
  }

  /**
   * A boolean field; `missing-field` when absent, `invalid-value` when not
   * `true` or `false`. (No Rust counterpart, as for {@link Operation#number}.)
   * @param {string} name
   * @returns {boolean}
   */
  boolean(name) {
    const v = this.field(name);
    if (v === undefined) throw PolicyError.missing(name);
    if (v.tag !== 'boolean') throw PolicyError.invalid(name, 'must be a boolean');
    return v.val;
  }
}
