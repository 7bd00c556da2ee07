// Types of @idem/policy/testing (testing/index.js): the native harness, the
// host's logic replicated in Node.js (cases files, canonical JSON numbers and
// operations, key digests, the derivation bounds, the decision gate). Node.js
// only; never bundled into a component. Held to the JavaScript by
// `npm run typecheck`, as ../index.d.ts is.

import type { DecisionValue, DerivationRecord, DuplicateContext, Part, PolicyExport, PolicyInfo } from '../index.js';

// -------------------------------------------------------------- cases files

/** The `duplicate` of a case: the stored record the operation collides with (u64 and u32 as BigInt). */
export interface CaseDuplicate {
  readonly state: DuplicateContext['state'];
  readonly fingerprint_matches: boolean;
  readonly attempts: bigint;
  readonly age_ms: bigint;
  readonly lease_remaining_ms: bigint;
  readonly outcome: { readonly status: bigint; readonly size: bigint; readonly error: string | undefined } | undefined;
}

/** What a case expects; every member is optional, at least one must be given. */
export interface CaseExpect {
  readonly key: string | undefined;
  readonly fingerprint: string | undefined;
  readonly partition: string | undefined;
  readonly retention_s: bigint | undefined;
  readonly lease_s: bigint | undefined;
  readonly same_key_as: string | undefined;
  readonly key_differs_from: string | undefined;
  readonly same_fingerprint_as: string | undefined;
  readonly fingerprint_differs_from: string | undefined;
  readonly error: string | undefined;
  readonly field: string | undefined;
  readonly malformed: boolean | undefined;
  readonly decision: string | undefined;
  readonly status: bigint | undefined;
  readonly retry_after_ms: bigint | undefined;
  readonly wait_ms: bigint | undefined;
  readonly unsafe: boolean | undefined;
}

/** One case: an operation as written (read later, as the host reads it), an optional duplicate, what must hold. */
export interface Case {
  readonly name: string;
  readonly op: JsonValue;
  readonly duplicate: CaseDuplicate | undefined;
  readonly expect: CaseExpect;
}

/** A parsed cases file. */
export interface CasesFile {
  /** The policy name the cases are for, checked against `describe`. */
  readonly policy: string | undefined;
  readonly cases: readonly Case[];
}

/** One result per case (or one `describe` result when the policy cannot be described). */
export interface CaseResult {
  readonly name: string;
  readonly passed: boolean;
  readonly detail: string;
}

/** What {@link runCases} returns. */
export interface Report {
  readonly results: readonly CaseResult[];
}

/** Reads a cases file's text. @throws {JsonSyntaxError} @throws {Error} a ShapeError when it is not a cases file */
export declare function parseCasesFile(text: string): CasesFile;
/** Runs every case against a policy export (a module's `policy`), as `idem test` does. */
export declare function runCases(policy: PolicyExport, file: CasesFile): Report;
/** The closing line: `N passed, N failed`. */
export declare function summary(report: Report): string;

/** The `policy` export of the module at `path`. @throws {Error} when it has none */
export declare function loadPolicy(path: string): Promise<PolicyExport>;
/** Reads a cases file as the host does: strict UTF-8. */
export declare function readCasesFile(path: string): Promise<CasesFile>;
/** Runs the cases file at `casesPath` against the policy module at `policyPath`. */
export declare function runCasesFile(policyPath: string, casesPath: string): Promise<Report>;
/** The report as `idem test` prints it: a header, one line per case, the summary. */
export declare function formatReport(casesPath: string, report: Report): string;

// ------------------------------------------- the cases through the component

/** The `idem` CLI: `$IDEM`, else `idem` on `PATH`; `undefined` when there is none. */
export declare function findIdem(env?: Readonly<Record<string, string | undefined>>): string | undefined;

/** What {@link runComponentCases} found. */
export interface ComponentRun {
  /** The component tested: `dist/NAME.wasm` of the project. */
  readonly component: string;
  /** Whether `idem build` ran first (a source was newer than the component, or there was none). */
  readonly built: boolean;
  /** Whether every case passed in the host (and the build, when one ran, succeeded). */
  readonly passed: boolean;
  /** What idem printed: the build's output when it failed, else `idem test`'s. */
  readonly output: string;
}

/**
 * Runs a cases file against the project's built component, in the host: `idem build PROJECT` when the
 * component is missing or older than a source, then `idem test`. @throws {Error} when there is no idem
 */
export declare function runComponentCases(projectDir: string, casesPath: string, options?: { readonly idem?: string }): ComponentRun;

// ---------------------------------------------------------------------- JSON

/** A JSON number, as its source text (never rounded through a double). */
export declare class JsonNumber {
  constructor(text: string);
  readonly text: string;
}

/** A JSON object: members in document order, repeats kept. */
export declare class JsonObject {
  constructor(entries: Array<[string, JsonValue]>);
  readonly entries: Array<[string, JsonValue]>;
}

/** A parsed JSON value. */
export type JsonValue = null | boolean | string | JsonNumber | JsonValue[] | JsonObject;

/** Why a text is not JSON; the message ends with serde_json's `at line L column C`. */
export declare class JsonSyntaxError extends Error {
  constructor(message: string);
}

/** Parses JSON as the host does (serde_json with arbitrary precision). @throws {JsonSyntaxError} */
export declare function parseJson(text: string): JsonValue;
/** Compact JSON text, as serde_json writes it. */
export declare function toCompactJson(v: JsonValue): string;

// ----------------------------------------------------------- numbers, keys

/** The longest canonical spelling of a JSON number, in bytes. */
export declare const MAX_CANONICAL_NUMBER_LEN: 128;

/** Why a JSON number has no canonical spelling: not a number, or too long without an exponent. */
export declare class NumberError extends Error {
  constructor(kind: 'syntax' | 'out-of-range', text: string);
  readonly kind: 'syntax' | 'out-of-range';
}

/** The host's spelling of a JSON number: `1.00E+2` → `100`. @throws {NumberError} */
export declare function canonicalNumber(text: string): string;

/** A value of a canonical operation as the host holds it. */
export type HostValue = { readonly tag: 'text' | 'number'; readonly val: string } | { readonly tag: 'boolean'; readonly val: boolean };

/** An operation as the host holds it after canonicalisation. */
export interface HostOperation {
  readonly kind: string;
  readonly tenant: string;
  readonly fields: ReadonlyArray<readonly [string, HostValue]>;
  readonly run: { readonly runId: string; readonly trigger: string; readonly attempt: number } | undefined;
  readonly nowMs: bigint | undefined;
}

/** The host's limits on an operation. */
export interface OperationLimits {
  readonly maxBytes: number;
  readonly maxFields: number;
  readonly maxNameBytes: number;
}

/** Why an operation was refused, worded as the host's. */
export declare class OpError extends Error {
  constructor(message: string);
}

/** Reads and canonicalises an operation from a parsed JSON value, as the host does. @throws {OpError} */
export declare function canonicalOperation(value: JsonValue, limits?: OperationLimits): HostOperation;

/** The version of the key encoding below. */
export declare const KEY_ENCODING_VERSION: 1;
/** The bytes the host hashes for a key or a fingerprint. */
export declare function encode(domain: 'key' | 'fingerprint', namespace: string, parts: readonly Part[]): Uint8Array;
/** The hex digest of {@link encode}'s bytes: a key or a fingerprint as the host stores it. */
export declare function digest(domain: 'key' | 'fingerprint', namespace: string, parts: readonly Part[]): string;

// ------------------------------------------------------- the host's checks

/** The host's refusal of a derivation or a self-description. */
export declare class MalformedError extends Error {
  constructor(why: string);
}

/** A derivation with its key and fingerprint computed. */
export type KeyedDerivation = DerivationRecord & {
  readonly namespace: string;
  readonly keyHex: string;
  readonly fingerprintHex: string;
};

/** Checks a derivation against the host's bounds and computes its keys. @throws {MalformedError} */
export declare function finish(d: DerivationRecord, namespace: string): KeyedDerivation;
/** Checks what the host relies on in `describe`. @throws {MalformedError} */
export declare function validatePolicyInfo(info: PolicyInfo): void;
/** Why the host refuses a decision for this duplicate, or `undefined` when it lets it through. */
export declare function checkDecision(
  ctx: Pick<DuplicateContext, 'state' | 'fingerprintMatches' | 'leaseRemainingMs'>,
  decision: DecisionValue,
): string | undefined;
