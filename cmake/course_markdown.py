"""The one reader of the book's markdown (book/*.md, and the /// comments of the headers), for every check.

regions(text) splits a page into Region(kind, start, lines, command):
  prose     what a reader reads as text
  output    an untagged ``` or ~~~ fence: pasted output or a command
  code      a fence with a language (```{.py}), \\code…\\endcode, @code…@endcode, \\verbatim…\\endverbatim
  dot, msc  Doxygen's graphs;  formula  \\f[…\\f];  comment  <!-- … -->
  command   one line of \\snippet, \\include, \\verbinclude, \\htmlinclude, \\image, \\page, \\section, …
            (command: its name and its arguments)
prose_lines(text, kinds) gives (line number, text) of those kinds with inline code spans, \\f$…\\f$ formulas
(also across lines), \\ref targets, {#anchors}, URLs, link targets and HTML tags blanked (same columns).
report() prints findings the same way for every check; selftest() proves a rule still matches.
Standard library only.
"""
import collections
import os
import re
import sys

Region = collections.namedtuple("Region", "kind start lines command")
FENCE = re.compile(r"^\s*(```|~~~)\s*(\{?[.\w]*\}?)")
BLOCKS = {"\\code": ("code", "\\endcode"), "@code": ("code", "@endcode"), "\\verbatim": ("code", "\\endverbatim"),
          "\\dot": ("dot", "\\enddot"), "\\msc": ("msc", "\\endmsc"), "\\f[": ("formula", "\\f]"),
          "<!--": ("comment", "-->")}
COMMAND = re.compile(r"^\s*[\\@](snippet\w*|include\w*|verbinclude|htmlinclude|dontinclude|skip|skipline|until|line|"
                     r"image|page|subpage|section|subsection|anchor)\b\s*(.*)$")
INLINE = re.compile(r"`[^`\n]*`|\\f\$.*?\\f\$|\\f\[.*?\\f\]|[\\@]ref\s+\S+(?:\s+\"[^\"\n]*\")?|\{#[\w-]+\}|"
                    r"https?://\S+|\]\([^)\n]*\)|<[^>\n]+>|[\\@](?:snippet|image)\b.*$", re.S | re.M)


def regions(text):
    found, closing, fenced = [], None, False

    def add(kind, number, line, command=None):
        if found and found[-1].kind == kind and kind in ("prose", "output") and not command:
            found[-1].lines.append((number, line))
        else:
            found.append(Region(kind, number, [(number, line)], command))

    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if closing:
            found[-1].lines.append((number, line))
            if closing[1] in stripped:
                closing = None
            continue
        fence = FENCE.match(line)
        if fence:
            if fenced:
                fenced = False
            elif fence.group(2):
                closing = ("code", fence.group(1))
                found.append(Region("code", number, [(number, line)], None))
            else:
                fenced = True
                found.append(Region("output", number, [], None))
            continue
        opened = next((o for o in BLOCKS if stripped.startswith(o)), None)
        if opened and BLOCKS[opened][1] not in stripped[len(opened):]:
            closing = BLOCKS[opened]
            found.append(Region(closing[0], number, [(number, line)], None))
            continue
        command = COMMAND.match(line)
        if command and not fenced:
            found.append(Region("command", number, [(number, line)], (command.group(1), command.group(2).split())))
            continue
        add("output" if fenced else "prose", number, line)
    return found


def blank(text):
    return INLINE.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), text)


def prose_lines(text, kinds=("prose",)):
    for region in regions(text):
        if region.kind in kinds and region.lines:
            joined = blank("\n".join(line for _, line in region.lines)).split("\n")
            yield from zip((n for n, _ in region.lines), joined)


def commands(text, names=None, stop_at_page=False):
    """(line number, name, arguments) of each command line; stop_at_page: only those before the first @page."""
    for region in regions(text):
        if region.kind == "command":
            if stop_at_page and region.command[0] == "page":
                return
            if names is None or region.command[0] in names:
                yield region.start, region.command[0], region.command[1]


def pages(root, pattern=r".*\.md$"):
    book = os.path.join(root, "book")
    return sorted(os.path.join(book, p) for p in os.listdir(book) if re.match(pattern, p))


def report(findings, bad, good):
    """Prints each finding, then one line: `bad` with their count, or `good`. The exit status."""
    for finding in findings:
        print(finding)
    print(f"{len(findings)} {bad}" if findings else good)
    return 1 if findings else 0


def selftest(rule, check, bad, good):
    """check(bad) must find something and check(good) nothing, or the rule has silently stopped matching."""
    if not check(bad) or check(good):
        sys.exit(f"self-test failed: the rule '{rule}' no longer tells {bad!r} from {good!r}")


PAGE = ("Text 4 ms `code 1 ms`\n```\npasted 2 ms\n```\n```{.py}\nx = 3 ms\n```\n\\dot\nA -> B [label=\"5 ms\"]\n"
        "\\enddot\n\\f[\n6\\,\\mathrm{ms}\n\\f]\n\\snippet a.cpp tag\n\\f$x\nwraps 7 ms\\f$ then 8 ms\n@page next")
selftest("one walker", lambda t: [n for n, l in prose_lines(t, ("prose", "output")) if "ms" in l] != [1, 3, 16],
         PAGE + "\n9 ms", PAGE)
selftest("commands", lambda t: [c[:2] for c in commands(t)] != [(14, "snippet"), (17, "page")], PAGE + "\n\\image x", PAGE)
