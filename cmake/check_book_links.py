#!/usr/bin/env python3
"""Every function the book names is a link: fails when book/*.md or a header's /// comment names a course function
as `attn::name` without the parentheses that make Doxygen link it (it links a qualified class by itself, a
namespace function only as `attn::name()`), so that a page never mixes links and plain text at random.
Prose only (cmake/course_markdown.py: no code, formulas, graphs, `code spans` or \\ref, which chooses its text).
A name is a function when a course header declares `... name(` and no class, struct or alias of that name.
Usage: check_book_links.py ROOT. Exit status 1 when a mention is unlinked.
"""
import functools
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import course_markdown as md  # noqa: E402

MENTION = re.compile(r"attn::[A-Za-z_0-9:]*[A-Za-z_0-9](?!\(|[A-Za-z_0-9]|::)")


def unlinked(text, declarations, is_header=False):
    """(line, name) of each function named without parentheses; a header's text is its /// comments."""
    if is_header:
        text = "\n".join(line.split("///", 1)[1].lstrip("<") if "///" in line else "" for line in text.splitlines())
    return [(number, m.group()) for number, line in md.prose_lines(text) for m in MENTION.finditer(line)
            if is_function(m.group().split("::")[-1], declarations)]


@functools.lru_cache(maxsize=None)
def is_function(name, declarations):
    return bool(re.search(r"[\w>&*]\s+" + re.escape(name) + r"\s*\(", declarations)) and \
        not re.search(r"(?:struct|class|using)\s+" + re.escape(name) + r"\b", declarations)


def main(root):
    fake = "float softmax(int);\nstruct Tiles {};\n"
    md.selftest("a function is named as attn::name()", lambda t: unlinked(t, fake), "Call attn::softmax on it.",
                "Call attn::softmax(), attn::Tiles, `attn::softmax` and \\ref attn::softmax \"it\".\n"
                "\\dot\na [label=\"attn::softmax\"]\n\\enddot\n```{.cpp}\nattn::softmax\n```")
    md.selftest("a header's /// comments are read", lambda t: unlinked(t, fake, True), "/// Uses attn::softmax.",
                "// Uses attn::softmax.")
    headers = sorted(os.path.relpath(os.path.join(folder, f), root) for top in ("common", "chapters", "exercises", "solutions")
                     for folder, _, files in os.walk(os.path.join(root, top)) for f in files if f.endswith((".hpp", ".cuh")))
    declarations = "".join(open(os.path.join(root, h), encoding="utf-8").read() for h in headers)
    pages = [os.path.relpath(p, root) for p in md.pages(root)]
    findings = [f"{path}:{number}: {name} is a function: write {name}() so that Doxygen links it"
                for path in pages + headers for number, name in
                unlinked(open(os.path.join(root, path), encoding="utf-8").read(), declarations, path in headers)]
    return md.report(findings, f"unlinked function names in {len(pages)} pages and {len(headers)} headers",
                     f"0 unlinked function names in {len(pages)} pages and {len(headers)} headers")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
