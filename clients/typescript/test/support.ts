// The tests run against a real `idem serve` serving the billing-charge
// policy, named by IDEM_SERVE_URL (and IDEM_SERVE_TOKEN when it has one).
// Without it every test is skipped, saying so, except under CI=true, where a
// missing server fails them: CI must never pass on tests that did not run.
//
// IDEM_TEST_RUN prefixes every invoice id, so that a run against a store that
// holds an earlier run's records starts from fresh keys (default: random).
// The Rust suite (tests/suite/clients/mod.rs) sets it to find this run's records.

import { randomUUID } from "node:crypto";
import type { TestContext } from "node:test";

import { IdemClient, type Operation } from "../src/index.js";

export const URL = process.env.IDEM_SERVE_URL || undefined;
export const TOKEN = process.env.IDEM_SERVE_TOKEN || undefined;
const CI = ["true", "1"].includes(process.env.CI ?? "");
const RUN = process.env.IDEM_TEST_RUN || randomUUID().slice(0, 12);

/** `{ skip }` for a test: a reason when there is no server to run against (never under CI). */
export function needs(what: "server" | "token"): { skip: string | false } {
  if (CI) return { skip: false };
  if (URL === undefined) {
    return { skip: "IDEM_SERVE_URL is not set: start `idem serve --lease 3s …` and set IDEM_SERVE_URL (and IDEM_SERVE_TOKEN)" };
  }
  if (what === "token" && TOKEN === undefined) return { skip: "IDEM_SERVE_TOKEN is not set: start idem serve with a token" };
  return { skip: false };
}

/** Skips the running test, saying why, or fails it under CI. */
export function skipOrFail(t: TestContext, why: string): void {
  if (CI) throw new Error(`${why}, and CI=true: the test must run`);
  t.skip(why);
}

/** The server's URL; under CI a missing one fails the test. */
export function serverUrl(): string {
  if (URL === undefined) throw new Error("IDEM_SERVE_URL is not set, and CI=true: the test must run");
  return URL;
}

export function client(): IdemClient {
  return new IdemClient({ baseUrl: serverUrl(), token: TOKEN });
}

/** A billing charge of its own invoice: this run's prefix and `name`. */
export function op(name: string, amount = "100"): Operation {
  return {
    kind: "charge",
    tenant: "acme",
    fields: {
      customer: "c-ts",
      billing_period: "2026-11",
      invoice_id: `${RUN}-${name}`,
      amount,
      currency: "EUR",
    },
  };
}

/** Narrows a begin answer to the kind expected, or fails showing what came. */
export function expectAnswer<A extends { answer: string }, K extends A["answer"]>(
  answer: A,
  kind: K,
): Extract<A, { answer: K }> {
  if (answer.answer !== kind) throw new Error(`expected ${kind}, got ${JSON.stringify(answer)}`);
  return answer as Extract<A, { answer: K }>;
}
