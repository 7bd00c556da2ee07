// Running a function at most once per operation.
//
// How a result is stored: the function's return value is encoded as JSON
// text (`JSON.stringify`) and completed with status 0, the API's status for
// success; `undefined` stores no body. A replay decodes the text with
// `JSON.parse` (no body: `undefined`), so a caller gets back an equal value
// (a `Date` comes back as its ISO string, as JSON has no dates). Pass
// `encode` and `decode` to store something else, e.g. bytes.

import type { Body, IdemClient } from "./client.js";
import {
  ConflictError,
  FailedPermanentlyError,
  IdemError,
  InProgressError,
  OperationConflictError,
  PermanentError,
  RejectedError,
  UnknownKeyError,
} from "./errors.js";
import type { Execute, Operation, Outcome, Run } from "./types.js";

export interface IdempotencyOptions<T> {
  /** Set as the operation's `run` member. */
  run?: Run;
  /** The status a result is completed with (default 0). */
  status?: number;
  /** How a result is stored (default JSON text; `undefined` stores no body). */
  encode?: (result: T) => Body | undefined;
  /** How a stored outcome is read back (default `JSON.parse` of its body). */
  decode?: (outcome: Outcome) => T;
  /** Whether an error is final (default: it is a `PermanentError`); else the failure is retryable. */
  isPermanent?: (error: unknown) => boolean;
  /** How long to wait for another holder before throwing `InProgressError` (default 30 000). */
  maxWaitMs?: number;
  /** The longest pause between begins while another holder runs (default 1 000; sooner when the answer says so). */
  pollIntervalMs?: number;
  /** How often to heartbeat while the function runs (default a third of the lease). */
  heartbeatEveryMs?: number;
}

// The API takes an `error` of any length, but a log line should stay one.
const ERROR_MAX_CHARS = 1000;

/** The default encoding of a result: JSON text (`undefined`: no body). */
export function encodeJson(result: unknown): string | undefined {
  return JSON.stringify(result);
}

/** The default decoding of a stored outcome: its body as JSON (no body: `undefined`). */
export function decodeJson<T>(outcome: Outcome): T {
  const text =
    outcome.body_base64 != null ? Buffer.from(outcome.body_base64, "base64").toString("utf8") : (outcome.body ?? "");
  return (text === "" ? undefined : JSON.parse(text)) as T;
}

function describe(error: unknown): string {
  const text = error instanceof Error ? `${error.name}: ${error.message}` : `thrown: ${String(error)}`;
  return text.slice(0, ERROR_MAX_CHARS);
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * Keeps a claim's lease while a function runs: a beat every `everyMs`, one at
 * a time. A lost claim (409, 404) stops it, since beating cannot win the claim
 * back and the completion will say what happened; any other error is left to
 * the next beat, as the lease outlasts several beats. The interval is unref'd:
 * a heartbeat alone never keeps a process alive.
 */
class Heartbeat {
  lost: IdemError | undefined;
  beats = 0;
  #inFlight: Promise<void> | undefined;
  readonly #timer: ReturnType<typeof setInterval>;

  constructor(client: IdemClient, claim: Execute, everyMs: number) {
    this.#timer = setInterval(() => {
      if (this.#inFlight !== undefined || this.lost !== undefined) return;
      this.#inFlight = client
        .heartbeat(claim.key, claim.fence, claim.lease_ms)
        .then(
          () => {
            this.beats += 1;
          },
          (e: unknown) => {
            if (e instanceof ConflictError || e instanceof UnknownKeyError) {
              this.lost = e;
              clearInterval(this.#timer);
            }
          },
        )
        .finally(() => {
          this.#inFlight = undefined;
        });
    }, everyMs);
    this.#timer.unref();
  }

  /** Stops beating, once the beat in flight (if any) has its answer. */
  async stop(): Promise<void> {
    clearInterval(this.#timer);
    await this.#inFlight;
  }
}

/**
 * Runs `fn` at most once for `operation`, and returns its result, or the
 * stored result of the call that ran it.
 *
 * It begins the operation. On `execute` it runs `fn(claim)` (hand
 * `claim.key` and `claim.fence` downstream) while heartbeating, then
 * completes the encoded result under the fence; if `fn` throws, the record is
 * failed (permanently when `isPermanent` says so, else retryable) and the
 * error rethrown. On `replay` it returns the decoded stored result without
 * running `fn`. On `in-progress` it begins again, after the answer's
 * `retry_after_ms` but at most `pollIntervalMs` later, until `maxWaitMs`
 * have passed; then it throws `InProgressError`. `conflict`, `rejected` and a
 * replayed permanent failure throw `OperationConflictError`, `RejectedError`
 * and `FailedPermanentlyError`.
 */
export async function withIdempotency<T>(
  client: IdemClient,
  operation: Operation,
  fn: (claim: Execute) => T | Promise<T>,
  options: IdempotencyOptions<T> = {},
): Promise<T> {
  const maxWaitMs = options.maxWaitMs ?? 30_000;
  const pollIntervalMs = options.pollIntervalMs ?? 1_000;
  const deadline = Date.now() + maxWaitMs;
  for (;;) {
    const answer = await client.begin(operation, options.run);
    switch (answer.answer) {
      case "execute":
        return execute(client, answer, fn, options);
      case "replay":
        if (answer.state !== "completed") throw new FailedPermanentlyError(answer);
        return (options.decode ?? decodeJson<T>)(answer.outcome);
      case "in-progress": {
        const left = deadline - Date.now();
        if (left <= 0) throw new InProgressError(answer);
        await sleep(Math.min(answer.retry_after_ms ?? pollIntervalMs, pollIntervalMs, left));
        break;
      }
      case "conflict":
        throw new OperationConflictError(answer);
      case "rejected":
        throw new RejectedError(answer);
    }
  }
}

async function execute<T>(
  client: IdemClient,
  claim: Execute,
  fn: (claim: Execute) => T | Promise<T>,
  options: IdempotencyOptions<T>,
): Promise<T> {
  const heartbeat = new Heartbeat(client, claim, options.heartbeatEveryMs ?? claim.lease_ms / 3);
  let result: T;
  try {
    result = await fn(claim);
  } catch (error) {
    await heartbeat.stop();
    const permanent = (options.isPermanent ?? ((e) => e instanceof PermanentError))(error);
    try {
      await client.fail(claim.key, claim.fence, !permanent, { error: describe(error) });
    } catch (failed) {
      // The function's error is what the caller must see; the failed write
      // (e.g. the claim was taken over meanwhile) goes with it.
      if (error instanceof Error) error.message += ` (idem: recording the failure failed too: ${String(failed)})`;
    }
    throw error;
  }
  await heartbeat.stop();
  let body: Body | undefined;
  try {
    body = (options.encode ?? (encodeJson as (r: T) => Body | undefined))(result);
  } catch (error) {
    // The effect happened but its result cannot be stored: a retry must not
    // perform it again, so the failure is final.
    await client.fail(claim.key, claim.fence, false, { error: `encoding the result failed: ${describe(error)}` });
    throw error;
  }
  await client.complete(claim.key, claim.fence, {
    status: options.status ?? 0,
    ...(body === undefined ? {} : { body }),
  });
  return result;
}
