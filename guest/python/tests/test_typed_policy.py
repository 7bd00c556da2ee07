"""The typed refund policy (policies/refunds/app.py, checked by
``mypy --strict``) answers the refund cases the TypeScript one answers
(guest/testdata/refund-cases.json): the same keys, fingerprints and
decisions from both SDKs."""

import unittest

import _paths
from idem_policy._host import cases_file
from idem_policy.cases import load_policy, run_cases

REFUNDS = _paths.PYTHON / "policies" / "refunds"
CASES = _paths.REPO / "guest" / "testdata" / "refund-cases.json"


class TypedRefundPolicy(unittest.TestCase):
    def test_passes_the_shared_refund_cases(self):
        policy = load_policy(REFUNDS / "app.py")
        report = run_cases(policy, cases_file.parse(CASES.read_text(encoding="utf-8")))
        self.assertGreater(len(report.results), 0)
        failures = [f"{r.name}: {r.detail}" for r in report.results if not r.passed]
        self.assertEqual(failures, [])
        # The first case pins the key and fingerprint as hex: a port that
        # derived other parts would fail it, not merely relate differently.
        self.assertEqual(report.results[0].name, "first refund")


if __name__ == "__main__":
    unittest.main()
