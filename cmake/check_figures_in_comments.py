#!/usr/bin/env python3
"""No measured figure in a code comment: fails on a comment that quotes a time ("56 ms"), a rate ("15.2 GB/s",
"220 GFLOP/s", "1.9 Gexp/s"), a percentage of a ceiling ("82% of the square sgemm", "94% of the triad") or a measured
speed-up ("1.31x faster"). Such a figure is true of one run on one machine, and goes stale as soon as the code or
the machine changes, while the comment stays; it belongs in a recording (book/recorded/, with the run's header),
which the measurements pages read. A comment points at the recording or the page instead.

A figure that is not a measurement is fine: a size ("64 MiB", "n = 4096"), a setting ("at least 3 s"), a bound the
code enforces, a formula's value. The patterns below only catch the units a measurement is stated in; a comment
that must state such a unit for another reason says so with `figure-ok:` and why, on the same line.

Usage: check_figures_in_comments.py ROOT. Reads every C++ and CUDA source and header under chapters/, common/,
solutions/ and exercises/; prints each finding; exit status 1 when there is one. Standard library only.
"""

import os
import re
import sys

FOLDERS = ("chapters", "common", "solutions", "exercises")
SUFFIXES = (".cpp", ".hpp", ".inl", ".cu", ".cuh")

NUMBER = r"(?<![\w.])\d+(?:[.,]\d+)?"
# An order of magnitude ("~100 ns", "about 2 ms") or a bound ("at least 10 ms") is a property of the hardware or a
# setting, not one run's result.
APPROXIMATE = r"(?<!~)(?<!about )(?<!~ )(?<!at least )"
MEASURED = [
    # a time as a measurement states it: ns, µs, ms, or seconds with decimals (whole seconds are mostly settings)
    (re.compile(APPROXIMATE + NUMBER + r"\s*(?:ns|µs|us|ms)\b|(?<![\w.])\d+\.\d+\s*(?:CPU-)?s\b|"
                r"(?<![\w.])\d+\s*[–-]\s*\d+\s*(?:ns|µs|ms|s)\b"), "a time"),
    # a rate: bytes, FLOPs, exponentials, tokens, sentences per second
    (re.compile(NUMBER + r"\s*(?:[kMGTP]?B/s|[kMGTP]?FLOP/s|[kMGTP]FLOPS|[kMGTP]?exp/s|tokens/s|sentences/s)(?!\w)"),
     "a rate"),
    # a percentage of a ceiling or of another kernel's speed, or several percentages of one run
    (re.compile(NUMBER + r"\s*%\s+of\s+(?:the\s+|its\s+|one\s+|a\s+)?(?:[\w']+[\s-]){0,3}?"
                         r"(?:peak|ceiling|triad|sgemm|roofline|bandwidth|flash_fast|bound)\b"),
     "a percentage of a ceiling"),
    (re.compile(NUMBER + r"\s*%.*" + NUMBER + r"\s*%"), "percentages of a run"),
    (re.compile(NUMBER + r"\s*%\s+of\s+(?:the\s+)?(?:[\w']+\s+)?samples\b"), "a profile's share"),
    # a measured speed-up or ratio between kernels or versions
    (re.compile(NUMBER + r"\s*[×x]\s+(?:faster|slower|the\s+speed|as\s+fast|version|rung)\b"), "a measured ratio"),
]
# The formats' own home shows what they print ("12.5 µs"): examples of a format, not measurements.
FORMAT_EXAMPLES = ("common/include/attn/format.hpp", "common/src/format.cpp")
COMMENT = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"', re.S)


def comments(text):
    """(line, text) of each comment in a C++ source; string literals are skipped, not reported."""
    for m in COMMENT.finditer(text):
        if m.group(0).startswith('"'):
            continue
        first = text.count("\n", 0, m.start()) + 1
        for i, line in enumerate(m.group(0).split("\n")):
            yield first + i, line


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = sys.argv[1]
    findings, files = [], 0
    for folder in FOLDERS:
        for base, _, names in os.walk(os.path.join(root, folder)):
            for name in sorted(names):
                if not name.endswith(SUFFIXES):
                    continue
                path = os.path.join(base, name)
                files += 1
                if os.path.relpath(path, root) in FORMAT_EXAMPLES:
                    continue
                with open(path, encoding="utf-8") as f:
                    text = f.read()
                for line, comment in comments(text):
                    if "figure-ok:" in comment:
                        continue
                    for pattern, what in MEASURED:
                        m = pattern.search(comment)
                        if m:
                            findings.append("%s:%d quotes %s (%s): point at the recording or the measurements "
                                            "page instead" % (os.path.relpath(path, root), line, what, m.group(0)))
                            break
    for f in sorted(findings):
        print(f)
    print("measured figures in comments: %d files read, %d findings" % (files, len(findings)))
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
