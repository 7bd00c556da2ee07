"""The three Python ports against the Rust policies' own cases files, through
the native runner (and, when the components are built and the PyPI
``wasmtime`` package is importable, against the built ``.wasm`` too), plus
the runner's own semantics (testing.rs's test of a fragile policy)."""

import io
import json
import os
import unittest
from contextlib import redirect_stdout
from pathlib import Path

import _paths
from idem_policy import Decision, Derivation, Policy, PolicyInfo
from idem_policy._host import cases_file
from idem_policy.cases import load_policy, main, run_cases

# Where `idem build … --out DIR` put the components (see guest/python/README.md).
COMPONENTS = Path(os.environ.get("IDEM_PY_COMPONENTS", "/var/tmp/idem-python-build"))


def report_of(policy_class, path):
    return run_cases(policy_class, cases_file.parse(Path(path).read_text(encoding="utf-8")))


class RustCasesNatively(unittest.TestCase):
    def test_each_port_passes_the_rust_cases(self):
        for name in _paths.POLICIES:
            with self.subTest(policy=name):
                report = report_of(load_policy(_paths.python_policy(name)), _paths.rust_cases(name))
                failures = [f"{r.name}: {r.detail}" for r in report.results if not r.passed]
                self.assertEqual(failures, [])
                self.assertGreater(len(report.results), 10)

    def test_the_command_line(self):
        out = io.StringIO()
        with redirect_stdout(out):
            rc = main([str(_paths.python_policy("billing-charge")), str(_paths.rust_cases("billing-charge"))])
        self.assertEqual(rc, 0)
        self.assertEqual(out.getvalue().splitlines()[-1], "17 passed, 0 failed")

    def test_the_wrong_policy_is_one_failed_describe(self):
        report = report_of(load_policy(_paths.python_policy("provider-charge")), _paths.rust_cases("billing-charge"))
        self.assertEqual([(r.name, r.passed) for r in report.results], [("describe", False)])


class Fragile(Policy):
    """Raises on the invoice `boom`; keys by invoice otherwise."""

    def describe(self):
        return PolicyInfo("fragile", "1.0.0", "fragile", "raises on one invoice")

    def derive(self, op):
        invoice = op.text("invoice")
        assert invoice != "boom", "invoice boom is not supported"
        return Derivation(invoice).key("invoice", invoice)

    def on_duplicate(self, ctx):
        raise RuntimeError("no duplicates here")


class RunnerSemantics(unittest.TestCase):
    @staticmethod
    def op(invoice):
        return {"kind": "charge", "tenant": "t", "fields": {"invoice": invoice}}

    def run_file(self, cases):
        # A Python dict cannot hold a repeated name: splice that op in as text.
        text = json.dumps({"cases": cases}).replace(
            '"DUPLICATE"', '{"kind": "k", "tenant": "t", "fields": {"a": 1, "a": 2}}'
        )
        return run_cases(Fragile, cases_file.parse(text))

    def test_a_raise_or_a_wrong_expectation_fails_one_case_only(self):
        report = self.run_file([
            {"name": "wrong expected key", "op": self.op("a"), "expect": {"key": "00" * 32}},
            {"name": "same as the wrong one", "op": self.op("a"), "expect": {"same_key_as": "wrong expected key"}},
            {"name": "panics", "op": self.op("boom"), "expect": {"partition": "boom"}},
            {"name": "after the panic", "op": self.op("b"), "expect": {"partition": "b"}},
            {"name": "compares with the panic", "op": self.op("b"), "expect": {"same_key_as": "panics"}},
            {"name": "duplicate panics", "op": self.op("c"),
             "duplicate": {"state": "completed", "fingerprint_matches": True}, "expect": {"decision": "replay"}},
        ])
        self.assertEqual(
            [(r.name, r.passed) for r in report.results],
            [("wrong expected key", False), ("same as the wrong one", True), ("panics", False),
             ("after the panic", True), ("compares with the panic", False), ("duplicate panics", False)],
        )
        detail = [r.detail for r in report.results]
        self.assertIn("raised in derive", detail[2])
        self.assertIn("boom is not supported", detail[2])
        # The policy's own file and line, as the host names them.
        self.assertRegex(detail[2], r" at \w+ \(test_policies\.py:\d+\)")
        self.assertIn("failed without deriving a key", detail[4])
        self.assertIn("raised in on-duplicate", detail[5])

    def test_expectations_that_check_nothing_or_name_nothing(self):
        report = self.run_file([
            {"name": "nothing", "op": self.op("a"), "expect": {"field": "x"}},
            {"name": "bad op", "op": "DUPLICATE", "expect": {"partition": "a"}},
            {"name": "unknown code", "op": self.op("a"), "expect": {"error": "nope"}},
            {"name": "malformed expected", "op": self.op("a"), "expect": {"malformed": True}},
            {"name": "no such case", "op": self.op("a"), "expect": {"same_key_as": "ghost"}},
        ])
        self.assertTrue(all(not r.passed for r in report.results), report.results)
        self.assertIn("checks nothing", report.results[0].detail)
        self.assertIn("appears twice", report.results[1].detail)
        self.assertIn("no earlier case named 'ghost'", report.results[4].detail)

    def test_unknown_members_are_not_a_cases_file(self):
        for text in ('{"cases": [], "extra": 1}',
                     '{"cases": [{"name": "x", "op": {}, "expect": {"keys": "x"}}]}',
                     '{"cases": [{"name": "x", "op": {}, "expect": {}, "duplicate": {"state": "done"}}]}'):
            with self.assertRaises(cases_file.CasesFileError, msg=text):
                cases_file.parse(text)


try:
    import component_policy
except ImportError:  # the PyPI wasmtime package is not installed
    component_policy = None


@unittest.skipIf(component_policy is None, "wasmtime (PyPI) is not importable")
class RustCasesInTheComponent(unittest.TestCase):
    def test_each_built_component_passes_the_rust_cases(self):
        for name in _paths.POLICIES:
            wasm = COMPONENTS / f"{name}.wasm"
            with self.subTest(policy=name):
                if not wasm.is_file():
                    self.skipTest(f"{wasm} not built (idem build guest/python/policies/{name} --out {COMPONENTS})")
                report = report_of(component_policy.component_policy(str(wasm)), _paths.rust_cases(name))
                self.assertEqual([f"{r.name}: {r.detail}" for r in report.results if not r.passed], [])


if __name__ == "__main__":
    unittest.main()
