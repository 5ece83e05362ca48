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


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in ("ninja", "ctest"):
        sys.exit("usage: compact_progress.py ninja|ctest [--tty]")
    mode, tty, shown = sys.argv[1], "--tty" in sys.argv[2:], False

    def write(text, status):
        """A status line overwrites the last one on a terminal; a lasting line stays."""
        nonlocal shown
        sys.stdout.write(("\r\033[K" if shown or (status and tty) else "") + (fit(text) if status else text) + ("" if status and tty else "\n"))
        sys.stdout.flush()
        shown = status and tty

    for line in iter(sys.stdin.readline, ""):
        line = line.rstrip("\n")
        if NINJA_NOISE.match(line) if mode == "ninja" else CTEST_START.match(line):
            continue
        m = NINJA_STEP.match(line) if mode == "ninja" else CTEST_RESULT.match(line)
        if not m:
            write(line, False)
        elif mode == "ninja":
            write(f"[{m.group(1)}/{m.group(2)}] {ninja_step(m.group(3))}", True)
        else:
            done, total, name, outcome = m.groups()
            tag = {"Passed": "ok", "Skipped": "skipped", "Not Run": "not run"}.get(outcome, "FAILED")
            write(fit(f"[{done}/{total}] {tag:<7} {name}"), tag == "ok")
    if shown:
        sys.stdout.write("\r\033[K")


if __name__ == "__main__":
    main()
