"""Records the ids the model's own tokenizer gives (its tokenizer.json, run by Hugging Face's `tokenizers`, which
sentence-transformers and transformers run) on the texts that separate one Unicode-handling choice from another,
and can compare the course's tokenizer with it on every code point of planes 0-3.

The classes, each a place where tokenizers differ (the original BERT tokenizer, Python's unicodedata, ICU):
whitespace (Unicode's White_Space: U+2028 and U+2029 separate words), final sigma (lower-cased one character at
a time: ΟΔΟΣ ends in σ, not ς), code points unassigned in Unicode 8.0 (the version of tokenizers' category
tables: kept as letters, so a word holding one is [UNK], never dropped), punctuation and marks added after
Unicode 8.0 (neither split nor stripped), the few characters whose category changed since, and the CJK range
(tokenizers starts the block after Extension D at U+2B920, not U+2B820).

Opt-in, in a virtual environment with `tokenizers` from PyPI (a few MB, no PyTorch):
  python3 -m venv build/tok-venv && build/tok-venv/bin/pip install tokenizers
  build/tok-venv/bin/python chapters/16_real_model/record_tokenizer.py record build/models/all-MiniLM-L6-v2 \\
      tests/data/16_tokenizer_reference.jsonl
writes one JSON object per line, {"class": ..., "text": ..., "ids": [...]}, after a first line naming the command
and the tokenizers version; tests/16_real_model_test.cpp compares the course's ids with them.
  build/tok-venv/bin/python chapters/16_real_model/record_tokenizer.py sweep build/models/all-MiniLM-L6-v2 TOOL
runs TOOL (a program that reads one JSON string per line on stdin and prints the course's ids, space-separated,
one line each) on "a<c>b <c>" for every code point c of planes 0-3 and prints every code point whose ids differ.
"""
import json
import subprocess
import sys

import tokenizers
from tokenizers import Tokenizer

# (class, text): each class the tests pin, with the characters that decide it.
CASES = [
    ("whitespace", "line\u2028separator"),
    ("whitespace", "paragraph\u2029separator"),
    ("whitespace", "no\u00a0break and\u3000ideographic and\u1680ogham and\u2003em"),
    ("whitespace", "tab\tnew\nline\rreturn"),
    ("control", "next\u0085line and\u180emongolian and soft\u00adhyphen"),
    ("final sigma", "ΟΔΟΣ"),
    ("final sigma", "ΣΑΣ Σ σ ς"),
    ("final sigma", "Οδός"),
    ("unassigned", "new \U0001FAE9 emoji"),
    ("unassigned", "a\u0378b \u0378"),
    ("unassigned", "non\ufdd0character"),
    ("after Unicode 8", "a\u2e4fb and \u061d"),
    ("after Unicode 8", "mark a\u07fdb"),
    ("after Unicode 8", "format a\u0890b"),
    ("after Unicode 8", "emoji \U0001F92F and \U0001F600"),
    ("category changed", "a\u166db"),
    ("category changed", "a\u1734b"),
    ("category changed", "a\u1885b"),
    ("category changed", "a\ua9bdb"),
    ("category changed", "a\U000111c9b"),
    ("CJK range", "a\U0002B81Fb"),
    ("CJK range", "a\U0002B820b"),
    ("CJK range", "a\U0002B91Fb"),
    ("CJK range", "a\U0002B920b"),
    ("CJK range", "猫坐在垫子上，它很累。"),
    ("accents", "Café déjà vu: naïve résumé, ÉCOLE! İstanbul"),
]


def load(model_dir):
    t = Tokenizer.from_file(model_dir + "/tokenizer.json")
    t.no_padding()
    t.no_truncation()
    return t


def record(model_dir, out_path):
    t = load(model_dir)
    with open(out_path, "w", encoding="utf-8") as out:
        out.write("# " + " ".join(["python"] + sys.argv) + f" (tokenizers {tokenizers.__version__})\n")
        for kind, text in CASES:
            out.write(json.dumps({"class": kind, "text": text, "ids": t.encode(text).ids}, ensure_ascii=True) + "\n")


def sweep(model_dir, tool):
    t = load(model_dir)
    cps = [c for c in range(0x40000) if not 0xD800 <= c <= 0xDFFF]
    texts = [f"a{chr(c)}b {chr(c)}" for c in cps]
    ref = [e.ids for e in t.encode_batch(texts)]
    run = subprocess.run([tool, model_dir + "/vocab.txt"], input="\n".join(json.dumps(x) for x in texts) + "\n",
                         capture_output=True, text=True, check=True)
    ours = [[int(v) for v in line.split()] for line in run.stdout.splitlines()]
    differ = [c for c, r, o in zip(cps, ref, ours) if r != o]
    for c in differ:
        print(f"U+{c:04X}")
    print(f"{len(differ)} of {len(cps)} code points give other ids than tokenizers {tokenizers.__version__}")
    return 1 if differ else 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "record":
        record(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == "sweep":
        sys.exit(sweep(sys.argv[2], sys.argv[3]))
    else:
        print(__doc__)
        sys.exit(2)
