#!/usr/bin/env python3
"""The course's rules for its C++ sources, each traced to a bug it had, read with one reader (course_source.py).

usage: check_sources.py ROOT [RULE ...]   (no RULE: all of them)

Each finding prints as `file:line: rule: message`; exit status 1 when there is one. Before reading the course,
each rule runs on a few made-up files of its own (RULES' cases): one it must report, one it must not, so that a
rule that silently stops matching fails too. Standard library only.
"""
import os
import re
import sys
from pathlib import PurePosixPath

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from course_source import Source, declarations, function, matching  # noqa: E402

SUFFIXES = (".cpp", ".hpp", ".inl", ".cu", ".cuh")


class Tree:
    """The course's sources: path from the root -> text (a dict of made-up files in the self-tests)."""

    def __init__(self, files, made_up=True):
        self.files, self.made_up, self._sources = files, made_up, {}

    @staticmethod
    def read(root):
        files = {}
        for top in ("chapters", "common", "solutions", "exercises", "tests"):
            for base, _, names in os.walk(os.path.join(root, top)):
                for name in names:
                    if name.endswith(SUFFIXES):
                        with open(os.path.join(base, name), encoding="utf-8") as f:
                            files[os.path.relpath(os.path.join(base, name), root)] = f.read()
        return Tree(files, made_up=False)

    def glob(self, pattern):
        return sorted(p for p in self.files if p.count("/") == pattern.count("/") and PurePosixPath(p).match(pattern))

    def source(self, path):
        return self._sources.setdefault(path, Source(self.files[path]))


RULES = {}  # name -> (check(tree) -> [(path, line, message)], what it guards, [(made-up files, findings expected)])


def rule(name, why, cases):
    def register(check):
        RULES[name] = (check, why, cases)
        return check
    return register


def split(s, brackets="([{", closing=")]}"):
    """[(start, end)] of the top-level comma-separated parts of s."""
    parts, depth, start = [], 0, 0
    for k, c in enumerate(s):
        depth += (c in brackets) - (c in closing)
        if c == "," and depth == 0:
            parts.append((start, k))
            start = k + 1
    return parts + [(start, len(s))]


def test_cases(src):
    """[(body start, body end)] of each TEST_CASE's braces."""
    code = src.code()
    return [(b, matching(code, b)) for m in re.finditer(r"\bTEST_CASE\s*\(", code)
            for b in [code.find("{", matching(code, m.end() - 1))]]


# --- one home: one definition of each helper, one home for each concern -------------------------------------------

FRAME = {"main", "tell_the_story"}  # every story's frame, meant to recur (and Google Benchmark's BM_ functions)
CLOCK_READERS = {  # files of chapters/ that read a clock themselves, and why
    "chapters/05_flash_cpu/bench.cpp": "tile_phases times the three phases inside one tile call",
    "chapters/12_learning/main.cpp": "the lesson shows pronoun_story with its own clock (book/12_learning.md)",
    "chapters/14_state_space/scan.cpp": "the scan reports each of its threads' CPU time (ScanStats)",
    "chapters/16_real_model/fast_minilm.cpp": "ForwardProfile times each step inside one forward call (StepClock)",
}
GPU_CEILINGS = "chapters/06_flash_cuda/"  # chapter 06's GPU ceilings have no CPU twin in common/
CONCERNS = [  # (pattern in the code, what to use instead)
    (r"\bset_blas_threads\s*\(", "sets OpenBLAS's thread count bare: hold a guard, attn::BlasThreads or "
     "attn::SingleThreadedBlas (attn/blas_threads.hpp)"),
    (r"\b\w+\[\s*(\w+)\s*\]\s*=\s*\w+\[\s*\1\s*\]\s*\+\s*\w+\s*\*\s*\w+\[\s*\1\s*\]", "runs a STREAM triad of its "
     "own: the triad is one of the run's ceilings, attn::ceilings(threads).triad (attn/ceilings.hpp)"),
    (r"(?m)^\s*(?:struct|class)\s+\w*Ceilings\b|^[\w:<> ]*\bmeasure_ceilings\s*\(", "measures ceilings of its own: "
     "the CPU's are attn::ceilings (attn/ceilings.hpp), declared by attn::BenchCeilings in bench.cpp"),
    (r"\bsteady_clock\b|\bhigh_resolution_clock\b|\bstd::clock\s*\(|\bclock_gettime\s*\(|\bthread_cpu_seconds\s*\(",
     "reads a clock itself: time with attn::time_calls or attn::time_benchmark_calls (attn/measure.hpp)"),
    (r"(?m)^#include <benchmark/|\bBENCHMARK\w*\s*\(|\bbenchmark::State\b",
     "holds Google Benchmark code: the benchmarks live in the chapter's bench.cpp"),
]


def parameter_types(params):
    """"const Matrix& a, int n = 2" gives ("const Matrix&", "int"): one name and these types is one function."""
    types = []
    for a, b in split(params, "<([{", ">)]}"):
        part = re.sub(r"\s+", " ", params[a:b].split("=")[0]).strip()
        m = re.match(r"^(.*?[\w>*&\]])\s*\b[A-Za-z_]\w*\s*(\[[^\]]*\])?$", part)
        if m and m.group(1).strip() not in ("const", "unsigned", "signed", "long", "short"):
            part = m.group(1) + (m.group(2) or "")
        if part not in ("", "void"):
            types.append(re.sub(r"\s*([*&])", r"\1", part).strip())
    return tuple(types)


def namespace_functions(src, definitions_only):
    """[(name, line, parameter types)] of the functions declared or defined at namespace scope."""
    out = []
    for scopes, statement, start, end in declarations(src.code()):
        f = function(statement)
        if f and all(s[0] == "ns" for s in scopes) and not f[0].startswith("operator") and \
                f[2] != f[0] + "::" and (end == "{" or not definitions_only):
            out.append((f[0], src.line(start + len(statement) - len(statement.lstrip())), parameter_types(f[1])))
    return out


def inline_differences(path, src):
    """xt::amax(xt::abs(A - B)) of two tensors: attn::max_abs_diff(A, B) is its home (a number is exempt)."""
    code, found = src.code(), []
    for m in re.finditer(r"\bxt::amax\s*\(\s*xt::abs\s*\(", code):
        arg, depth = code[m.end():matching(code, m.end() - 1) - 1], 0
        for k, c in enumerate(arg):
            depth += (c in "([{") - (c in ")]}")
            if c == "-" and depth == 0 and arg[k + 1:k + 2] not in ">-=" and re.search(r"[\w)\]]\s*$", arg[:k]):
                if not any(re.fullmatch(r"[\d.]+(?:e[-+]?\d+)?f?", s.strip()) for s in (arg[:k], arg[k + 1:])):
                    found.append((path, src.line(m.start()), "takes the largest |A - B| inline: call "
                                  "attn::max_abs_diff(A, B) (attn/stats.hpp), its one home"))
                break
    return found


@rule("one-home", "a helper defined again (a format, a max-difference, a fit, a timer) or a concern of common/ kept "
      "by a chapter: a duplicate too short for a duplicate finder", [
          ({"common/include/attn/stats.hpp": "namespace attn {\ndouble max_abs_diff(const Matrix& a, const Matrix& b);\n}",
            "chapters/01_a/main.cpp": "namespace {\ndouble max_abs_diff(const Matrix& x, const Matrix& y) { return 0; }\n"
            "auto t = std::chrono::steady_clock::now();\ndouble e = xt::amax(xt::abs(A - f(B, C)))();\n}",
            "tests/01_a_test.cpp": "CHECK(xt::amax(xt::abs(x - y))() < 1e-6);"},
           ["max_abs_diff.*already lives", "reads a clock", "01_a/main.cpp:4: .*max_abs_diff", "01_a_test.*"]),
          ({"common/include/attn/stats.hpp": "namespace attn {\nstruct S {\n  int max_abs_diff(int a);\n};\n}",
            "chapters/01_a/main.cpp": "namespace {\nint max_abs_diff(int a) { return 0; }  // steady_clock\n"
            "double e = xt::amax(xt::abs(sums - 1.0f))() + xt::amax(xt::abs(-A))();\n}"}, []),
      ])
def one_home(tree):
    found, homes = [], {}  # homes: name -> [(parameter types, "file:line")], common/'s and the earlier headers'
    for path in tree.glob("common/include/attn/*.hpp"):
        for f, line, types in namespace_functions(tree.source(path), False):
            homes.setdefault(f, []).append((types, "%s:%d" % (path, line)))
    common_homes, programs = {f: list(p) for f, p in homes.items()}, {}
    for stem in sorted({p.split("/")[1] for p in tree.glob("chapters/*/*") if re.match(r"\d\d_", p.split("/")[1])}):
        # main.cpp first: a copy is reported in bench.cpp or another program.
        sources = sorted((p for p in tree.glob("chapters/%s/*" % stem) if p.endswith((".cpp", ".inl", ".cu"))),
                         key=lambda p: (not p.endswith("/main.cpp"), p))
        headers = [p for p in tree.glob("chapters/%s/*" % stem) if p.endswith((".hpp", ".cuh"))]
        for path in sources + headers:
            src, name = tree.source(path), path.rsplit("/", 1)[1]
            code = src.code()
            for pattern, what in CONCERNS:
                if ("Ceilings" in pattern and path.startswith(GPU_CEILINGS) or "clock" in pattern and
                        path in CLOCK_READERS or "benchmark" in pattern and name != "main.cpp"):
                    continue
                found += [(path, src.line(m.start()), what) for m in re.finditer(pattern, code)]
            if name == "bench.cpp" and not path.startswith(GPU_CEILINGS) and "attn::BenchCeilings" not in code:
                found.append((path, 1, "declares no attn::BenchCeilings: every chapter's run reports the machine's "
                              "ceilings the same way, in its header (attn/ceilings.hpp)"))
        for path in sources:
            # A program's helpers (main.cpp, bench.cpp, the MPI programs) match by name alone: a second helper of
            # one name is a copy even when its parameters drifted. Library code may reuse a name in its own
            # namespace, but not a function of common/ with the same parameter types.
            name = path.rsplit("/", 1)[1]
            program = name in ("main.cpp", "bench.cpp", "transport.cpp", "schedule.cpp") or name.endswith("_mpi.cpp")
            for f, line, types in namespace_functions(tree.source(path), True):
                home = next((w for t, w in (homes if program else common_homes).get(f, []) if program or t == types),
                            None)
                twin = program and next((w for w in programs.get(f, []) if not w.startswith(path + ":")), None)
                if home:
                    found.append((path, line, "defines %s(), which already lives in %s: use that one" % (f, home)))
                elif twin and f not in FRAME and not f.startswith("BM_"):
                    found.append((path, line, "defines %s(), as %s does: give it one home (common/ or the chapter "
                                  "that teaches it)" % (f, twin)))
                if program:
                    programs.setdefault(f, []).append("%s:%d" % (path, line))
        for path in headers:  # "earlier chapters" for the chapters after this one
            for f, line, types in namespace_functions(tree.source(path), False):
                homes.setdefault(f, []).append((types, "%s:%d" % (path, line)))
    for path in tree.files:
        if path.startswith(("chapters/", "solutions/", "tests/")):
            found += inline_differences(path, tree.source(path))
    return found


# --- figures: no measured figure in a code comment ----------------------------------------------------------------

# A figure true of one run on one machine goes stale while the comment stays: it belongs in a recording
# (book/recorded/), which the measurements pages read. Sizes, settings, bounds and a formula's values are fine, and
# so is an order of magnitude or a bound ("~100 ns", "at least 10% faster"); a comment that must state such a unit
# for another reason says why with `figure-ok:` on the same line.
NUMBER = r"(?<![\w.])\d+(?:[.,]\d+)?"
APPROXIMATE = r"(?<!~)(?<!about )(?<!~ )(?<!at least )"
SHARE = r"\b(?:a|one|two|three)\s+(?:half|third|quarter|fifth|tenth)s?\s+"
MEASURED = [(re.compile(p), what) for p, what in [
    (APPROXIMATE + NUMBER + r"\s*(?:ns|µs|us|ms)\b|(?<![\w.])\d+\.\d+\s*(?:CPU-)?s\b|(?<![\w.])\d+\s*[–-]\s*\d+\s*"
     r"(?:ns|µs|ms|s)\b", "a time"),
    (NUMBER + r"\s*(?:[kMGTP]?B/s|[kMGTP]?FLOP/s|[kMGTP]FLOPS|[kMGTP]?exp/s|tokens/s|sentences/s)(?!\w)", "a rate"),
    (NUMBER + r"\s*%\s+of\s+(?:the\s+|its\s+|one\s+|a\s+)?(?:[\w']+[\s-]){0,3}?(?:peak|ceiling|triad|sgemm|roofline|"
     r"bandwidth|flash_fast|bound)\b", "a percentage of a ceiling"),
    (NUMBER + r"\s*%.*" + NUMBER + r"\s*%", "percentages of a run"),
    (NUMBER + r"\s*%\s+of\s+(?:the\s+)?(?:[\w']+\s+)?samples\b", "a profile's share"),
    (NUMBER + r"\s*(?:[×x]|times)\s+(?:faster|slower|the\s+speed|as\s+fast|version|rung)\b", "a measured ratio"),
    (APPROXIMATE + NUMBER + r"\s*%\s+(?:slower|faster)\b", "a measured speed-up"),
    (SHARE + r"(?:slower|faster|(?:as\s+fast|of\s+(?:the\s+|its\s+|their\s+)?(?:[\w'’]+\s+){0,2}?(?:time|cost|speed|"
     r"runtime)\b))", "a measured share in words"),
]]
FORMAT_EXAMPLES = ("common/include/attn/format.hpp", "common/src/format.cpp")  # what the formats print


@rule("figures", "a measured figure in a code comment (a time, a rate, a share of a ceiling, a speed-up, in "
      "digits or in words): true of one run, stale after the next", [
          ({"chapters/01_a/a.cpp": "int x;  // 56 ms here\n/* at 8, 15% faster;\n a BLAS call spends a quarter of "
            "its time packing */\n// at a third of the cost\nconst char* s = \"12 ms\";"},
           ["a.cpp:1: .*a time", "a.cpp:2: .*speed-up", "a.cpp:3: .*share", "a.cpp:4: .*share"]),
          ({"chapters/01_a/a.cpp": "// n = 4096, 64 MiB, at least 10% faster, half of it causal, ~100 ns\n"
            "// a quarter of an hour, 12 ms  figure-ok: the format's example\n"}, []),
      ])
def figures(tree):
    found = []
    for path in sorted(tree.files):
        if path.startswith(("chapters/", "common/", "solutions/", "exercises/")) and path not in FORMAT_EXAMPLES:
            for _, first, comment in tree.source(path).comments():
                for i, line in enumerate(comment.split("\n")):
                    hit = next(((m, what) for p, what in MEASURED for m in [p.search(line)] if m), None)
                    if hit and "figure-ok:" not in line:
                        (m, what) = hit
                        found.append((path, first + i, "quotes %s (%s): say why without the figure, or point at the "
                                      "recording or the measurements page" % (what, m.group(0))))
    return found


# --- bad input: every public function of a chapter runs the hostile-input battery ---------------------------------

# A chapter's public functions: its headers' declarations in namespace attn (attn::chNN included, detail not), free
# functions and the public members and constructors of its classes (operators included; destructors, assignments,
# deleted and defaulted members not). Overloads share one battery. Each must run tests/support/hostile.hpp's
# battery in a TEST_CASE of tests/NN_name_test.cpp or tests/NN_name_core_test.cpp that carries the line
# `// hostile battery: name, name`, calls hostile::battery( and calls the function (`name(`, `obj.name(`, a
# constructor `Type(`, `Type{` or `Type var(`). A function without parameters has no input that can be bad; the rest
# that take nothing that can be bad are in EXEMPT, each with its reason. An MPI program's headers are left to its
# ctest cases.
EXEMPT = {
    "11_positions/BlockMask::count": "counts the tiles in state t: every Tile has a count (0 when none holds it)",
    "12_learning/zeros_like": "zeros of an existing model's shapes: that model's sizes were checked when it was made",
    "12_learning/parameters": "pointers to the model's own matrices: any model has them",
    "15_structured/zeros_like": "zeros of an existing model's shapes: that model's sizes were checked when it was made",
    "15_structured/parameters": "pointers to the model's own matrices: any model has them",
    "04_complexity/memory_refusal::memory_refusal": "an exception type: it formats the estimate guarded_attention made",
    "04_complexity/measure_heap_peak": "its one argument is the work to measure, a callable: it has no value to be bad",
    "05_flash_cpu/default_tiles_on": "fills a FastConfig; the kernels refuse threads < 1 (flash_attention_fast's battery)",
    "12_learning/make_pronoun": "takes only the random source: every draw is a valid sentence of the task",
    # Chapter 06's tile arithmetic: constexpr int, compiled for the device too (no exceptions there).
    "06_flash_cuda/fp32_smem_bytes": "device-side tile arithmetic: its d is checked first (check_shape, kernel_plans)",
    "06_flash_cuda/tc_head_dim": "device-side tile arithmetic: its d is checked first (check_shape, kernel_plans)",
    "06_flash_cuda/tc_qk_stride": "device-side tile arithmetic on tc_head_dim()'s 64 or 128",
    "06_flash_cuda/tc_smem_bytes": "device-side tile arithmetic: its d is checked first (check_shape, kernel_plans)",
    "06_flash_cuda/tc_vt_item": "device-side index arithmetic of a kernel's own work items (tested for banks)",
    "06_flash_cuda/tc_vt_word": "device-side index arithmetic of a kernel's own work items (tested for banks)",
    "06_flash_cuda/GpuWorkspace::fill_normal": "any seed names a stream of random inputs",
    "15_structured/GatherRows::row": "the CSR kernel's per-edge read: csr_attention() checks every sender < rows first",
}


def public_functions(src):
    """[(qualified name, line, has parameters)] of the public functions a chapter header declares."""
    out = []
    for scopes, statement, start, _ in declarations(src.code()):
        names = [n for s in scopes if s[0] == "ns" for n in s[1].split("::")]
        f = function(statement)
        if f and names[:1] == ["attn"] and "detail" not in names and all(s[0] == "ns" or s[2] for s in scopes) \
                and not f[2] and f[0] != "operator=":  # Class::f outside its class: declared inside it
            qualified = "::".join([s[1] for s in scopes if s[0] == "class"] + [f[0]])
            out.append((qualified, src.line(start + len(statement) - len(statement.lstrip())), f[1] not in ("", "void")))
    return out


def calls(code, name):
    """Does the code call \\p name (a function, a member through . or ->, a constructor, an operator)?"""
    *owner, short = name.split("::")
    if short == "operator()":
        return bool(owner) and re.search(r"\b%s\b" % owner[-1], code) is not None
    if short.startswith("operator"):
        return short[len("operator"):] in code
    if owner and owner[-1] == short:  # a constructor: Type(…), Type{…} or Type name(…)
        return re.search(r"\b%s\s*(?:<[^;()]*>)?\s*(?:[({]|\w+\s*[({])" % short, code) is not None
    return re.search(r"(?<![\w~])%s\s*(?:<[^;()]*>)?\s*\(" % short, code) is not None


@rule("bad-input", "a public function of a chapter that no test feeds bad input (the hostile battery)", [
    ({"chapters/99_a/a.hpp": "namespace attn {\nint tested(int n);\nint forgotten(int n);\nint constant();\n"
      "struct Thing {\n  Thing(int size);\n  int member(int i) const;\n private:\n  int hidden(int i);\n};\n"
      "namespace detail {\nint internal(int x);\n}\n}  // namespace attn\n",
      "tests/99_a_test.cpp": "TEST_CASE(\"a\") {\n  // hostile battery: tested, Thing, member\n  hostile::battery(\"t\", "
      "{}, [] { attn::Thing t(1); t.member(attn::tested(0)); }).run();\n}\nTEST_CASE(\"b\") {\n  // hostile battery: "
      "forgotten\n  attn::forgotten(1);  // runs no battery\n}\n// hostile battery: forgotten (outside a case)\n"},
     ["a.hpp:3: forgotten has no hostile battery"]),
    ({"chapters/99_a/a.hpp": "namespace attn {\nint constant();\nclass C {\n  int hidden(int i);\n};\n}\n"}, []),
])
def bad_input(tree):
    exempt = {} if tree.made_up else EXEMPT
    found, seen = [], set()
    for stem in sorted({p.split("/")[1] for p in tree.glob("chapters/*/*.hpp") if re.match(r"\d\d_", p.split("/")[1])}):
        batteries = []  # (names on the case's markers, the case's code)
        for path in ("tests/%s_test.cpp" % stem, "tests/%s_core_test.cpp" % stem):
            if path in tree.files:
                src = tree.source(path)
                for a, b in test_cases(src):
                    names = [n.strip() for start, _, c in src.comments() if a <= start < b
                             for m in re.finditer(r"//\s*hostile battery:(.*)", c) for n in m.group(1).split(",")]
                    if re.search(r"\bhostile::battery\s*\(", src.code()[a:b]):
                        batteries.append((names, src.code()[a:b]))
        for path in tree.glob("chapters/%s/*.hpp" % stem):
            if re.search(r"(?m)^#include <mpi\.h>", tree.files[path]):
                continue
            done = set()
            for name, line, has_parameters in public_functions(tree.source(path)):
                key, short = "%s/%s" % (stem, name), name.split("::")[-1]
                if key in done or not has_parameters or key in exempt:
                    seen.add(key)
                elif not any(short in names and calls(code, name) for names, code in batteries):
                    found.append((path, line, "%s has no hostile battery: a TEST_CASE in tests/%s_*test.cpp marked "
                                  "`// hostile battery: %s` that calls hostile::battery( and the function, or an "
                                  "entry in EXEMPT with the reason it needs none" % (name, stem, short)))
                done.add(key)
    return found + [("cmake/check_sources.py", 1, "EXEMPT lists %s, which no chapter header declares: remove it" % k)
                    for k in sorted(set(exempt) - seen)]


# --- wording: exercise tests check an error for what the contract says it names ------------------------------------

# In an exercise's test case (a suite "NN_name/exercise"; "NN_name: chapter code" tests the chapter's own code), a
# check binds the learner to a phrase when it is CHECK_THROWS_WITH(_AS) (REQUIRE_, WARN_) with any message, or
# CHECK_THROWS_NAMING with an item that is neither a number nor a name (tests/support/throws.hpp finds those as
# tokens, in any quoting or bracket style). It passes only when chapters/NN_name/*.hpp states that wording
# verbatim, as a phrase of its own ("node 3" is not stated by "node 33").
WITH, NAMING = r"\b(?:CHECK|REQUIRE|WARN)_THROWS_WITH(?:_AS)?\s*\(", r"\bCHECK_THROWS_NAMING\s*\("


def literal_value(text):
    """The string that adjacent literals in \\p text hold, or None when there is none."""
    parts = re.findall(r'(?:u8)?"((?:[^"\\\n]|\\.)*)"', text)
    return "".join(bytes(p, "utf-8").decode("unicode_escape").encode("latin-1").decode("utf-8")
                   for p in parts) if parts else None


@rule("wording", "an exercise test that binds the learner to an error's wording the contract does not state", [
    ({"chapters/01_a/a.hpp": "/// \\throws std::invalid_argument naming \"rows differ\".",
      "tests/01_a_test.cpp": "TEST_SUITE(\"01_a/exercise\") {\nTEST_CASE(\"x\") {\n  CHECK_THROWS_NAMING(f(), E, "
      "\"Q\", \"rows must match\");\n  CHECK_THROWS_WITH(f(), \"rows differ\");\n  CHECK_THROWS_WITH(f(), msg(3));\n}\n}"},
     ["test.cpp:3: .*rows must match", "test.cpp:5: .*exact message"]),
    ({"chapters/01_a/a.hpp": "/// \\throws std::invalid_argument naming \"rows differ\".",
      "tests/01_a_test.cpp": "TEST_CASE(\"x\" * doctest::test_suite(\"01_a/exercise\")) {\n  CHECK_THROWS_NAMING(f(\")\"),"
      " E, \"Q\", \"3\", \"rows differ\");\n}\nTEST_CASE(\"y\" * doctest::test_suite(\"01_a: chapter code\")) {\n"
      "  CHECK_THROWS_WITH(g(), \"any words\");\n}"}, []),
])
def wording(tree):
    found = []
    for path in tree.glob("tests/*_test.cpp"):
        stem = path[len("tests/"):-len("_test.cpp")]
        if not re.match(r"\d\d_", stem) or stem.endswith("_core"):
            continue
        contract = "".join(tree.files[p] for p in tree.glob("chapters/%s/*.hpp" % stem))
        src = tree.source(path)
        text, code = src.text, src.code()
        blocks = [(m.end() - 1, matching(code, m.end() - 1), text[m.start(1):m.end(1)])
                  for m in re.finditer(r"\bTEST_SUITE\s*\(\s*\"([^\"]*)\"\s*\)\s*\{", code)]
        cases = []  # (start, end, suite) of every test case
        for (a, b), m in zip(test_cases(src), re.finditer(r"\bTEST_CASE\s*\(", code)):
            decorated = re.search(r"test_suite\s*\(\s*\"([^\"]*)\"\s*\)", text[m.start():a])
            enclosing = [s for s in blocks if s[0] < m.start() < s[1]]
            cases.append((m.start(), b, decorated.group(1) if decorated else enclosing[-1][2] if enclosing else ""))
        for pattern in (WITH, NAMING):
            for m in re.finditer(pattern, code):
                suite = next((s for a, b, s in reversed(cases) if a <= m.start() <= b), "")
                if "/" not in suite:  # outside a case, or the chapter's own code
                    continue
                open_at = m.end() - 1
                args = [text[open_at + 1 + a:open_at + 1 + b]
                        for a, b in split(code[open_at + 1:matching(code, open_at) - 1])]
                macro = m.group(0).rstrip("( ")
                for arg in args[1:2] if pattern is WITH else args[2:]:  # WITH's message; NAMING's items
                    wording = literal_value(arg)
                    if wording is None and pattern is WITH:  # a message the test builds: an exact wording too
                        found.append((path, src.line(m.start()), "%s checks an exact message: %s" %
                                      (macro, " ".join(arg.split()))))
                    elif wording is not None and (pattern is WITH or not re.match(
                            r"^(-?\d+(\.\d+)?([eE][-+]?\d+)?|[^\W\d]\w*)$", wording)) and not re.search(
                            (r"(?<!\w)" if re.match(r"\w", wording) else "") + re.escape(wording) +
                            (r"(?!\w)" if re.search(r"\w$", wording) else ""), contract):
                        found.append((path, src.line(m.start()), "%s \"%s\", which chapters/%s/ does not state "
                                      "verbatim: check the type and what the contract says the message names, "
                                      "CHECK_THROWS_NAMING(expr, Exception, \"name\", \"3\")" % (
                                          "checks the phrase" if pattern is NAMING else macro +
                                          " checks the exact wording", wording, stem)))
    return found


# --- test names and skeletons ---------------------------------------------------------------------------------------

@rule("test-names", "a TEST_CASE name with ';': ctest splits it, and the halves match no case and pass unrun", [
    ({"tests/a.cpp": "TEST_CASE(\"a; b\") {}\nTEST_CASE(\"c\"\n          \"d;\") {}"}, ["a.cpp:1:", "a.cpp:2:"]),
    ({"tests/a.cpp": "TEST_CASE(\"a, b\") {}  // TEST_CASE(\"x; y\")\nconst char* s = \"TEST_CASE(\\\"p;q\\\")\";"}, []),
])
def test_names(tree):
    found = []
    for path in sorted(p for p in tree.files if p.startswith("tests/") and p.endswith(".cpp")):
        src = tree.source(path)
        for m in re.finditer(r"\bTEST_CASE\s*\(\s*((?:\"(?:\\.|[^\"\\])*\"\s*)+)", src.code(strings=False)):
            if src.code().find("TEST_CASE", m.start()) == m.start() and ";" in literal_value(m.group(1)):
                found.append((path, src.line(m.start()), "the name \"%s\" holds ';'" % literal_value(m.group(1))))
    return found


def includes(src):
    return [line.rstrip() for line in re.findall(r"(?m)^#include.*", src.code(strings=False))]


@rule("skeleton-includes", "an exercise skeleton that lacks an include of its solution: the hints' calls would not "
      "compile in the learner's file", [
          ({"solutions/01_a/a.cpp": "#include <vector>\n#include \"a.hpp\"", "exercises/01_a/a.cpp": "#include \"a.hpp\""},
           ["exercises/01_a/a.cpp:1: .*<vector>"]),
          ({"solutions/01_a/a.cpp": "#include <vector>  // std::vector\n",
            "exercises/01_a/a.cpp": "#include <vector>\n#include <cmath>\n"}, []),
      ])
def skeleton_includes(tree):
    found = []
    for solution in tree.glob("solutions/*/*.cpp") + tree.glob("solutions/*/*.cu"):
        skeleton = "exercises/" + solution[len("solutions/"):]
        if skeleton in tree.files:
            missing = [i for i in includes(tree.source(solution)) if i not in includes(tree.source(skeleton))]
            if missing:
                found.append((skeleton, 1, "lacks what its solution includes: " + " ".join(missing)))
    return found


def main(argv):
    if len(argv) < 2 or any(r not in RULES for r in argv[2:]):
        print(__doc__ + "rules: " + ", ".join(RULES), file=sys.stderr)
        return 2
    names, failed = argv[2:] or list(RULES), False
    for name in names:  # the self-tests first: a rule that finds nothing would pass every source
        check, _, cases = RULES[name]
        for files, expected in cases:
            got = ["%s:%d: %s" % f for f in check(Tree(files))]
            if len(got) != len(expected) or not all(any(re.search(e, g) for g in got) for e in expected):
                print("cmake/check_sources.py:1: %s: self-test: on made-up files it reported %s, expected %s" %
                      (name, got, expected))
                failed = True
    if failed:
        return 1
    tree = Tree.read(argv[1])
    for name in names:
        check, why, _ = RULES[name]
        found = sorted(set(check(tree)))
        for path, line, message in found:
            print("%s:%d: %s: %s" % (path, line, name, message))
        print("%s: %d findings (guards against %s)" % (name, len(found), why))
        failed |= bool(found)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
