#!/usr/bin/env python3
"""A lesson shows no reference answer: fails when a chapter's lesson page, before its first sub-page (the
solutions page and the output page follow the lesson in the same file, each opened by `@page`), takes code
from solutions/ or shows chapter code that is the same computation as one of the chapter's exercises.

What counts, on book/NN_name.md up to its first `@page` line (code blocks and `code spans` left alone):
- a `\\snippet`, `\\include` or `\\dontinclude` of a file under solutions/ (the reference answers belong on
  the solutions page, where the reader arrives after writing them);
- a `\\snippet FILE TAG` of any other source whose TAG is an exercise's name;
- a `\\snippet` whose region defines a function named as an exercise, or as an exercise and a suffix that
  names only another layout of the same computation (LAYOUTS: `Matrix encoder_layer_packed(` is the exercise
  encoder_layer over a packed batch), whatever its tag. Other suffixes are other computations
  (chapter 08's linear_attention_weights is the quadratic order beside the exercise linear_attention);
  a definition that hands the work to the exercise itself (`return attn::make_block_mask(...)`, a wrapper)
  shows no answer and does not count.
The chapter's exercises are the `## name` headings of exercises/NN_name/HINTS.md (the first word of each).
Only a chapter's own exercises count: a lesson may show what earlier chapters asked for, as chapter code.

Usage: check_lesson_answers.py ROOT [PAGE...] (default: every book/NN_name.md). Prints each finding with its
page and line; exit status 1 when there is one. Standard library only.
"""

import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "driver"))
import hints  # noqa: E402  (driver/hints.py: the one reader of HINTS.md)

SNIPPET = re.compile(r"^\s*\\snippet(?:doc|lineno)?\s+(\S+)\s+(\S+)")
INCLUDE = re.compile(r"^\s*\\(?:include|includelineno|dontinclude)\s+(\S+)")
OPENS = ("\\code", "```", "~~~", "\\verbatim")
CLOSES = ("\\endcode", "```", "~~~", "\\endverbatim")
LAYOUTS = ("packed", "batched", "batch", "into", "in_place", "inplace", "fast", "threaded")
NOT_TYPES = {"return", "else", "case", "throw", "new", "delete", "co_return", "goto", "if", "while", "for"}


def exercises_of(root, stem):
    """The exercise names of chapter `stem` (NN_name), unqualified (Class::method gives method): driver/hints.py's."""
    return [name.split("::")[-1] for name in hints.exercise_names(root, stem)]


def lesson_lines(path):
    """(line number, line) of the lesson's body: up to the first `@page`, outside code blocks."""
    body, inside = [], None
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            stripped = line.strip()
            if inside is not None:
                if stripped.startswith(CLOSES[inside]):
                    inside = None
                continue
            opened = [k for k, o in enumerate(OPENS) if stripped.startswith(o)]
            if opened:
                inside = opened[0]
                continue
            if stripped.startswith("@page") or stripped.startswith("\\page"):
                break
            body.append((number, line))
    return body


def region(root, source, tag):
    """The lines between the two `// [tag]` markers of `source` (empty when the file or the tag is missing:
    Doxygen's own build reports those)."""
    path = os.path.join(root, source)
    if not os.path.exists(path):
        return []
    marker = re.compile(r"^\s*//\s*\[" + re.escape(tag) + r"\]\s*$")
    lines, inside = [], False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if marker.match(line):
                if inside:
                    break
                inside = True
                continue
            if inside:
                lines.append(line)
    return lines


def defines(lines, name):
    """The function the lines define under `name` or `name_LAYOUT` (a return type, then the name and its
    parameters, then a body), or None. A definition whose body calls `::name(` hands the work to the exercise
    and does not count."""
    definition = re.compile(r"^\s*(?:(?:inline|static|constexpr|template\s*<[^>]*>)\s+)*"
                            r"(?P<type>[A-Za-z_][\w:<>,]*(?:\s*[&*]+)?)\s+(?:[\w:]+::)?"
                            r"(?P<name>" + re.escape(name) + r"(?:_(?:" + "|".join(LAYOUTS) + r"))?)\s*\(")
    for k, line in enumerate(lines):
        m = definition.match(line)
        if not m or m.group("type") in NOT_TYPES:
            continue
        rest = "".join(lines[k:])
        head = rest.split("{", 1)[0]
        if "{" not in rest or ";" in head:
            continue  # a declaration, not a definition
        if re.search(r"::" + re.escape(name) + r"\s*\(", rest.split("{", 1)[1]):
            continue  # a wrapper around the exercise
        return m.group("name")
    return None


def check_page(root, page):
    stem = os.path.basename(page)[:-3]
    names = exercises_of(root, stem)
    findings = []
    for number, line in lesson_lines(page):
        where = f"{os.path.relpath(page, root)}:{number}"
        m = SNIPPET.match(line) or INCLUDE.match(line)
        if not m:
            continue
        source = m.group(1)
        if source.startswith("solutions/"):
            findings.append(f"{where}: the lesson takes {source} (a reference answer) before the learner writes it; "
                            "it belongs on the solutions page")
            continue
        if m.re is not SNIPPET:
            continue
        tag = m.group(2)
        for name in names:
            if tag == name:
                findings.append(f"{where}: snippet '{tag}' of {source} is named for the exercise {name}: "
                                "the same computation as the learner's answer, shown before they write it")
                break
            defined = defines(region(root, source, tag), name)
            if defined:
                findings.append(f"{where}: snippet '{tag}' of {source} defines {defined}(), the same computation "
                                f"as the exercise {name}: it belongs on the solutions page")
                break
    return findings


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    root = argv[1]
    pages = argv[2:]
    if not pages:
        book = os.path.join(root, "book")
        pages = sorted(os.path.join(book, p) for p in os.listdir(book) if re.match(r"^\d\d_\w+\.md$", p))
    findings = []
    for page in pages:
        findings += check_page(root, page)
    for f in findings:
        print(f)
    if findings:
        print(f"{len(findings)} place(s) where a lesson shows an answer before its exercises are written")
        return 1
    print(f"no lesson of {len(pages)} shows a reference answer before its solutions page")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
