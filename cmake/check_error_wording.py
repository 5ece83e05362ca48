#!/usr/bin/env python3
"""Exercise tests check an error for what its contract says the message names, never for wording of their own.

usage: check_error_wording.py ROOT

In every tests/NN_name_test.cpp, a check inside an exercise's test case (a suite "NN_name/exercise"; the
suites "NN_name: chapter code" test the chapter's own code and are left alone) fails this lint when it binds
the learner to a phrase: CHECK_THROWS_WITH / CHECK_THROWS_WITH_AS (and REQUIRE_ / WARN_) with any string, or
CHECK_THROWS_NAMING with an item that is neither a number nor a name (tests/support/throws.hpp: those are
found as tokens, in any quoting or bracket style). Such a check passes the lint only when the chapter's
contract (chapters/NN_name/*.hpp) states that wording verbatim, as a phrase of its own ("node 3" is not stated by
"node 33"). Status 1 lists each offending check.
"""
import glob
import os
import re
import sys

WITH = re.compile(r"\b(?:CHECK|REQUIRE|WARN)_THROWS_WITH(?:_AS)?\s*\(")
NAMING = re.compile(r"\bCHECK_THROWS_NAMING\s*\(")
CASE = re.compile(r"\bTEST_CASE\s*\(")
SUITE_BLOCK = re.compile(r"\bTEST_SUITE\s*\(\s*\"([^\"]*)\"\s*\)\s*\{")
SUITE_DECORATOR = re.compile(r"test_suite\s*\(\s*\"([^\"]*)\"\s*\)")
LITERAL = re.compile(r'(?:u8)?"((?:[^"\\\n]|\\.)*)"')
NUMBER = re.compile(r"^-?\d+(\.\d+)?([eE][-+]?\d+)?$")
NAME = re.compile(r"^[^\W\d][\w]*$")


def blank_comments_and_strings(text):
    """text with comments and the insides of string and character literals replaced by spaces, so braces,
    parentheses and commas in it are code; positions are kept."""
    out, i, n = list(text), 0, len(text)

    def blank(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        if text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            blank(i, end)
            i = end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            blank(i, end)
            i = end
        elif text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            open_paren = text.find("(", i)
            delim = text[i + 2:open_paren]
            end = text.find(")" + delim + '"', open_paren) + len(delim) + 2
            blank(i + 1, end - 1)
            i = end
        elif text[i] in "\"'":
            quote, k = text[i], i + 1
            while k < n and text[k] != quote:
                k += 2 if text[k] == "\\" else 1
            blank(i + 1, k)
            i = k + 1
        else:
            i += 1
    return "".join(out)


def matching(code, open_at):
    """The index of the bracket that closes the one at open_at (in blanked code)."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    stack = []
    for k in range(open_at, len(code)):
        if code[k] in pairs:
            stack.append(pairs[code[k]])
        elif stack and code[k] == stack[-1]:
            stack.pop()
            if not stack:
                return k
    return len(code) - 1


def arguments(text, code, open_at):
    """The top-level arguments of the call whose '(' is at open_at, as original text."""
    close = matching(code, open_at)
    args, depth, start = [], 0, open_at + 1
    for k in range(open_at + 1, close):
        if code[k] in "([{":
            depth += 1
        elif code[k] in ")]}":
            depth -= 1
        elif code[k] == "," and depth == 0:
            args.append(text[start:k])
            start = k + 1
    args.append(text[start:close])
    return args


def literal_value(arg):
    """The string a literal argument holds (adjacent literals joined), or None when it holds none."""
    parts = LITERAL.findall(arg)
    if not parts:
        return None
    return "".join(bytes(p, "utf-8").decode("unicode_escape").encode("latin-1").decode("utf-8") for p in parts)


def exercise_regions(text, code):
    """[(start, end, suite)] of every test case's body, with the suite it belongs to."""
    blocks = []  # (start, end, suite) of TEST_SUITE blocks
    for m in SUITE_BLOCK.finditer(code):
        suite = text[m.start(1):m.end(1)]
        brace = m.end() - 1
        blocks.append((brace, matching(code, brace), suite))
    regions = []
    for m in CASE.finditer(code):
        header_close = matching(code, m.end() - 1)
        body_open = code.find("{", header_close)
        body_close = matching(code, body_open)
        decorated = SUITE_DECORATOR.search(text[m.start():header_close])
        if decorated:
            suite = decorated.group(1)
        else:
            enclosing = [b for b in blocks if b[0] < m.start() < b[1]]
            suite = max(enclosing, key=lambda b: b[0])[2] if enclosing else ""
        regions.append((m.start(), body_close, suite))
    return regions


def stated(wording, contract):
    """Whether the contract states the wording as a phrase of its own: "node 3" is not stated by "node 33"."""
    before = r"(?<!\w)" if re.match(r"\w", wording) else ""
    after = r"(?!\w)" if re.search(r"\w$", wording) else ""
    return re.search(before + re.escape(wording) + after, contract) is not None


def lint_file(root, path):
    stem = os.path.basename(path)[:-len("_test.cpp")]
    contract = ""
    for header in glob.glob(os.path.join(root, "chapters", stem, "*.hpp")):
        with open(header, encoding="utf-8") as f:
            contract += f.read()
    with open(path, encoding="utf-8") as f:
        text = f.read()
    code = blank_comments_and_strings(text)
    regions = exercise_regions(text, code)
    problems = []

    def suite_at(position):
        inside = [r for r in regions if r[0] <= position <= r[1]]
        return inside[-1][2] if inside else None

    def line_of(position):
        return text.count("\n", 0, position) + 1

    def report(position, wording, how):
        if stated(wording, contract):
            return
        problems.append(f"{os.path.relpath(path, root)}:{line_of(position)}: {how} \"{wording}\", which "
                        f"chapters/{stem}/ does not state verbatim")

    for pattern in (WITH, NAMING):
        for m in pattern.finditer(code):
            suite = suite_at(m.start())
            if suite is None or "/" not in suite:  # outside a case, or the chapter's own code
                continue
            args = arguments(text, code, m.end() - 1)
            for arg in (args[1:2] if pattern is WITH else args[2:]):  # WITH's message; NAMING's items
                wording = literal_value(arg)
                if wording is None:  # a message the test builds (a shape_str(), say): exact wording too
                    if pattern is WITH:
                        problems.append(f"{os.path.relpath(path, root)}:{line_of(m.start())}: "
                                        f"{m.group(0).rstrip('( ')} checks an exact message: {' '.join(arg.split())}")
                    continue
                if pattern is NAMING and (NUMBER.match(wording) or NAME.match(wording)):
                    continue  # a number or a name: found as a token, whatever the style
                how = ("checks the phrase" if pattern is NAMING else
                       f"{m.group(0).rstrip('( ')} checks the exact wording")
                report(m.start(), wording, how)
    return problems


def main(argv):
    root = os.path.abspath(argv[1] if len(argv) > 1 else ".")
    problems = []
    for path in sorted(glob.glob(os.path.join(root, "tests", "[0-9][0-9]_*_test.cpp"))):
        if path.endswith("_core_test.cpp"):
            continue
        problems += lint_file(root, path)
    if problems:
        print("Exercise tests that bind the learner to wording the contract does not state (check the type and what")
        print("the contract says the message names: CHECK_THROWS_NAMING(expr, Exception, \"name\", \"3\"), which")
        print("finds names as words and numbers as number tokens, in any quoting or bracket style):")
        for p in problems:
            print("  " + p)
        print(f"{len(problems)} checks")
        return 1
    print("every exercise test checks errors for what their contracts say they name")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
