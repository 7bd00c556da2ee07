"""canonical_decimal and Operation.decimal against every example in the Rust
SDK (decimal.rs, helpers.rs doctests) and the guide (writing-a-policy.md)."""

import json
import unittest

import _paths
from idem_policy import ErrorCode, Field, Number, Operation, Text, canonical_decimal
from idem_policy import Boolean, DecimalError, MAX_DECIMAL_LEN, PolicyError
from idem_policy._host.number import canonical_number


class CanonicalDecimal(unittest.TestCase):
    def test_rust_doctest_spellings(self):
        for text, want in [
            ("10.50", "10.5"),
            ("10.5", "10.5"),
            ("0010.00", "10"),
            ("-0.0", "0"),
            ("0.050", "0.05"),
        ]:
            self.assertEqual(canonical_decimal(text), want, text)

    def test_rust_doctest_garbage(self):
        for garbage in ["", "ten", "1,000.00", "1e3", "+5", " 5", "5.", ".5", "--5", "NaN"]:
            with self.assertRaises(DecimalError, msg=garbage):
                canonical_decimal(garbage)

    def test_rust_doctest_message(self):
        with self.assertRaises(DecimalError) as cm:
            canonical_decimal("12,50")
        self.assertEqual(
            str(cm.exception),
            "`12,50` is not a decimal: only digits, one `.` and a leading `-` are allowed",
        )

    def test_reasons_in_rust_order(self):
        for text, why in [
            ("", "it is empty"),
            ("9" * 129, "it is longer than 128 characters"),
            (".5", "it needs a digit before the `.`"),
            ("-.5", "it needs a digit before the `.`"),
            (".", "it needs a digit before the `.`"),
            ("5.", "it needs a digit after the `.`"),
            ("1.2.3", "only digits, one `.` and a leading `-` are allowed"),
            ("٣", "only digits, one `.` and a leading `-` are allowed"),
            ("--5", "only digits, one `.` and a leading `-` are allowed"),
        ]:
            with self.assertRaises(DecimalError, msg=text) as cm:
                canonical_decimal(text)
            self.assertEqual(cm.exception.why, why, text)

    def test_agrees_with_the_host_spelling_of_json_numbers(self):
        # decimal.rs: where both spellings apply, they agree, so a field sent
        # as a number and one sent as a string give one fingerprint.
        for int_part in ["0", "1", "10", "100", "12345678901234567890"]:
            for frac in ["", ".0", ".5", ".50", ".05", ".000", ".125"]:
                for sign in ["", "-"]:
                    text = f"{sign}{int_part}{frac}"
                    self.assertEqual(canonical_decimal(text), canonical_number(text), text)

    def test_errors_quote_a_bounded_text(self):
        long = "9" * 100 + "x"
        err = self._err(long)
        self.assertLessEqual(len(err.text), 41, err)
        self.assertEqual(self._err("9" * (MAX_DECIMAL_LEN + 1)).why, "it is longer than 128 characters")
        accents = self._err("é" * 50)
        self.assertTrue(accents.text.endswith("…"))
        # 40 bytes cut at a character boundary: 20 two-byte characters.
        self.assertEqual(accents.text, "é" * 20 + "…")
        self.assertEqual(self._err("€" * 20).text, "€" * 13 + "…")

    def test_length_is_counted_in_bytes(self):
        self.assertEqual(canonical_decimal("1" * 128), "1" * 128)
        self.assertEqual(self._err("1" * 127 + "é").why, "it is longer than 128 characters")

    def _err(self, text):
        with self.assertRaises(DecimalError) as cm:
            canonical_decimal(text)
        return cm.exception


class OperationDecimal(unittest.TestCase):
    op = Operation(
        "charge",
        "acme",
        [
            Field("amount", Text("10.50")),
            Field("fee", Number("0.3")),
            Field("note", Text("ten")),
            Field("vip", Boolean(True)),
        ],
    )

    def test_helpers_doctest(self):
        self.assertEqual(self.op.decimal("amount"), "10.5")
        self.assertEqual(self.op.decimal("fee"), "0.3")
        with self.assertRaises(Exception) as cm:
            self.op.decimal("note")
        err = cm.exception
        self.assertEqual(err.code, ErrorCode.INVALID_VALUE)
        self.assertEqual(err.field, "note")
        self.assertEqual(
            err.message,
            "`note` must be a decimal like 10.50: `ten` is not a decimal: only digits, "
            "one `.` and a leading `-` are allowed",
        )
        with self.assertRaises(Exception) as cm:
            self.op.decimal("tax")
        self.assertEqual(cm.exception.code, ErrorCode.MISSING_FIELD)

    def test_boolean_is_refused(self):
        with self.assertRaises(Exception) as cm:
            self.op.decimal("vip")
        self.assertEqual(cm.exception.message, "`vip` must be a decimal like 10.50, not a boolean")

    def test_guide_example(self):
        # writing-a-policy.md: "10.50", "10.5", 10.5 → "10.5"
        for value in (Text("10.50"), Text("10.5"), Number(canonical_number("10.5"))):
            self.assertEqual(Operation("k", "t", [Field("amount", value)]).decimal("amount"), "10.5")
        err = self._refusal(Operation("k", "t", [Field("amount", Text("12,50"))]))
        self.assertEqual(
            err.message,
            "`amount` must be a decimal like 10.50: `12,50` is not a decimal: only digits, "
            "one `.` and a leading `-` are allowed",
        )

    def _refusal(self, op):
        with self.assertRaises(Exception) as cm:
            op.decimal("amount")
        return cm.exception


# The vectors every SDK reads (guest/testdata/decimals.json, the Rust SDK's
# behaviour written down): a divergence between languages fails here, in
# guest/js/tests/decimal.test.js or in guest/sdk/src/decimal.rs.
VECTORS = json.loads((_paths.REPO / "guest" / "testdata" / "decimals.json").read_text(encoding="utf-8"))


class SharedVectors(unittest.TestCase):
    def test_decimals_as_text(self):
        self.assertTrue(VECTORS["decimals"])
        for v in VECTORS["decimals"]:
            with self.subTest(text=v["text"]):
                op = Operation("k", "t", [Field("amount", Text(v["text"]))])
                if "canonical" in v:
                    self.assertEqual(canonical_decimal(v["text"]), v["canonical"])
                    self.assertEqual(op.decimal("amount"), v["canonical"])
                    continue
                with self.assertRaises(DecimalError) as cm:
                    canonical_decimal(v["text"])
                self.assertEqual(cm.exception.why, v["refused"])
                if "message" in v:
                    self.assertEqual(str(cm.exception), v["message"])
                with self.assertRaises(PolicyError) as refused:
                    op.decimal("amount")
                self.assertEqual(refused.exception.code, ErrorCode.INVALID_VALUE)

    def test_json_numbers_exponents_included(self):
        self.assertTrue(VECTORS["numbers"])
        for v in VECTORS["numbers"]:
            with self.subTest(json=v["json"]):
                value = canonical_number(v["json"])
                self.assertEqual(value, v["canonical"])
                op = Operation("k", "t", [Field("amount", Number(value))])
                self.assertEqual(op.decimal("amount"), v["canonical"])


if __name__ == "__main__":
    unittest.main()
