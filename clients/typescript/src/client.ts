// `IdemClient`: one method per route of `idem serve`, over `fetch`.

import { hostname } from "node:os";
import { basename, extname } from "node:path";

import { problemError, TransportError } from "./errors.js";
import type {
  BeginAnswer,
  BeginRequest,
  Derivation,
  Finished,
  Heartbeat,
  Operation,
  Problem,
  Report,
  ReportRequest,
  Resolved,
  Run,
} from "./types.js";

/** A body to store: text as `body`, bytes as `body_base64`. */
export type Body = string | Uint8Array;

export interface IdemClientOptions {
  /** Where `idem serve` listens, e.g. `http://127.0.0.1:7676`. */
  baseUrl: string;
  /** The bearer token it was started with, if any. */
  token?: string | undefined;
  /** How long one request may take (default 30 s). */
  timeoutMs?: number;
  /** The `fetch` to use (default the global one). */
  fetch?: typeof globalThis.fetch;
  /**
   * The name `begin` gives the sidecar for this process (default {@link defaultCaller}:
   * `service@host:pid`): the attempt log, `idem report` and the review console show it as who held
   * the record.
   */
  caller?: string;
}

/** The longest caller name the sidecar keeps, in bytes. */
export const MAX_CALLER_BYTES = 128;

/**
 * Who this process is, as `begin` tells the sidecar by default: `$IDEM_CALLER` when set, else
 * `service@host:pid` (the script's name without its extension, the host name, the process id),
 * printable and cut to {@link MAX_CALLER_BYTES}.
 */
export function defaultCaller(): string {
  const given = process.env.IDEM_CALLER;
  if (given) return given;
  const script = process.argv[1] ?? "";
  const program = basename(script, extname(script)) || "node";
  // Untrusted everywhere it is shown: nothing that moves a cursor.
  // Cut by code point (a UTF-16 cut can leave half a pair) and trimmed after
  // the cut (which can leave a space at the end): the sidecar refuses either.
  const chars = Array.from(`${program}@${hostname() || "unknown"}:${process.pid}`.replace(/\p{Cc}/gu, "?"));
  while (Buffer.byteLength(chars.join(""), "utf8") > MAX_CALLER_BYTES) chars.pop();
  return chars.join("").trim();
}

export interface BeginOptions {
  /** The effect commits in the same transaction as its end (a PostgreSQL store only). Default false. */
  atomic?: boolean;
}

export interface CompleteOptions {
  /** Default 0. */
  status?: number;
  body?: Body;
}

export interface FailOptions {
  /** Default 1. */
  status?: number;
  /** Default `failed with status N`. */
  error?: string;
  body?: Body;
}

export interface ResolveOptions {
  resolution: "completed" | "release" | "reject";
  /** What was checked, who asked: not empty. */
  reason: string;
  /** Who decides. */
  by: string;
  status?: number;
  body?: Body;
  /** Amend a person's release or rejection written at `fence` (default false). */
  amend?: boolean;
}

function bodyMembers(body: Body | undefined): { body?: string; body_base64?: string } {
  if (body === undefined) return {};
  if (typeof body === "string") return { body };
  return { body_base64: Buffer.from(body).toString("base64") };
}

/**
 * A client of one `idem serve` (one policy, one store). It holds nothing but
 * its settings, so one client may serve every call of a process. Fences are
 * JavaScript numbers: exact up to 2^53, far past what a record reaches.
 */
export class IdemClient {
  readonly baseUrl: string;
  /** The name `begin` gives the sidecar for this process. */
  readonly caller: string;
  readonly #token: string | undefined;
  readonly #timeoutMs: number;
  readonly #fetch: typeof globalThis.fetch;

  constructor(options: IdemClientOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.#token = options.token;
    this.#timeoutMs = options.timeoutMs ?? 30_000;
    this.#fetch = options.fetch ?? globalThis.fetch;
    this.caller = options.caller ?? defaultCaller();
  }

  /** `POST route` with a JSON body: the answer's JSON, or the problem thrown as its error. */
  async post<T>(route: string, body: unknown): Promise<T> {
    const headers: Record<string, string> = {
      "content-type": "application/json",
      accept: "application/json, application/problem+json",
    };
    if (this.#token !== undefined) headers.authorization = `Bearer ${this.#token}`;
    const url = this.baseUrl + route;
    let response: Response;
    let text: string;
    try {
      response = await this.#fetch(url, {
        method: "POST",
        headers,
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(this.#timeoutMs),
      });
      text = await response.text();
    } catch (e) {
      throw new TransportError(`POST ${url}: ${(e as Error).message}`, { cause: e });
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = undefined;
    }
    if (!response.ok) {
      const retryAfter = Number.parseInt(response.headers.get("retry-after") ?? "", 10);
      const problem: Problem = isObject(parsed)
        ? (parsed as Problem)
        : // Not idem's answer (a proxy in the way?): a problem all the same,
          // so callers handle one kind of error.
          { type: "about:blank", title: response.statusText, status: response.status, detail: text.slice(0, 500) };
      throw problemError(problem, Number.isNaN(retryAfter) ? undefined : retryAfter);
    }
    if (!isObject(parsed)) throw new TransportError(`POST ${url}: the answer is not a JSON object`);
    return parsed as T;
  }

  /** The operation's key, fingerprint and partition; stores nothing. */
  derive(operation: Operation): Promise<Derivation> {
    return this.post("/v1/derive", { operation });
  }

  /**
   * Claims the operation's key, or says what a duplicate gets; `run` is set as the operation's `run`.
   * `atomic: true` (a PostgreSQL store only) says the effect commits in the same transaction as its
   * end (`completeIn`): should the claim expire, the next duplicate knows nothing was done and
   * re-executes it instead of sending it to review. The claim is held under this client's `caller`.
   */
  begin(operation: Operation, run?: Run, options: BeginOptions = {}): Promise<BeginAnswer> {
    const withRun = run === undefined ? operation : { ...operation, run };
    const request: BeginRequest = { operation: withRun, caller: this.caller };
    if (options.atomic) request.atomic = true;
    return this.post("/v1/begin", request);
  }

  /** Records the outcome under `fence`. Sending the same end again is answered as the first. */
  complete(key: string, fence: number, options: CompleteOptions = {}): Promise<Finished> {
    return this.post("/v1/complete", { key, fence, status: options.status ?? 0, ...bodyMembers(options.body) });
  }

  /** Records a failure under `fence`: retryable (a later begin may re-execute) or permanent (replayed). */
  fail(key: string, fence: number, retryable: boolean, options: FailOptions = {}): Promise<Finished> {
    return this.post("/v1/fail", {
      key,
      fence,
      retryable,
      ...(options.status === undefined ? {} : { status: options.status }),
      ...(options.error === undefined ? {} : { error: options.error }),
      ...bodyMembers(options.body),
    });
  }

  /** Extends the claim's lease to the store's now plus `leaseMs` (pass back begin's `lease_ms`). */
  heartbeat(key: string, fence: number, leaseMs: number): Promise<Heartbeat> {
    return this.post("/v1/heartbeat", { key, fence, lease_ms: leaseMs });
  }

  /**
   * A person settles a record waiting for review, under the fence they saw; with `amend: true`,
   * amends a person's release or rejection that was wrong (`fence` is the one that resolution
   * wrote; the log keeps both decisions, and `NotAmendableError` says why one is refused).
   */
  resolve(key: string, fence: number, options: ResolveOptions): Promise<Resolved> {
    return this.post("/v1/resolve", {
      key,
      fence,
      resolution: options.resolution,
      reason: options.reason,
      by: options.by,
      ...(options.status === undefined ? {} : { status: options.status }),
      ...(options.amend ? { amend: true } : {}),
      ...bodyMembers(options.body),
    });
  }

  /** Why it ran twice, in this policy's namespace (what `idem report --json` prints). */
  report(filter: ReportRequest = {}): Promise<Report> {
    return this.post("/v1/report", filter);
  }

  /** Never the token. */
  toJSON(): { baseUrl: string; caller: string } {
    return { baseUrl: this.baseUrl, caller: this.caller };
  }
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
