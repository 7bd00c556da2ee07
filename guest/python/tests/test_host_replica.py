"""The runner's replica of the host: operation canonicalisation
(operation.rs tests), key encoding (digest.rs golden vector), derivation
checks (derivation.rs) and the decision gate (duplicate.rs's safety table)."""

import unittest

import _paths  # noqa: F401
from idem_policy import Decision, Derivation, DuplicateContext, Operation, RecordState
from idem_policy._host import gate, json_source, keys
from idem_policy._host.operation_json import OpError, operation_from_value

SEED_OP = (
    '{"kind":"charge","tenant":"acme","fields":{"customer":"c1","billing_period":"2026-11",'
    '"invoice_id":"i1","amount":"100","currency":"EUR"},'
    '"run":{"run_id":"nightly-2026-11-30","trigger":"scheduled","attempt":1}}'
)


def parse(text):
    return operation_from_value(json_source.loads(text))


class OperationJson(unittest.TestCase):
    def test_reads_the_documented_example(self):
        op, now = parse(SEED_OP)
        self.assertEqual(op.kind, "charge")
        self.assertEqual(len(op.fields), 5)
        self.assertEqual(op.run.trigger.value, "scheduled")
        self.assertEqual(op.fields[0].name, "amount")
        self.assertIsNone(now)

    def test_one_logical_operation_is_one_value(self):
        a, _ = parse('{"kind":"charge","tenant":"acme","fields":{"b":1.50,"a":"e\\u0301"}}')
        b, _ = parse('{ "fields": {"a":"é", "b":15e-1}, "tenant":"acme", "kind":"charge" }')
        self.assertEqual(a, b)
        self.assertEqual([(f.name, f.value.value) for f in a.fields], [("a", "é"), ("b", "1.5")])

    def test_refusals(self):
        for doc, needle in [
            ('{"kind":"k","tenant":"t","color":"red"}', "unknown field `color`"),
            ('{"kind":"k","tenant":"t","run":{"run_id":"r","trigger":"manual","x":1}}', "unknown field `x`"),
            ('{"kind":"k","tenant":"t","fields":{"a":1,"a":2}}', "field `a` appears twice"),
            ('{"kind":"k","tenant":"t","fields":{"é":1,"e\\u0301":2}}', "NFC"),
            ('{"kind":"k","kind":"j","tenant":"t"}', "duplicate field `kind`"),
            ('{"kind":"k","tenant":"t","fields":{"a":null}}', "field `a` is null"),
            ('{"kind":"k","tenant":"t","fields":{"a":[1]}}', "field `a` is an array"),
            ('{"kind":"k","tenant":"t","fields":{"a":{}}}', "field `a` is an object"),
            ('{"kind":"k","tenant":"t","fields":{"a":1e999}}', "send it as a string"),
            ('{"kind":"","tenant":"t"}', "`kind`: must not be empty"),
            ('{"kind":"k\\u0007","tenant":"t"}', "control characters"),
            ('{"kind":"k","tenant":"t","run":{"run_id":"r","trigger":"cron"}}', "unknown variant `cron`"),
            ('{"kind":"k","tenant":"t","run":{"run_id":"r","trigger":"retry","attempt":0}}', "starts at 1"),
            ('{"kind":"k"}', "missing field `tenant`"),
            ('{"kind":"k","tenant":"t","now_ms":1.0}', "expected u64"),
            ('{"kind":"k","tenant":"t","now_ms":-1}', "expected u64"),
            ("[]", "must be a JSON object"),
        ]:
            with self.assertRaises(OpError, msg=doc) as cm:
                parse(doc)
            self.assertIn(needle, str(cm.exception), doc)

    def test_json_the_host_refuses(self):
        for doc in ('{"kind":"k","tenant":"\\ud800"}', '{"kind":"k","tenant":"t","fields":{"a":NaN}}', '{"kind":"k","tenant":"t"'):
            with self.assertRaises(json_source.JsonError, msg=doc):
                json_source.loads(doc)

    def test_oversized_documents(self):
        big = '{"kind":"k","tenant":"t","fields":{"a":"%s"}}' % ("x" * 65536)
        with self.assertRaises(OpError) as cm:
            parse(big)
        self.assertIn("the limit is 65536 bytes", str(cm.exception))

    def test_compact_length_counts_escapes_and_utf8(self):
        value = json_source.loads('{"a" : ["é\\n", 1.50e2, true, null]}')
        self.assertEqual(json_source.compact_len(value), len('{"a":["é\\n",1.50e2,true,null]}'.encode()))


class Keys(unittest.TestCase):
    def test_golden_vector(self):
        # digest.rs: pinned, computed independently with hashlib.
        self.assertEqual(
            keys.digest("key", "billing", [("customer", "c1"), ("invoice_id", "i1")]),
            "e769850ffcf82c59c0e32bab9ea257cbd9e491e2c2ef1ab972dbe45f4fab2961",
        )

    def test_length_prefixes_keep_boundaries_and_domains_separate(self):
        d = keys.digest
        self.assertNotEqual(d("key", "ns", [("a", "bc")]), d("key", "ns", [("ab", "c")]))
        self.assertNotEqual(d("key", "ns", [("a", "b"), ("c", "d")]), d("key", "ns", [("a", "b\0\0\0\x01c"), ("", "d")]))
        self.assertNotEqual(d("key", "ns", [("x", "1")]), d("fingerprint", "ns", [("x", "1")]))
        self.assertNotEqual(d("key", "ns", [("x", "1")]), d("key", "ns2", [("x", "1")]))

    def sample(self):
        return Derivation("c1").key("customer", "c1").key("invoice_id", "i1").fingerprint("amount", "100").retention_s(3600).lease_s(60)

    def test_refuses_malformed_derivations(self):
        def mutate(f):
            d = self.sample()
            f(d)
            return d

        for d, needle in [
            (mutate(lambda d: d.key_parts.clear()), "key has no parts"),
            (mutate(lambda d: d.key("customer", "x")), "appears twice"),
            (mutate(lambda d: d.key_parts.insert(0, type(d.key_parts[0])("", "x"))), "part 0 has a name of 0 bytes"),
            (mutate(lambda d: setattr(d, "partition", "")), "partition"),
            (mutate(lambda d: d.lease_s(0)), "lease_s"),
            (mutate(lambda d: d.retention_s(0)), "retention_s"),
            (mutate(lambda d: d.retention_s(10)), "shorter than lease_s"),
            (mutate(lambda d: d.fingerprint("blob", "x" * 9000)), "material is"),
        ]:
            with self.assertRaises(keys.Malformed, msg=needle) as cm:
                keys.finish(d, "billing")
            self.assertIn(needle, str(cm.exception))
        many = Derivation("p")
        for i in range(33):
            many.key(f"p{i}", "v")
        with self.assertRaisesRegex(keys.Malformed, "33 parts"):
            keys.finish(many, "billing")

    def test_policy_info_needs_semver(self):
        self.assertTrue(keys._is_semver("1.0.0") and keys._is_semver("1.0.0-rc.1"))
        for bad in ["1.0", "v1.0.0", "01.0.0", ""]:
            self.assertFalse(keys._is_semver(bad), bad)


class Gate(unittest.TestCase):
    def test_the_safety_table(self):
        S = RecordState
        for state in S:
            for fp in (True, False):
                for lease in (0, 5000):
                    c = DuplicateContext(Operation("k", "t"), state, fp, 1, 10, lease if state is S.IN_PROGRESS else 0)
                    expired = state is S.IN_PROGRESS and c.lease_remaining_ms == 0
                    live = state is S.IN_PROGRESS and not expired

                    def ok(d):
                        try:
                            gate.check_decision(c, d)
                            return True
                        except gate.UnsafeDecision:
                            return False

                    final = state in (S.COMPLETED, S.FAILED_PERMANENT)
                    self.assertEqual(ok(Decision.replay()), final and fp)
                    self.assertEqual(ok(Decision.re_execute()), fp and (state in (S.FAILED_RETRYABLE, S.OUTCOME_UNKNOWN) or expired))
                    self.assertEqual(ok(Decision.wait(100)), live)
                    self.assertEqual(ok(Decision.mark_unknown(409, "no")), expired)
                    self.assertTrue(ok(Decision.reject(409, "no")))

    def test_a_completed_record_is_never_re_executed(self):
        c = DuplicateContext(Operation("k", "t"), RecordState.COMPLETED, True, 1, 10, 0)
        with self.assertRaises(gate.UnsafeDecision) as cm:
            gate.check_decision(c, Decision.re_execute())
        self.assertEqual(
            str(cm.exception),
            "policy decided `re-execute` for a completed record: a final record is never executed again",
        )


if __name__ == "__main__":
    unittest.main()
