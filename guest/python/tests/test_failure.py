"""What a failing policy tells the host (idem_policy.failure): the traceback's
last line, then the policy's own file and line."""

import os
import unittest

import _paths
from idem_policy import Operation
from idem_policy.failure import describe_failure

HERE = os.path.dirname(os.path.abspath(__file__))
SDK = str(_paths.SDK)


def typo(op):
    return op.txt("customer")  # the line named below


class DescribeFailure(unittest.TestCase):
    def test_an_exception_names_its_type_message_and_line(self):
        line = typo.__code__.co_firstlineno + 1
        try:
            typo(Operation("charge", "t", (), None, 0))
        except AttributeError as e:
            said = describe_failure(e, [HERE, SDK])
        self.assertTrue(said.startswith("AttributeError: 'Operation' object has no attribute 'txt'"), said)
        self.assertTrue(said.endswith(f" at typo (test_failure.py:{line})"), said)

    def test_frames_in_the_sdk_are_named_up_to_the_policys_own(self):
        def derive(op):
            return op.text("customer")

        try:
            derive(Operation("charge", "t", (), None, 0))
        except Exception as e:  # a PolicyError: raised inside the SDK
            said = describe_failure(e, [HERE, SDK])
        frames = said.split(" at ", 1)[1].split(" ← ")
        self.assertTrue(frames[0].startswith("text (idem_policy/operation.py:"), said)
        self.assertTrue(frames[-1].startswith("derive (test_failure.py:"), said)

    def test_an_exception_without_a_message_or_traceback(self):
        self.assertEqual(describe_failure(KeyError(), []), "KeyError")


if __name__ == "__main__":
    unittest.main()
