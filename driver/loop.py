#!/usr/bin/env python3
"""The learner's loop: ./course check | watch | hint | list (the bash driver bootstraps, then runs this).

usage: loop.py ROOT check [NN] | watch [NN] | hint [NN] [--all] | list

Each chapter's exercise tests run with ATTN_TEST_RESULTS=FILE, where the test program declares its results
(tests/support/results.hpp); the console text is never read. An exercise is solved when every one of its cases
passed; a skipped case is never a pass. The results stay in build/default/check/ until the chapter's exercise
folder, test file or test program change. Everything printed fits 100 columns.

Environment: COURSE_BUILD_COMMAND replaces `cmake --build BUILD` (the loop's own tests use it), NO_COLOR.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time
import unicodedata
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hints as hints_md  # noqa: E402  (driver/hints.py and driver/manifest.py, beside this file)
import manifest  # noqa: E402

WIDTH = 100
CHAPTER_CODE = "*: chapter code"  # suites of the chapter's own code: no exercise's cases (excluded here)


def columns(text):
    """The terminal columns of text: CJK characters take two."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def wrap(text, first="", rest=None, width=WIDTH):
    """text as lines of at most width columns: first before the first line, rest (first's width in spaces by
    default) before the others; broken at spaces, and inside a word only when the word alone is too long."""
    rest = " " * columns(first) if rest is None else rest
    if "\n" not in text and columns(first + text) <= width:
        return (first + text).rstrip()
    lines, line, prefix = [], "", first
    for word in text.split():
        while True:
            room = width - columns(prefix)
            candidate = f"{line} {word}" if line else word
            if columns(candidate) <= room:
                line = candidate
                break
            if line:  # the word goes on the next line
                lines.append(prefix + line)
                line, prefix = "", rest
                continue
            cut, used = 0, 0  # a word longer than a line: cut it
            while cut < len(word) and used + columns(word[cut]) <= room:
                used += columns(word[cut])
                cut += 1
            lines.append(prefix + word[:max(cut, 1)])
            word, prefix = word[max(cut, 1):], rest
            if not word:
                break
    if line or not lines:
        lines.append(prefix + line)
    return "\n".join(l.rstrip() for l in lines)


def say(text):
    bold = sys.stderr.isatty() and "NO_COLOR" not in os.environ
    print(f"\033[1m==> {text}\033[0m" if bold else f"==> {text}", file=sys.stderr, flush=True)


class UsageError(Exception):
    pass


USAGE = """usage: ./course check [NN] | watch [NN] | hint [NN] [--all] | list   (./course help: every command)"""


# --- the course's chapters, exercises and hints ------------------------------------------------------------
def chapter_stems(root):
    """The chapters in order: chapters/manifest.json's (driver/manifest.py), or the chapter folders where a
    checkout has no manifest (the loop's fixture tests)."""
    listed = os.path.join(root, "chapters", "manifest.json")
    if os.path.isfile(listed):
        return [c["stem"] for c in manifest.load(listed)]
    return sorted(d for d in os.listdir(os.path.join(root, "chapters"))
                  if re.match(r"^\d\d_", d) and os.path.isdir(os.path.join(root, "chapters", d)))


class Course:
    def __init__(self, root):
        self.root = root
        self.build = os.path.join(root, "build", "default")
        self.bin = os.path.join(self.build, "bin")
        self.check_dir = os.path.join(self.build, "check")
        self.stems = chapter_stems(root)

    def stem_of(self, nn):
        if not re.fullmatch(r"\d{1,2}", nn):
            raise UsageError(f"'{nn}' is not a chapter number (expected 01, 02, ...)")
        for stem in self.stems:
            if int(stem[:2]) == int(nn):
                return stem
        raise UsageError(f"there is no chapter {int(nn):02d}; the chapters are: {' '.join(self.stems)}")

    def hints(self, stem):
        return hints_md.read_hints(self.root, stem)

    def sources(self, stem):
        """The files whose change makes the chapter's results out of date."""
        folder = os.path.join(self.root, "exercises", stem)
        files = [os.path.join(folder, f) for f in os.listdir(folder)]
        return files + [os.path.join(self.root, "tests", f"{stem}_test.cpp")]

    def program(self, stem):
        return os.path.join(self.bin, f"ch{stem}_exercise_test")

    def read_line(self, stem):
        """Where to read: the built page at its exercises, or the page's source and how to build it."""
        md = os.path.join(self.root, "book", f"{stem}.md")
        label, section = "index", ""
        if not os.path.isfile(md):
            return f"book/{stem}.md (the chapter has no page yet)"
        with open(md, encoding="utf-8") as f:
            text = f.read()
        first = re.search(r"\{#([A-Za-z0-9_]+)\}", text.split("\n", 1)[0])
        label = first.group(1) if first else label
        exercises = re.search(r"^## Exercises.*\{#([A-Za-z0-9_]+)\}", text, re.M)
        section = f"#{exercises.group(1)}" if exercises else ""
        html = os.path.join(self.build, "book", "html", f"{label}.html")
        if os.path.isfile(html):
            return os.path.relpath(html, self.root) + section
        return f"book/{stem}.md (the built page: ./course book)"


def unquoted(text):
    """An exception's text as doctest gives it, without the quotes around it."""
    text = text or ""
    return text[1:-1] if len(text) >= 2 and text[0] == text[-1] == '"' else text


def text_lines(text, first="    "):
    """A message of several lines, rewrapped: a line indented four or more deeper than the one before
    continues it (as attn::not_implemented wraps its hint); the first paragraph after first, the others
    indented two more."""
    paragraphs = []  # [indent, text]
    for line in (l for l in text.split("\n") if l.strip()):
        indent = len(line) - len(line.lstrip())
        if paragraphs and indent >= paragraphs[-1][0] + 4:
            paragraphs[-1][1] += " " + line.strip()
        else:
            paragraphs.append([indent, line.strip()])
    return [wrap(p, first if k == 0 else first + "  ", (first if k == 0 else first + "  ") + "    ")
            for k, (_, p) in enumerate(paragraphs)]


def mtime(path):
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


# --- one chapter's results -------------------------------------------------------------------------------
class Results:
    """A chapter's last run: its cases (name, suite, exercise, status, reason, failures) and the program's
    exit status; 'compiled' is False when the last build of its test program failed."""

    def __init__(self, course, stem):
        self.course, self.stem = course, stem
        self.path = os.path.join(course.check_dir, stem)
        self.compiled, self.exit, self.cases, self.died_in = True, 0, [], None
        self.exercises = list(course.hints(stem))
        if os.path.isfile(self.path + ".run.json"):
            self.load()

    def stale(self):
        stamp = mtime(self.path + ".run.json")
        if stamp is None:
            return True
        newest = max((mtime(f) or 0) for f in self.course.sources(self.stem) + [self.course.program(self.stem)])
        return newest > stamp

    def compiled_now(self):
        """The test program is newer than every source: the last build of them succeeded."""
        built = mtime(self.course.program(self.stem))
        return built is not None and all((mtime(f) or 0) <= built for f in self.course.sources(self.stem)
                                         if f.endswith((".cpp", ".hpp", ".cu")))

    def run(self):
        """Runs the chapter's exercise tests (or records that they do not compile) and keeps the results."""
        os.makedirs(self.course.check_dir, exist_ok=True)
        program = self.course.program(self.stem)
        compiled = self.compiled_now()
        run = {"compiled": compiled, "exit": 0}
        if compiled:
            options = [f"--test-suite-exclude={CHAPTER_CODE}", "--no-version"]
            env = dict(os.environ, ATTN_TEST_RESULTS=self.path + ".list.json")
            subprocess.run([program, *options, "--list-test-cases"], env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            env["ATTN_TEST_RESULTS"] = self.path + ".json"
            with open(self.path + ".out", "w") as out:  # the console text, for a reader who wants it all
                run["exit"] = subprocess.run([program, *options], env=env, stdout=out, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL).returncode
        with open(self.path + ".run.json", "w") as f:
            json.dump(run, f)
        self.load()

    def load(self):
        with open(self.path + ".run.json") as f:
            run = json.load(f)
        self.compiled, self.exit = run["compiled"], run["exit"]
        listed = {r["name"]: r for r in read_json_lines(self.path + ".list.json") if r.get("event") == "listed"}
        cases, started = {}, None
        if self.compiled:
            for r in read_json_lines(self.path + ".json"):
                if r.get("event") == "start":
                    started = r
                elif r.get("event") == "case":
                    cases[r["name"]] = r
                    started = None
                    if any(f.get("kind") == "crash" for f in r.get("failures", [])):
                        self.died_in = r["name"]  # doctest caught the signal and reported the case
        if started is not None:  # the program died in this case: its last words, if doctest caught the signal
            self.died_in = started["name"]
            cases[started["name"]] = dict(started, status="failed", reason=None, failures=[
                {"kind": "crash", "message": f"the test program died in this case (status {self.exit})"}])
        for name, r in listed.items():  # listed but never reached: the program died first, or does not build
            if name not in cases:
                why = ("the chapter does not compile" if not self.compiled else
                       f"did not run: the test program died before it (status {self.exit})")
                cases[name] = dict(r, status="failed", reason=None, failures=[{"kind": "not run", "message": why}])
        order = list(listed) + [n for n in cases if n not in listed]
        self.cases = [cases[n] for n in order] if self.compiled else []  # not compiled: every exercise unsolved

    def undeclared(self):
        """Cases whose suite names no exercise of HINTS.md (a course bug: every case declares its exercise)."""
        return [c for c in self.cases if c["exercise"] not in self.exercises]

    def of(self, exercise, status=None):
        return [c for c in self.cases if c["exercise"] == exercise and (status is None or c["status"] == status)]

    def state(self, exercise):
        """solved (every case passed), unsolved (one failed, or none ran) or untested (none failed, some
        skipped: not counted as solved)."""
        cases = self.of(exercise)
        if not self.compiled or not cases or self.of(exercise, "failed"):
            return "unsolved"
        return "untested" if self.of(exercise, "skipped") else "solved"

    def solved(self):
        return sum(self.state(e) == "solved" for e in self.exercises)

    def unsolved(self):
        return [e for e in self.exercises if self.state(e) == "unsolved"]

    def done(self):
        return os.path.isfile(self.path + ".run.json") and self.compiled and not self.unsolved()

    def skip_reasons(self):
        """{reason: number of cases skipped for it}"""
        return Counter(c.get("reason") or "no reason given" for c in self.cases if c["status"] == "skipped")


def read_json_lines(path):
    """The objects of a results file; a line cut short by a dying program is left out."""
    out = []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.readlines()
    except OSError:
        return out
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


# --- the loop --------------------------------------------------------------------------------------------
class Loop:
    def __init__(self, root):
        self.course = Course(root)
        self.root = root

    def results(self, stem):
        return Results(self.course, stem)

    def build(self, stems, quiet):
        """Builds the chapters' exercise test programs; Ninja goes on past one that does not compile."""
        targets = [f"ch{s}_exercise_test" for s in stems]
        command = os.environ.get("COURSE_BUILD_COMMAND")
        if command:
            cmd = [*command.split(), *targets]
        else:
            cmd = ["cmake", "--build", self.course.build]
            for t in targets:
                cmd += ["--target", t]
            cmd += ["--", "-k", "0"]
        if quiet:
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            return
        say(f"building {' '.join(targets)}")
        compact = [sys.executable, "-u", os.path.join(self.root, "cmake", "compact_progress.py"), "ninja"]
        if sys.stdout.isatty():
            compact.append("--tty")
        build = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        subprocess.run(compact, stdin=build.stdout)
        build.wait()

    def refresh(self, stems, quiet=False):
        """Rebuilds and reruns the chapters whose results are out of date."""
        stale = [s for s in stems if self.results(s).stale()]
        if stale:
            self.build(stale, quiet)
            for stem in stale:
                self.results(stem).run()

    def started(self, stem, results):
        """The learner has begun the chapter: an exercise passes, or a source was saved after the checkout
        wrote the chapter's HINTS.md (a checkout writes both within a second)."""
        if results.solved() > 0:
            return True
        return self.last_save(stem) > (mtime(os.path.join(self.root, "exercises", stem, "HINTS.md")) or 0) + 2

    def last_save(self, stem):
        folder = os.path.join(self.root, "exercises", stem)
        return max([mtime(os.path.join(folder, f)) or 0 for f in os.listdir(folder)
                    if f.endswith((".cpp", ".cu", ".hpp"))] + [0])

    def in_progress(self, all_results):
        """The first chapter not done, from the started chapter saved last (from chapter 01 when none is
        started); the last chapter when every one is done."""
        stems = self.course.stems
        started = [s for s in stems if self.started(s, all_results[s])]
        latest = max(started, key=self.last_save) if started else stems[0]
        start = stems.index(latest)
        for k in range(len(stems)):
            stem = stems[(start + k) % len(stems)]
            if not all_results[stem].done():
                return stem
        return stems[-1]

    def hints_seen(self, stem, exercise):
        try:
            with open(os.path.join(self.course.check_dir, "hints", stem, exercise)) as f:
                return int(f.read().strip() or 0)
        except (OSError, ValueError):
            return 0

    # --- what is printed ---
    def list_lines(self, all_results, focus):
        lines = ["Your progress, chapter by chapter (./course check NN checks one):"]
        for stem in self.course.stems:
            r = all_results[stem]
            if not r.compiled:
                state = "does not compile"
            elif r.done():
                untested = [e for e in r.exercises if r.state(e) == "untested"]
                state = "done" + (f" ({len(untested)} not tested here)" if untested else "")
            elif r.solved() > 0 or self.started(stem, r):
                state = f"started: next {r.unsolved()[0]}"
            else:
                state = "not started"
            if stem == focus:
                state += "   <- you are here"
            lines.append(wrap(f"{stem[:2]} {stem[3:]:<12} {r.solved():2d} of {len(r.exercises):2d}  {state}", "  ",
                              " " * 6))
        return lines

    def progress_line(self, all_results, focus):
        solved = sum(r.solved() for r in all_results.values())
        total = sum(len(r.exercises) for r in all_results.values())
        r = all_results[focus]
        return wrap(f"Progress: chapter {focus[:2]}: {r.solved()} of {len(r.exercises)} exercises solved; "
                    f"the course: {solved} of {total}.")

    def failure_lines(self, failure):
        """One failure of a case, as the learner reads it: where, what, the values, what was logged."""
        kind = failure.get("kind")
        where = f"{self.relative(failure['file'])}:{failure['line']}: " if failure.get("file") else ""
        lines = []
        if kind == "assert":
            a = failure
            head = f"{a['assertion']}( {a['expression']} )"
            if a.get("expected_type") or a.get("expected_message"):
                expected = ", ".join(x for x in (f"\"{a.get('expected_message')}\"" if a.get("expected_message")
                                                 else "", a.get("expected_type", "")) if x)
                head = f"{a['assertion']}( {a['expression']}, {expected} )"
            lines.append(wrap(where + head, "  ", "      "))
            if a.get("threw") and a["assertion"].endswith(("THROWS_AS", "THROWS_WITH", "THROWS_WITH_AS")):
                lines += text_lines("threw another exception, or another message: " + unquoted(a.get("exception")))
            elif a.get("threw"):
                lines += text_lines("threw: " + unquoted(a.get("exception")))
            elif "THROWS" in a["assertion"]:
                lines.append("    did not throw")
            elif a.get("values"):
                lines.append(wrap("values: " + a["values"], "    ", "            "))
        elif kind in ("exception", "crash", "not run"):
            label = {"exception": "the case threw: ", "crash": "CRASHED: ", "not run": ""}[kind]
            lines += text_lines(label + failure.get("message", ""), "  ")
        else:
            lines += text_lines(where + failure.get("message", ""), "  ")
        for subcase in failure.get("subcases", []):
            lines.append(wrap("in subcase: " + subcase, "    ", "      "))
        for context in failure.get("context", []):
            lines.append(wrap("with " + context, "    ", "      "))
        return lines

    def relative(self, path):
        if os.path.isabs(path):
            return os.path.relpath(path, self.root)
        return re.sub(r"^(\.\./)+", "", path)

    def skipped_lines(self, r):
        lines = []
        for reason, n in r.skip_reasons().items():
            lines.append(wrap(f"{n} test case{'s' if n > 1 else ''} skipped: {reason}", "  ", "    "))
        untested = [e for e in r.exercises if r.state(e) == "untested"]
        if untested:
            parts = [f"{e} ({len(r.of(e, 'skipped'))} of {len(r.of(e))} cases skipped)" for e in untested]
            lines.append(wrap("Not tested here, so not counted as solved: " + ", ".join(parts), "  ", "    "))
        return lines

    @staticmethod
    def undeclared_lines(stem, r):
        undeclared = r.undeclared()
        return [wrap(f"test cases of chapter {stem[:2]} credited to no exercise of its HINTS.md (a course bug): "
                     + "; ".join(f"{c['name']} (suite {c['suite']})" for c in undeclared))] if undeclared else []

    def report(self, stem, r):
        """The chapter's state; with an unsolved exercise, its failures, hint and page. True when done."""
        page = self.course.read_line(stem)
        out = []
        if not r.compiled:
            out += ["", f"chapter {stem[:2]} ({stem[3:]}) does not compile: the compiler's first error is above.",
                    f"  Your code: exercises/{stem}/", wrap(page, "  Read:      ", " " * 13)]
            print("\n".join(out))
            return False
        out += self.undeclared_lines(stem, r)
        unsolved = r.unsolved()
        if not unsolved:
            skipped = r.skip_reasons()
            out.append(wrap(f"chapter {stem[:2]} ({stem[3:]}): every exercise passes its tests"
                            + (" that ran here." if skipped else ".")))
            out += self.skipped_lines(r)
            print("\n".join(out))
            return True
        first = unsolved[0]
        failing = r.of(first, "failed")
        if failing:
            out += ["", wrap(f"chapter {stem[:2]} ({stem[3:]}) is not done yet: {first} fails {len(failing)} of "
                             f"{len(r.of(first))} test cases.")]
        else:
            out += ["", wrap(f"chapter {stem[:2]} ({stem[3:]}) is not done yet: {first} has no test cases (each case "
                             "names its exercise in a suite \"NN_name/exercise\").")]
        out += [wrap(c["name"], "  ✗ ", "    ") for c in failing]
        if failing:
            case = failing[0]
            n = len(case["failures"])
            out += ["", wrap(f"The first failing case, \"{case['name']}\": {n} failure{'s' if n != 1 else ''}"
                             + (":" if n else "."))]
            previous = None
            for failure in case["failures"]:
                lines = self.failure_lines(failure)
                if failure.get("threw") and previous and failure.get("exception") == previous.get("exception"):
                    lines = [lines[0], "    threw the same exception"]  # a skeleton's, at every call
                out += lines
                previous = failure
            if r.died_in and r.died_in == case["name"]:
                out.append(wrap(f"(the test program died here, status {r.exit}: the cases after this one did not"
                                " run; all its output: build/default/check/" + stem + ".out)", "    ", "    "))
        hints = self.course.hints(stem).get(first, [])
        seen = max(1, self.hints_seen(stem, first))
        out += ["", f"Hint ({first}, {min(seen, len(hints))} of {len(hints)}):"]
        if hints:
            out.append(wrap(hints[min(seen, len(hints)) - 1], "  "))
        if seen < len(hints):
            out.append(f"  Next hint:   ./course hint {stem[:2]}   (hint {seen + 1} of {len(hints)}; one more per call)")
        else:
            out.append(f"  All hints:   ./course hint {stem[:2]} --all")
        out.append(wrap(f"exercises/{stem}/{stem[3:]}.cpp ({first}; look for TODO(learner):)", "  Your code:   ",
                        " " * 15))
        out.append(wrap(page, "  Read:        ", " " * 15))
        others = [f"{e} ({len(r.of(e, 'failed'))} failing)" if r.of(e) else f"{e} (no test cases)"
                  for e in unsolved[1:]]
        if others:
            out.append(wrap("Also unsolved in this chapter: " + ", ".join(others), "  ", "    "))
        out += self.skipped_lines(r)
        print("\n".join(out))
        return False

    # --- the commands ---
    def all_results(self):
        return {s: self.results(s) for s in self.course.stems}

    def check(self, args):
        if len(args) > 1:
            raise UsageError("check takes at most one chapter number")
        focus = self.course.stem_of(args[0]) if args else None
        if focus:
            # The chapter asked for first, so its compiler errors are the ones on screen; then the others, for
            # the progress line (those already up to date cost nothing).
            self.refresh([focus])
            if any(self.results(s).stale() for s in self.course.stems):
                say("the other chapters, for the progress line (only those changed since the last check)")
                self.refresh(self.course.stems, quiet=True)
            all_results = self.all_results()
        else:
            self.refresh(self.course.stems)
            all_results = self.all_results()
            focus = self.in_progress(all_results)
            print()
            print("\n".join(self.list_lines(all_results, focus)))
        done = self.report(focus, all_results[focus])
        print()
        print(self.progress_line(all_results, focus))
        return 0 if done else 1

    def list(self, args):
        if args:
            raise UsageError("list takes no arguments")
        self.refresh(self.course.stems, quiet=True)
        all_results = self.all_results()
        print("\n".join(self.list_lines(all_results, self.in_progress(all_results))))
        print("\n".join(line for s in self.course.stems for line in self.undeclared_lines(s, all_results[s])))
        solved = sum(r.solved() for r in all_results.values())
        total = sum(len(r.exercises) for r in all_results.values())
        print(f"The course: {solved} of {total} exercises solved.")
        return 0

    def hint(self, args):
        show_all = "--all" in args
        numbers = [a for a in args if a != "--all"]
        if len(numbers) > 1:
            raise UsageError("hint takes at most one chapter number (and --all)")
        if numbers:
            stem = self.course.stem_of(numbers[0])
            if not show_all:
                self.refresh([stem], quiet=True)
        else:
            self.refresh(self.course.stems, quiet=True)
            stem = self.in_progress(self.all_results())
        if show_all:
            with open(hints_md.hints_path(self.root, stem), encoding="utf-8") as f:
                # A numbered hint's indented lines continue it: joined first, so the hint wraps as one paragraph.
                units = []
                for line in f.read().rstrip("\n").split("\n"):
                    if units and re.match(r"^\s+\S", line) and re.match(r"^\d+\. ", units[-1]):
                        units[-1] += " " + line.strip()
                    else:
                        units.append(line)
                for line in units:
                    indent = re.match(r"^(\d+\. |\s*)", line).group(1)
                    print(wrap(line[len(indent):], indent, " " * len(indent) if indent.strip() else indent)
                          if line.strip() else "")
            return 0
        r = self.results(stem)
        unsolved = r.unsolved()
        if not unsolved:
            print(f"Chapter {stem[:2]} ({stem[3:]}): every exercise passes its tests; no hint needed.")
            print(f"  Every hint of the chapter: ./course hint {stem[:2]} --all")
            return 0
        exercise = unsolved[0]
        hints = self.course.hints(stem)[exercise]
        level = min(self.hints_seen(stem, exercise) + 1, len(hints))
        folder = os.path.join(self.course.check_dir, "hints", stem)
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, exercise), "w") as f:
            f.write(f"{level}\n")
        print(f"Chapter {stem[:2]} ({stem[3:]}), {exercise}: hint {level} of {len(hints)}")
        print(wrap(hints[level - 1], "  "))
        print()
        if level < len(hints):
            print(f"Stuck still? ./course hint {stem[:2]} shows hint {level + 1}, which gives more away.")
        else:
            print(f"That was the last hint for {exercise}. All of the chapter's: ./course hint {stem[:2]} --all")
        return 0

    def watch(self, args):
        if len(args) > 1:
            raise UsageError("watch takes at most one chapter number")
        folder = os.path.join(self.root, "exercises", *(self.course.stem_of(a) for a in args))
        if subprocess.run(["sh", "-c", "command -v inotifywait"], stdout=subprocess.DEVNULL).returncode != 0:
            print("course: watch needs inotifywait (Debian package inotify-tools): ./course setup installs it",
                  file=sys.stderr)
            return 1

        def stop(*_):
            print("\ncourse: watch stopped.", flush=True)
            os._exit(0)

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        while True:
            print("\033[2J\033[H", end="", flush=True)
            self.check(args)
            print(f"\nWatching {os.path.relpath(folder, self.root)} for saves (Ctrl-C stops).", flush=True)
            # Editors save by writing, by renaming a temporary file over the original, or both.
            subprocess.run(["inotifywait", "-q", "-q", "-r", "-e", "close_write", "-e", "moved_to", "-e", "create",
                            "--exclude", r"(\.sw[a-z]+|~|/\.#[^/]*|/4913)$", folder])
            time.sleep(0.2)  # let the editor finish a save made of several events


def main(argv):
    if len(argv) < 2:
        print(USAGE, file=sys.stderr)
        return 2
    root, command, args = argv[0], argv[1], argv[2:]
    loop = Loop(os.path.abspath(root))
    commands = {"check": loop.check, "list": loop.list, "hint": loop.hint, "watch": loop.watch}
    try:
        if command not in commands:
            raise UsageError(f"unknown command '{command}'")
        return commands[command](args)
    except UsageError as e:
        print(f"course: {e}\n{USAGE}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
