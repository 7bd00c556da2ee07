// The completion inside your own PostgreSQL transaction (node-postgres).
//
// When `idem serve` keeps its records in PostgreSQL and your service's
// tables live in the same database, your business writes and idem's
// completion can commit in one transaction: a crash between "charged" and
// "recorded" can no longer happen, and a holder that was deposed (another
// took the key over) commits none of its writes.
//
//   const begun = await idem.begin(operation);          // answer "execute"
//   const db = await pool.connect();
//   await db.query("BEGIN");
//   await db.query("INSERT INTO ledger (invoice, fence) VALUES ($1, $2)", ["inv-1", begun.fence]);
//   await completeIn(db, begun, { body: "charged" });   // throws FencedError if deposed
//   await db.query("COMMIT");
//
// `completeIn` calls the store's SQL function `complete` (in its schema:
// `idem` unless the store URL says `idem_schema=`), which locks the record,
// checks the fence by the server's clock and writes the completion; a
// refusal raises SQLSTATE IDF01 inside your transaction, so it cannot
// commit. Nothing here imports `pg`: any client with node-postgres's
// `query(text, values)` will do (a `Client`, a `PoolClient`).

import { IdemError } from "./errors.js";
import type { Finished } from "./types.js";

/** The SQLSTATE `complete` raises when the completion is refused (the transaction is aborted). */
export const FENCED_SQLSTATE = "IDF01";

/**
 * The SQLSTATE `complete` raises for a request that cannot be right (a key
 * that is not 64 hexadecimal digits, a body over the store's 64 KiB).
 */
export const INVALID_SQLSTATE = "IDF02";

/** What the helpers need of a connection: node-postgres's `Client` and `PoolClient` have it. */
export interface Queryable {
  query(text: string, values?: unknown[]): Promise<{ rows: unknown[] }>;
}

/** What the completion names: an `execute` answer of `begin` is one. */
export interface PgClaim {
  readonly namespace: string;
  readonly key: string;
  readonly fence: number;
}

/** The outcome to store: `status` (default 0) and `body` (text as UTF-8, bytes as they are). */
export interface PgOutcome {
  status?: number;
  body?: string | Uint8Array;
}

/** Where the store's tables and functions are. */
export interface PgOptions {
  /** The store's schema (default `idem`; the store URL's `idem_schema=`). */
  schema?: string;
}

/** Why a completion was refused. */
export type FencedReason = "fenced" | "final" | "gone";

/**
 * The completion was refused, and the transaction is aborted: roll it back.
 * None of its writes may commit; a COMMIT rolls back.
 *
 * `reason`: `fenced` (another holder took the key over under a higher
 * fence: its run is the one that counts), `final` (the record is no longer
 * in progress: completed, failed, or sent to review) or `gone` (no live
 * record under the key). `logRefusal` appends it to the attempt log once
 * the transaction rolled back.
 */
export class FencedError extends IdemError {
  readonly namespace: string;
  readonly key: string;
  readonly fence: number;
  readonly reason: FencedReason;

  constructor(message: string, claim: PgClaim, reason: FencedReason, options?: ErrorOptions) {
    super(message, options);
    this.namespace = claim.namespace;
    this.key = claim.key;
    this.fence = claim.fence;
    this.reason = reason;
  }
}

/**
 * Completes `claim` (what `begin` answered `execute` with) with `outcome`
 * inside the transaction open on `client` (after your `BEGIN` and your
 * writes); you send `COMMIT`. The record's row stays locked until the
 * transaction ends: keep the rest of it short.
 *
 * Throws `FencedError` when the completion is refused (then send
 * `ROLLBACK`), and node-postgres's error otherwise (code `IDF02` for a
 * request that cannot be right). Called outside a transaction, the
 * completion would commit alone, without your writes: don't. If the
 * answer to your `COMMIT` is lost, ask `completedUnder` before anything else.
 */
export async function completeIn(
  client: Queryable,
  claim: PgClaim,
  outcome: PgOutcome = {},
  options: PgOptions = {},
): Promise<Finished> {
  try {
    await client.query(call(options, "complete"), values(claim, outcome));
  } catch (e) {
    const db = e as { code?: unknown; detail?: unknown; message?: unknown };
    if (db.code === FENCED_SQLSTATE) {
      throw new FencedError(String(db.message), claim, reasonOf(db.detail), { cause: e });
    }
    throw e;
  }
  return { key: claim.key, fence: claim.fence, state: "completed" };
}

/**
 * Whether the completion of `claim` with `outcome` committed: the question
 * to ask when the answer to your `COMMIT` was lost (the connection
 * dropped), on a connection that works, outside any other transaction. It
 * waits until the old transaction is over on the server, so `true` proves
 * it committed and `false` that it did not (then none of its writes did:
 * run the transaction again; its completion is refused if the claim was
 * lost meanwhile). An error leaves it unknown: ask again.
 */
export async function completedUnder(
  client: Queryable,
  claim: PgClaim,
  outcome: PgOutcome = {},
  options: PgOptions = {},
): Promise<boolean> {
  const result = await client.query(call(options, "completed_under"), values(claim, outcome));
  const row = result.rows[0] as Record<string, unknown> | undefined;
  return row?.completed_under === true;
}

/**
 * Appends the refused completion `refused` to the store's attempt log
 * (`idem report` then shows the deposed holder's write), as the library
 * logs it: call it after your `ROLLBACK`, outside any transaction. The
 * rollback took any entry the refusal could have written. `true` when it
 * appended one; `false` when there was nothing to log (no fence was
 * deposed) or it is logged already.
 */
export async function logRefusal(client: Queryable, refused: FencedError, options: PgOptions = {}): Promise<boolean> {
  const result = await client.query(
    `SELECT ${quote(options.schema ?? "idem")}.log_refused($1, $2, $3) AS log_refused`,
    [refused.namespace, refused.key, String(refused.fence)],
  );
  const row = result.rows[0] as Record<string, unknown> | undefined;
  return row?.log_refused === true;
}

function call(options: PgOptions, name: string): string {
  return `SELECT ${quote(options.schema ?? "idem")}.${name}($1, $2, $3, $4, $5) AS ${name}`;
}

function values(claim: PgClaim, outcome: PgOutcome): unknown[] {
  // A bytea parameter is sent as bytes: a string would be read as bytea's
  // text form (`\x…` escapes), not as the text it is.
  const body = outcome.body ?? "";
  const bytes = typeof body === "string" ? Buffer.from(body, "utf8") : Buffer.from(body);
  return [claim.namespace, claim.key, String(claim.fence), outcome.status ?? 0, bytes];
}

function quote(identifier: string): string {
  return `"${identifier.replaceAll('"', '""')}"`;
}

function reasonOf(detail: unknown): FencedReason {
  return detail === "fenced" || detail === "final" || detail === "gone" ? detail : "fenced";
}
