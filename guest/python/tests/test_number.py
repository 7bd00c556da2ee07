"""The host's canonical number spelling (number.rs tests and the operation
reference's examples)."""

import random
import unittest

import _paths  # noqa: F401
from idem_policy._host.number import NumberError, canonical_number


class CanonicalNumber(unittest.TestCase):
    def test_spellings_of_one_number_agree(self):
        for text in ["100", "100.0", "1e2", "1.00E+2", "10000e-2", "0.1e3"]:
            self.assertEqual(canonical_number(text), "100", text)

    def test_canonical_forms(self):
        for text, want in [
            ("0", "0"),
            ("-0", "0"),
            ("-0.000", "0"),
            ("0e999999999999999999999", "0"),
            ("1.5", "1.5"),
            ("-1.50", "-1.5"),
            ("0.05", "0.05"),
            ("5e-3", "0.005"),
            ("123.456e1", "1234.56"),
            ("12345678901234567890.125", "12345678901234567890.125"),
            # docs/reference/operation.md and writing-a-policy.md
            ("1.50e2", "150"),
            ("150.0", "150"),
            ("15e-1", "1.5"),
            ("1.50", "1.5"),
            ("100.0", "100"),
        ]:
            self.assertEqual(canonical_number(text), want, text)

    def test_rejects_non_numbers_and_huge_spellings(self):
        for bad in ["", "-", "01", "1.", ".5", "1e", "+1", "1e+", "0x10", "1_000", "NaN", "١"]:
            with self.assertRaises(NumberError, msg=bad) as cm:
                canonical_number(bad)
            self.assertEqual(cm.exception.kind, "syntax", bad)
        for huge in ["1e400", "1e-400", "1e99999999999999999999"]:
            with self.assertRaises(NumberError, msg=huge) as cm:
                canonical_number(huge)
            self.assertEqual(cm.exception.kind, "out-of-range", huge)
        self.assertEqual(
            str(NumberError("out-of-range", "1e400")),
            "`1e400` spells to more than 128 digits; send it as a string",
        )

    def test_the_128_character_bound(self):
        self.assertEqual(canonical_number("1e127"), "1" + "0" * 127)
        with self.assertRaises(NumberError):
            canonical_number("1e128")
        with self.assertRaises(NumberError):
            canonical_number("-1e127")  # the sign counts
        self.assertEqual(canonical_number("1e-126"), "0." + "0" * 125 + "1")
        with self.assertRaises(NumberError):
            canonical_number("1e-127")

    # number.rs's proptests, as seeded random samples.
    def test_integers_match_their_decimal_spelling(self):
        rng = random.Random(7)
        for _ in range(2000):
            n = rng.randint(-(1 << 63), (1 << 63) - 1)
            self.assertEqual(canonical_number(str(n)), str(n))

    def test_exponent_shifts_do_not_change_the_number(self):
        rng = random.Random(8)
        for _ in range(2000):
            m, shift = rng.randint(1, 999_999), rng.randint(0, 19)
            self.assertEqual(canonical_number(f"{m * 10**shift}e{-shift}"), canonical_number(str(m)))

    def test_canonical_form_is_a_fixed_point(self):
        rng = random.Random(9)
        for _ in range(2000):
            i = rng.randint(0, (1 << 64) - 2)
            frac = "".join(rng.choice("0123456789") for _ in range(rng.randint(0, 8)))
            exp = rng.randint(-30, 29)
            text = f"{i}e{exp}" if not frac else f"{i}.{frac}e{exp}"
            once = canonical_number(text)
            self.assertEqual(canonical_number(once), once, text)


if __name__ == "__main__":
    unittest.main()
