"""A chapter's exercises and their hints, as exercises/NN_name/HINTS.md declares them: the one reader of that file, for
the driver (driver/loop.py), the isolation check (tests/driver/check_isolation.py) and the lesson-answer check
(cmake/check_lesson_answers.py). Standard library only.

HINTS.md: each exercise a '## name' heading (the contract function's name, possibly qualified: Class::method), in the
order the learner meets them; under it, numbered hints ('1. ...'), each continued by the lines that follow it up to
a blank line.
"""

import os
import re

HEADING = re.compile(r"^## ([A-Za-z_][A-Za-z0-9_:]*)")
HINT = re.compile(r"^(\d+)\. (.*)")


def hints_path(root, stem):
    return os.path.join(root, "exercises", stem, "HINTS.md")


def read_hints(root, stem):
    """{exercise: [hint, ...]} in HINTS.md order; {} for a chapter without exercises (no HINTS.md)."""
    path = hints_path(root, stem)
    if not os.path.exists(path):
        return {}
    out, exercise, hint = {}, None, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            heading, item = HEADING.match(line), HINT.match(line)
            if heading:
                exercise, hint = heading.group(1), None
                out[exercise] = []
            elif exercise and item:
                out[exercise].append(item.group(2))
                hint = len(out[exercise]) - 1
            elif exercise and hint is not None and line.strip():
                out[exercise][hint] += " " + line.strip()
            elif not line.strip():
                hint = None
    return out


def exercise_names(root, stem):
    """The chapter's exercises, in order: read_hints()'s keys."""
    return list(read_hints(root, stem))
