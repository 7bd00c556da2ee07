// Building what a policy derives (the contract's `derivation` record), as the
// Rust SDK's `Derivation` builder does, with the same defaults.

/** Seconds in a minute. */
export const MINUTE = 60;
/** Seconds in an hour. */
export const HOUR = 3600;
/** Seconds in a day. */
export const DAY = 24 * HOUR;

const U32_MAX = 0xffff_ffff;
const U64_MAX = (1n << 64n) - 1n;

/**
 * A u64 for the host: componentize-js lowers u64 from a BigInt. Accepts an
 * integral Number too, so `400 * DAY` reads naturally; a fraction, a
 * negative or a too-large value is a bug in the policy, refused here with a
 * clear message instead of a trap inside the bindings.
 * @param {number | bigint} v
 * @param {string} what
 * @returns {bigint}
 */
export function toU64(v, what) {
  if (typeof v === 'number' && !Number.isSafeInteger(v)) {
    throw new TypeError(`${what} must be a whole number of at most 2^53 - 1 as a Number (use a BigInt beyond), got ${v}`);
  }
  const b = typeof v === 'bigint' ? v : typeof v === 'number' ? BigInt(v) : undefined;
  if (b === undefined || b < 0n || b > U64_MAX) throw new TypeError(`${what} must be a u64, got ${String(v)}`);
  return b;
}

/**
 * A u32 for the host (a Number under componentize-js).
 * @param {number | bigint} v
 * @param {string} what
 * @returns {number}
 */
export function toU32(v, what) {
  const n = typeof v === 'bigint' ? Number(v) : v;
  if (!Number.isInteger(n) || n < 0 || n > U32_MAX) throw new TypeError(`${what} must be a u32, got ${String(v)}`);
  return n;
}

/** @typedef {{ name: string, value: string }} Part */
/**
 * The record the host receives from `derive`.
 * @typedef {{ key: Part[], fingerprint: Part[], partition: string, retentionS: bigint, leaseS: number }} DerivationRecord
 */

/**
 * What a policy derives: key and fingerprint parts (in order), the
 * partition, the retention and the lease. Return it from `derive`.
 *
 *     return new Derivation(customer).key('customer', customer).retentionS(400 * DAY);
 */
export class Derivation {
  /** @type {Part[]} */ #key = [];
  /** @type {Part[]} */ #fingerprint = [];
  /** @type {string} */ #partition;
  /** @type {bigint} */ #retentionS = BigInt(DAY);
  /** @type {number} */ #leaseS = 5 * MINUTE;

  /**
   * A derivation owned by `partition`, with a one-day retention and a
   * five-minute lease until told otherwise (the Rust SDK's defaults).
   * @param {string} partition
   */
  constructor(partition) {
    this.#partition = mustBeString(partition, 'partition');
  }

  /**
   * Appends a named part of the key material (order matters).
   * @param {string} name @param {string} value
   * @returns {this}
   */
  key(name, value) {
    this.#key.push(part(name, value, 'key'));
    return this;
  }

  /**
   * Appends a named part of the fingerprint material.
   * @param {string} name @param {string} value
   * @returns {this}
   */
  fingerprint(name, value) {
    this.#fingerprint.push(part(name, value, 'fingerprint'));
    return this;
  }

  /** How long the record is kept, in seconds. @param {number | bigint} seconds @returns {this} */
  retentionS(seconds) {
    this.#retentionS = toU64(seconds, 'retentionS');
    return this;
  }

  /** How long a claim holds before its lease expires, in seconds. @param {number | bigint} seconds @returns {this} */
  leaseS(seconds) {
    this.#leaseS = toU32(seconds, 'leaseS');
    return this;
  }

  /**
   * The plain WIT record (fresh arrays: the builder stays the caller's).
   * The host's own checks (at least one key part, unique names, bounds) are
   * the host's: a derivation that breaks them is refused as malformed.
   * @returns {DerivationRecord}
   */
  toRecord() {
    return {
      key: this.#key.map((p) => ({ ...p })),
      fingerprint: this.#fingerprint.map((p) => ({ ...p })),
      partition: this.#partition,
      retentionS: this.#retentionS,
      leaseS: this.#leaseS,
    };
  }
}

/** @param {unknown} v @param {string} what @returns {string} */
function mustBeString(v, what) {
  // A number would be lowered as garbage or trap; material is text, always.
  if (typeof v !== 'string') throw new TypeError(`${what} must be a string, got ${typeof v}`);
  return v;
}

/** @param {unknown} name @param {unknown} value @param {string} list @returns {Part} */
function part(name, value, list) {
  return {
    name: mustBeString(name, `${list} part name`),
    value: mustBeString(value, `${list} part \`${String(name)}\``),
  };
}
