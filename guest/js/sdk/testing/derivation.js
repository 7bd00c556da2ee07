// The host's checks on what a policy describes and derives, and the keys it
// makes of a derivation: a port of host/idem-core/src/derivation.rs, with
// its messages, so a derivation refused here is refused by the host.

import { utf8Length, utf8Prefix } from '../utf8.js';
import { digest } from './digest.js';

export const bounds = Object.freeze({
  MAX_PARTS: 32,
  MAX_PART_NAME: 64,
  MAX_MATERIAL: 8 * 1024,
  MAX_PARTITION: 512,
  MAX_LEASE_S: 24 * 3600,
  MAX_RETENTION_S: BigInt(10 * 366 * 24 * 3600),
});

/** The host's refusal of a derivation or a self-description. */
export class MalformedError extends Error {
  constructor(why) {
    super(`policy returned a malformed derivation: ${why}`);
    this.name = 'MalformedError';
  }
}

/** Rust's `text::bounded` under `{:?}`: a quoted, bounded rendering. */
function boundedDebug(text, max) {
  const cut = utf8Length(text) <= max ? text : `${utf8Prefix(text, max)}…(${utf8Length(text)} bytes)`;
  return JSON.stringify(cut);
}

function isSemver(v) {
  const core = v.split(/[-+]/)[0];
  const nums = core.split('.');
  return nums.length === 3 && nums.every((n) => /^(0|[1-9][0-9]*)$/.test(n));
}

/**
 * Checks what the host relies on in `describe`.
 * @param {{ name: string, version: string, namespace: string, description: string }} info
 * @throws {MalformedError}
 */
export function validatePolicyInfo(info) {
  const len = (s) => utf8Length(s);
  if (len(info.name) === 0 || len(info.name) > 128) {
    throw new MalformedError(`policy name must be 1 to 128 bytes, got ${boundedDebug(info.name, 64)}`);
  }
  if (len(info.namespace) === 0 || len(info.namespace) > 128) {
    throw new MalformedError(`policy namespace must be 1 to 128 bytes, got ${boundedDebug(info.namespace, 64)}`);
  }
  if (!isSemver(info.version)) {
    throw new MalformedError(
      `policy version ${boundedDebug(info.version, 64)} is not a semantic version (like 1.2.0)`,
    );
  }
  if (len(info.description) > 1024) throw new MalformedError('policy description is longer than 1024 bytes');
}

/** @typedef {import('./digest.js').Part} Part */
/**
 * @typedef {{ key: Part[], fingerprint: Part[], partition: string, retentionS: bigint, leaseS: number }} Derivation
 * @typedef {Derivation & { namespace: string, keyHex: string, fingerprintHex: string }} KeyedDerivation
 */

function checkParts(what, parts, mayBeEmpty) {
  if (parts.length === 0 && !mayBeEmpty) {
    throw new MalformedError(`${what} has no parts: every operation would share one key`);
  }
  if (parts.length > bounds.MAX_PARTS) {
    throw new MalformedError(`${what} has ${parts.length} parts; the limit is ${bounds.MAX_PARTS}`);
  }
  let material = 0;
  parts.forEach((part, i) => {
    const n = utf8Length(part.name);
    if (n === 0 || n > bounds.MAX_PART_NAME) {
      throw new MalformedError(`${what} part ${i} has a name of ${n} bytes (1 to ${bounds.MAX_PART_NAME})`);
    }
    if (parts.slice(0, i).some((p) => p.name === part.name)) {
      throw new MalformedError(`${what} part \`${part.name}\` appears twice`);
    }
    material += n + utf8Length(part.value);
  });
  if (material > bounds.MAX_MATERIAL) {
    throw new MalformedError(`${what} material is ${material} bytes; the limit is ${bounds.MAX_MATERIAL}`);
  }
}

/**
 * Checks a derivation against the bounds and computes its key and
 * fingerprint under `namespace` (Rust's `Derivation::finish`).
 * @param {Derivation} d
 * @param {string} namespace
 * @returns {KeyedDerivation}
 * @throws {MalformedError}
 */
export function finish(d, namespace) {
  checkParts('key', d.key, false);
  checkParts('fingerprint', d.fingerprint, true);
  const p = utf8Length(d.partition);
  if (p === 0 || p > bounds.MAX_PARTITION) {
    throw new MalformedError(`partition must be 1 to ${bounds.MAX_PARTITION} bytes`);
  }
  if (d.leaseS === 0 || d.leaseS > bounds.MAX_LEASE_S) {
    throw new MalformedError(`lease_s must be 1 to ${bounds.MAX_LEASE_S} seconds, got ${d.leaseS}`);
  }
  if (d.retentionS === 0n || d.retentionS > bounds.MAX_RETENTION_S) {
    throw new MalformedError(`retention_s must be 1 to ${bounds.MAX_RETENTION_S} seconds, got ${d.retentionS}`);
  }
  if (d.retentionS < BigInt(d.leaseS)) {
    throw new MalformedError(
      `retention_s (${d.retentionS}) is shorter than lease_s (${d.leaseS}): a record would vanish while claimed`,
    );
  }
  return {
    ...d,
    namespace,
    keyHex: digest('key', namespace, d.key),
    fingerprintHex: digest('fingerprint', namespace, d.fingerprint),
  };
}
