// The errors the client throws.
//
// Every error `idem serve` answers is an RFC 9457 problem document whose
// `type` ends in a slug naming the case; each problem becomes the class named
// for its slug (or, for a slug this release does not know, for its HTTP
// status), carrying the document. The begin answers that stop a call without
// being errors of the API (`in-progress` past the wait, `conflict`,
// `rejected`, a replayed permanent failure) have classes of their own, thrown
// by `withIdempotency`, never by `IdemClient.begin`.

import type { Conflict, InProgress, Outcome, Problem, Rejected, Replay } from "./types.js";

export const PROBLEM_PREFIX = "tag:idem.invalid,2026:problem/";

/** Anything this client throws. */
export class IdemError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
  }
}

/**
 * The server could not be reached, or answered something that is not the
 * API (not JSON, a cut connection, a timeout). Whether the request was
 * applied is unknown: `complete` and `fail` may be sent again under the same
 * fence (the same end is answered 200 again).
 */
export class TransportError extends IdemError {}

/** The server refused the request with a problem document. */
export class ProblemError extends IdemError {
  /** The whole problem document. */
  readonly problem: Problem;
  readonly status: number;
  readonly type: string;
  readonly title: string;
  readonly detail: string;
  /** The request member at fault, when one is. */
  readonly member: string | undefined;
  /** When to try again (503), from the document or `Retry-After`. */
  readonly retryAfterS: number | undefined;

  constructor(problem: Problem, retryAfterS?: number) {
    super(`${problem.status} ${slugOf(problem.type) || problem.title}: ${problem.detail}`);
    this.problem = problem;
    this.status = problem.status;
    this.type = problem.type;
    this.title = problem.title;
    this.detail = problem.detail;
    this.member = problem.member;
    this.retryAfterS = problem.retry_after_s ?? retryAfterS;
  }

  /** The case, e.g. `stale-fence` (empty when `type` is not idem's). */
  get slug(): string {
    return slugOf(this.type);
  }
}

function slugOf(type: string): string {
  return type.startsWith(PROBLEM_PREFIX) ? type.slice(PROBLEM_PREFIX.length) : "";
}

/** 400: malformed JSON, an unknown, missing or wrongly typed member (`member`). */
export class BadRequestError extends ProblemError {}

/** 401: no bearer token, or not this server's. */
export class UnauthorizedError extends ProblemError {}

/** 403: the store registered this namespace, and not this policy's digest. */
export class PolicyNotRegisteredError extends ProblemError {}

/** 404: no record has the key (it never existed, or it expired). */
export class UnknownKeyError extends ProblemError {
  get key(): string | undefined {
    return this.problem.key;
  }
}

/** 409: the write does not fit the record as it is now; nothing changed. */
export class ConflictError extends ProblemError {}

/** 409 `stale-fence`: the fence is not the record's current one. */
export class StaleFenceError extends ConflictError {
  get fence(): number | undefined {
    return this.problem.fence;
  }
  get currentFence(): number | undefined {
    return this.problem.current_fence;
  }
}

/** 409 `not-in-progress`: the record already ended (otherwise), or waits for review. */
export class NotInProgressError extends ConflictError {
  get fence(): number | undefined {
    return this.problem.fence;
  }
  get state(): string | undefined {
    return this.problem.state;
  }
}

/** 409 `not-waiting-for-review`: a resolution of a record no person needs to settle. */
export class NotWaitingForReviewError extends ConflictError {
  get state(): string | undefined {
    return this.problem.state;
  }
}

/**
 * 409 `not-amendable`: an amendment of a record whose latest write is not a person's release or
 * rejection (completed, a holder's end, still waiting for review).
 */
export class NotAmendableError extends ConflictError {
  get state(): string | undefined {
    return this.problem.state;
  }
}

/** 413: the request, or the outcome's body, is past the limit (`limitBytes`). */
export class TooLargeError extends ProblemError {
  get limitBytes(): number | undefined {
    return this.problem.limit_bytes;
  }
}

/** 422: the policy refused the operation; `code` and `field` say why. */
export class PolicyRefusedError extends ProblemError {
  /** `missing-field`, `invalid-value` or `unsupported-kind`. */
  get code(): string | undefined {
    return this.problem.code;
  }
  get field(): string | undefined {
    return this.problem.field;
  }
}

/** 500: the policy failed while evaluating (trap, fuel, memory). */
export class PolicyFailedError extends ProblemError {}

/** 503: the store failed, or too many connections; try again after `retryAfterS`. */
export class UnavailableError extends ProblemError {}

const BY_SLUG: Record<string, typeof ProblemError> = {
  "malformed-json": BadRequestError,
  "invalid-request": BadRequestError,
  "unreadable-body": BadRequestError,
  "malformed-request": BadRequestError,
  unauthorized: UnauthorizedError,
  "policy-not-registered": PolicyNotRegisteredError,
  "unknown-key": UnknownKeyError,
  "stale-fence": StaleFenceError,
  "not-in-progress": NotInProgressError,
  "not-waiting-for-review": NotWaitingForReviewError,
  "not-amendable": NotAmendableError,
  "body-too-large": TooLargeError,
  "outcome-too-large": TooLargeError,
  "refused-by-policy": PolicyRefusedError,
  "policy-failed": PolicyFailedError,
  "store-unavailable": UnavailableError,
  "too-many-connections": UnavailableError,
};

const BY_STATUS: Record<number, typeof ProblemError> = {
  400: BadRequestError,
  401: UnauthorizedError,
  409: ConflictError,
  413: TooLargeError,
  422: PolicyRefusedError,
  503: UnavailableError,
};

/** The error for a problem document: by its slug, else its status. */
export function problemError(problem: Problem, retryAfterS?: number): ProblemError {
  const Class = BY_SLUG[slugOf(problem.type)] ?? BY_STATUS[problem.status] ?? ProblemError;
  return new Class(problem, retryAfterS);
}

/** Another holder was still performing the effect when the wait ran out. */
export class InProgressError extends IdemError {
  readonly key: string;
  readonly retryAfterMs: number | null;
  constructor(readonly answer: InProgress) {
    super(`${answer.key}: in progress (${answer.reason})`);
    this.key = answer.key;
    this.retryAfterMs = answer.retry_after_ms;
  }
}

/** The key was used for a different operation (e.g. another amount). */
export class OperationConflictError extends IdemError {
  readonly key: string;
  constructor(readonly answer: Conflict) {
    super(`${answer.key}: ${answer.reason}`);
    this.key = answer.key;
  }
}

/** The policy rejected the duplicate; `sentToReview`: the record now waits for a person. */
export class RejectedError extends IdemError {
  readonly key: string;
  readonly sentToReview: boolean;
  constructor(readonly answer: Rejected) {
    super(`${answer.key}: ${answer.reason}`);
    this.key = answer.key;
    this.sentToReview = answer.sent_to_review;
  }
}

/** The record failed for good: its failure is replayed, the body not run again. */
export class FailedPermanentlyError extends IdemError {
  readonly key: string;
  readonly outcome: Outcome;
  constructor(readonly answer: Replay) {
    super(`${answer.key}: failed permanently: ${answer.outcome.error}`);
    this.key = answer.key;
    this.outcome = answer.outcome;
  }
}

/**
 * Throw this (or a subclass) from an idempotent body for a failure that must
 * not be retried: the record is failed permanently, and every later call
 * throws `FailedPermanentlyError` instead of running the body.
 */
export class PermanentError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
  }
}
