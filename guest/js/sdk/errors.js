// A policy's typed refusal to derive a key (the contract's `policy-error`),
// with the Rust SDK's three constructors and their exact messages, so a
// JavaScript policy refuses an operation in the same words as a Rust one.

/**
 * The contract's `error-code` enum, spelt as componentize-js spells WIT enum
 * cases: their kebab-case names.
 * @readonly
 * @enum {'missing-field' | 'invalid-value' | 'unsupported-kind'}
 */
export const ErrorCode = Object.freeze({
  MissingField: 'missing-field',
  InvalidValue: 'invalid-value',
  UnsupportedKind: 'unsupported-kind',
});

/**
 * The record the component hands the host as `result`'s error.
 * @typedef {{ code: ErrorCode, field: string | undefined, message: string }} PolicyErrorRecord
 */

// A registered symbol, not `instanceof`: two copies of this module (a bundle
// and a test importing the SDK directly) still recognise each other's errors.
const BRAND = Symbol.for('idem.policy-error');

/**
 * A typed refusal. Throw it from `derive` (the `op.text(...)` family throws
 * it for you); the export glue turns it into the `result` error the host
 * receives. Any other exception is a bug, and a trap in the host.
 */
export class PolicyError extends Error {
  /**
   * @param {ErrorCode} code
   * @param {string | undefined} field the field at fault, when there is one
   * @param {string} message for the caller
   */
  constructor(code, field, message) {
    super(message);
    this.name = 'PolicyError';
    /** @type {ErrorCode} */
    this.code = code;
    /** @type {string | undefined} */
    this.field = field;
    Object.defineProperty(this, BRAND, { value: true });
  }

  /** A required field is absent. @param {string} field */
  static missing(field) {
    return new PolicyError(ErrorCode.MissingField, field, `the operation has no \`${field}\``);
  }

  /** A field's value is unacceptable. @param {string} field @param {string} why */
  static invalid(field, why) {
    return new PolicyError(ErrorCode.InvalidValue, field, `\`${field}\` ${why}`);
  }

  /** The policy does not handle this kind of operation. @param {string} kind */
  static unsupportedKind(kind) {
    return new PolicyError(
      ErrorCode.UnsupportedKind,
      undefined,
      `this policy does not handle operations of kind \`${kind}\``,
    );
  }

  /**
   * Whether `e` is a PolicyError (from any copy of this module).
   * @param {unknown} e
   * @returns {e is PolicyError}
   */
  static is(e) {
    return typeof e === 'object' && e !== null && /** @type {any} */ (e)[BRAND] === true;
  }

  /**
   * The plain record for the host: a thrown `Error` would trap under
   * componentize-js (it treats only a non-Error object as the error value).
   * @returns {PolicyErrorRecord}
   */
  toRecord() {
    return { code: this.code, field: this.field, message: this.message };
  }
}
