// Types of @idem/policy (index.js), for editors and `tsc`. Written by hand to
// say what the JSDoc cannot (string-literal unions, the exact decisions);
// `npm run typecheck` holds them to the JavaScript: a strict TypeScript policy
// must compile against them and pass its cases through index.js, and the
// names declared here must be the names index.js exports.
//
// Conventions of the bindings (componentize-js): WIT names in camelCase,
// u64 as BigInt, u32 / u16 / i32 as Number, variants as `{ tag, val }`, enum
// cases as their kebab-case names, an absent option as `undefined`.

// ---------------------------------------------------------------- operation

/** A field's canonical value: text (NFC), a JSON number as canonical decimal text, or a boolean. */
export type Value =
  | { readonly tag: 'text'; readonly val: string }
  | { readonly tag: 'number'; readonly val: string }
  | { readonly tag: 'boolean'; readonly val: boolean };

/** One named field of an operation. */
export interface Field {
  readonly name: string;
  readonly value: Value;
}

/** Why an operation is being run (the contract's `trigger` enum). */
export type Trigger = 'scheduled' | 'retry' | 'manual' | 'client';
/** The `trigger` spellings by name: `Trigger.Retry === 'retry'`. */
export declare const Trigger: Readonly<{
  Scheduled: 'scheduled';
  Retry: 'retry';
  Manual: 'manual';
  Client: 'client';
}>;

/** The run that carries an operation; `attempt` is 1 for the first. */
export interface RunContext {
  readonly runId: string;
  readonly trigger: Trigger;
  readonly attempt: number;
}

/** The operation record as the host hands it to the component. */
export interface OperationRecord {
  readonly kind: string;
  readonly tenant: string;
  readonly fields: readonly Field[];
  readonly run: RunContext | undefined;
  readonly nowMs: bigint;
}

/**
 * A value as key material: text as is, numbers in their canonical spelling,
 * booleans as `true` / `false`.
 */
export declare function material(value: Value): string;

/**
 * An operation with typed accessors; `derive` and `ctx.operation` get one.
 * Every accessor that refuses throws a {@link PolicyError} (`missing-field`,
 * `invalid-value`), which the host answers with 400.
 */
export declare class Operation implements OperationRecord {
  constructor(record: OperationRecord);
  /** What the effect is, e.g. `charge`. */
  readonly kind: string;
  /** Whose effect it is. */
  readonly tenant: string;
  /** Sorted by name (bytewise), names unique. */
  readonly fields: readonly Field[];
  /** The run that carries the operation, when the host knows one. */
  readonly run: RunContext | undefined;
  /** The host's logical time, ms since the epoch: the policy has no clock. */
  readonly nowMs: bigint;
  /** The field's value, or `undefined` when absent. */
  field(name: string): Value | undefined;
  /** A non-empty text field. @throws {PolicyError} missing-field, invalid-value */
  text(name: string): string;
  /** A text field, or `undefined` when absent (`''` stays `''`). @throws {PolicyError} invalid-value */
  optionalText(name: string): string | undefined;
  /** Any field as key material (see {@link material}). @throws {PolicyError} missing-field */
  material(name: string): string;
  /** A decimal from a JSON number or a string, canonical: `"10.50"` → `"10.5"`. @throws {PolicyError} missing-field, invalid-value */
  decimal(name: string): string;
  /** A JSON number field as its canonical decimal text, never a JS Number. @throws {PolicyError} missing-field, invalid-value */
  number(name: string): string;
  /** A boolean field. @throws {PolicyError} missing-field, invalid-value */
  boolean(name: string): boolean;
}

// --------------------------------------------------------------- derivation

/** Seconds in a minute. */
export declare const MINUTE: 60;
/** Seconds in an hour. */
export declare const HOUR: 3600;
/** Seconds in a day. */
export declare const DAY: 86400;

/** One named piece of key or fingerprint material. */
export interface Part {
  readonly name: string;
  readonly value: string;
}

/** The record the host receives from `derive`. */
export interface DerivationRecord {
  readonly key: readonly Part[];
  readonly fingerprint: readonly Part[];
  readonly partition: string;
  readonly retentionS: bigint;
  readonly leaseS: number;
}

/**
 * What `derive` returns: key and fingerprint parts in order, the partition,
 * the retention (default one day) and the lease (default five minutes).
 * A Number where a u64 / u32 is expected must be a whole number in range,
 * or the setter throws a TypeError (a bug, a trap in the host).
 */
export declare class Derivation {
  /** A derivation owned by `partition`. */
  constructor(partition: string);
  /** Appends a named part of the key material (order matters). */
  key(name: string, value: string): this;
  /** Appends a named part of the fingerprint material. */
  fingerprint(name: string, value: string): this;
  /** How long the record is kept, in seconds (a u64). */
  retentionS(seconds: number | bigint): this;
  /** How long a claim holds before its lease expires, in seconds (a u32). */
  leaseS(seconds: number | bigint): this;
  /** The plain record for the host (fresh arrays). */
  toRecord(): DerivationRecord;
}

// ------------------------------------------------------------------- errors

/** The contract's `error-code` enum. */
export type ErrorCode = 'missing-field' | 'invalid-value' | 'unsupported-kind';
/** The `error-code` spellings by name: `ErrorCode.MissingField === 'missing-field'`. */
export declare const ErrorCode: Readonly<{
  MissingField: 'missing-field';
  InvalidValue: 'invalid-value';
  UnsupportedKind: 'unsupported-kind';
}>;

/** The record the host receives as `derive`'s error. */
export interface PolicyErrorRecord {
  readonly code: ErrorCode;
  readonly field: string | undefined;
  readonly message: string;
}

/**
 * A typed refusal: throw it from `derive` and the host answers 400 with its
 * code, field and message. Any other exception is a bug, a trap in the host.
 */
export declare class PolicyError extends Error {
  constructor(code: ErrorCode, field: string | undefined, message: string);
  readonly name: 'PolicyError';
  readonly code: ErrorCode;
  /** The field at fault, when there is one. */
  readonly field: string | undefined;
  /** A required field is absent: "the operation has no `field`". */
  static missing(field: string): PolicyError;
  /** A field's value is unacceptable: "`field` why". */
  static invalid(field: string, why: string): PolicyError;
  /** The policy does not handle operations of this kind. */
  static unsupportedKind(kind: string): PolicyError;
  /** Whether `e` is a PolicyError, from any copy of the SDK. */
  static is(e: unknown): e is PolicyError;
  /** The plain record for the host. */
  toRecord(): PolicyErrorRecord;
}

// ---------------------------------------------------------------- decisions

/** The state of the stored record a duplicate collided with (the contract's `record-state`). */
export type RecordState = 'in-progress' | 'completed' | 'failed-retryable' | 'failed-permanent' | 'outcome-unknown';
/** The `record-state` spellings by name: `RecordState.InProgress === 'in-progress'`. */
export declare const RecordState: Readonly<{
  InProgress: 'in-progress';
  Completed: 'completed';
  FailedRetryable: 'failed-retryable';
  FailedPermanent: 'failed-permanent';
  OutcomeUnknown: 'outcome-unknown';
}>;

/** The stored outcome: its status (exit code or HTTP status), its size in bytes, a failed attempt's error. */
export interface OutcomeSummary {
  readonly status: number;
  readonly size: bigint;
  readonly error: string | undefined;
}

/** What the host knows about a duplicate, handed to `onDuplicate`. */
export interface DuplicateContext {
  /** The duplicate operation itself. */
  readonly operation: Operation;
  /** The stored record's state. */
  readonly state: RecordState;
  /** Whether the duplicate's fingerprint is the stored one's (false: the key was reused for another request). */
  readonly fingerprintMatches: boolean;
  /** How many times the effect was claimed so far. */
  readonly attempts: number;
  /** Time since the record was created, in ms. */
  readonly ageMs: bigint;
  /** Time left on the holder's lease, in ms; 0n once expired or when not in progress. */
  readonly leaseRemainingMs: bigint;
  /** The stored outcome, for a completed or failed record. */
  readonly outcome: OutcomeSummary | undefined;
}

/** A refusal: an HTTP-style status (400 to 599), a reason, and when trying again may help. */
export interface Rejection {
  readonly status: number;
  readonly reason: string;
  readonly retryAfterMs: bigint | undefined;
}

/** Hand back the stored outcome. */
export interface Replay { readonly tag: 'replay' }
/** Refuse this duplicate. */
export interface Reject { readonly tag: 'reject'; readonly val: Rejection }
/** Wait up to `val` ms in all for an in-progress record, then decide again (a wait decided again gets what is left). */
export interface Wait { readonly tag: 'wait'; readonly val: bigint }
/** Run the effect again under the same key. */
export interface ReExecute { readonly tag: 're-execute' }
/** Mark an expired in-progress record outcome-unknown, and refuse. */
export interface MarkUnknown { readonly tag: 'mark-unknown'; readonly val: Rejection }
/** What a duplicate gets (the contract's `decision` variant). */
export type DecisionValue = Replay | Reject | Wait | ReExecute | MarkUnknown;

/** A rejection record; `retryAfterMs` must be a whole number of ms if given. */
export declare function rejection(status: number, reason: string, retryAfterMs?: number | bigint): Rejection;

/** The decisions, built. The host refuses an unsafe one (e.g. replaying a record that is still in progress). */
export declare const Decision: Readonly<{
  /** Hand back the stored outcome (a completed or permanently failed record). */
  replay(): Replay;
  /** Refuse this duplicate with `status` (400 to 599) and `reason`. */
  reject(status: number, reason: string, retryAfterMs?: number | bigint): Reject;
  /** Wait up to `ms` (1 to 60000) in all for an in-progress record with a live lease; the host may cap it (`--max-wait`). */
  wait(ms: number | bigint): Wait;
  /** Run the effect again under the same key (never for a completed record). */
  reExecute(): ReExecute;
  /** Mark an in-progress record whose lease expired outcome-unknown, and refuse. */
  markUnknown(status: number, reason: string, retryAfterMs?: number | bigint): MarkUnknown;
  /**
   * The decisions most policies want (the Rust SDK's `Decision::standard`):
   * another fingerprint → reject 422; completed or failed-permanent → replay;
   * in progress, lease live → reject 409 retrying after the lease; lease
   * expired → mark-unknown 409; failed-retryable → re-execute;
   * outcome-unknown → reject 409.
   */
  standard(ctx: Pick<DuplicateContext, 'fingerprintMatches' | 'state' | 'leaseRemainingMs'>): DecisionValue;
}>;

// ------------------------------------------------------------------- policy

/** Who the policy is: short stable name, semantic version, key namespace, one-line description. */
export interface PolicyInfo {
  readonly name: string;
  readonly version: string;
  readonly namespace: string;
  readonly description: string;
}

/** What a policy author writes and hands to {@link definePolicy}. */
export interface PolicyDefinition {
  describe(): PolicyInfo;
  /** Key material for an operation; throw a {@link PolicyError} to refuse. */
  derive(op: Operation): Derivation | DerivationRecord;
  /** What a duplicate gets. */
  onDuplicate(ctx: DuplicateContext): DecisionValue;
}

/** The duplicate context as the host hands it over: the operation is the plain record. */
export type DuplicateContextRecord = Omit<DuplicateContext, 'operation'> & { readonly operation: OperationRecord };

/** What the component exports as `idem:policy/policy` (and the native runner calls). */
export interface PolicyExport {
  describe(): PolicyInfo;
  /** @throws {PolicyErrorRecord} a refusal, as `result`'s error */
  derive(op: OperationRecord): DerivationRecord;
  onDuplicate(ctx: DuplicateContextRecord): DecisionValue;
}

/**
 * Turns a policy definition into the world's export. The module must export
 * it as `policy`: `export const policy = definePolicy({ ... })`.
 * @throws {TypeError} when `describe`, `derive` or `onDuplicate` is missing
 */
export declare function definePolicy(definition: PolicyDefinition): Readonly<PolicyExport>;

// ------------------------------------------------------------------ helpers

/** The longest decimal text {@link canonicalDecimal} accepts, in UTF-8 bytes. */
export declare const MAX_DECIMAL_LEN: 128;

/** Why a text is not a decimal; `message` reads as the Rust SDK's. */
export declare class DecimalError extends Error {
  constructor(text: string, why: string);
  readonly name: 'DecimalError';
  /** The offending text, cut to 40 bytes and `…`. */
  readonly text: string;
  /** What is wrong with it. */
  readonly why: string;
}

/**
 * The canonical spelling of a decimal given as text: an optional `-`,
 * digits, an optional `.` and digits; no `+`, spaces, exponents or
 * separators. `"0010.00"` → `"10"`, `"-0.0"` → `"0"`.
 * @throws {DecimalError}
 */
export declare function canonicalDecimal(text: string): string;

/** The length of `s` in UTF-8 bytes, as the host counts every limit. */
export declare function utf8Length(s: string): number;
