#!/usr/bin/env python3
"""Every public function of every chapter has a bad-input test: fails, naming the function and its header,
when one has none.

The public functions are the declarations in chapters/NN_name/*.hpp inside namespace attn (attn::chNN
included; namespaces named detail are private): free functions, and the public member functions and
constructors of the classes declared there (operators included; destructors, assignments, deleted and
defaulted members not). Overloads share their name: one bad-input test covers the name.

A function of chapter NN counts as tested with bad input when one of the chapter's test files
(tests/NN_name_test.cpp, tests/NN_name_core_test.cpp) calls it
  - inside the expression of a throw check (CHECK_THROWS_NAMING, CHECK_THROWS_AS, CHECK_THROWS_WITH_AS,
    REQUIRE_THROWS..., CHECK_THROWS): bad input refused, or
  - inside a TEST_CASE that carries the line `// bad input answered: name, name` naming it: bad input with an
    answer the contract defines (zero rows give an empty result), checked by the case's assertions.
A call is the name followed by "(" or "{" (a constructor: `KVCache(` or `KVCache{`, or `KVCache cache(`).

In the chapters of BATTERY_CHAPTERS a test that exists is not enough: each function must run the hostile-input
battery (tests/support/hostile.hpp), in a TEST_CASE that carries the line `// hostile battery: name, name`
naming it, calls `hostile::battery(` and calls the function. The chapters not yet listed keep the rule above.

A function with no parameters has no input that can be bad (its object's constructor is what is checked);
it is listed in the count, never required. The rest that take nothing that can be bad are in EXEMPT below,
each with its reason.

Usage: check_bad_input.py ROOT [--list]. --list prints every public function and how it is covered.
Exit status 1 when a function is neither tested nor exempt, or when EXEMPT names a function that does not
exist (a stale entry). It first checks itself on a small made-up chapter (a header and a test file in a
temporary folder: the functions it must report, and none it must not). Standard library only.
"""

import os
import re
import sys

# "chapter/qualified name": why it needs no bad-input test. Keep each reason to one line.
EXEMPT = {
    # Any argument has a defined answer.
    "11_positions/BlockMask::count": "counts the tiles in state t: every Tile has a count (0 when none holds it)",
    # Derived from an object already checked when it was made.
    "12_learning/zeros_like": "zeros of an existing model's shapes: that model's sizes were checked when it was made",
    "12_learning/parameters": "pointers to the model's own matrices: any model has them",
    "15_structured/zeros_like": "zeros of an existing model's shapes: that model's sizes were checked when it was made",
    "15_structured/parameters": "pointers to the model's own matrices: any model has them",
    # An exception type.
    "04_complexity/memory_refusal::memory_refusal": "an exception type: it formats the estimate guarded_attention made",
    # Nothing but the work to measure.
    "04_complexity/measure_heap_peak": "its one argument is the work to measure, a callable: it has no value to be bad",
    # A value to pass on, checked where it is used.
    "05_flash_cpu/default_tiles_on": "fills a FastConfig; the kernels refuse threads < 1 (flash_attention_fast's battery)",
    # Nothing but a random source.
    "12_learning/make_pronoun": "takes only the random source: every draw is a valid sentence of the task",
    # Chapter 06's tile arithmetic: constexpr int, compiled for the device too (no exceptions there).
    "06_flash_cuda/fp32_smem_bytes": "device-side tile arithmetic: its d is checked first (check_shape, kernel_plans)",
    "06_flash_cuda/tc_head_dim": "device-side tile arithmetic: its d is checked first (check_shape, kernel_plans)",
    "06_flash_cuda/tc_qk_stride": "device-side tile arithmetic on tc_head_dim()'s 64 or 128",
    "06_flash_cuda/tc_smem_bytes": "device-side tile arithmetic: its d is checked first (check_shape, kernel_plans)",
    "06_flash_cuda/tc_vt_item": "device-side index arithmetic of a kernel's own work items (tested for banks)",
    "06_flash_cuda/tc_vt_word": "device-side index arithmetic of a kernel's own work items (tested for banks)",
    "06_flash_cuda/GpuWorkspace::fill_normal": "any seed names a stream of random inputs",
    # Inner-loop accessors whose callers check every index once, before the loop.
    "15_structured/GatherRows::row": "the CSR kernel's per-edge read: csr_attention() checks every sender < rows first",
}


# The chapters whose every public function must run the hostile-input battery (the rest: a bad-input test).
# 99_battery_demo is the self-test's made-up chapter.
BATTERY_CHAPTERS = {"01_intuition", "02_qkv_trace", "03_multi_head", "04_complexity", "05_flash_cpu", "06_flash_cuda",
                    "07_sparse", "08_linear", "09_mqa_gqa", "10_backward", "11_positions", "12_learning", "13_ring",
                    "14_state_space", "15_structured", "16_real_model", "17_serving", "99_battery_demo"}


def strip_comments(text, keep_markers=False):
    """The text with comments and string/char literals blanked, newlines kept (so line numbers hold)."""
    def blank(m):
        s = m.group(0)
        if keep_markers and s.startswith("//") and (MARKER.search(s) or BATTERY_MARKER.search(s)):
            return s
        if s.startswith('"') and not keep_markers:
            return '"' + re.sub(r"[^\n]", " ", s[1:-1]) + '"'
        return re.sub(r"[^\n]", " ", s)
    return re.sub(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', blank, text, flags=re.S)


MARKER = re.compile(r"//\s*bad input answered:\s*(.*)")
BATTERY_MARKER = re.compile(r"//\s*hostile battery:\s*(.*)")


def matching(text, i, open_ch, close_ch):
    """Index just past the bracket that closes the one at text[i]."""
    depth = 0
    while i < len(text):
        c = text[i]
        if c == open_ch:
            depth += 1
        elif c == close_ch:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return len(text)


def skip_template_args(text, i):
    """text[i] is "<": index past the matching ">" (no shifts in the course's headers' declarations)."""
    depth = 0
    while i < len(text):
        if text[i] == "<":
            depth += 1
        elif text[i] == ">":
            depth -= 1
            if depth == 0:
                return i + 1
        elif text[i] in ";{}":
            return i
        i += 1
    return i


KEYWORDS = {"return", "if", "for", "while", "switch", "sizeof", "decltype", "static_assert", "alignof",
            "noexcept", "alignas", "requires", "throw", "typename", "template", "using", "typedef"}


def declaration(statement):
    """(name, has_parameters, is_special) of the function a namespace- or class-scope statement declares, or None."""
    s = statement.strip()
    s = re.sub(r"^(?:(?:public|private|protected)\s*:\s*)+", "", s)
    s = re.sub(r"^template\s*", "", s)
    if s.startswith("<"):
        s = s[skip_template_args(s, 0):].strip()
    if re.match(r"(using|typedef|friend|static_assert|namespace|enum|class|struct|union)\b", s) or not s:
        return None
    op = re.search(r"\boperator\s*(\(\)|\[\]|[^\s(\w]+|\w[\w\s:*&<>]*?)\s*\(", s)
    if op:
        name, paren = "operator" + op.group(1).replace(" ", ""), op.end() - 1
    else:
        m = None
        depth = 0
        for i, c in enumerate(s):
            if c == "<":
                depth += 1
            elif c == ">":
                depth = max(depth - 1, 0)
            elif c == "=" and depth == 0:
                return None  # a variable with an initialiser (or "= default" before any "(")
            elif c == "(" and depth == 0:
                if re.match(r"\(\s*\*", s[i:]):
                    return None  # a function pointer: data, not a function
                m = re.search(r"(~?[A-Za-z_]\w*)\s*$", s[:i])
                if m and re.search(r"::\s*$", s[:m.start()]):
                    return None  # Class::member defined out of its class: declared (and listed) inside it
                paren = i
                break
        if not m or m.group(1) in KEYWORDS or m.group(1).startswith("~"):
            return None
        name = m.group(1)
        if re.match(r"ATTN_|[A-Z][A-Z0-9_]+$", name):  # a macro call
            return None
    if name == "operator=":
        return None  # copy or move assignment: another object of the type, checked when it was made
    close = matching(s, paren, "(", ")")
    params = s[paren + 1:close - 1].strip()
    rest = s[close:]
    if re.match(r"\s*(?:const\s*)?(?:noexcept\s*)?=\s*(?:delete|default)", rest):
        return None
    return name, params not in ("", "void")


def scan_header(path):
    """[(qualified name, line, has_parameters)] of the public functions the header declares."""
    with open(path, encoding="utf-8") as f:
        text = strip_comments(f.read())
    found = []
    # scope stack: ("ns", name) | ("class", name, public?) | ("other",)
    stack = []
    start = 0
    i = 0

    def in_public_attn():
        names = [s[1] for s in stack if s[0] == "ns"]
        if not names or names[0] != "attn" or "detail" in names:
            return False
        return all(s[0] == "ns" or (s[0] == "class" and s[2]) for s in stack)

    def classes():
        return [s[1] for s in stack if s[0] == "class"]

    def consider(statement, at):
        nonlocal stack
        if stack and stack[-1][0] == "class":
            # access labels switch the current class's visibility
            for label in re.findall(r"\b(public|private|protected)\s*:(?!:)", statement):
                stack[-1] = ("class", stack[-1][1], label == "public")
            statement = re.sub(r".*\b(?:public|private|protected)\s*:(?!:)", "", statement, flags=re.S)
        if not in_public_attn():
            return
        d = declaration(statement)
        if d:
            name, has_params = d
            qualified = "::".join(classes() + [name])
            found.append((qualified, text.count("\n", 0, at) + 1, has_params))

    while i < len(text):
        c = text[i]
        if c == ";":
            consider(text[start:i], start + len(text[start:i]) - len(text[start:i].lstrip()))
            start = i + 1
        elif c == "{":
            head = text[start:i]
            if stack and stack[-1][0] == "class":
                for label in re.findall(r"\b(public|private|protected)\s*:(?!:)", head):
                    stack[-1] = ("class", stack[-1][1], label == "public")
                head = re.sub(r".*\b(?:public|private|protected)\s*:(?!:)", "", head, flags=re.S)
            m_ns = re.search(r"\bnamespace\s+([\w:]*)\s*$", head)
            m_cls = re.search(r"\b(class|struct|union)\s+(?:alignas\s*\([^)]*\)\s*)?(\w+)(?:\s+final)?\s*(?::[^{]*)?$",
                              head)
            if m_ns:
                for part in (m_ns.group(1) or "(anonymous)").split("::"):
                    stack.append(("ns", part))
                # remember how many to pop
                stack[-1] = stack[-1] + (len((m_ns.group(1) or "x").split("::")),)
                start = i + 1
            elif m_cls and not re.search(r"\benum\b", head):
                stack.append(("class", m_cls.group(2), m_cls.group(1) != "class"))
                start = i + 1
            elif re.search(r"\)\s*(?:const\s*)?(?:noexcept\s*)?(?:override\s*)?(?:final\s*)?(?:->[^{]*)?$", head) or \
                 re.search(r"\)\s*:\s*[^{]*$", head) and not re.search(r"\b(class|struct)\b", head):
                # a function body (or a constructor's initialiser list and body): the head is its declaration
                consider(head, start + len(head) - len(head.lstrip()))
                i = matching(text, i, "{", "}")
                # swallow a following ';' (none for functions)
                start = i
                continue
            else:
                # an enum body, a brace initialiser: skip it as part of the statement
                i = matching(text, i, "{", "}")
                continue
        elif c == "}":
            if stack:
                top = stack.pop()
                if top[0] == "ns" and len(top) == 3:
                    for _ in range(top[2] - 1):
                        stack.pop()
            start = i + 1
        i += 1
    return found


def throw_checks(text):
    """The text of every throw check's expression in a test file (comments already blanked)."""
    out = []
    for m in re.finditer(r"\b(?:CHECK|REQUIRE|WARN)_THROWS\w*\s*\(", text):
        out.append(text[m.end() - 1:matching(text, m.end() - 1, "(", ")")])
    return out


def answered_cases(raw, marker_re=MARKER):
    """[(names, body)] of each TEST_CASE that carries a `// bad input answered:` line (or \p marker_re's)."""
    text = strip_comments(raw, keep_markers=True)
    out = []
    for m in re.finditer(r"\bTEST_CASE\s*\(", text):
        head_end = matching(text, m.end() - 1, "(", ")")
        brace = text.find("{", head_end)
        body = text[brace:matching(text, brace, "{", "}")]
        names = []
        for marker in marker_re.finditer(body):
            names += [n.strip() for n in marker.group(1).split(",") if n.strip()]
        if names:
            out.append((names, body))
    return out


def battery_cases(raw):
    """[(names, body)] of each TEST_CASE that carries `// hostile battery:` lines and runs hostile::battery(."""
    return [(names, body) for names, body in answered_cases(raw, BATTERY_MARKER)
            if re.search(r"\bhostile::battery\s*\(", strip_comments(body))]


def calls(text, name):
    """Does \p text call \p name (a function, a member through . or ->, or a constructor)?"""
    short = name.split("::")[-1]
    if short.startswith("operator"):
        op = short[len("operator"):]
        if op == "()":
            owner = name.split("::")[-2] if "::" in name else ""
            return bool(owner) and bool(re.search(r"\b" + re.escape(owner) + r"\b", text))
        return op in text
    owner = name.split("::")[-2] if "::" in name else None
    if owner and owner == short:  # a constructor: Type(…), Type{…} or Type name(…)
        return bool(re.search(r"\b" + re.escape(short) + r"\s*(?:<[^;()]*>)?\s*(?:[({]|\w+\s*[({])", text))
    return bool(re.search(r"(?<![\w~])" + re.escape(short) + r"\s*(?:<[^;()]*>)?\s*\(", text))


SELF_TEST_HEADER = """namespace attn {
int tested(int n);
int answered(int n);
int forgotten(int n);
int constant();
struct Thing {
  Thing(int size);
  int member(int i) const;
 private:
  int hidden(int i);
};
namespace detail {
int internal(int x);
}
}  // namespace attn
"""

SELF_TEST_BATTERY = [
    # (test file of chapter 99_battery_demo, names reported missing): a throw check is not enough there.
    ("TEST_CASE(\"a\") { CHECK_THROWS_AS(attn::tested(-1), std::invalid_argument); }\n"
     "TEST_CASE(\"b\") {\n  // hostile battery: answered, member\n  hostile::battery(\"answered\", {}, [] { "
     "return attn::answered(0); }).run();\n}\n"
     "TEST_CASE(\"c\") {\n  // hostile battery: forgotten, Thing\n  attn::forgotten(1);\n}\n",
     ["Thing::Thing", "Thing::member", "forgotten", "tested"]),
]

SELF_TEST_CASES = [
    # (test file, names reported missing)
    ("", ["Thing::Thing", "Thing::member", "answered", "forgotten", "tested"]),
    ("TEST_CASE(\"a\") { CHECK_THROWS_AS(attn::tested(-1), std::invalid_argument); }\n"
     "TEST_CASE(\"b\") {\n  // bad input answered: answered\n  CHECK(attn::answered(0) == 0);\n}\n"
     "TEST_CASE(\"c\") { CHECK_THROWS_NAMING(attn::Thing(0), std::invalid_argument, \"size\"); }\n"
     "TEST_CASE(\"d\") { attn::Thing t(1); CHECK_THROWS(t.member(-1)); }\n"
     "// bad input answered: forgotten (a marker outside a test case counts for nothing)\n",
     ["forgotten"]),
]


def self_test():
    """Runs the check on a small made-up chapter: "" when it reports what it should, else what went wrong."""
    import subprocess
    import tempfile
    for stem, tests, missing in ([("01_demo", t, m) for t, m in SELF_TEST_CASES] +
                                 [("99_battery_demo", t, m) for t, m in SELF_TEST_BATTERY]):
        with tempfile.TemporaryDirectory() as root:
            os.makedirs(os.path.join(root, "chapters", stem))
            os.makedirs(os.path.join(root, "tests"))
            with open(os.path.join(root, "chapters", stem, "demo.hpp"), "w", encoding="utf-8") as f:
                f.write(SELF_TEST_HEADER)
            with open(os.path.join(root, "tests", stem + "_test.cpp"), "w", encoding="utf-8") as f:
                f.write(tests)
            run = subprocess.run([sys.executable, os.path.abspath(__file__), root, "--no-self-test", "--no-exempt"],
                                 capture_output=True, text=True)
            reported = sorted(re.findall(r"demo\.hpp:\d+: (\S+) has no (?:bad-input test|hostile battery)", run.stdout))
            if reported != sorted(missing) or run.returncode != (1 if missing else 0):
                return ("self-test: for the test file %r the check reported %s (status %d), expected %s" %
                        (tests[:60], reported, run.returncode, sorted(missing)))
    return ""


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    root = args[0]
    listing = "--list" in sys.argv
    if "--no-self-test" not in sys.argv:
        failure = self_test()  # a parser that silently finds nothing would pass every chapter: prove it finds
        if failure:
            print(failure)
            return 1
    if "--no-exempt" in sys.argv:
        EXEMPT.clear()
    chapters_dir = os.path.join(root, "chapters")
    problems, counts = [], {"tested": 0, "answered": 0, "battery": 0, "no parameters": 0, "exempt": 0}
    seen_exempt = set()
    for stem in sorted(d for d in os.listdir(chapters_dir) if re.match(r"\d\d_", d)):
        tests = []
        for t in ("%s_test.cpp" % stem, "%s_core_test.cpp" % stem):
            path = os.path.join(root, "tests", t)
            if os.path.isfile(path):
                with open(path, encoding="utf-8") as f:
                    tests.append(f.read())
        checks = [e for raw in tests for e in throw_checks(strip_comments(raw))]
        answered = [c for raw in tests for c in answered_cases(raw)]
        batteries = [c for raw in tests for c in battery_cases(raw)]
        needs_battery = stem in BATTERY_CHAPTERS
        for header in sorted(os.listdir(os.path.join(chapters_dir, stem))):
            if not header.endswith(".hpp"):
                continue
            rel = "chapters/%s/%s" % (stem, header)
            with open(os.path.join(chapters_dir, stem, header), encoding="utf-8") as f:
                if re.search(r"^#include <mpi\.h>", f.read(), re.M):
                    continue  # an MPI program's own parts: they run under mpirun, tested by its ctest cases

            done = set()
            for name, line, has_params in scan_header(os.path.join(chapters_dir, stem, header)):
                key = "%s/%s" % (stem, name)
                if key in done:
                    continue  # an overload: one bad-input test covers the name
                done.add(key)
                how = None
                if key in EXEMPT:
                    seen_exempt.add(key)
                    how = "exempt: " + EXEMPT[key]
                    counts["exempt"] += 1
                elif not has_params:
                    how = "no parameters"
                    counts["no parameters"] += 1
                elif needs_battery:
                    if any(name.split("::")[-1] in names and calls(body, name) for names, body in batteries):
                        how = "tested: runs the hostile battery"
                        counts["battery"] += 1
                    else:
                        problems.append("%s:%d: %s has no hostile battery (a TEST_CASE in tests/%s_*test.cpp marked "
                                        "`// hostile battery: %s` that calls hostile::battery( and the function)" %
                                        (rel, line, name, stem, name.split("::")[-1]))
                elif any(calls(e, name) for e in checks):
                    how = "tested: refused in a throw check"
                    counts["tested"] += 1
                elif any(name.split("::")[-1] in names and calls(body, name) for names, body in answered):
                    how = "tested: a defined answer checked"
                    counts["answered"] += 1
                else:
                    problems.append("%s:%d: %s has no bad-input test (a throw check in tests/%s_*test.cpp, or a "
                                    "case marked `// bad input answered: %s`)" % (rel, line, name, stem,
                                                                                 name.split("::")[-1]))
                if listing and how:
                    print("%s:%d: %s: %s" % (rel, line, name, how))
    for key in sorted(set(EXEMPT) - seen_exempt):
        problems.append("EXEMPT lists %s, which no chapter header declares: remove it" % key)
    for p in problems:
        print(p)
    missing = len([p for p in problems if "has no bad-input" in p or "has no hostile battery" in p])
    total = sum(counts.values()) + missing
    print("bad input: %d public functions of chapters/*/*.hpp; %d run the hostile battery (chapters %s), %d refused in "
          "a throw check, %d with a defined answer checked, %d without parameters, %d exempt; %d without their test" %
          (total, counts["battery"], ", ".join(sorted(c[:2] for c in BATTERY_CHAPTERS if not c.startswith("99"))),
           counts["tested"], counts["answered"], counts["no parameters"], counts["exempt"], missing))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
