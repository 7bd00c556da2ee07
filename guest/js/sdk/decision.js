// What a duplicate gets (the contract's `decision` variant, as componentize-js
// spells variants: `{ tag, val }` with the WIT case names), and the Rust SDK's
// `Decision::standard`.

import { toU64 } from './derivation.js';

/**
 * The contract's `record-state` enum.
 * @readonly
 * @enum {'in-progress' | 'completed' | 'failed-retryable' | 'failed-permanent' | 'outcome-unknown'}
 */
export const RecordState = Object.freeze({
  InProgress: 'in-progress',
  Completed: 'completed',
  FailedRetryable: 'failed-retryable',
  FailedPermanent: 'failed-permanent',
  OutcomeUnknown: 'outcome-unknown',
});

/**
 * The contract's `trigger` enum.
 * @readonly
 * @enum {'scheduled' | 'retry' | 'manual' | 'client'}
 */
export const Trigger = Object.freeze({
  Scheduled: 'scheduled',
  Retry: 'retry',
  Manual: 'manual',
  Client: 'client',
});

/** @typedef {{ status: number, reason: string, retryAfterMs: bigint | undefined }} Rejection */
/**
 * @typedef {{ tag: 'replay' } | { tag: 'reject', val: Rejection } | { tag: 'wait', val: bigint }
 *   | { tag: 're-execute' } | { tag: 'mark-unknown', val: Rejection }} DecisionValue
 */
/** @typedef {{ status: number, size: bigint, error: string | undefined }} OutcomeSummary */
/**
 * What the host knows about a duplicate (u64 members are BigInts).
 * @typedef {{ operation: import('./operation.js').Operation, state: RecordState, fingerprintMatches: boolean,
 *   attempts: number, ageMs: bigint, leaseRemainingMs: bigint, outcome: OutcomeSummary | undefined }} DuplicateContext
 */

/**
 * A refusal with an HTTP-style status and a reason, and optionally when
 * trying again may help.
 * @param {number} status 400 to 599 (the host refuses anything else)
 * @param {string} reason
 * @param {number | bigint} [retryAfterMs]
 * @returns {Rejection}
 */
export function rejection(status, reason, retryAfterMs) {
  return {
    status,
    reason,
    retryAfterMs: retryAfterMs === undefined ? undefined : toU64(retryAfterMs, 'retryAfterMs'),
  };
}

export const Decision = Object.freeze({
  /** Hand back the stored outcome. @returns {DecisionValue} */
  replay: () => ({ tag: 'replay' }),
  /** Refuse this duplicate. @param {number} status @param {string} reason @param {number | bigint} [retryAfterMs] @returns {DecisionValue} */
  reject: (status, reason, retryAfterMs) => ({ tag: 'reject', val: rejection(status, reason, retryAfterMs) }),
  /** Wait up to `ms` in all for an in-progress record (the host may cap it, never extend it). @param {number | bigint} ms @returns {DecisionValue} */
  wait: (ms) => ({ tag: 'wait', val: toU64(ms, 'wait') }),
  /** Run the effect again under the same key. @returns {DecisionValue} */
  reExecute: () => ({ tag: 're-execute' }),
  /** Mark an expired in-progress record outcome-unknown, and refuse. @param {number} status @param {string} reason @param {number | bigint} [retryAfterMs] @returns {DecisionValue} */
  markUnknown: (status, reason, retryAfterMs) => ({ tag: 'mark-unknown', val: rejection(status, reason, retryAfterMs) }),

  /**
   * The decisions most policies want (the Rust SDK's `Decision::standard`):
   * - a different fingerprint → reject 422 (the key was reused for another request);
   * - completed or permanently failed → replay the stored outcome;
   * - in progress with a live lease → reject 409, retry after the lease;
   * - in progress with an expired lease → mark outcome-unknown for review
   *   (the effect may have happened: never run it blind);
   * - failed-retryable → re-execute;
   * - outcome-unknown → reject 409 for review.
   * @param {DuplicateContext} ctx
   * @returns {DecisionValue}
   */
  standard(ctx) {
    if (!ctx.fingerprintMatches) {
      return Decision.reject(422, 'the idempotency key was reused for a different request');
    }
    switch (ctx.state) {
      case RecordState.Completed:
      case RecordState.FailedPermanent:
        return Decision.replay();
      case RecordState.InProgress:
        // BigInt from the host; `> 0` also holds for a Number in a hand-built ctx.
        if (ctx.leaseRemainingMs > 0) {
          return Decision.reject(409, 'the operation is in progress', ctx.leaseRemainingMs);
        }
        return Decision.markUnknown(
          409,
          "the previous holder's lease expired before it finished; the outcome needs review",
        );
      case RecordState.FailedRetryable:
        return Decision.reExecute();
      case RecordState.OutcomeUnknown:
        return Decision.reject(409, 'the outcome of an earlier attempt is unknown and needs review');
      default:
        // Rust's match is exhaustive; here an unknown state is a host/SDK
        // mismatch, and failing loudly beats guessing a decision.
        throw new TypeError(`unknown record state \`${String(ctx.state)}\``);
    }
  },
});
