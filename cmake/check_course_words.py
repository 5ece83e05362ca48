#!/usr/bin/env python3
"""Fails when a word of the course's workshop reaches a reader: the article the course follows called "the
seed", claim labels such as "C7", verdicts against the project's own goals ("target met", "Convolution:
missed"). The course calls its source "the article the course follows" and turns its claims into the
numbered questions of book/questions.md.

usage: check_course_words.py --title EXE [ARGS...]    EXE --no-color ARGS starts with its title line, "Chapter NN:"
       check_course_words.py --pages ROOT     README.md, book/*.md, book/recorded/* and the sources the book
                                             quotes (chapters/, solutions/, exercises/, common/) under ROOT
       check_course_words.py --chapter EXE [ARGS...]  what EXE --book DIR ARGS writes (the text the book includes)
Prints each offending line (file:line: text) and exits 1 when there is one; 2 on bad usage.
"""
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

# A random generator's seed ("seed 12", "--seed", "8 seeds", "seeded") is an ordinary word and stays.
WORKSHOP_WORDS = re.compile(
    r"\b[Tt]he seed\b(?! (?:of|and|value|schedule))"  # the article, as the workshop calls it
    r"|\bseed's\b"
    r"|\b[Cc]laims? C\d+|\bC\d{1,2}\b(?![+#])"  # claim labels: C7, C16
    r"|\btargets?\b[^.\n]{0,40}\b(?:met|missed)\b"  # verdicts against the project's goals
    r"|:\s*(?:met|missed)\b")


def offending_lines(path, shown_as):
    found = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            if WORKSHOP_WORDS.search(line):
                found.append("%s:%d: %s" % (shown_as, number, line.rstrip()[:160]))
    return found


def check_pages(root):
    paths = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "book", "*.md")))
    paths += sorted(p for p in glob.glob(os.path.join(root, "book", "recorded", "*")) if os.path.isfile(p))
    for part in ("chapters", "solutions", "exercises", "common"):  # snippets and the API reference
        paths += sorted(p for p in glob.glob(os.path.join(root, part, "**", "*"), recursive=True)
                        if os.path.isfile(p) and p.endswith((".cpp", ".hpp", ".cu", ".cuh", ".h")))
    found = []
    for path in paths:
        found += offending_lines(path, os.path.relpath(path, root))
    return found, len(paths)


def check_chapter(exe, extra):
    with tempfile.TemporaryDirectory() as out:
        run = subprocess.run([exe, "--book", out] + extra, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if run.returncode != 0:
            print("%s --book failed (status %d):\n%s" % (exe, run.returncode, run.stdout[-2000:]))
            sys.exit(1)
        texts = sorted(glob.glob(os.path.join(out, "*.txt")))
        found = []
        for path in texts:
            found += offending_lines(path, os.path.basename(exe) + " --book: " + os.path.basename(path))
        return found, len(texts)


def manifest_title(number):
    """Chapter NUMBER's title in chapters/manifest.json (the one list of chapters), or None."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "chapters", "manifest.json")
    with open(path, encoding="utf-8") as f:
        for entry in json.load(f)["chapters"]:
            if entry["number"] == number:
                return entry["title"]
    return None


def check_title(exe, extra):
    """A reader who runs a chapter first sees which chapter it is: "Chapter NN: <its title in the manifest>"."""
    number = re.match(r"ch(\d\d)_", os.path.basename(exe))
    run = subprocess.run([exe, "--no-color"] + extra, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    first = run.stdout.split("\n", 1)[0]
    title = manifest_title(number.group(1)) if number else None
    expected = "Chapter %s: %s" % (number.group(1) if number else "NN", title or "(no manifest entry)")
    if run.returncode != 0 or title is None or first != expected:
        print("%s --no-color (status %d) starts with %r, not its title line from chapters/manifest.json %r" %
              (os.path.basename(exe), run.returncode, first[:100], expected))
        return 1
    print("%s starts with its title: %s" % (os.path.basename(exe), first))
    return 0


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("--pages", "--chapter", "--title") or \
            (sys.argv[1] == "--pages" and len(sys.argv) != 3):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    extra = sys.argv[3:]  # the chapter's own arguments (the sanitizer build's shorter run)
    if sys.argv[1] == "--title":
        return check_title(sys.argv[2], extra)
    found, files = check_pages(sys.argv[2]) if sys.argv[1] == "--pages" else check_chapter(sys.argv[2], extra)
    for line in found:
        print(line)
    if found:
        print("%d line(s) use the workshop's words; say \"the article the course follows\" and name the question"
              % len(found))
        return 1
    print("%d file(s) read, none uses the workshop's words" % files)
    return 0


if __name__ == "__main__":
    sys.exit(main())
