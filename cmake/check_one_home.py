#!/usr/bin/env python3
"""One home for each helper: fails when a chapter's main.cpp defines a function whose name is already
defined (or declared) in common/ or in the header of an earlier chapter, or that another chapter's main.cpp
defines too.

Small helpers (a number format, a max-difference, a fit, a timer) are too short for a duplicate finder to
see, so each chapter would otherwise grow its own copy. The one definition lives in common/include/attn/
(formats, comparisons, timing) or in the chapter that teaches it (chapter 04's fit_power_law); a chapter
uses it with a `using` declaration or by its qualified name.

Usage: check_one_home.py ROOT. Prints each duplicate with both places; exit status 1 when there is one.
Standard library only. Relies on the course's formatting (clang-format: namespace contents not indented),
so a function at namespace scope starts in column 0 and a class member does not.
"""

import os
import re
import sys

# The story every chapter tells has the same frame: these names are meant to recur. So are the names of
# Google Benchmark functions (BM_...): each executable registers its own, under the name its report prints.
FRAME = {"main", "tell_the_story"}


def is_frame(name):
    return name in FRAME or name.startswith("BM_")

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


def functions(path, definitions_only):
    """(name, line) of each function declared or defined at namespace scope in the file."""
    with open(path, encoding="utf-8") as f:
        text = strip_comments(f.read())
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
        found.append((m.group(1), text.count("\n", 0, m.start()) + 1))
    return found


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = sys.argv[1]
    rel = lambda p: os.path.relpath(p, root)

    homes = {}  # name -> "file:line" of its definition or declaration in common/ or a chapter header
    common = os.path.join(root, "common", "include", "attn")
    for name in sorted(os.listdir(common)):
        if name.endswith(".hpp"):
            for f, line in functions(os.path.join(common, name), definitions_only=False):
                homes.setdefault(f, "%s:%d" % (rel(os.path.join(common, name)), line))

    chapters = sorted(d for d in os.listdir(os.path.join(root, "chapters")) if re.match(r"\d\d_", d))
    problems, defined_in_main = [], {}
    for stem in chapters:
        folder = os.path.join(root, "chapters", stem)
        main_cpp = os.path.join(folder, "main.cpp")
        if os.path.isfile(main_cpp):
            for f, line in functions(main_cpp, definitions_only=True):
                where = "%s:%d" % (rel(main_cpp), line)
                if f in homes:
                    problems.append("%s defines %s(), which already lives in %s: use that one" %
                                    (where, f, homes[f]))
                elif f in defined_in_main and not is_frame(f):
                    problems.append("%s defines %s(), as %s does: give it one home (common/ or the chapter "
                                    "that teaches it)" % (where, f, defined_in_main[f]))
                defined_in_main.setdefault(f, where)
        # This chapter's headers are "earlier chapters" for the chapters after it.
        for header in sorted(os.listdir(folder)):
            if header.endswith((".hpp", ".cuh")):
                for f, line in functions(os.path.join(folder, header), definitions_only=False):
                    homes.setdefault(f, "%s:%d" % (rel(os.path.join(folder, header)), line))

    for p in problems:
        print(p)
    print("one home per helper: %d chapters' main.cpp checked against common/ and the earlier chapters' "
          "headers; %d duplicates" % (len(chapters), len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
