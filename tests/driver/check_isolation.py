#!/usr/bin/env python3
"""Each exercise is checked on its own: a case credited to exercise E fails only because of E.

usage: check_isolation.py ROOT [NN ...] [--jobs N] [--keep DIR]

For every exercise E of every chapter (the '## name' headings of exercises/NN_name/HINTS.md, in the order the
loop asks for them), two variants of the chapter's exercise test program, linked from one pair of objects per
chapter:
  - only E left as its skeleton, every other exercise its reference solution: E's cases fail (a case that
    passes without E cannot tell E's absence), and the cases of the exercises before E pass (they must not
    need E, which the learner writes later);
  - E and the exercises before it written (their reference solutions), those after it skeletons, where a
    learner working in order stands: every case of E passes.
So a case credited to E fails only because of E: it may use the exercises before E (a learner's E calls their
own, as the reference does), never one after. A case that needs a later exercise is credited to the last
exercise it needs, or calls the reference of the other (the oracle, the chapter's own code).

How: each chapter's two track sources are compiled once more with -fPIC, where GCC keeps every call to a
function of default visibility a call (semantic interposition: no inlining or cloning across them), so a
solution calling another exercise really calls whichever definition the link picks. Per variant, objcopy
--weaken-symbol makes E's definitions weak in one object and every other definition weak in the other; the
linker takes the strong ones. The test program's own objects and libraries are the build's (build/default,
built first: cmake --build build/default --target attn_exercise_tests). Each variant's results are read from
its results file (tests/support/results.hpp). A case skipped here (no GPU) checks nothing and is counted.
Status 1 when some exercise is not checked on its own.
"""
import concurrent.futures
import glob
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "driver"))
import hints  # noqa: E402  (driver/hints.py: the one reader of HINTS.md)

CHAPTER_CODE = "*: chapter code"




def owner(demangled, exercises):
    """The exercise a symbol defines part of: its function, or a member of its class, or None."""
    qualified = demangled.split("(")[0]
    for e in exercises:
        if qualified == e or qualified.endswith("::" + e) or f"::{e}::" in qualified or qualified.startswith(e + "::"):
            return e
    return None


def defined_globals(obj):
    """[(mangled, demangled)] of the global symbols obj defines."""
    def nm(*flags):
        out = subprocess.run(["nm", "--defined-only", *flags, obj], capture_output=True, text=True, check=True).stdout
        return [line.split(" ", 2) for line in out.splitlines() if line.count(" ") >= 2]
    plain, pretty = nm(), nm("-C")
    return [(m[2], d[2]) for m, d in zip(plain, pretty) if m[1] in "TWVDBRGSuiv" or m[1].isupper()]


class Chapter:
    def __init__(self, root, build, stem, scratch, compdb):
        self.root, self.build, self.stem, self.scratch = root, build, stem, os.path.join(scratch, stem)
        os.makedirs(self.scratch, exist_ok=True)
        self.exercises = hints.exercise_names(root, stem)
        self.compdb = compdb
        self.program = f"ch{stem}_exercise_test"

    def ninja_commands(self, target):
        out = subprocess.run(["ninja", "-C", self.build, "-t", "commands", target], capture_output=True, text=True,
                             check=True).stdout
        return out.strip().splitlines()

    def link_command(self, program):
        """Ninja's link step of bin/program (": && c++ ... -o bin/PROGRAM ... && cd ... && cmake ...")."""
        words = shlex.split(self.ninja_commands(f"bin/{program}")[-1])
        segments, current = [], []
        for w in words + ["&&"]:
            if w == "&&":
                segments.append(current)
                current = []
            else:
                current.append(w)
        return next(seg for seg in segments if "-o" in seg and f"bin/{program}" in seg)

    def prepare(self):
        """The link commands of the exercise test program and of the other programs on the learner's code it
        may start (chapter 13's MPI program), and each track's objects compiled with -fPIC."""
        others = [os.path.basename(p) for p in glob.glob(os.path.join(self.build, "bin", f"ch{self.stem}_*exercise"))]
        self.links = {p: self.link_command(p) for p in [self.program] + others}
        self.objects = {"exercise": self.track_objects("exercise"), "solution": self.track_objects("solution")}
        self.symbols = {t: {o: defined_globals(o) for o in objs} for t, objs in self.objects.items()}

    def track_objects(self, track):
        """The track library's objects: its C++ sources compiled again with -fPIC, the rest (CUDA) as built."""
        out = []
        for source in sorted(glob.glob(os.path.join(self.root, f"{track}s", self.stem, "*"))):
            entry = self.compdb.get(os.path.realpath(source))
            if entry is None:
                continue  # not built here (a .cu without CUDA), or no source (HINTS.md)
            obj = os.path.join(self.scratch, f"{track}-{os.path.basename(source)}.o")
            args = shlex.split(entry["command"])
            if source.endswith(".cpp"):
                args = self.pic(args, obj)
                subprocess.run(args, cwd=entry["directory"], check=True)
            else:
                built = os.path.join(entry["directory"], args[args.index("-o") + 1])
                if not os.path.isfile(built):
                    sys.exit(f"isolation: {built} is not built: cmake --build --preset exercises first")
                shutil.copy(built, obj)
            out.append(obj)
        return out

    @staticmethod
    def pic(args, obj):
        """A compile command made for the check: position-independent with semantic interposition (calls to
        the contract's functions stay calls), no precompiled header (built without -fPIC), no dependency
        file, into obj."""
        out, skip = [], 0
        for k, a in enumerate(args):
            if skip:
                skip -= 1
                continue
            if a in ("-include",) and args[k + 1].endswith("cmake_pch.hxx"):
                skip = 1
                continue
            if a in ("-MF", "-MT", "-o"):
                skip = 1
                continue
            if a in ("-MD", "-Winvalid-pch", "-Werror", "-fpch-preprocess"):
                continue
            out.append(a)
        return out + ["-fPIC", "-fsemantic-interposition", "-o", obj]

    def variant(self, name, from_solution):
        """A test program whose exercises in from_solution (and the code no exercise owns) come from the
        solution track, and every other exercise from the exercise track (its skeleton); returns its path."""
        objs = []
        for track in ("solution", "exercise"):
            for obj in self.objects[track]:
                def taken_from_solution(demangled):
                    e = owner(demangled, self.exercises)
                    return e is None or e in from_solution
                weak = [m for m, d in self.symbols[track][obj] if taken_from_solution(d) != (track == "solution")]
                out = os.path.join(self.scratch, f"{name}-{track}-{os.path.basename(obj)}")
                with open(out + ".weak", "w") as f:
                    f.write("\n".join(weak) + "\n")
                subprocess.run(["objcopy", f"--weaken-symbols={out}.weak", obj, out], check=True)
                objs.append(out)
        # Each program keeps its name, in a folder of the variant's: a test finds its helpers beside itself.
        folder = os.path.join(self.scratch, name + ".programs")
        os.makedirs(folder, exist_ok=True)
        for program, command in self.links.items():
            link = list(command)
            at = next(k for k, a in enumerate(link) if a.endswith(f"libch{self.stem}_exercise.a"))
            link[at:at + 1] = objs
            link[link.index("-o") + 1] = os.path.join(folder, program)
            subprocess.run(link, cwd=self.build, check=True, capture_output=True)
        return os.path.join(folder, self.program)

    def run(self, program, only=None):
        """{case name: (exercise, status)} of the program's exercise cases (only E's with only)."""
        results = program + ".json"
        args = [program, f"--test-suite-exclude={CHAPTER_CODE}", "--no-version"]
        if only:
            args.append(f"--test-suite={self.stem}/{only}")
        subprocess.run(args, env=dict(os.environ, ATTN_TEST_RESULTS=results), stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, timeout=900)
        out, started = {}, None
        with open(results, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                if r["event"] == "start":
                    started = r
                elif r["event"] == "case":
                    out[r["name"]] = (r["exercise"], r["status"])
                    started = None
        if started:
            out[started["name"]] = (started["exercise"], "failed (crashed)")
        return out

    def check(self, exercise):
        """The problems of one exercise, as lines, and how many of its cases were skipped here."""
        problems, skipped = [], 0
        k = self.exercises.index(exercise)
        before, safe = self.exercises[:k], exercise.replace(":", "_")
        # Only it a skeleton: its cases fail (they tell its absence), the cases of the exercises before it pass
        # (they do not need it).
        alone = self.run(self.variant(f"{safe}-skeleton", set(self.exercises) - {exercise}))
        for name, (e, status) in alone.items():
            if e in before and status.startswith("failed"):
                problems.append(f"a case of {e} needs {exercise}, which comes after it: \"{name}\"")
            if e == exercise and status == "passed":
                problems.append(f"its case passes with {exercise} a skeleton (it cannot tell): \"{name}\"")
            skipped += e == exercise and status == "skipped"
        # It and the exercises before it written, those after it skeletons (where a learner working in order
        # stands): every case of it passes.
        mine = self.run(self.variant(f"{safe}-written", set(before) | {exercise}), only=exercise)
        if not mine:
            problems.append(f"{exercise} has no test cases")
        for name, (e, status) in mine.items():
            if status.startswith("failed"):
                problems.append(f"its case needs an exercise after {exercise}: \"{name}\"")
        return problems, skipped


def compile_database(build):
    with open(os.path.join(build, "compile_commands.json")) as f:
        return {os.path.realpath(os.path.join(e["directory"], e["file"])): e for e in json.load(f)}


def main(argv):
    args = argv[1:]
    jobs, keep, numbers = max(1, (os.cpu_count() or 2)), None, []
    while args:
        a = args.pop(0)
        if a == "--jobs":
            jobs = int(args.pop(0))
        elif a == "--keep":
            keep = args.pop(0)
        else:
            numbers.append(a)
    root = os.path.abspath(numbers.pop(0) if numbers else ".")
    build = os.path.join(root, "build", "default")
    stems = sorted(os.path.basename(d) for d in glob.glob(os.path.join(root, "chapters", "[0-9][0-9]_*")))
    if numbers:
        stems = [s for s in stems if s[:2] in {f"{int(n):02d}" for n in numbers}]
    stems = [s for s in stems if os.path.exists(os.path.join(build, "bin", f"ch{s}_exercise_test"))]
    scratch = keep or tempfile.mkdtemp(prefix="isolation-")
    compdb = compile_database(build)
    start = time.time()
    chapters = [Chapter(root, build, s, scratch, compdb) for s in stems]
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        list(pool.map(Chapter.prepare, chapters))
    print(f"isolation: {len(chapters)} chapters compiled with -fPIC in {time.time() - start:.0f} s", flush=True)
    work = [(c, e) for c in chapters for e in c.exercises]
    failed, skipped = 0, 0
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        for (c, e), (problems, skips) in zip(work, pool.map(lambda ce: ce[0].check(ce[1]), work)):
            skipped += skips
            status = "ok" if not problems else "NOT ON ITS OWN"
            print(f"  {c.stem[:2]} {e}: {status}" + (f" ({skips} cases skipped here)" if skips else ""), flush=True)
            for p in problems:
                print(f"      {p}")
            failed += bool(problems)
    print(f"isolation: {len(work) - failed} of {len(work)} exercises checked on their own"
          f"{f', {skipped} cases skipped here' if skipped else ''}; {time.time() - start:.0f} s")
    if not keep:
        shutil.rmtree(scratch, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
