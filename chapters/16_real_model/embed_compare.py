#!/usr/bin/env python3
"""Chapter 16's C++ forward beside the engines people deploy this model with: sentence embeddings per second and
per CPU-second, one run.

usage: embed_compare.py EXECUTABLE MODEL_DIR SENTENCES [--threads 2] [--repeats 5] [--rounds 3]
                        [--latency-repeats 2] [--engines course,sentence-transformers,onnxruntime,ctranslate2]

Every engine embeds the same sentences (chapters/16_real_model/sentences.txt) with the same model files on the same
number of threads, in batches of 32 and one at a time; each result is mean-pooled over the tokens and L2-normalised,
as sentence-transformers does. An engine that can spend its T threads two ways is timed both ways, and the fastest
setting is the one it is raced on: all T threads on each batch, or T streams of one thread each, every stream taking
an equal share of the sentences (what the course does: its forward starts no thread of its own).
  - The course (`EXECUTABLE bench`, BM_embed_fast/batch:B/threads:T): T streams; each thread takes the next batch
    of its share and runs it packed, no padding, with the fast forward (fast_minilm.hpp); Google Benchmark's
    --repeats repetitions, median. Its CPU time is the process's (attn::time_benchmark_calls:
    CLOCK_PROCESS_CPUTIME_ID, every thread's).
  - sentence-transformers on PyTorch: torch.set_num_threads(T), model.encode(sentences, batch_size=B) (it sorts the
    sentences by length, so a batch pads little).
  - ONNX Runtime: the transformers BertModel of the same folder exported by torch.onnx.export (TorchScript exporter,
    dynamic batch and length), a default InferenceSession (graph optimisations on: its own fusions); one session
    with intra_op_num_threads = T, and T sessions of 1 intra-op thread, one per Python thread (run() releases the
    GIL); the tokenizer and the length-sorted batches as sentence-transformers'.
  - CTranslate2: the same folder converted by its transformers converter (float32), ctranslate2.Encoder with
    intra_threads = T (inter_threads = 1), and with inter_threads = T of intra_threads = 1 called from T Python
    threads; the same tokenizer and batches.
One sentence's latency, beside the throughput: every sentence embedded alone, one after another, on one stream of
each setting (the course: BM_sentence_latency, its forward on one thread), each timed alone; the median in ms.
With ATTN_VECTOR_ISA=avx2 in the environment the course runs its AVX2+FMA path, and ./course bench forces the others
to AVX2 where they can be: CTranslate2 by CT2_FORCE_CPU_ISA=AVX2, PyTorch by ATEN_CPU_CAPABILITY=avx2 with
MKL_ENABLE_INSTRUCTIONS=AVX2 and ONEDNN_MAX_CPU_ISA=AVX2. ONNX Runtime has no such switch: its MLAS kernels pick
the CPU's widest instructions themselves (the header says so).
For the Python engines: a warm-up pass, then --repeats timed passes over all sentences (wall: perf_counter; CPU:
process_time, every thread of the process), median. --rounds rounds of every engine in turn, so that a change in
the machine's load hits all alike; the table gives the median over rounds and the spread (lowest–highest round).
Before timing, every engine's embeddings are compared with the course's: a cosine below 0.9999 stops the run.
Exported and converted models are kept under build/ (build/ch16_engines/), never committed.
Called by `./course bench 16 --vs-torch`; book page: book/measure_16_real_model.md.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import threading

ENGINES = ["course", "sentence-transformers", "onnxruntime", "ctranslate2"]
MIN_COSINE = 0.9999  # float32 rounding through six layers moves a cosine by ~1e-7; a wrong model by far more


def course_round(exe, batch, threads, repeats):
    """The course's (sentences/s, sentences per CPU-second) at \\p batch on \\p threads threads (medians of Google
    Benchmark's repetitions) and its context (CPU, BLAS kernel)."""
    out = subprocess.run(
        [exe, "bench", f"--benchmark_filter=^BM_embed_fast/batch:{batch}/threads:{threads}/",
         f"--benchmark_repetitions={repeats}", "--benchmark_format=json"],
        check=True, capture_output=True, text=True).stdout
    run = json.loads(out)
    walls, cpus = [], []
    for b in run["benchmarks"]:
        if b.get("error_occurred"):
            raise SystemExit(f"embed_compare: the course's benchmark failed: {b.get('error_message')}")
        if b.get("run_type") == "iteration":
            walls.append(b["sentences/s"])
            cpus.append(b["sentences/cpu_s"])
    if not walls:
        raise SystemExit(f"embed_compare: no BM_embed_fast/batch:{batch}/threads:{threads} in the course's output")
    return (statistics.median(walls), statistics.median(cpus)), run["context"]


def course_latency(exe, repeats):
    """The course's median latency of one sentence in ms (BM_sentence_latency: its forward on one thread), the
    median over Google Benchmark's repetitions."""
    out = subprocess.run(
        [exe, "bench", "--benchmark_filter=^BM_sentence_latency", f"--benchmark_repetitions={repeats}",
         "--benchmark_format=json"], check=True, capture_output=True, text=True).stdout
    ms = [b["median_ms"] for b in json.loads(out)["benchmarks"] if b.get("run_type") == "iteration"]
    if not ms:
        raise SystemExit("embed_compare: no BM_sentence_latency in the course's output")
    return statistics.median(ms)


def course_embeddings(exe, sentences_path, cache):
    """The course's embeddings of every sentence (ch16_real_model --write-embeddings), as a list of lists."""
    path = os.path.join(cache, "course_embeddings.txt")
    subprocess.run([exe, "--write-embeddings", path, "--sentences-file", sentences_path], check=True,
                   capture_output=True, text=True)
    with open(path, encoding="utf-8") as f:
        return [[float(v) for v in line.split()] for line in f if line.strip()]


def timed(encode, sentences, batch, repeats):
    """(sentences/s, sentences per CPU-second): medians of \\p repeats passes after a warm-up pass."""
    encode(sentences, batch)
    walls, cpus = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        encode(sentences, batch)
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - start_cpu)
    return len(sentences) / statistics.median(walls), len(sentences) / statistics.median(cpus)


def latency_ms(encode_one, sentences, repeats):
    """The median latency in ms of one sentence embedded alone by \\p encode_one, after a warm-up pass: every
    sentence, \\p repeats passes, each call timed alone."""
    for text in sentences:
        encode_one(text)
    times = []
    for _ in range(repeats):
        for text in sentences:
            start = time.perf_counter()
            encode_one(text)
            times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def on_streams(encode_share, streams):
    """encode(sentences, batch) that embeds an equal share of the sentences on each of \\p streams Python threads
    at once, stream s calling encode_share(s, its sentences, batch), as the course's threads share them."""
    def encode(sentences, batch):
        n, out, threads = len(sentences), [None] * streams, []
        for s in range(streams):
            def run(s=s):
                out[s] = encode_share(s, sentences[s * n // streams:(s + 1) * n // streams], batch)
            threads.append(threading.Thread(target=run))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return [e for part in out for e in part]
    return encode


def pooled(np, hidden, mask):
    """Mean pooling over the real tokens (mask) and L2 normalisation, as sentence-transformers' Pooling + Normalize."""
    m = mask[..., None].astype(np.float32)
    mean = (hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
    return mean / np.maximum(np.linalg.norm(mean, axis=1, keepdims=True), 1e-12)


def by_length_batches(tokenizer, sentences, batch):
    """Batches of sentence indices, longest first, as sentence-transformers forms them (little padding)."""
    order = sorted(range(len(sentences)), key=lambda i: -len(sentences[i]))
    return [order[i:i + batch] for i in range(0, len(order), batch)]


def make_onnxruntime(model_dir, cache, threads, tokenizer):
    import numpy as np
    import onnxruntime as ort
    import torch
    from transformers import BertModel
    path = os.path.join(cache, "model.onnx")
    if not os.path.exists(path):
        class LastHiddenState(torch.nn.Module):  # BertModel's forward by keyword: its positional order varies
            def __init__(self):
                super().__init__()
                # eager attention: the plain MatMul-Softmax-MatMul graph that ONNX Runtime's Attention fusion knows
                self.bert = BertModel.from_pretrained(model_dir, add_pooling_layer=False,
                                                      attn_implementation="eager").eval()

            def forward(self, input_ids, attention_mask, token_type_ids):
                return self.bert(input_ids=input_ids, attention_mask=attention_mask,
                                 token_type_ids=token_type_ids).last_hidden_state

        example = tokenizer(["a sentence to trace"], return_tensors="pt")
        dynamic = {0: "batch", 1: "tokens"}
        with torch.no_grad():
            torch.onnx.export(LastHiddenState(), (example["input_ids"], example["attention_mask"], example["token_type_ids"]),
                              path + ".part", input_names=["input_ids", "attention_mask", "token_type_ids"],
                              output_names=["last_hidden_state"], opset_version=17, dynamo=False,
                              dynamic_axes={"input_ids": dynamic, "attention_mask": dynamic, "token_type_ids": dynamic,
                                            "last_hidden_state": dynamic})
        os.replace(path + ".part", path)
    def session_of(intra):
        options = ort.SessionOptions()
        options.intra_op_num_threads = intra
        return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])

    def encoder_of(session):
        def encode(sentences, batch):
            out = [None] * len(sentences)
            for idx in by_length_batches(tokenizer, sentences, batch):
                t = tokenizer([sentences[i] for i in idx], padding=True, truncation=True, max_length=256,
                              return_tensors="np")
                feed = {k: t[k].astype(np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")}
                e = pooled(np, session.run(None, feed)[0], t["attention_mask"])
                for k, i in enumerate(idx):
                    out[i] = e[k]
            return out
        return encode

    whole = encoder_of(session_of(threads))
    settings = [(f"{threads} intra-op threads", whole, lambda text: whole([text], 1))]
    if threads > 1:
        streams = [encoder_of(session_of(1)) for _ in range(threads)]
        settings.append((f"{threads} sessions x 1 thread", on_streams(lambda s, x, b: streams[s](x, b), threads),
                         lambda text: streams[0]([text], 1)))
    return settings, f"ONNX Runtime {ort.__version__} (opset 17, CPUExecutionProvider, default graph optimisations)"


def make_ctranslate2(model_dir, cache, threads, tokenizer):
    import ctranslate2
    import numpy as np
    path = os.path.join(cache, "ctranslate2")
    if not os.path.exists(os.path.join(path, "model.bin")):
        ctranslate2.converters.TransformersConverter(model_dir).convert(path, force=True)
    def encoder_of(encoder):
        def encode(sentences, batch):
            out = [None] * len(sentences)
            for idx in by_length_batches(tokenizer, sentences, batch):
                ids = [tokenizer(sentences[i], truncation=True, max_length=256)["input_ids"] for i in idx]
                hidden = np.array(encoder.forward_batch(ids).last_hidden_state)
                mask = np.zeros(hidden.shape[:2], dtype=np.int64)
                for k, row in enumerate(ids):
                    mask[k, :len(row)] = 1
                e = pooled(np, hidden, mask)
                for k, i in enumerate(idx):
                    out[i] = e[k]
            return out
        return encode

    def encoder(inter, intra):
        return ctranslate2.Encoder(path, device="cpu", inter_threads=inter, intra_threads=intra,
                                   compute_type="float32")

    whole = encoder_of(encoder(1, threads))
    settings = [(f"{threads} intra threads", whole, lambda text: whole([text], 1))]
    if threads > 1:
        shared = encoder_of(encoder(threads, 1))  # inter_threads: that many calls at once, one thread each
        settings.append((f"{threads} inter x 1 intra", on_streams(lambda s, x, b: shared(x, b), threads),
                         lambda text: shared([text], 1)))
    isa = os.environ.get("CT2_FORCE_CPU_ISA")
    return settings, (f"CTranslate2 {ctranslate2.__version__} (float32, converted by its transformers converter"
                      f"{', CT2_FORCE_CPU_ISA=' + isa if isa else ''})")


def make_sentence_transformers(model_dir, threads):
    import sentence_transformers
    import torch
    from sentence_transformers import SentenceTransformer
    model = SentenceTransformer(model_dir, device="cpu")

    def encode(sentences, batch):
        return list(model.encode(sentences, batch_size=batch, convert_to_numpy=True))
    return [(f"{threads} torch threads", encode, lambda text: encode([text], 1))], (
        f"sentence-transformers {sentence_transformers.__version__} on PyTorch {torch.__version__} "
        f"(CPU capability {torch.backends.cpu.get_cpu_capability()})")


def cosine(a, b):
    ab = sum(x * y for x, y in zip(a, b))
    return ab / (sum(x * x for x in a) * sum(y * y for y in b)) ** 0.5


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("exe", help="build/default/bin/ch16_real_model")
    p.add_argument("model", help="the model's folder (build/models/all-MiniLM-L6-v2)")
    p.add_argument("sentences", help="chapters/16_real_model/sentences.txt")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--latency-repeats", type=int, default=2, help="passes of single sentences per round (latency)")
    p.add_argument("--engines", default=",".join(ENGINES), help="a comma-separated subset of " + ",".join(ENGINES))
    a = p.parse_args()
    engines = a.engines.split(",")
    if a.threads < 1 or a.repeats < 1 or a.rounds < 1 or a.latency_repeats < 1:
        p.error("--threads, --repeats, --rounds and --latency-repeats must be at least 1")
    if "course" not in engines or any(e not in ENGINES for e in engines):
        p.error(f"--engines: a subset of {','.join(ENGINES)} that holds the course")
    forced = os.environ.get("ATTN_FORCED_TO_AVX2", "")  # ./course bench sets it with ATTN_VECTOR_ISA=avx2
    try:
        import numpy  # noqa: F401
        import torch
        from transformers import AutoTokenizer
    except ImportError as e:
        print(f"embed_compare: {e.name} is not installed (./course bench 16 --vs-torch installs it)", file=sys.stderr)
        return 2
    with open(a.sentences, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f]  # as the course reads them: whole lines, # lines skipped
    sentences = [line for line in lines if line and not line.startswith("#")]
    root = os.path.dirname(os.path.dirname(os.path.abspath(a.exe)))  # build/default/bin → build/default
    cache = os.path.join(os.path.dirname(root), "ch16_engines")    # build/ch16_engines
    os.makedirs(cache, exist_ok=True)
    torch.set_num_threads(a.threads)
    tokenizer = AutoTokenizer.from_pretrained(a.model)

    makers = {"sentence-transformers": lambda: make_sentence_transformers(a.model, a.threads),
              "onnxruntime": lambda: make_onnxruntime(a.model, cache, a.threads, tokenizer),
              "ctranslate2": lambda: make_ctranslate2(a.model, cache, a.threads, tokenizer)}
    # A row per engine and setting: (engine, setting) → (encode(sentences, batch), encode_one(text)); the course's
    # row is timed by its own program.
    course_row = ("course", f"{a.threads} threads x 1 stream" if a.threads > 1 else "1 thread")
    rows, versions = {course_row: None}, {}
    for name in [e for e in engines if e != "course"]:
        settings, versions[name] = makers[name]()
        for label, encode, encode_one in settings:
            rows[(name, label)] = (encode, encode_one)

    # The same model first: every engine's embeddings, in every setting, against the course's.
    ours = course_embeddings(a.exe, a.sentences, cache)
    agreement = {}
    for row, funcs in rows.items():
        if funcs is None:
            continue
        theirs = funcs[0](sentences, 32)
        cosines = [cosine(x, [float(v) for v in y]) for x, y in zip(ours, theirs)]
        worst = max(max(abs(x - float(y)) for x, y in zip(u, v)) for u, v in zip(ours, theirs))
        agreement[row] = (min(cosines), worst)
        if min(cosines) < MIN_COSINE:
            raise SystemExit(f"embed_compare: {row[0]} ({row[1]}): its embeddings differ from the course's (lowest "
                             f"cosine {min(cosines):.6f} < {MIN_COSINE}): not the same model, nothing timed")

    # Rounds of every row in turn, so that a change in the machine's load hits all alike.
    rates = {row: {1: [], 32: []} for row in rows}
    latency = {row: [] for row in rows}
    context = {}
    for _ in range(a.rounds):
        for row, funcs in rows.items():
            for batch in (1, 32):
                if funcs is None:
                    rate, context = course_round(a.exe, batch, a.threads, a.repeats)
                else:
                    rate = timed(funcs[0], sentences, batch, a.repeats)
                rates[row][batch].append(rate)
            latency[row].append(course_latency(a.exe, a.latency_repeats) if funcs is None else
                                latency_ms(funcs[1], sentences, a.latency_repeats))
            time.sleep(0.5)

    print(f"Problem: {len(sentences)} sentences of {os.path.basename(a.sentences)}, all-MiniLM-L6-v2, float32, "
          f"{a.threads} threads; Python {platform.python_version()}")
    print(f"Course: chapter 16's fast forward (BM_embed_fast), a batch per thread, packed; "
          f"{context.get('cpu', '?')}")
    print(f"  {context.get('blas', '?').split(' NO_')[0]}, kernel {context.get('blas_kernel', '?')} "
          f"(used only on the portable path: the others' products are the course's own kernel on packed weights)")
    for name in versions:
        print(f"{name}: {versions[name]}")
    if forced:
        print(f"Forced to AVX2 with the course: {forced}; ONNX Runtime has no such switch (its kernels take the "
              "CPU's widest instructions)")
    print()
    print("The same model: every setting's embeddings of the sentences (batch 32) against the course's")
    for (name, label), (low, worst) in agreement.items():
        print(f"  {name + ', ' + label:<44} lowest cosine {low:.9f}, largest |difference| {worst:.2e}")
    print()
    header = (f"{'engine':<22} {'setting':<22} {'batch':>5} {'sentences/s':>11} {'spread':>13} {'per CPU-s':>9}"
              f" {'course/it':>9} {'per CPU-s':>9}")
    print(header)
    print("-" * len(header))
    med = {row: {b: (statistics.median(r[0] for r in rates[row][b]), statistics.median(r[1] for r in rates[row][b]))
                 for b in (1, 32)} for row in rows}
    for batch in (1, 32):
        for row in rows:
            r = rates[row][batch]
            wall, cpu = med[row][batch]
            spread_w = f"{min(x[0] for x in r):.1f}-{max(x[0] for x in r):.1f}"
            ratio = "" if row == course_row else (f"{med[course_row][batch][0] / wall:>8.2f}x "
                                                  f"{med[course_row][batch][1] / cpu:>8.2f}x")
            print(f"{row[0]:<22} {row[1]:<22} {batch:>5} {wall:>11.1f} {spread_w:>13} {cpu:>9.1f} {ratio}")
    print()
    print("One sentence alone (every sentence in turn on one stream of the setting): median latency")
    for row in rows:
        ms = latency[row]
        print(f"  {row[0] + ', ' + row[1]:<44} {statistics.median(ms):>7.2f} ms  ({min(ms):.2f}-{max(ms):.2f})")
    print()
    others = [row for row in rows if row != course_row]
    for batch in (1, 32):
        if others:
            best_w = max(others, key=lambda row: med[row][batch][0])
            best_c = max(others, key=lambda row: med[row][batch][1])
            print(f"batch {batch:>2}: course / fastest other: {med[course_row][batch][0] / med[best_w][batch][0]:.2f}x "
                  f"wall ({', '.join(best_w)}), {med[course_row][batch][1] / med[best_c][batch][1]:.2f}x per "
                  f"CPU-second ({', '.join(best_c)})")
    if others:
        best_l = min(others, key=lambda row: statistics.median(latency[row]))
        print(f"latency:  fastest other / course: "
              f"{statistics.median(latency[best_l]) / statistics.median(latency[course_row]):.2f}x "
              f"({', '.join(best_l)})")
    print()
    print("course/it > 1 means the course embeds more sentences per second (or per CPU-second) than that setting;")
    print("  the latency ratio > 1 that the course's one sentence takes less time.")
    print(f"{a.rounds} rounds, each: every setting in turn at batch 1 and 32, then its latency; the course {a.repeats} "
          f"Google")
    print(f"  Benchmark repetitions, the others a warm-up pass then {a.repeats} timed passes over all sentences, and")
    print(f"  {a.latency_repeats} passes of single sentences for the latency; medians, and the spread over rounds "
          f"(lowest-highest).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
