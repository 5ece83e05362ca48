#!/usr/bin/env python3
"""Fails when a word of the course's workshop reaches a reader: the article the course follows called "the seed",
claim labels such as "C7", verdicts against the project's own goals ("target met", "Convolution: missed"). The
course says "the article the course follows" and names the numbered questions of book/questions.md. Every line
is read, code included: a page shows its code blocks, and the book quotes the sources.

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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import course_markdown as md  # noqa: E402

# A random generator's seed ("seed 12", "--seed", "8 seeds", "seeded") is an ordinary word and stays.
WORKSHOP_WORDS = re.compile(
    r"\b[Tt]he seed\b(?! (?:of|and|value|schedule))|\bseed's\b"  # the article, as the workshop calls it
    r"|\b[Cc]laims? C\d+|\bC\d{1,2}\b(?![+#])"  # claim labels: C7, C16
    r"|\btargets?\b[^.\n]{0,40}\b(?:met|missed)\b|:\s*(?:met|missed)\b")  # verdicts against the project's goals


def offending(text, shown_as):
    return [f"{shown_as}:{n}: {line.rstrip()[:160]}" for n, line in enumerate(text.split("\n"), 1)
            if WORKSHOP_WORDS.search(line)]


def files(root):
    paths = [os.path.join(root, "README.md")] + md.pages(root)
    paths += sorted(p for p in glob.glob(os.path.join(root, "book", "recorded", "*")) if os.path.isfile(p))
    for part in ("chapters", "solutions", "exercises", "common"):  # snippets and the API reference
        paths += sorted(p for p in glob.glob(os.path.join(root, part, "**", "*"), recursive=True)
                        if os.path.isfile(p) and p.endswith((".cpp", ".hpp", ".cu", ".cuh", ".h")))
    return [(p, os.path.relpath(p, root)) for p in paths]


def check_title(exe, extra):
    """A reader who runs a chapter first sees which chapter it is: "Chapter NN: <its title in the manifest>"."""
    number = re.match(r"ch(\d\d)_", os.path.basename(exe))
    run = subprocess.run([exe, "--no-color"] + extra, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    first = run.stdout.split("\n", 1)[0]
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "chapters", "manifest.json"), encoding="utf-8") as f:
        title = next((c["title"] for c in json.load(f)["chapters"] if number and c["number"] == number.group(1)), None)
    expected = "Chapter %s: %s" % (number.group(1) if number else "NN", title or "(no manifest entry)")
    if run.returncode != 0 or title is None or first != expected:
        print("%s --no-color (status %d) starts with %r, not its title line from chapters/manifest.json %r" %
              (os.path.basename(exe), run.returncode, first[:100], expected))
        return 1
    print("%s starts with its title: %s" % (os.path.basename(exe), first))
    return 0


def main(argv):
    if len(argv) < 2 or argv[0] not in ("--pages", "--chapter", "--title") or (argv[0] == "--pages" and len(argv) != 2):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    md.selftest("the workshop's words", lambda t: offending(t, "-"), "As the seed says (claim C7), target met.",
                "Seed 12, --seed, 8 seeds, the seed of the generator, C++ and C#: the article the course follows.")
    if argv[0] == "--title":
        return check_title(argv[1], argv[2:])  # the chapter's own arguments (the sanitizer build's shorter run)
    if argv[0] == "--pages":
        read = files(argv[1])
        found = [f for path, shown in read for f in offending(open(path, encoding="utf-8", errors="replace").read(), shown)]
    else:
        with tempfile.TemporaryDirectory() as out:
            run = subprocess.run([argv[1], "--book", out] + argv[2:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if run.returncode != 0:
                print("%s --book failed (status %d):\n%s" % (argv[1], run.returncode, run.stdout[-2000:]))
                return 1
            read = sorted(glob.glob(os.path.join(out, "*.txt")))
            found = [f for path in read for f in offending(open(path, encoding="utf-8", errors="replace").read(),
                                                           os.path.basename(argv[1]) + " --book: " + os.path.basename(path))]
    return md.report(found, "line(s) use the workshop's words; say \"the article the course follows\" and name the question",
                     "%d file(s) read, none uses the workshop's words" % len(read))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
