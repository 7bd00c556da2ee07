// A client for `idem serve`, the idem sidecar: side effects that happen
// exactly once, from TypeScript and JavaScript (Node 20 and later).
//
//   const client = new IdemClient({ baseUrl: "http://127.0.0.1:7676", token });
//   const receipt = await withIdempotency(client, operation, (claim) => charge(claim.key, claim.fence));
//
// See README.md, and docs/guide/client-typescript.md in the idem repository.

export { defaultCaller, IdemClient, MAX_CALLER_BYTES } from "./client.js";
export type { BeginOptions, Body, CompleteOptions, FailOptions, IdemClientOptions, ResolveOptions } from "./client.js";
export * from "./errors.js";
export { decodeJson, encodeJson, withIdempotency } from "./idempotency.js";
export type { IdempotencyOptions } from "./idempotency.js";
export { completedUnder, completeIn, FENCED_SQLSTATE, FencedError, INVALID_SQLSTATE, logRefusal } from "./postgres.js";
export type { FencedReason, PgClaim, PgOptions, PgOutcome, Queryable } from "./postgres.js";
export type * from "./types.js";
