// The completion inside the caller's own PostgreSQL transaction
// (`completeIn`, `completedUnder`), against a real server whose store is
// PostgreSQL and the same database (IDEM_TEST_POSTGRES_URL, the store's
// schema in IDEM_TEST_POSTGRES_SCHEMA): a business row and the completion
// commit together; a deposed holder's completion throws FencedError and its
// row rolls back; a completed record is never overwritten.

import assert from "node:assert/strict";
import { test, type TestContext } from "node:test";

import pg from "pg";

import { completedUnder, completeIn, FencedError, logRefusal } from "../src/index.js";
import { client, expectAnswer, needs, op, skipOrFail } from "./support.js";

const PG_URL = process.env.IDEM_TEST_POSTGRES_URL || undefined;
const SCHEMA = process.env.IDEM_TEST_POSTGRES_SCHEMA || "idem";
const options = { schema: SCHEMA };

/** A connection to the store's database and a business table beside idem's; undefined when skipped. */
async function connect(t: TestContext): Promise<{ db: pg.Client; ledger: string } | undefined> {
  if (PG_URL === undefined) {
    skipOrFail(t, "IDEM_TEST_POSTGRES_URL is not set: start `idem serve` on a PostgreSQL store and set it (and IDEM_TEST_POSTGRES_SCHEMA)");
    return undefined;
  }
  const db = new pg.Client({ connectionString: PG_URL });
  await db.connect();
  t.after(() => db.end());
  const ledger = `${db.escapeIdentifier(SCHEMA)}.ledger_ts`;
  await db.query(`CREATE TABLE IF NOT EXISTS ${ledger} (invoice text, fence bigint)`);
  return { db, ledger };
}

async function rows(db: pg.Client, ledger: string, invoice: string): Promise<number> {
  const result = await db.query<{ n: string }>(`SELECT count(*) AS n FROM ${ledger} WHERE invoice = $1`, [invoice]);
  return Number(result.rows[0]?.n);
}

/** BEGIN, the row, the completion, COMMIT; ROLLBACK and rethrow on an error. */
async function charge(db: pg.Client, ledger: string, invoice: string, claim: { namespace: string; key: string; fence: number }, body: string | Uint8Array): Promise<void> {
  await db.query("BEGIN");
  try {
    await db.query(`INSERT INTO ${ledger} (invoice, fence) VALUES ($1, $2)`, [invoice, claim.fence]);
    await completeIn(db, claim, { body }, options);
    await db.query("COMMIT");
  } catch (e) {
    await db.query("ROLLBACK");
    throw e;
  }
}

test("the business row and the completion commit together", needs("server"), async (t) => {
  const conn = await connect(t);
  if (conn === undefined) return;
  const { db, ledger } = conn;
  const idem = client();
  const operation = op("pg-commit");
  const invoice = String(operation.fields?.invoice_id);
  const begun = expectAnswer(await idem.begin(operation, undefined, { atomic: true }), "execute");
  await charge(db, ledger, invoice, begun, "charged in the ledger");
  assert.equal(await rows(db, ledger, invoice), 1);
  const replay = expectAnswer(await idem.begin(operation), "replay");
  assert.equal(replay.fence, begun.fence);
  assert.equal(replay.outcome.body, "charged in the ledger");
  // The read-back after a lost COMMIT answer: this completion, and no other.
  assert.equal(await completedUnder(db, begun, { body: "charged in the ledger" }, options), true);
  assert.equal(await completedUnder(db, begun, { body: "something else" }, options), false);
});

test("a deposed holder gets FencedError and its row rolls back", needs("server"), async (t) => {
  const conn = await connect(t);
  if (conn === undefined) return;
  const { db, ledger } = conn;
  const idem = client();
  const operation = op("pg-deposed");
  const invoice = String(operation.fields?.invoice_id);
  const old = expectAnswer(await idem.begin(operation), "execute");
  // Another holder takes the key over under a higher fence (the old one
  // recorded a retryable failure; the policy re-executes it).
  await idem.fail(old.key, old.fence, true, { error: "timed out" });
  const now = expectAnswer(await idem.begin(operation), "execute");
  assert.ok(now.fence > old.fence);

  const refused = await charge(db, ledger, invoice, old, "charged").then(
    () => assert.fail("the deposed holder's completion was accepted"),
    (e: unknown) => e,
  );
  assert.ok(refused instanceof FencedError, String(refused));
  assert.equal(refused.reason, "fenced");
  assert.equal(refused.key, old.key);
  assert.equal(refused.fence, old.fence);
  assert.ok(refused.message.includes(`fence ${now.fence}`), refused.message);
  assert.equal(await rows(db, ledger, invoice), 0, "the deposed holder's row committed");
  // The refused write in the attempt log, once.
  assert.equal(await logRefusal(db, refused, options), true);
  assert.equal(await logRefusal(db, refused, options), false);

  await charge(db, ledger, invoice, now, "charged");
  assert.equal(await rows(db, ledger, invoice), 1);
  assert.equal(await completedUnder(db, now, { body: "charged" }, options), true);
  assert.equal(await completedUnder(db, old, { body: "charged" }, options), false);
});

test("a completed record is never overwritten", needs("server"), async (t) => {
  const conn = await connect(t);
  if (conn === undefined) return;
  const { db, ledger } = conn;
  const idem = client();
  const operation = op("pg-final");
  const invoice = String(operation.fields?.invoice_id);
  const begun = expectAnswer(await idem.begin(operation), "execute");
  await charge(db, ledger, invoice, begun, new Uint8Array([0xff, 0, 1]));
  // The same holder completing again (a retried transaction) is refused.
  const refused = await charge(db, ledger, invoice, begun, "second").then(
    () => assert.fail("a completed record was completed again"),
    (e: unknown) => e,
  );
  assert.ok(refused instanceof FencedError, String(refused));
  assert.equal(refused.reason, "final");
  assert.equal(await rows(db, ledger, invoice), 1);
  const replay = expectAnswer(await idem.begin(operation), "replay");
  assert.equal(replay.outcome.body_base64, Buffer.from([0xff, 0, 1]).toString("base64"));
});

test("a key never claimed is gone", needs("server"), async (t) => {
  const conn = await connect(t);
  if (conn === undefined) return;
  const { db, ledger } = conn;
  const derived = await client().derive(op("pg-never-begun"));
  const claim = { namespace: derived.namespace, key: derived.key, fence: 1 };
  const refused = await charge(db, ledger, "never", claim, "charged").then(
    () => assert.fail("a key never claimed was completed"),
    (e: unknown) => e,
  );
  assert.ok(refused instanceof FencedError, String(refused));
  assert.equal(refused.reason, "gone");
});
