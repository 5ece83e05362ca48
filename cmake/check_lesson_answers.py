#!/usr/bin/env python3
"""A lesson shows no reference answer. On book/NN_name.md before its first `@page` (the solutions and output pages
follow the lesson in the same file), outside code (cmake/course_markdown.py), a finding is:
- a \\snippet, \\include or \\dontinclude of a file under solutions/ (answers belong on the solutions page);
- a `\\snippet FILE TAG` whose TAG is one of the chapter's exercises;
- a \\snippet whose region defines a function named as an exercise, or as an exercise and a suffix naming only
  another layout of the same computation (LAYOUTS: `encoder_layer_packed`), whatever its tag. Other suffixes are
  other computations (linear_attention_weights beside linear_attention); a definition that hands the work to the
  exercise (`return attn::make_block_mask(...)`) shows no answer.
The exercises are the chapter's own (driver/hints.py: the `## name` headings of exercises/NN_name/HINTS.md); a
lesson may show what earlier chapters asked for. Usage: check_lesson_answers.py ROOT [PAGE...] (default: every
book/NN_name.md). Exit status 1 on a finding.
"""
import os
import re
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [here, os.path.join(here, "..", "driver")]
import course_markdown as md  # noqa: E402
import hints  # noqa: E402  (driver/hints.py: the one reader of HINTS.md)

LAYOUTS = ("packed", "batched", "batch", "into", "in_place", "inplace", "fast", "threaded")
NOT_TYPES = {"return", "else", "case", "throw", "new", "delete", "co_return", "goto", "if", "while", "for"}


def region(root, source, tag):
    """The lines between the two `// [tag]` markers of `source` (none when the file or tag is missing: Doxygen says)."""
    path, lines, inside = os.path.join(root, source), [], False
    for line in open(path, encoding="utf-8") if os.path.exists(path) else []:
        if re.match(r"^\s*//\s*\[" + re.escape(tag) + r"\]\s*$", line):
            if inside:
                break
            inside = True
        elif inside:
            lines.append(line)
    return lines


def defines(lines, name):
    """The function (`name` or `name_LAYOUT`) the lines define with a body that is not a call of `::name(`, or None."""
    definition = re.compile(r"^\s*(?:(?:inline|static|constexpr|template\s*<[^>]*>)\s+)*"
                            r"(?P<type>[A-Za-z_][\w:<>,]*(?:\s*[&*]+)?)\s+(?:[\w:]+::)?"
                            r"(?P<name>" + re.escape(name) + r"(?:_(?:" + "|".join(LAYOUTS) + r"))?)\s*\(")
    for k, line in enumerate(lines):
        m = definition.match(line)
        head, brace, body = "".join(lines[k:]).partition("{")
        if m and m.group("type") not in NOT_TYPES and brace and ";" not in head and \
                not re.search(r"::" + re.escape(name) + r"\s*\(", body):
            return m.group("name")
    return None


def findings(text, names, snippet_lines):
    found = []
    for number, command, args in md.commands(text, stop_at_page=True):
        if command not in ("snippet", "snippetdoc", "snippetlineno", "include", "includelineno", "dontinclude") or not args:
            continue
        if args[0].startswith("solutions/"):
            found.append((number, f"the lesson takes {args[0]} (a reference answer) before the learner writes it; "
                                  "it belongs on the solutions page"))
        elif command.startswith("snippet") and len(args) > 1:
            for name in names:
                defined = None if args[1] == name else defines(snippet_lines(args[0], args[1]), name)
                if args[1] == name or defined:
                    found.append((number, f"snippet '{args[1]}' of {args[0]} is named for the exercise {name}: the same "
                                          "computation as the learner's answer, shown before they write it" if not defined else
                                          f"snippet '{args[1]}' of {args[0]} defines {defined}(), the same computation "
                                          f"as the exercise {name}: it belongs on the solutions page"))
                    break
    return found


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    fake = {"a": ["Matrix softmax_fast(const Matrix& x) {\n", "  return x;\n", "}\n"],
            "b": ["Matrix softmax_weights(const Matrix& x) {\n", "}\n"],
            "c": ["Matrix softmax_fast(const Matrix& x) {\n", "  return attn::softmax(x);\n", "}\n"]}
    check = lambda text: findings(text, ["softmax"], lambda source, tag: fake.get(tag, []))  # noqa: E731
    md.selftest("no solutions/ before the solutions page", check, "\\include solutions/01_x/x.cpp",
                "```\n\\include solutions/01_x/x.cpp\n```\n@page s Solutions\n\\include solutions/01_x/x.cpp")
    md.selftest("no snippet named as an exercise", check, "\\snippet chapters/x.cpp softmax", "\\snippet chapters/x.cpp demo")
    md.selftest("no snippet defining an exercise", check, "\\snippet chapters/x.cpp a",
                "\\snippet chapters/x.cpp b\n\\snippet chapters/x.cpp c")
    root = argv[1]
    pages = argv[2:] or md.pages(root, r"^\d\d_\w+\.md$")
    found = [f"{os.path.relpath(page, root)}:{number}: {message}" for page in pages for number, message in findings(
        open(page, encoding="utf-8").read(), [n.split("::")[-1] for n in hints.exercise_names(root, os.path.basename(page)[:-3])],
        lambda source, tag: region(root, source, tag))]
    return md.report(found, "place(s) where a lesson shows an answer before its exercises are written",
                     f"no lesson of {len(pages)} shows a reference answer before its solutions page")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
