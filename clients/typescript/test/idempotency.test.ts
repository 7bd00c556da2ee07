// withIdempotency: a function runs at most once per operation, its result is
// stored and replayed, a failure is recorded, a long function keeps its claim.

import assert from "node:assert/strict";
import { test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";

import {
  FailedPermanentlyError,
  InProgressError,
  OperationConflictError,
  PermanentError,
  PolicyRefusedError,
  withIdempotency,
  type BeginAnswer,
  type Execute,
} from "../src/index.js";
import { client, expectAnswer, needs, op, skipOrFail } from "./support.js";

test("the first call executes and a second replays", needs("server"), async () => {
  const idem = client();
  let ran = 0;
  const charge = (claim: Execute) => {
    ran += 1;
    return { receipt: `r-${claim.attempt}`, amount: 100, at: new Date(Date.UTC(2026, 10, 30)) };
  };
  const first = await withIdempotency(idem, op("once"), charge);
  const second = await withIdempotency(idem, op("once"), charge);
  assert.equal(ran, 1);
  assert.equal(first.receipt, "r-1");
  // JSON: the Date comes back as its ISO string, everything else equal.
  assert.deepEqual(second, { receipt: "r-1", amount: 100, at: "2026-11-30T00:00:00.000Z" });
  // What was stored is the result as JSON text, with status 0.
  const replay = expectAnswer(await idem.begin(op("once")), "replay");
  assert.equal(replay.outcome.status, 0);
  assert.equal(replay.outcome.body, '{"receipt":"r-1","amount":100,"at":"2026-11-30T00:00:00.000Z"}');
});

test("the claim's key and fence reach the function", needs("server"), async () => {
  const idem = client();
  const derived = await idem.derive(op("claim"));
  const seen = await withIdempotency(idem, op("claim"), (claim) => ({ key: claim.key, fence: claim.fence }));
  assert.equal(seen.key, derived.key);
  assert.ok(seen.fence > 0);
  // Another amount for the same invoice is refused, without running.
  let ran = 0;
  await assert.rejects(
    withIdempotency(idem, op("claim", "250"), () => (ran += 1)),
    OperationConflictError,
  );
  assert.equal(ran, 0);
});

test("an error fails the record and a later call executes again", needs("server"), async () => {
  const idem = client();
  let ran = 0;
  const flaky = (claim: Execute) => {
    ran += 1;
    if (ran === 1) throw new Error("the provider timed out");
    assert.equal(claim.take_over, true);
    assert.equal(claim.attempt, 2);
    return "charged";
  };
  await assert.rejects(withIdempotency(idem, op("flaky"), flaky), /the provider timed out/);
  assert.equal(await withIdempotency(idem, op("flaky"), flaky), "charged");
  assert.equal(await withIdempotency(idem, op("flaky"), flaky), "charged");
  assert.equal(ran, 2);
});

test("a permanent error is replayed without running", needs("server"), async () => {
  const idem = client();
  let ran = 0;
  const declined = () => {
    ran += 1;
    throw new PermanentError("card declined");
  };
  await assert.rejects(withIdempotency(idem, op("declined-fn"), declined), PermanentError);
  const replayed = await withIdempotency(idem, op("declined-fn"), declined).catch((e: unknown) => e);
  assert.ok(replayed instanceof FailedPermanentlyError, String(replayed));
  assert.equal(replayed.outcome.error, "PermanentError: card declined");
  assert.equal(ran, 1);
  // isPermanent decides for other errors.
  class Declined extends Error {}
  const options = { isPermanent: (e: unknown) => e instanceof Declined };
  await assert.rejects(
    withIdempotency(idem, op("declined-opt"), () => Promise.reject(new Declined("no")), options),
    Declined,
  );
  await assert.rejects(withIdempotency(idem, op("declined-opt"), () => "ran", options), FailedPermanentlyError);
});

test("a policy refusal runs nothing", needs("server"), async () => {
  let ran = 0;
  await assert.rejects(
    withIdempotency(client(), { ...op("refused"), kind: "refund" }, () => (ran += 1)),
    (e: unknown) => e instanceof PolicyRefusedError && e.code === "unsupported-kind",
  );
  assert.equal(ran, 0);
});

test("heartbeats keep a function longer than its lease", needs("server"), async (t) => {
  const idem = client();
  const leaseMs = (await idem.derive(op("long"))).lease_ms;
  if (leaseMs > 10_000) {
    skipOrFail(t, `the lease is ${leaseMs} ms: start idem serve with \`--lease 3s\``);
    return;
  }
  let probe: BeginAnswer | undefined;
  const fence = await withIdempotency(idem, op("long"), async (claim) => {
    // Past the lease: without a heartbeat the claim would have lapsed, and
    // this begin would send the record to review (`rejected`).
    await sleep(leaseMs * 1.5);
    probe = await idem.begin(op("long"));
    return claim.fence;
  });
  assert.equal(probe?.answer, "in-progress", JSON.stringify(probe));
  // The completion under the fence was accepted: the record replays.
  const replay = expectAnswer(await idem.begin(op("long")), "replay");
  assert.equal(replay.fence, fence);
  assert.equal(replay.outcome.body, String(fence));
});

test("in-progress waits up to its bound", needs("server"), async () => {
  const idem = client();
  const held = expectAnswer(await idem.begin(op("held")), "execute");
  let ran = 0;
  const busy = await withIdempotency(idem, op("held"), () => (ran += 1), { maxWaitMs: 0 }).catch((e: unknown) => e);
  assert.ok(busy instanceof InProgressError, String(busy));
  assert.equal(busy.key, held.key);
  assert.ok((busy.retryAfterMs ?? 0) > 0);
  // Once the holder completes, a waiting call replays its result.
  await idem.complete(held.key, held.fence, { body: '"by the holder"' });
  assert.equal(await withIdempotency(idem, op("held"), () => "ran", { maxWaitMs: 0 }), "by the holder");
  assert.equal(ran, 0);
});

test("two concurrent calls, one execution", needs("server"), async () => {
  const idem = client();
  let ran = 0;
  const charge = async () => {
    ran += 1;
    const n = ran;
    // Long enough for the other call to find the claim held, which is what
    // it must wait out; not what the assertions rest on.
    await sleep(500);
    return `charged ${n}`;
  };
  const results = await Promise.all([
    withIdempotency(idem, op("race"), charge, { pollIntervalMs: 100 }),
    withIdempotency(idem, op("race"), charge, { pollIntervalMs: 100 }),
  ]);
  assert.deepEqual(results, ["charged 1", "charged 1"]);
  assert.equal(ran, 1);
});
