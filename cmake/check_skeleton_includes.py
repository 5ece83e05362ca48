#!/usr/bin/env python3
"""Every exercise skeleton includes what its reference solution includes, so the calls the hints suggest compile
in the learner's file.

usage: check_skeleton_includes.py ROOT

For each solutions/NN_name/FILE (.cpp, .cu), every `#include` line of it must be an `#include` line of
exercises/NN_name/FILE (a trailing // comment on the skeleton's line is ignored). Status 1 lists what each
skeleton lacks. (tests/driver/check_driver.sh checked this on its scratch copy only, in CI; as a ctest test it
fails where the solution gains an include.)
"""
import glob
import os
import re
import sys


def includes(path):
    with open(path, encoding="utf-8") as f:
        return [re.sub(r"\s*//.*$", "", line.rstrip("\n")) for line in f if line.startswith("#include")]


def main(root):
    problems = []
    for solution in sorted(glob.glob(os.path.join(root, "solutions", "*", "*.cpp")) +
                           glob.glob(os.path.join(root, "solutions", "*", "*.cu"))):
        skeleton = os.path.join(root, "exercises", os.path.relpath(solution, os.path.join(root, "solutions")))
        if not os.path.exists(skeleton):
            continue
        missing = [line for line in includes(solution) if line not in set(includes(skeleton))]
        if missing:
            problems.append(f"  {os.path.relpath(skeleton, root)} lacks: {' '.join(missing)}")
    if problems:
        print("Exercise skeletons that lack an include of their solution (the hints' calls would not compile):")
        print("\n".join(problems))
        return 1
    print("every exercise skeleton includes what its solution does")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
