// The routes, one method each, and the problems as typed errors.

import assert from "node:assert/strict";
import { hostname } from "node:os";
import { test } from "node:test";

import {
  BadRequestError,
  ConflictError,
  IdemClient,
  NotAmendableError,
  NotInProgressError,
  PolicyRefusedError,
  StaleFenceError,
  TransportError,
  UnauthorizedError,
  UnknownKeyError,
} from "../src/index.js";
import { client, expectAnswer, needs, op, serverUrl, TOKEN } from "./support.js";

test("derive names the key and stores nothing", needs("server"), async () => {
  const idem = client();
  const derived = await idem.derive(op("derive"));
  assert.equal(derived.namespace, "billing");
  assert.match(derived.key, /^[0-9a-f]{64}$/);
  assert.equal(derived.partition, "c-ts");
  assert.ok(derived.policy.startsWith("sha256:"));
  // Nothing was stored: the first begin still executes, under that key.
  const begun = expectAnswer(await idem.begin(op("derive")), "execute");
  assert.equal(begun.key, derived.key);
  assert.equal(begun.attempt, 1);
  assert.equal(begun.take_over, false);
});

test("begin, complete, then begin replays", needs("server"), async () => {
  const idem = client();
  const begun = expectAnswer(await idem.begin(op("flow")), "execute");
  // While it runs, a duplicate is told to wait.
  const busy = expectAnswer(await idem.begin(op("flow")), "in-progress");
  assert.ok((busy.retry_after_ms ?? 0) > 0, JSON.stringify(busy));
  const beat = await idem.heartbeat(begun.key, begun.fence, begun.lease_ms);
  assert.ok(beat.lease_until_ms >= begun.lease_until_ms);
  const done = await idem.complete(begun.key, begun.fence, { body: "receipt 1" });
  assert.deepEqual(done, { key: begun.key, fence: begun.fence, state: "completed" });
  // The same end again (its answer lost) is answered as the first was.
  assert.deepEqual(await idem.complete(begun.key, begun.fence, { body: "receipt 1" }), done);
  const replay = expectAnswer(await idem.begin(op("flow")), "replay");
  assert.equal(replay.state, "completed");
  assert.equal(replay.outcome.status, 0);
  assert.equal(replay.outcome.body, "receipt 1");
  // Another end under that fence is refused, typed, with what is stored.
  const refused = await idem.complete(begun.key, begun.fence, { body: "receipt 2" }).catch((e: unknown) => e);
  assert.ok(refused instanceof NotInProgressError, String(refused));
  assert.ok(refused instanceof ConflictError);
  assert.equal(refused.status, 409);
  assert.equal(refused.state, "completed");
  // The same invoice for another amount: the key was used for another operation.
  expectAnswer(await idem.begin(op("flow", "250")), "conflict");
});

test("bytes are stored as bytes", needs("server"), async () => {
  const idem = client();
  const begun = expectAnswer(await idem.begin(op("bytes")), "execute");
  await idem.complete(begun.key, begun.fence, { status: 7, body: new Uint8Array([0xff, 0, 0x72]) });
  const replay = expectAnswer(await idem.begin(op("bytes")), "replay");
  assert.equal(replay.outcome.body, undefined);
  assert.deepEqual([...Buffer.from(replay.outcome.body_base64 ?? "", "base64")], [0xff, 0, 0x72]);
  assert.equal(replay.outcome.status, 7);
});

test("a stale fence is refused, typed", needs("server"), async () => {
  const idem = client();
  const first = expectAnswer(await idem.begin(op("stale")), "execute");
  const failed = await idem.fail(first.key, first.fence, true, { error: "provider timeout" });
  assert.equal(failed.state, "failed-retryable");
  const second = expectAnswer(await idem.begin(op("stale")), "execute");
  assert.ok(second.fence > first.fence);
  assert.equal(second.take_over, true);
  assert.equal(second.attempt, 2);
  // The first holder comes back late: its fence no longer writes.
  const stale = await idem.complete(first.key, first.fence, { body: "late" }).catch((e: unknown) => e);
  assert.ok(stale instanceof StaleFenceError, String(stale));
  assert.equal(stale.status, 409);
  assert.equal(stale.slug, "stale-fence");
  assert.equal(stale.fence, first.fence);
  assert.equal(stale.currentFence, second.fence);
  assert.ok(stale.detail.includes(`fence ${first.fence}`), stale.detail);
  assert.ok(stale.title.length > 0);
  await assert.rejects(idem.heartbeat(first.key, first.fence, first.lease_ms), StaleFenceError);
  // The current holder's completion stands.
  assert.equal((await idem.complete(second.key, second.fence, { body: "ok" })).state, "completed");
});

test("a permanent failure is replayed", needs("server"), async () => {
  const idem = client();
  const begun = expectAnswer(await idem.begin(op("declined")), "execute");
  const done = await idem.fail(begun.key, begun.fence, false, { status: 2, error: "card declined" });
  assert.equal(done.state, "failed-permanent");
  const replay = expectAnswer(await idem.begin(op("declined")), "replay");
  assert.equal(replay.state, "failed-permanent");
  assert.equal(replay.outcome.status, 2);
  assert.equal(replay.outcome.error, "card declined");
});

test("amending a holder's own end is refused, typed", needs("server"), async () => {
  const idem = client();
  const begun = expectAnswer(await idem.begin(op("amend-declined")), "execute");
  const done = await idem.fail(begun.key, begun.fence, false, { status: 2, error: "card declined" });
  const refused = await idem
    .resolve(begun.key, done.fence, { resolution: "completed", reason: "charged after all", by: "ops", amend: true })
    .catch((e: unknown) => e);
  assert.ok(refused instanceof NotAmendableError, String(refused));
  assert.equal(refused.status, 409);
  assert.equal(refused.state, "failed-permanent");
  assert.match(refused.detail, /a holder's end wrote it/);
});

test("the token is required", needs("token"), async () => {
  if (TOKEN === undefined) throw new Error("IDEM_SERVE_TOKEN is not set, and CI=true: the test must run");
  for (const token of [undefined, `not-${TOKEN}`]) {
    const refused = await new IdemClient({ baseUrl: serverUrl(), token })
      .derive(op("token"))
      .catch((e: unknown) => e);
    assert.ok(refused instanceof UnauthorizedError, String(refused));
    assert.equal(refused.status, 401);
    assert.equal(refused.slug, "unauthorized");
    assert.ok(refused.detail.length > 0);
  }
  // The token is never shown.
  const idem = new IdemClient({ baseUrl: serverUrl(), token: TOKEN });
  assert.ok(!JSON.stringify(idem).includes(TOKEN));
});

test("a policy refusal is typed", needs("server"), async () => {
  const idem = client();
  const refused = await idem.begin({ ...op("refund"), kind: "refund" }).catch((e: unknown) => e);
  assert.ok(refused instanceof PolicyRefusedError, String(refused));
  assert.equal(refused.status, 422);
  assert.equal(refused.code, "unsupported-kind");
  const noCurrency = op("no-currency");
  delete noCurrency.fields?.currency;
  const missing = await idem.derive(noCurrency).catch((e: unknown) => e);
  assert.ok(missing instanceof PolicyRefusedError, String(missing));
  assert.equal(missing.code, "missing-field");
  assert.equal(missing.field, "currency");
});

test("other problems are typed", needs("server"), async () => {
  const idem = client();
  const unknown = "0".repeat(64);
  const missing = await idem.complete(unknown, 1, { body: "x" }).catch((e: unknown) => e);
  assert.ok(missing instanceof UnknownKeyError, String(missing));
  assert.equal(missing.status, 404);
  assert.equal(missing.key, unknown);
  const bad = await idem.heartbeat("not-a-key", 1, 3000).catch((e: unknown) => e);
  assert.ok(bad instanceof BadRequestError, String(bad));
  assert.equal(bad.status, 400);
  assert.equal(bad.member, "key");
});

test("an unreachable server is a transport error", async () => {
  // Port 9 (discard) on loopback: nothing listens there on a test machine.
  const nowhere = new IdemClient({ baseUrl: "http://127.0.0.1:9", timeoutMs: 5_000 });
  await assert.rejects(nowhere.derive(op("nowhere")), TransportError);
});

test("the report sees the replay", needs("server"), async () => {
  const idem = client();
  const begun = expectAnswer(await idem.begin(op("report")), "execute");
  await idem.complete(begun.key, begun.fence, { body: "r" });
  expectAnswer(await idem.begin(op("report")), "replay");
  const report = await idem.report({ key: begun.key });
  assert.equal(report.namespace, "billing");
  assert.equal(report.keys, 1);
  assert.ok(report.entries >= 3, JSON.stringify(report)); // executed, completed, replayed
});

test("begin names its caller, and the report shows it", needs("server"), async () => {
  const named = new IdemClient({ baseUrl: serverUrl(), token: TOKEN, caller: "ts-billing@ci:7" });
  const begun = expectAnswer(await named.begin(op("named")), "execute");
  await named.complete(begun.key, begun.fence, { body: "r" });
  expectAnswer(await named.begin(op("named")), "replay");
  const report = await named.report({ key: begun.key });
  const [dup] = report.duplicates;
  assert.equal(dup?.cause, "client-retry", JSON.stringify(report));
  assert.deepEqual(dup?.runs, ["ts-billing@ci:7"]);
  assert.ok(dup?.explanation.includes("ts-billing@ci:7 asked again"), dup?.explanation);
});

test("the default caller is service@host:pid, bounded", () => {
  const caller = new IdemClient({ baseUrl: "http://127.0.0.1:9" }).caller;
  if (!process.env.IDEM_CALLER) assert.ok(caller.endsWith(`@${hostname()}:${process.pid}`), caller);
  assert.ok(Buffer.byteLength(caller, "utf8") <= 128, caller);
});

test("a caller name with a control character is refused", needs("server"), async () => {
  const bad = new IdemClient({ baseUrl: serverUrl(), token: TOKEN, caller: "evil\u001b[2J" });
  const refused = await bad.begin(op("bad-caller")).then(
    () => assert.fail("a control character was accepted"),
    (e: unknown) => e,
  );
  assert.ok(refused instanceof BadRequestError, String(refused));
  assert.equal(refused.member, "caller");
});
