#!/usr/bin/env python3
"""The learner's loop (driver/loop.py) on fixture chapters, in seconds: no build, no xtensor.

Each test makes a checkout of two fake chapters (98_first, 99_fake) whose "test programs" are small scripts
that write a prepared results file (the format of tests/support/results.hpp), and whose "build" touches them
(COURSE_BUILD_COMMAND), failing where a source says "not C++". Run: python3 tests/driver/test_loop.py
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unicodedata
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LOOP = os.path.join(ROOT, "driver", "loop.py")

FAKE_PROGRAM = r'''#!/usr/bin/env python3
# A chapter's exercise test program, faked: writes the results its scenario file holds.
import json, os, sys
scenario = json.load(open(sys.argv[0] + ".scenario.json"))
out = open(os.environ["ATTN_TEST_RESULTS"], "w")
def write(o):
    out.write(json.dumps(o) + "\n")
    out.flush()
def who(c):
    suite = c["suite"]
    return {"name": c["name"], "suite": suite, "exercise": suite.split("/", 1)[1] if "/" in suite else None}
write({"event": "run", "program": sys.argv[0]})
if "--list-test-cases" in sys.argv:
    for c in scenario:
        write(dict(who(c), event="listed", file="tests/x_test.cpp", line=1))
    sys.exit(0)
failed = 0
for c in scenario:
    write(dict(who(c), event="start"))
    if c.get("dies"):
        out.write('{"event": "case", "name": "cut sh')  # a line cut short by the death
        out.flush()
        os._exit(139)
    failed += c["status"] == "failed"
    write(dict(who(c), event="case", status=c["status"], reason=c.get("reason"), seconds=0,
               failures=c.get("failures", [])))
write({"event": "end", "cases": len(scenario), "failed": failed})
sys.exit(1 if failed else 0)
'''

FAKE_BUILD = r'''#!/bin/sh
# The build, faked: a chapter whose exercise source says "not C++" does not compile; the others are rebuilt.
root=$(dirname "$0")
status=0
for target in "$@"; do
  stem=${target#ch}; stem=${stem%_exercise_test}
  if grep -q "not C++" "$root/exercises/$stem/"*.cpp; then
    echo "exercises/$stem/$(echo ${stem#???}).cpp:1:1: error: 'this' does not name a type"
    status=1
  else
    touch "$root/build/default/bin/$target"
  fi
done
exit $status
'''

LONG_HINT = ("Keep the running maximum m and the running sum ℓ of one row; when a block raises the maximum, scale "
             "what you summed so far by e^(m_old − m_new) before adding the block's own terms, or the sum is off.")
SKIP = "no model: ./course setup fetches it"


def columns(text):  # the test's own count, so that a miscount in the loop's shows
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def assertion(expr, values, line=12, context=()):
    return {"kind": "assert", "file": "tests/99_fake_test.cpp", "line": line, "assertion": "CHECK",
            "expression": expr, "threw": False, "values": values, "context": list(context), "subcases": []}


def case(exercise, status="passed", name=None, stem="99_fake", failures=None, **more):
    """A case of stem's exercise: named "EXERCISE works" when it passes, "EXERCISE fails" (its one assertion
    EXERCISE() false) when it fails, unless told otherwise."""
    if status == "failed" and failures is None and not more.get("dies"):
        failures = [assertion(f"{exercise}()", "false")]
    name = name or f"{exercise} {'fails' if status == 'failed' else 'works'}"
    return dict(name=name, suite=f"{stem}/{exercise}", status=status, failures=failures or [], **more)


class Checkout:
    """A fixture checkout in a temporary folder: chapters 98_first (exercise solo) and 99_fake (exercises
    alpha, beta, gamma)."""

    CHAPTERS = {"98_first": ["solo"], "99_fake": ["alpha", "beta", "gamma"]}

    def __init__(self):
        self.root = tempfile.mkdtemp(prefix="loop-fixture-")
        os.makedirs(os.path.join(self.root, "cmake"))
        shutil.copy(os.path.join(ROOT, "cmake", "compact_progress.py"), os.path.join(self.root, "cmake"))
        self.write("build.sh", FAKE_BUILD, executable=True)
        for stem, exercises in self.CHAPTERS.items():
            os.makedirs(os.path.join(self.root, "chapters", stem))
            hints = "".join(f"## {e}\n1. The first hint of {e}.\n2. {LONG_HINT}\n   Its second line, indented.\n"
                            f"3. The last hint of {e}.\n\n" for e in exercises)
            self.write(f"exercises/{stem}/HINTS.md", f"# Chapter {stem[:2]} hints\n\n{hints}")
            self.write(f"exercises/{stem}/{stem[3:]}.cpp", "// the learner's code\n")
            self.write(f"tests/{stem}_test.cpp", "// the tests\n")
            self.write(f"book/{stem}.md", f"# Chapter {stem[:2]} {{#ch{stem}}}\n\ntext\n\n"
                       f"## Exercises {{#ch{stem[:2]}_exercises}}\n")
            self.write(f"build/default/bin/ch{stem}_exercise_test", FAKE_PROGRAM, executable=True)
            self.scenario(stem, [case(e, stem=stem) for e in exercises])
        # A checkout writes every file within a second: nothing is started yet.
        past = time.time() - 100
        for folder, _, files in os.walk(self.root):
            for f in files:
                os.utime(os.path.join(folder, f), (past, past))

    def write(self, relative, text, executable=False):
        path = os.path.join(self.root, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        if executable:
            os.chmod(path, 0o755)

    def scenario(self, stem, cases):
        """What chapter stem's test program reports next time; the program counts as rebuilt."""
        program = f"build/default/bin/ch{stem}_exercise_test"
        self.write(program + ".scenario.json", json.dumps(cases))
        os.utime(os.path.join(self.root, program))

    def save(self, stem, text="// the learner's code, saved\n"):
        """The learner saves the chapter's exercise source (now, after the checkout)."""
        self.write(f"exercises/{stem}/{stem[3:]}.cpp", text)

    def course(self, *args):
        env = dict(os.environ, COURSE_BUILD_COMMAND=os.path.join(self.root, "build.sh"), NO_COLOR="1")
        p = subprocess.run([sys.executable, LOOP, self.root, *args], env=env, capture_output=True, text=True,
                           timeout=60)
        return p.returncode, p.stdout, p.stderr


class LoopTest(unittest.TestCase):
    def setUp(self):
        self.c = Checkout()
        self.addCleanup(shutil.rmtree, self.c.root)

    def check(self, *args, status=None, cases=None):
        """./course ARGS (after chapter 99's test program is set to report cases); asserts its exit status
        and that every line fits 100 columns; returns stdout."""
        if cases is not None:
            self.c.scenario("99_fake", cases)
        rc, out, err = self.c.course(*args)
        if status is not None:
            self.assertEqual(rc, status, f"status {rc}; stdout:\n{out}\nstderr:\n{err}")
        for line in (out + err).splitlines():
            self.assertLessEqual(columns(line), 100, f"a line of {columns(line)} columns:\n{line}")
        return out

    def assertShows(self, out, *texts):
        for text in texts:
            self.assertIn(text, out)

    def test_a_skip_is_reported_with_its_reason_and_never_counted_as_solved(self):
        out = self.check("check", "99", status=0, cases=[
            case("alpha"), case("alpha", "skipped", "alpha on the real model", reason=SKIP),
            case("beta", "skipped", "beta on the real model", reason=SKIP),
            case("gamma", "skipped", "gamma on the real model", reason=SKIP), case("gamma")])
        self.assertShows(out, "3 test cases skipped: no model: ./course setup fetches it",
                         "Not tested here, so not counted as solved: alpha (1 of 2 cases skipped), beta (1 of 1",
                         "every exercise passes its tests that ran here.", "Progress: chapter 99: 0 of 3 exercises solved")
        self.assertIn("99 fake          0 of  3  done (3 not tested here)", self.check("list", status=0))

    def test_a_skipped_case_beside_a_failing_exercise_is_named_too(self):
        out = self.check("check", "99", status=1, cases=[
            case("alpha", "failed"), case("beta", "skipped", "beta on the GPU", reason="no CUDA device")])
        self.assertIn("1 test case skipped: no CUDA device", out)
        self.assertIn("Also unsolved in this chapter: gamma", out)  # no case at all: not solved either

    def test_every_failed_assertion_of_the_first_failing_case_is_shown(self):
        out = self.check("check", "99", status=1, cases=[
            case("alpha"),
            case("beta", "failed", "beta keeps the shape and the values", failures=[
                assertion("out.shape(0) == 3", "2 == 3", 20, ["k := 7"]), assertion("out(1, 1) == 0.5", "0.25 == 0.5", 21),
                {"kind": "message", "file": "tests/99_fake_test.cpp", "line": 22, "context": [],
                 "message": "Worst at (row 1, column 1): actual 0.25, expected 0.5\n  first mismatches: 3",
                 "subcases": ["with a mask"]},
                {"kind": "exception", "message": "beta is not implemented yet (exercises/99_fake/).\n  Hint: " + LONG_HINT,
                 "context": [], "subcases": []}]),
            case("beta", "failed", "beta refuses a bad shape", failures=[assertion("second_case()", "false")])])
        self.assertShows(out, "chapter 99 (fake) is not done yet: beta fails 2 of 2 test cases.",
                         "  ✗ beta keeps the shape and the values\n  ✗ beta refuses a bad shape",
                         'The first failing case, "beta keeps the shape and the values": 4 failures:',
                         "tests/99_fake_test.cpp:20: CHECK( out.shape(0) == 3 )", "values: 2 == 3", "with k := 7",
                         "tests/99_fake_test.cpp:21: CHECK( out(1, 1) == 0.5 )", "values: 0.25 == 0.5",
                         "Worst at (row 1, column 1)", "first mismatches: 3", "in subcase: with a mask",
                         "the case threw: beta is not implemented yet", "Hint (beta, 1 of 3):\n  The first hint of beta.")
        self.assertNotIn("second_case()", out)  # the second failing case's assertions are not shown

    def test_a_skeleton_s_exception_is_shown_once_with_its_lines(self):
        threw = dict(assertion("alpha(1) == 2", None), threw=True,
                     exception='"alpha is not implemented yet (exercises/99_fake/).\n  Hint: ' + LONG_HINT[:90] +
                               "\n        " + LONG_HINT[90:] + '\n  Read: book/99_fake.md"')
        out = self.check("check", "99", status=1, cases=[
            case("alpha", "failed", failures=[threw, dict(threw, line=13, expression="alpha(2) == 3")])])
        self.assertShows(out, "    threw: alpha is not implemented yet (exercises/99_fake/).\n      Hint: Keep the running",
                         "\n      Read: book/99_fake.md\n",
                         "tests/99_fake_test.cpp:13: CHECK( alpha(2) == 3 )\n    threw the same exception")

    def test_a_case_is_credited_to_the_exercise_its_suite_names_not_its_name(self):
        out = self.check("check", "99", status=1, cases=[
            case("alpha"), case("beta"), case("gamma", "failed", "alpha and beta together give gamma's answer")])
        self.assertShows(out, "is not done yet: gamma fails 1 of 1 test cases.", "Progress: chapter 99: 2 of 3 exercises solved")

    def test_a_case_credited_to_no_exercise_is_reported(self):
        out = self.check("check", "99", cases=[case("alpha"), case("delta", name="stray"),
                                               dict(case("alpha", name="no exercise at all"), suite="99_fake")])
        for out in (out, self.check("list", status=0)):
            self.assertShows(" ".join(out.split()), "credited to no exercise of its HINTS.md",
                             "stray (suite 99_fake/delta)", "no exercise at all (suite 99_fake)")

    def test_a_crash_names_the_case_it_died_in_and_the_cases_that_did_not_run(self):
        out = self.check("check", "99", status=1, cases=[
            case("alpha"), case("beta", "failed", "beta crashes", dies=True), case("gamma")])
        self.assertShows(out, "beta fails 1 of 1", "CRASHED: the test program died in this case (status 139)",
                         "the cases after this one did not run", "Also unsolved in this chapter: gamma (1 failing)",
                         "Progress: chapter 99: 1 of 3")

    def test_lines_fit_100_columns_with_long_names_hints_messages_and_cjk(self):
        self.c.scenario("99_fake", [case("beta", "failed", "beta " + "keeps every row of a very long sequence " * 4,
                                         failures=[assertion("f(" + "x, " * 60 + "y)", "它 猫 " * 40),
                                                   {"kind": "message", "file": "t.cpp", "line": 1, "context": [],
                                                    "message": "/" + "a/very/long/path" * 10, "subcases": []}])])
        self.c.save("99_fake")
        for args, status in ((("check", "99"), 1), (("check",), 1), (("list",), 0), (("hint", "99"), 0),
                             (("hint", "99"), 0), (("hint", "99", "--all"), 0)):  # the second hint: the long one
            self.check(*args, status=status)  # check() asserts the width of every line

    def test_read_points_at_the_source_page_until_the_book_is_built(self):
        read = "  Read:        "
        self.assertIn(read + "book/99_fake.md (the built page: ./course book)",
                      self.check("check", "99", status=1, cases=[case("alpha", "failed")]))
        self.c.write("build/default/book/html/ch99_fake.html", "<html></html>")
        self.assertIn(read + "build/default/book/html/ch99_fake.html#ch99_exercises", self.check("check", "99", status=1))
        os.remove(os.path.join(self.c.root, "book", "99_fake.md"))  # a new chapter, its page not written yet
        self.assertIn(read + "book/99_fake.md (the chapter has no page yet)", self.check("check", "99", status=1))

    def test_exit_statuses(self):
        self.check("check", "99", status=0)  # every case passes
        self.check("check", "99", status=1, cases=[case("alpha", "failed")])
        for args, message in ((("check", "7"), "there is no chapter 07"), (("check", "one"), "'one' is not"),
                              (("check", "98", "99"), "at most one"), (("hint", "98", "99"), "at most one"),
                              (("list", "98"), "takes no arguments"), (("frobnicate",), "unknown command")):
            rc, out, err = self.c.course(*args)
            self.assertEqual(rc, 2, args)
            self.assertIn(message, err)

    def test_hints_one_level_per_call_and_the_check_remembers_them(self):
        out = self.check("hint", "99", status=0, cases=[case("beta", "failed")])
        self.assertIn("Chapter 99 (fake), alpha: hint 1 of 3", out)  # alpha has no case: unsolved, first
        out = self.check("hint", "99", status=0, cases=[case("alpha"), case("beta", "failed"), case("gamma")])
        self.assertIn("beta: hint 1 of 3\n  The first hint of beta.\n\nStuck still? ./course hint 99 shows hint 2", out)
        self.assertShows(self.check("hint", "99", status=0), "beta: hint 2 of 3\n  Keep the running maximum",
                         "Its second line, indented.")
        self.assertShows(self.check("check", "99", status=1), "Hint (beta, 2 of 3):",
                         "Next hint:   ./course hint 99   (hint 3 of 3; one more per call)")
        self.check("hint", "99")
        self.assertShows(self.check("hint", "99", status=0), "beta: hint 3 of 3", "That was the last hint for beta")
        # A hint's indented second line continues its paragraph, not a line of its own after a short one.
        self.assertShows(self.check("hint", "99", "--all", status=0), "## alpha", "## gamma",
                         "is off. Its second line, indented.")

    def test_check_without_a_chapter_goes_on_where_the_learner_works(self):
        self.c.scenario("98_first", [case("solo", "failed", stem="98_first")])
        out = self.check("check", status=1, cases=[case("alpha", "failed")])  # nothing started: the first chapter
        self.assertShows(out, "  98 first         0 of  1  not started   <- you are here",
                         "chapter 98 (first) is not done yet: solo")
        self.c.save("99_fake")
        out = self.check("check", status=1, cases=[case("alpha"), case("beta", "failed")])
        self.assertShows(out, "  99 fake          1 of  3  started: next beta   <- you are here",
                         "chapter 99 (fake) is not done yet: beta",
                         "Progress: chapter 99: 1 of 3 exercises solved; the course: 1 of 4.")
        self.assertIn("The course: 1 of 4 exercises solved.", self.check("list", status=0))

    def test_a_chapter_that_does_not_compile_is_reported_and_does_not_block_the_others(self):
        self.c.save("99_fake", "this is not C++\n")
        rc, out, err = self.c.course("check", "99")
        self.assertEqual(rc, 1)
        self.assertIn("error: 'this' does not name a type", out + err)
        self.assertShows(out, "chapter 99 (fake) does not compile", "Progress: chapter 99: 0 of 3")
        self.assertIn("chapter 98 (first): every exercise passes its tests.", self.check("check", "98", status=0))
        self.assertIn("99 fake          0 of  3  does not compile", self.check("list"))

    def test_results_are_kept_until_a_source_or_the_program_changes(self):
        self.check("check", "99", status=0)
        results = os.path.join(self.c.root, "build", "default", "check", "99_fake.run.json")
        before = os.stat(results).st_mtime_ns
        self.check("check", "99", status=0)
        self.assertEqual(os.stat(results).st_mtime_ns, before, "ran again with nothing changed")
        time.sleep(0.01)
        self.c.save("99_fake")
        self.check("check", "99", status=0)
        self.assertNotEqual(os.stat(results).st_mtime_ns, before, "did not run again after a save")


if __name__ == "__main__":
    unittest.main(verbosity=1)
