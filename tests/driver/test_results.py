#!/usr/bin/env python3
"""What a test program declares in its results file (tests/support/results.hpp), and how its skips and its
error checks (tests/support/throws.hpp) read: tests/support/results_probe.cpp's cases pass, fail, skip and
crash on purpose.

usage: test_results.py PROBE_PROGRAM
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

PROBE = None


def run_probe(*args, env=None):
    """Runs the probe with a results file; returns (status, console text, {case name: record}, records)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "results.json")
        p = subprocess.run([PROBE, "--no-version", *args], env=dict(os.environ, ATTN_TEST_RESULTS=path, **(env or {})),
                           capture_output=True, text=True, timeout=60)
        with open(path, encoding="utf-8") as f:
            records = [json.loads(line) for line in f]
    cases = {r["name"]: r for r in records if r["event"] == "case"}
    return p.returncode, p.stdout + p.stderr, cases, records


class ResultsFileTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.status, cls.console, cls.cases, cls.records = run_probe()

    def test_every_case_is_declared_with_its_suite_exercise_and_status(self):
        passed = self.cases["a case that passes"]
        self.assertEqual((passed["suite"], passed["exercise"], passed["status"]),
                         ("99_probe/passes", "passes", "passed"))
        self.assertIsNone(self.cases["a case of the chapter's own code"]["exercise"])
        self.assertEqual(self.records[0]["event"], "run")
        self.assertEqual(self.records[-1]["event"], "end")
        self.assertEqual(self.status, 1)

    def test_every_failed_assertion_of_a_case_with_values_and_logged_context(self):
        case = self.cases["a case with two failed assertions and a logged value"]
        self.assertEqual(case["status"], "failed")
        failures = case["failures"]
        self.assertEqual(len(failures), 2, failures)
        self.assertEqual(failures[0]["expression"], "three() == 4")
        self.assertEqual(failures[0]["values"], "3 == 4")
        self.assertTrue(failures[0]["file"].endswith("results_probe.cpp"))
        self.assertIn("k := 7", failures[0]["context"])
        self.assertIn("the step: 8", failures[0]["context"])
        self.assertIn("three is not five", failures[1]["context"])  # CHECK_MESSAGE's message

    def test_an_exception_is_a_failure_with_its_text(self):
        case = self.cases["a case that throws"]
        self.assertEqual(case["status"], "failed")
        self.assertEqual(case["failures"][-1]["kind"], "exception")
        self.assertIn("thrown from the case", case["failures"][-1]["message"])

    def test_a_skip_is_skipped_with_its_reason_and_ctest_sees_it(self):
        case = self.cases["a case that skips itself"]
        self.assertEqual((case["status"], case["reason"]), ("skipped", "no model: ./course setup fetches it"))
        self.assertIn("\nskipped: no model: ./course setup fetches it\n", "\n" + self.console)
        late = self.cases["a case that fails, then skips: failed"]
        self.assertEqual(late["status"], "failed")
        self.assertIsNone(late["reason"])
        status, console, cases, _ = run_probe("--test-case=a case that fails, then skips: failed")
        self.assertNotIn("\nskipped:", "\n" + console)  # ctest must not read a failure as a skip

    def test_errors_are_checked_for_what_they_name(self):
        self.assertEqual(self.cases["errors named as the contract says"]["status"], "passed")
        messages = [f["message"] for f in self.cases["errors that do not name what the contract says"]["failures"]]
        self.assertEqual(len(messages), 4, messages)
        self.assertIn("threw std::invalid_argument, as it should, but the message does not name 3: shape (2, 33)",
                      messages[0])
        self.assertIn("does not name v: the tensor vv", messages[1])
        self.assertIn("should throw std::runtime_error, but threw another exception: fine", messages[2])
        self.assertIn("should throw std::invalid_argument, but returned normally", messages[3])
        self.assertNotIn("DIFFERENT", self.console)

    def test_a_listing_declares_every_case(self):
        _, _, _, records = run_probe("--list-test-cases", "--test-suite-exclude=*: chapter code")
        listed = [r["name"] for r in records if r["event"] == "listed"]
        self.assertIn("a case that crashes the program", listed)
        self.assertNotIn("a case of the chapter's own code", listed)

    def test_a_crash_leaves_the_cases_before_it_and_names_the_case(self):
        for env, kind in (({"ATTN_PROBE_CRASH": "1"}, "crash"), ({"ATTN_PROBE_EXIT": "1"}, None)):
            status, _, cases, records = run_probe(env=env)
            self.assertNotEqual(status, 0)
            self.assertEqual(cases["a case that passes"]["status"], "passed")
            starts = [r["name"] for r in records if r["event"] == "start"]
            self.assertEqual(starts[-1], "a case that crashes the program")
            if kind:  # doctest caught the signal: the case is declared failed, as a crash
                self.assertEqual(cases["a case that crashes the program"]["failures"][0]["kind"], "crash")
            else:  # nothing caught the exit: the last start without its case names it
                self.assertNotIn("a case that crashes the program", cases)


if __name__ == "__main__":
    PROBE = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=1)
