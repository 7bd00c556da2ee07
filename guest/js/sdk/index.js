// @idem/policy: write an idempotency policy for idem in JavaScript.
//
// A policy tells the host, for every operation, what identifies its effect
// (the key material), what must match for a duplicate to be a true replay
// (the fingerprint material), who owns it, how long to remember it and how
// long a claim holds, and what a duplicate gets. The host, never the policy,
// hashes the material into keys. The policy is pure: inside the component it
// has no clock and no randomness worth the name (`Date.now()` is the build
// time), so it reads time only from `op.nowMs`.
//
// This module must stay free of Node.js APIs: it is bundled into the
// component. The native test harness lives in `./testing/`.

export { definePolicy } from './export.js';
export { Operation, material } from './operation.js';
export { PolicyError, ErrorCode } from './errors.js';
export { Derivation, DAY, HOUR, MINUTE } from './derivation.js';
export { Decision, RecordState, Trigger, rejection } from './decision.js';
export { canonicalDecimal, DecimalError, MAX_DECIMAL_LEN } from './decimal.js';
export { utf8Length } from './utf8.js';
