#!/usr/bin/env python3
"""One home for each helper: fails when a chapter's source defines a function whose name is already defined (or
declared) in common/ or in the header of an earlier chapter, or that another source of chapters/ defines too; and
when a chapter keeps a concern that has one home in common/ to itself.

Every source of chapters/ is read: main.cpp (the story), bench.cpp (the benchmarks), the chapter's other .cpp, .inl
and .cu files, and chapter 13's MPI program. Small helpers (a number format, a max-difference, a fit, a timer) are
too short for a duplicate finder to see, so each chapter would otherwise grow its own copy. The one definition lives
in common/include/attn/ (formats, comparisons, timing, the ceilings, OpenBLAS's threads, benchmark inputs) or in the
chapter that teaches it (chapter 04's fit_power_law and exponent_between); a chapter uses it with a `using`
declaration or by its qualified name.

The concerns with one home, checked by what a chapter's source must not do itself:
  - OpenBLAS's thread count: attn/blas_threads.hpp's guards; no bare set_blas_threads() call in chapters/;
  - timing: attn::time_calls / attn::time_benchmark_calls (attn/measure.hpp); no clock read (steady_clock,
    std::clock, clock_gettime, thread_cpu_seconds) in chapters/ outside the files of CLOCK_READERS below;
  - the ceilings: attn::ceilings (attn/ceilings.hpp, STREAM's triad among them); no triad loop (a = b + s·c) and no
    ceiling of its own (a Ceilings struct or a measure_ceilings function outside chapter 06's GPU);
  - Google Benchmark: only in bench.cpp (and what it includes); a main.cpp tells the story and registers none;
    every bench.cpp declares the thread counts of its ceilings (attn::BenchCeilings), so every run reports them
    the same way (chapter 06's GPU ceilings excepted).

Usage: check_one_home.py ROOT. Prints each finding with its place; exit status 1 when there is one.
Standard library only. Relies on the course's formatting (clang-format: namespace contents not indented),
so a function at namespace scope starts in column 0 and a class member does not.
"""

import os
import re
import sys

# The story every chapter tells has the same frame: these names are meant to recur. So are the names of
# Google Benchmark functions (BM_...): each executable registers its own, under the name its report prints.
FRAME = {"main", "tell_the_story"}

SOURCE_SUFFIXES = (".cpp", ".inl", ".cu")
HEADER_SUFFIXES = (".hpp", ".cuh")

# Files of chapters/ that may read a clock themselves, and why: each measures something the one timing helper
# cannot (a phase inside one call, the CPU time of every thread of a kernel), or is code a lesson shows as it is.
CLOCK_READERS = {
    "chapters/05_flash_cpu/bench.cpp": "tile_phases times the three phases inside one tile call",
    "chapters/12_learning/main.cpp": "the lesson shows pronoun_story with its own clock (book/12_learning.md)",
    "chapters/14_state_space/scan.cpp": "the scan reports each of its threads' CPU time (ScanStats)",
    "chapters/16_real_model/fast_minilm.cpp": "ForwardProfile times each step inside one forward call (StepClock)",
}


def is_frame(name):
    return name in FRAME or name.startswith("BM_")


def is_program(file_name):
    """A chapter's programs: its story, its benchmarks, its MPI programs. Their helpers live in anonymous
    namespaces, where a copy is easiest to make and hardest to see."""
    return file_name in ("main.cpp", "bench.cpp") or file_name.endswith("_mpi.cpp") or file_name in (
        "transport.cpp", "schedule.cpp")

# The start of a function at namespace scope: return type, name, "(".
HEAD = re.compile(r"^(?:template\s*<[^;{}]*>\s*)?(?:(?:static|inline|constexpr|\[\[nodiscard\]\])\s+)*"
                  r"(?!(?:return|else|if|for|while|switch|case|using|typedef|namespace|class|struct|enum)\b)"
                  r"[A-Za-z_][\w:]*(?:<[^;{}()]*>)?(?:\s*[*&]+\s*|\s+)(?:[\w:]+::)?(~?[A-Za-z_]\w*)\s*\(",
                  re.M)


def strip_comments(text):
    """The source with comments and string literals blanked (line numbers kept)."""
    def blank(m):
        return re.sub(r"[^\n]", " ", m.group(0))
    return re.sub(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', blank, text, flags=re.S)


def code_of(path):
    with open(path, encoding="utf-8") as f:
        return strip_comments(f.read())


def parameter_types(params):
    """The types of a parameter list, names and default values left out: "const Matrix& a, int n = 2" gives
    ("const Matrix&", "int"). Two functions of one name and these types are one function defined twice."""
    parts, depth, current = [], 0, ""
    for c in params:
        if c in "<([{":
            depth += 1
        elif c in ">)]}":
            depth -= 1
        if c == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += c
    parts.append(current)
    types = []
    for part in parts:
        part = re.sub(r"=.*$", "", part, flags=re.S).strip()
        part = re.sub(r"\s+", " ", part)
        if not part or part == "void":
            continue
        m = re.match(r"^(.*?[\w>*&\]])\s*\b([A-Za-z_]\w*)\s*(\[[^\]]*\])?$", part)
        if m and m.group(1).strip() not in ("const", "unsigned", "signed", "long", "short"):
            part = m.group(1) + (m.group(3) or "")
        types.append(re.sub(r"\s*([*&])", r"\1", part).strip())
    return tuple(types)


def functions(path, definitions_only):
    """(name, line, parameter types) of each function declared or defined at namespace scope in the file."""
    text = code_of(path)
    found = []
    for m in HEAD.finditer(text):
        # After the parameter list: "{" (perhaps after const, noexcept or "-> T") is a definition, ";" a
        # declaration, anything else (an initialiser, a macro call) neither.
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        rest = re.match(r"\s*(?:const\s*)?(?:noexcept\s*)?(?:->\s*[^;{]+)?([;{])", text[i:])
        if not rest or (definitions_only and rest.group(1) != "{"):
            continue
        found.append((m.group(1), text.count("\n", 0, m.start()) + 1, parameter_types(text[m.end():i - 1])))
    return found


# What a chapter's source must not do itself: (pattern in the code, comments and strings blanked, what to use).
CONCERNS = [
    (re.compile(r"\bset_blas_threads\s*\("),
     "sets OpenBLAS's thread count bare: hold a guard, attn::BlasThreads or attn::SingleThreadedBlas "
     "(attn/blas_threads.hpp)"),
    (re.compile(r"\b(?:\w+)\[\s*(\w+)\s*\]\s*=\s*(?:\w+)\[\s*\1\s*\]\s*\+\s*\w+\s*\*\s*(?:\w+)\[\s*\1\s*\]"),
     "runs a STREAM triad of its own: the triad is one of the run's ceilings, attn::ceilings(threads).triad "
     "(attn/ceilings.hpp)"),
    (re.compile(r"^\s*(?:struct|class)\s+\w*Ceilings\b|^[\w:<> ]*\bmeasure_ceilings\s*\(", re.M),
     "measures ceilings of its own: the CPU's are attn::ceilings (attn/ceilings.hpp), declared by "
     "attn::BenchCeilings in bench.cpp"),
]
CLOCK = re.compile(r"\bsteady_clock\b|\bhigh_resolution_clock\b|\bstd::clock\s*\(|\bclock_gettime\s*\(|"
                   r"\bthread_cpu_seconds\s*\(")
BENCHMARK_CODE = re.compile(r"\bBENCHMARK\w*\s*\(|\bbenchmark::State\b")
# Chapter 06's GPU ceilings (cuBLAS, bf16 tensor cores, device memory) have no CPU twin in common/.
GPU_CEILINGS = "chapters/06_flash_cuda/"


def concern_findings(root, path):
    """Places where the chapter source at \\p path keeps a concern of common/ to itself."""
    rel = os.path.relpath(path, root)
    with open(path, encoding="utf-8") as f:
        raw = f.read()
    text = strip_comments(raw)
    line_of = lambda pos: text.count("\n", 0, pos) + 1
    found = []
    for pattern, what in CONCERNS:
        if "Ceilings" in pattern.pattern and rel.startswith(GPU_CEILINGS):
            continue
        for m in pattern.finditer(text):
            found.append("%s:%d %s" % (rel, line_of(m.start()), what))
    if rel not in CLOCK_READERS:
        for m in CLOCK.finditer(text):
            found.append("%s:%d reads a clock itself: time with attn::time_calls or attn::time_benchmark_calls "
                         "(attn/measure.hpp)" % (rel, line_of(m.start())))
    if os.path.basename(path) == "bench.cpp" and not rel.startswith(GPU_CEILINGS) and \
            not re.search(r"\battn::BenchCeilings\b", text):
        found.append("%s:1 declares no attn::BenchCeilings: every chapter's run reports the machine's ceilings the "
                     "same way, in its header (attn/ceilings.hpp)" % rel)
    if os.path.basename(path) == "main.cpp":
        lines = raw.splitlines()
        for i, line in enumerate(lines):
            if line.startswith("#include <benchmark/"):
                found.append("%s:%d includes Google Benchmark: the benchmarks live in the chapter's bench.cpp"
                             % (rel, i + 1))
        for m in BENCHMARK_CODE.finditer(text):
            found.append("%s:%d holds Google Benchmark code: the benchmarks live in the chapter's bench.cpp"
                         % (rel, line_of(m.start())))
    return found


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = sys.argv[1]
    rel = lambda p: os.path.relpath(p, root)

    # name -> [(parameter types, "file:line")] of its declarations and definitions: in common/ (common_homes), and
    # in common/ and the chapter headers seen so far (homes).
    homes = {}
    common = os.path.join(root, "common", "include", "attn")
    for name in sorted(os.listdir(common)):
        if name.endswith(".hpp"):
            for f, line, types in functions(os.path.join(common, name), definitions_only=False):
                homes.setdefault(f, []).append((types, "%s:%d" % (rel(os.path.join(common, name)), line)))
    common_homes = {f: list(places) for f, places in homes.items()}

    chapters = sorted(d for d in os.listdir(os.path.join(root, "chapters")) if re.match(r"\d\d_", d))
    problems, programs_defining = [], {}
    checked = 0
    for stem in chapters:
        folder = os.path.join(root, "chapters", stem)
        # main.cpp first, so that a duplicate is reported at the copy in bench.cpp or another program.
        sources = sorted((n for n in os.listdir(folder) if n.endswith(SOURCE_SUFFIXES)),
                         key=lambda n: (n != "main.cpp", n))
        for name in sources:
            path = os.path.join(folder, name)
            program = is_program(name)
            checked += 1
            problems.extend(concern_findings(root, path))
            for f, line, types in functions(path, definitions_only=True):
                where = "%s:%d" % (rel(path), line)
                if program:
                    # A program's helper matches by name alone: a second helper of one name is a copy even when
                    # its parameters drifted. It may not repeat common/, an earlier chapter's header, or another
                    # program's helper.
                    home = next((w for _, w in homes.get(f, [])), None)
                    twin = next((w for w in programs_defining.get(f, []) if not w.startswith(rel(path) + ":")), None)
                else:
                    # A chapter's library code (its kernels, its data) may reuse a name in its own namespace, and
                    # define a function twice in the branches of an #if: it may not define again a function of
                    # common/, the same name with the same parameter types.
                    home = next((w for t, w in common_homes.get(f, []) if t == types), None)
                    twin = None
                if home:
                    problems.append("%s defines %s(), which already lives in %s: use that one" % (where, f, home))
                elif twin and not is_frame(f):
                    problems.append("%s defines %s(), as %s does: give it one home (common/ or the chapter "
                                    "that teaches it)" % (where, f, twin))
                if program:
                    programs_defining.setdefault(f, []).append(where)
        # This chapter's headers are "earlier chapters" for the chapters after it.
        for header in sorted(os.listdir(folder)):
            if header.endswith(HEADER_SUFFIXES):
                checked += 1
                problems.extend(concern_findings(root, os.path.join(folder, header)))
                for f, line, types in functions(os.path.join(folder, header), definitions_only=False):
                    homes.setdefault(f, []).append((types, "%s:%d" % (rel(os.path.join(folder, header)), line)))

    for p in problems:
        print(p)
    print("one home per concern: %d source files of %d chapters checked against common/, the earlier chapters' "
          "headers and each other; %d findings" % (checked, len(chapters), len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
