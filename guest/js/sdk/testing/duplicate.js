// The host's safety gate on a policy's decision: a port of
// host/idem-core/src/duplicate.rs `check_decision`, with its messages. The
// host refuses an unsafe decision (and rejects the duplicate instead); a
// case expecting a decision must get one the host lets through.

import { utf8Length } from '../utf8.js';

export const MAX_WAIT_MS = 60_000n;
export const MAX_REASON_BYTES = 1024;

/** The contract's name of a decision (its variant tag). */
export const decisionName = (d) => d.tag;

/**
 * Why the host refuses a decision, or undefined when it lets it through.
 * @param {{ state: string, fingerprintMatches: boolean, leaseRemainingMs: bigint }} ctx
 * @param {import('../decision.js').DecisionValue} decision
 * @returns {string | undefined}
 */
export function checkDecision(ctx, decision) {
  const expired = ctx.state === 'in-progress' && ctx.leaseRemainingMs === 0n;
  const final = ctx.state === 'completed' || ctx.state === 'failed-permanent';
  const refuse = (why) =>
    `policy decided \`${decision.tag}\` for a ${ctx.state} record${ctx.fingerprintMatches ? '' : ' with a different fingerprint'}: ${why}`;
  const checkRejection = (r) => {
    if (!(r.status >= 400 && r.status <= 599)) return refuse("a rejection's status must be 400 to 599");
    const n = utf8Length(r.reason);
    if (n === 0 || n > MAX_REASON_BYTES) return refuse('a rejection needs a reason of 1 to 1024 bytes');
    return undefined;
  };
  switch (decision.tag) {
    case 'replay':
      if (!final) return refuse('there is no final outcome to replay');
      if (!ctx.fingerprintMatches) return refuse('the stored outcome belongs to a different request');
      return undefined;
    case 're-execute':
      if (final) return refuse('a final record is never executed again');
      if (ctx.state === 'in-progress' && !expired) return refuse("another holder's lease is still live");
      if (!ctx.fingerprintMatches) return refuse('re-executing would run a different request under the same key');
      return undefined;
    case 'wait':
      if (ctx.state !== 'in-progress' || expired) return refuse('waiting only makes sense for a live in-progress record');
      if (decision.val === 0n || decision.val > MAX_WAIT_MS) return refuse('a wait must be 1 to 60000 ms');
      return undefined;
    case 'mark-unknown':
      if (!expired) return refuse('only an in-progress record whose lease expired can be marked outcome-unknown');
      return checkRejection(decision.val);
    case 'reject':
      return checkRejection(decision.val);
    default:
      throw new TypeError(`unknown decision \`${decision.tag}\``);
  }
}
