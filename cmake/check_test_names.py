#!/usr/bin/env python3
"""Every doctest case name can be run by ctest: fails on a TEST_CASE name that holds a semicolon.

doctest_discover_tests registers each case with ctest as "<prefix><name>" and runs it with --test-case=<name>;
CMake splits a name at ';' (a list separator), so ctest ran each half as a filter that matched no case, and the
test passed without running anything. Usage: check_test_names.py ROOT. Standard library only.
"""

import glob
import os
import re
import sys

# TEST_CASE( followed by one or more adjacent string literals (a long name split over lines).
CASE = re.compile(r'TEST_CASE\s*\(\s*((?:"(?:\\.|[^"\\])*"\s*)+)')


def names(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    for m in CASE.finditer(text):
        name = "".join(re.findall(r'"((?:\\.|[^"\\])*)"', m.group(1)))
        yield text.count("\n", 0, m.start()) + 1, name


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = sys.argv[1]
    files = sorted(glob.glob(os.path.join(root, "tests", "**", "*.cpp"), recursive=True) +
                   glob.glob(os.path.join(root, "tests", "fixture_chapter", "*.cpp")))
    found = [f"{os.path.relpath(p, root)}:{line}: \"{name}\"" for p in files for line, name in names(p) if ";" in name]
    for f in found:
        print(f)
    if found:
        print(f"{len(found)} test name(s) hold ';', which ctest splits: the halves match no case and pass unrun")
        return 1
    print(f"{len(files)} test files read; no test name holds ';'")
    return 0


if __name__ == "__main__":
    sys.exit(main())
