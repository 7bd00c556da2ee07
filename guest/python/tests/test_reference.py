"""The reference page (docs/guide/sdk-reference-python.md) against the SDK:
every name of ``idem_policy.__all__``, every field of the duplicate context,
every accessor, builder method, error constructor and decision, and every
record state by name and spelling appears on the page. A name added to the
SDK and not to the page fails here."""

import dataclasses
import inspect
import re
import unittest

import _paths
import idem_policy
from idem_policy import Decision, Derivation, DuplicateContext, Operation, PolicyError, RecordState
from idem_policy import cases

PAGE = (_paths.REPO / "docs" / "guide" / "sdk-reference-python.md").read_text(encoding="utf-8")


def _spans() -> list[str]:
    # A span without a call in it may name several things: `key_parts`, `…`.
    out = []
    for span in re.findall(r"`([^`]+)`", PAGE):
        out.extend([span] if "(" in span else [s.strip() for s in span.split(",")])
    return out


SPANS = _spans()


def documented(name: str) -> bool:
    """A code span that is the name, or the name called or reached through an
    object (``Decision.wait(max_ms)``, ``op.text(name)``, ``ctx.state``)."""
    pattern = re.compile(rf"^(?:[\w.]*\.)?{re.escape(name)}(?:\(.*\))?$")
    return any(pattern.match(s) for s in SPANS)


def missing(names):
    return [n for n in names if not documented(n)]


def public(cls) -> list[str]:
    return [n for n, _ in inspect.getmembers(cls) if not n.startswith("_") and n in vars(cls)]


class ReferencePage(unittest.TestCase):
    def test_every_name_of_all_is_on_the_page(self):
        self.assertGreater(len(idem_policy.__all__), 20)
        self.assertEqual(missing(idem_policy.__all__), [])

    def test_the_runner_is_on_the_page(self):
        self.assertEqual(missing(["load_policy", "run_cases", "Report", "CaseResult", "summary"]), [])
        self.assertTrue(callable(cases.load_policy) and callable(cases.run_cases))

    def test_every_field_of_the_duplicate_context_is_on_the_page(self):
        fields = [f.name for f in dataclasses.fields(DuplicateContext)]
        self.assertEqual(
            fields,
            ["operation", "state", "fingerprint_matches", "attempts", "age_ms", "lease_remaining_ms", "outcome"],
        )
        self.assertEqual(missing(f"ctx.{f}" for f in fields), [])

    def test_every_accessor_builder_constructor_and_decision_is_on_the_page(self):
        names = (
            [f"op.{n}" for n in public(Operation)]
            + [f"op.{f.name}" for f in dataclasses.fields(Operation) if not f.name.startswith("_")]
            + public(Derivation)
            + list(Derivation.__slots__)
            + [f"PolicyError.{n}" for n in ("missing", "invalid", "unsupported_kind")]
            + [f"Decision.{n}" for n in public(Decision) if n not in {f.name for f in dataclasses.fields(Decision)}]
        )
        self.assertIn("Decision.wait", names)
        self.assertIn("op.decimal", names)
        self.assertEqual(missing(names), [])

    def test_every_record_state_by_name_and_spelling(self):
        self.assertEqual(len(RecordState), 5)
        for state in RecordState:
            self.assertTrue(documented(f"RecordState.{state.name}"), state.name)
            self.assertIn(f"`{state.value}`", PAGE, state.value)


if __name__ == "__main__":
    unittest.main()
