#!/usr/bin/env python3
"""Every function the book names is a link: fails when book/*.md or a header's /// comment names a course
function as `attn::name` without the parentheses that make Doxygen link it.

Doxygen links a qualified class name by itself, but a namespace-qualified function only when it is written
`attn::name()`. Without the parentheses the reader sees plain text where every other mention is a link to
the contract, so a page would mix the two at random.

Skipped: code blocks (\\code, ``` and \\verbatim), `code spans`, and \\ref commands, which choose their own text.
A name counts as a function when a header of the course declares `... name(` and no class, struct or alias of
that name. Usage: check_book_links.py ROOT. Prints every mention with its file and line; exit status 1 when
there is one. Standard library only.
"""

import os
import re
import sys

MENTION = re.compile(r"attn::[A-Za-z_0-9:]*[A-Za-z_0-9](?!\(|[A-Za-z_0-9]|::)")
LEAVE_ALONE = re.compile(r'(`[^`]*`|\\ref\s+\S+(?:\s+"[^"]*")?)')
OPENS = ("\\code", "```", "~~~", "\\verbatim")
CLOSES = ("\\endcode", "```", "~~~", "\\endverbatim")


def headers_of(root):
    """The course's headers, relative to root (build folders left out)."""
    found = []
    for top in ("common", "chapters", "exercises", "solutions"):
        for folder, _, files in os.walk(os.path.join(root, top)):
            found += [os.path.relpath(os.path.join(folder, f), root) for f in files if f.endswith((".hpp", ".cuh"))]
    return sorted(found)


def function_test(declarations):
    cache = {}

    def is_function(qualified):
        name = qualified.split("::")[-1]
        if name not in cache:
            declared = re.search(r"[\w>&*]\s+" + re.escape(name) + r"\s*\(", declarations)
            a_type = re.search(r"(?:struct|class|using)\s+" + re.escape(name) + r"\b", declarations)
            cache[name] = bool(declared) and not a_type
        return cache[name]

    return is_function


def prose_lines(path):
    """(line number, prose text) of a book page, or of a header's /// comments."""
    is_page = path.endswith(".md")
    in_code = False
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            text = line.rstrip("\n")
            if not is_page:
                if "///" not in text:
                    continue
                text = text.split("///", 1)[1].lstrip("<")
            stripped = text.strip()
            if in_code:
                in_code = not stripped.startswith(CLOSES)
                continue
            if stripped.startswith(OPENS):
                in_code = True
                continue
            yield number, LEAVE_ALONE.sub(" ", text)


def main(root):
    headers = headers_of(root)
    declarations = "".join(open(os.path.join(root, h), encoding="utf-8").read() for h in headers)
    is_function = function_test(declarations)
    pages = sorted(os.path.join("book", p) for p in os.listdir(os.path.join(root, "book")) if p.endswith(".md"))
    problems = []
    for path in pages + headers:
        for number, text in prose_lines(os.path.join(root, path)):
            for mention in MENTION.finditer(text):
                if is_function(mention.group(0)):
                    problems.append(f"{path}:{number}: {mention.group(0)} is a function: write "
                                    f"{mention.group(0)}() so that Doxygen links it")
    for problem in problems:
        print(problem)
    print(f"{len(problems)} unlinked function names in {len(pages)} pages and {len(headers)} headers")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
