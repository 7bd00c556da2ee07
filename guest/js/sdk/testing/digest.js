// How key and fingerprint material become keys: a port of
// host/idem-core/src/digest.rs. SHA-256 over
//   u32be(1) lp(domain) lp(namespace) u32be(part count) (lp(name) lp(value))*
// where lp(x) is u32be(byte length of x) and x's UTF-8 bytes. The length
// prefixes make the encoding injective; the domain keeps keys and
// fingerprints apart.

import { createHash } from 'node:crypto';

export const KEY_ENCODING_VERSION = 1;

/** @typedef {'key' | 'fingerprint'} Domain */
/** @typedef {{ name: string, value: string }} Part */

/**
 * The exact bytes that are hashed.
 * @param {Domain} domain
 * @param {string} namespace
 * @param {Part[]} parts
 * @returns {Buffer}
 */
export function encode(domain, namespace, parts) {
  const chunks = [];
  const u32 = (n) => {
    const b = Buffer.alloc(4);
    b.writeUInt32BE(n);
    chunks.push(b);
  };
  const lp = (s) => {
    // Buffer.from turns a lone surrogate into U+FFFD, as the component's
    // string lowering does: the same bytes either way.
    const bytes = Buffer.from(s, 'utf8');
    u32(bytes.length);
    chunks.push(bytes);
  };
  u32(KEY_ENCODING_VERSION);
  lp(domain);
  lp(namespace);
  u32(parts.length);
  for (const p of parts) {
    lp(p.name);
    lp(p.value);
  }
  return Buffer.concat(chunks);
}

/**
 * The digest of `parts` in `domain` under `namespace`, as 64 lowercase hex
 * characters.
 * @param {Domain} domain
 * @param {string} namespace
 * @param {Part[]} parts
 * @returns {string}
 */
export function digest(domain, namespace, parts) {
  return createHash('sha256').update(encode(domain, namespace, parts)).digest('hex');
}
