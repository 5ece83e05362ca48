#!/usr/bin/env python3
"""Ninja's and CTest's output, made short for a reader (./course pipes its builds and test runs here).

usage: compact_progress.py ninja|ctest [--tty]

ninja: drops the lines a build with nothing to do prints ("Re-checking globbed directories...",
"ninja: no work to do.") and shortens each step to "[12/170] compiling chapters/05_flash_cpu/row_ops.cpp".
ctest: drops the "Start" lines and shortens each result to "[12/372] ok      solution:ch05 ...".
Every line written fits 100 columns; anything else (compiler errors, a failed test's output, the
summary) passes unchanged. With --tty, steps and passed tests overwrite one status line, so only what
needs reading stays on the screen.
"""
import os
import re
import sys
import unicodedata

WIDTH = 100
NINJA_STEP = re.compile(r"^\[(\d+)/(\d+)\] (.*)$")
NINJA_NOISE = re.compile(r"^(\[\d+/\d+\] Re-checking globbed directories\.\.\.|ninja: no work to do\.)$")
CTEST_START = re.compile(r"^\s*Start\s+\d+: ")
# "307/372 Test #321: NAME ......   Passed    0.79 sec", "***Failed", "***Not Run (Disabled)", "***Timeout"...
CTEST_RESULT = re.compile(r"^\s*(\d+)/(\d+) Test\s+#\d+: (.*?) \.+\s*\**(Passed|Failed|Not Run|Skipped|Timeout|"
                          r"Exception|[A-Z][A-Za-z ]*?)\b.*?\s[\d.]+ sec\s*$")


def columns(text):
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def fit(text, width=WIDTH):
    """text cut to width display columns, ending in '...' when cut."""
    if columns(text) <= width:
        return text
    out, used = "", 0
    for c in text:
        w = columns(c)
        if used + w > width - 3:
            break
        out, used = out + c, used + w
    return out + "..."


def ninja_step(what):
    # "common/CMakeFiles/attn_common.dir/src/machine.cpp.o" → "common/src/machine.cpp" ("__" is "..")
    m = re.match(r"Building (?:CXX|CUDA|C) object (?:(\S*?)CMakeFiles/[^/]+\.dir/)?(\S+?)\.o$", what)
    if m:
        path = os.path.normpath((m.group(1) or "") + m.group(2).replace("__/", "../"))
        return "compiling " + path
    m = re.match(r"Linking (?:CXX|CUDA|C) (?:executable|static library|shared library) (\S+)$", what)
    if m:
        return "linking " + m.group(1)
    return what


class Screen:
    """Writes lines; on a terminal, status lines overwrite each other until a lasting line comes."""

    def __init__(self, tty):
        self.tty, self.status_shown = tty, False

    def status(self, text):
        if self.tty:
            sys.stdout.write("\r\033[K" + fit(text))
            self.status_shown = True
        else:
            sys.stdout.write(fit(text) + "\n")
        sys.stdout.flush()

    def lasting(self, text):
        self.clear()
        sys.stdout.write(text + "\n")
        sys.stdout.flush()

    def clear(self):
        if self.status_shown:
            sys.stdout.write("\r\033[K")
            self.status_shown = False


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in ("ninja", "ctest"):
        sys.exit("usage: compact_progress.py ninja|ctest [--tty]")
    mode, screen = sys.argv[1], Screen("--tty" in sys.argv[2:])
    while True:
        line = sys.stdin.readline()
        if not line:
            break
        line = line.rstrip("\n")
        if mode == "ninja":
            if NINJA_NOISE.match(line):
                continue
            m = NINJA_STEP.match(line)
            if m:
                screen.status(f"[{m.group(1)}/{m.group(2)}] {ninja_step(m.group(3))}")
            else:
                screen.lasting(line)
        else:
            if CTEST_START.match(line):
                continue
            m = CTEST_RESULT.match(line)
            if not m:
                screen.lasting(line)
                continue
            done, total, name, outcome = m.groups()
            tag = {"Passed": "ok", "Skipped": "skipped", "Not Run": "not run"}.get(outcome, "FAILED")
            text = f"[{done}/{total}] {tag:<7} {name}"
            if tag == "ok":
                screen.status(text)
            else:
                screen.lasting(fit(text))
    screen.clear()


if __name__ == "__main__":
    main()
