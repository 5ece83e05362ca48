#!/usr/bin/env python3
"""The course's chapters as chapters/manifest.json lists them, for the driver (./course) and its tests.

Usage: manifest.py [--manifest FILE] QUESTION [ARGS]
  stems                   every chapter's folder name (01_intuition ...), in order, one per line
  stem NN                 the folder name of chapter NN (status 2 and a message when there is none)
  field STEM KEY[.KEY]    a field of the chapter's entry (a list: one item per line; missing: nothing, status 1)
  with KEY                the stems of the chapters whose entry has KEY (mpi, vs_torch, model, gpu ...)
  packages                the Debian packages the chapters need beyond the course's own, one per line
  check ROOT              the manifest against the tree: every entry has its folder and every chapter folder
                          has its entry, numbers rise with no gap, every level is known, each row of the README's
                          table is a listed chapter at its level, in order (status 1 and the problems otherwise)
Standard library only: the driver runs it before anything is built.
"""

import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT = os.path.join(HERE, "..", "chapters", "manifest.json")
LEVELS = ("beginner", "intermediate", "advanced")


def load(path=DEFAULT):
    """The manifest's chapters: a list of dicts, each with its 'stem' (NN_name) added."""
    with open(path, encoding="utf-8") as f:
        chapters = json.load(f)["chapters"]
    for entry in chapters:
        entry["stem"] = f'{entry["number"]}_{entry["name"]}'
    return chapters


def by_stem(chapters, stem):
    return next((c for c in chapters if c["stem"] == stem), None)


def field(entry, key):
    """entry's value at KEY[.KEY], or None."""
    for part in key.split("."):
        entry = entry.get(part) if isinstance(entry, dict) else None
    return entry


def problems(chapters, root):
    """What is wrong between the manifest and the tree at ROOT (an empty list when nothing is)."""
    found = []
    folders = sorted(d for d in os.listdir(os.path.join(root, "chapters"))
                     if re.fullmatch(r"\d\d_\w+", d) and os.path.isdir(os.path.join(root, "chapters", d)))
    listed = [c["stem"] for c in chapters]
    for stem in listed:
        if stem not in folders:
            found.append(f"the manifest lists {stem}, but there is no folder chapters/{stem}/")
        elif not os.path.isfile(os.path.join(root, "chapters", stem, "CMakeLists.txt")):
            found.append(f"chapters/{stem}/ has no CMakeLists.txt (it calls attn_add_chapter)")
    for stem in folders:
        if stem not in listed:
            found.append(f"chapters/{stem}/ is not in chapters/manifest.json")
    numbers = [int(c["number"]) for c in chapters]
    if numbers != list(range(1, len(numbers) + 1)):
        found.append(f"the chapters' numbers must run 01, 02, ... with no gap or repeat: {numbers}")
    readme = os.path.join(root, "README.md")
    if os.path.isfile(readme):  # the README's table of chapters: the same chapters, levels and order
        with open(readme, encoding="utf-8") as f:
            rows = re.findall(r"^\| (\w+) \| (\d\d) (\w+) \|", f.read(), re.M)
        table = [(f"{number}_{name}", level) for level, number, name in rows]
        listed_levels = [(c["stem"], c.get("level")) for c in chapters]
        # Each row is a chapter of the manifest at its level, in the manifest's order (a chapter just added may
        # not have its row yet: the manifest is the list, the table describes it).
        if [t for t in listed_levels if t in table] != table:
            found.append("README.md's table of chapters (level, NN name) differs from the manifest: "
                         f"{[t for t in table if t not in listed_levels] or table} against "
                         f"{[t for t in listed_levels if t in table]}")
    for c in chapters:
        if c.get("level") not in LEVELS:
            found.append(f"{c['stem']}: level '{c.get('level')}' is not one of {', '.join(LEVELS)}")
        if not c.get("title"):
            found.append(f"{c['stem']}: no title")
    return found


def main(argv):
    path = DEFAULT
    if len(argv) >= 2 and argv[0] == "--manifest":
        path, argv = argv[1], argv[2:]
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    chapters = load(path)
    question, args = argv[0], argv[1:]
    if question == "stems":
        print("\n".join(c["stem"] for c in chapters))
    elif question == "stem" and len(args) == 1:
        number = args[0]
        if not re.fullmatch(r"\d{1,2}", number):
            return f"course: '{number}' is not a chapter number (expected 01, 02, ...)"
        stem = next((c["stem"] for c in chapters if int(c["number"]) == int(number)), None)
        if stem is None:
            return f"course: there is no chapter {int(number):02d}; the chapters are: " + " ".join(
                c["stem"] for c in chapters)
        print(stem)
    elif question == "field" and len(args) == 2:
        entry = by_stem(chapters, args[0])
        value = field(entry, args[1]) if entry else None
        if value is None:
            return 1
        print("\n".join(map(str, value)) if isinstance(value, list) else value)
    elif question == "with" and len(args) == 1:
        print("\n".join(c["stem"] for c in chapters if field(c, args[0]) is not None))
    elif question == "packages":
        print("\n".join(dict.fromkeys(p for c in chapters for p in c.get("packages", []))))
    elif question == "check" and len(args) == 1:
        found = problems(chapters, args[0])
        for p in found:
            print(f"manifest: {p}", file=sys.stderr)
        return 1 if found else 0
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    status = main(sys.argv[1:])
    if isinstance(status, str):  # a refused chapter number: status 2, as the driver's usage errors
        print(status, file=sys.stderr)
        status = 2
    sys.exit(status)
