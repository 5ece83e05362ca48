#!/usr/bin/env python3
"""Chapter 16's C++ forward beside sentence-transformers on PyTorch: sentence embeddings per second, one run.

usage: embed_compare.py EXECUTABLE MODEL_DIR SENTENCES [--threads 2] [--repeats 5] [--rounds 2]

Both embed the same sentences (chapters/16_real_model/sentences.txt) with the same model files on the same
number of threads, in batches of 32 (sentence-transformers' default) and one at a time. The course
(`EXECUTABLE bench`, BM_embed_sentences/batch:B/threads:T): each thread takes the next batch and runs it packed,
no padding (sentence_embeddings()), OpenBLAS single-threaded in each thread; Google Benchmark's repetitions,
median. sentence-transformers: torch.set_num_threads(T), model.encode(sentences, batch_size=B) (it sorts the
sentences by length, so a batch pads little); one warm-up pass, then --repeats timed passes, median.
--rounds rounds of both in turn; medians over all.
Called by `./course bench 16 --vs-torch`; book page: book/measure_16_real_model.md.
"""
import argparse
import json
import statistics
import subprocess
import sys
import time


def course_rate(exe, batch, threads, repeats):
    """The course's sentences per second in batches of \p batch on \p threads threads (median of Google
    Benchmark's repetitions) and its context (CPU, BLAS kernel)."""
    out = subprocess.run(
        [exe, "bench", f"--benchmark_filter=^BM_embed_sentences/batch:{batch}/threads:{threads}/",
         f"--benchmark_repetitions={repeats}",
         "--benchmark_report_aggregates_only=true", "--benchmark_format=json"],
        check=True, capture_output=True, text=True).stdout
    run = json.loads(out)
    for b in run["benchmarks"]:
        if b.get("error_occurred"):
            raise SystemExit(f"embed_compare: the course's benchmark failed: {b.get('error_message')}")
        if b.get("aggregate_name") == "median":
            return b["sentences/s"], run["context"]
    raise SystemExit(f"embed_compare: no BM_embed_sentences/batch:{batch}/threads:{threads} in the course's output")


def torch_rate(model, sentences, batch, repeats):
    """sentence-transformers' sentences per second (wall clock, median of \p repeats passes over all sentences)
    and per CPU-second of the process."""
    model.encode(sentences, batch_size=batch, convert_to_numpy=True)  # warm-up
    walls, cpus = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        model.encode(sentences, batch_size=batch, convert_to_numpy=True)
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - start_cpu)
    return len(sentences) / statistics.median(walls), len(sentences) / statistics.median(cpus)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("exe", help="build/default/bin/ch16_real_model")
    p.add_argument("model", help="the model's folder (build/models/all-MiniLM-L6-v2)")
    p.add_argument("sentences", help="chapters/16_real_model/sentences.txt")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args()
    if a.threads < 1 or a.repeats < 1 or a.rounds < 1:
        p.error("--threads, --repeats and --rounds must be at least 1")
    try:
        import torch
        from sentence_transformers import SentenceTransformer
    except ImportError as e:
        print(f"embed_compare: {e.name} is not installed (./course bench 16 --vs-torch installs it)", file=sys.stderr)
        return 2
    with open(a.sentences, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f]  # as the course reads them: whole lines, # lines skipped
    sentences = [line for line in lines if line and not line.startswith("#")]
    torch.set_num_threads(a.threads)
    model = SentenceTransformer(a.model, device="cpu")

    # Rounds of each contender in turn, so that a change in the machine's load hits all alike.
    ours32, ours1, theirs32, theirs1, contexts = [], [], [], [], []
    for _ in range(a.rounds):
        rate, context = course_rate(a.exe, 32, a.threads, a.repeats)
        ours32.append(rate)
        contexts.append(context)
        ours1.append(course_rate(a.exe, 1, a.threads, a.repeats)[0])
        time.sleep(0.5)
        theirs32.append(torch_rate(model, sentences, 32, a.repeats))
        theirs1.append(torch_rate(model, sentences, 1, a.repeats))
        time.sleep(0.5)
    c32, c1 = statistics.median(ours32), statistics.median(ours1)
    t32 = statistics.median(r[0] for r in theirs32), statistics.median(r[1] for r in theirs32)
    t1 = statistics.median(r[0] for r in theirs1), statistics.median(r[1] for r in theirs1)
    context = contexts[-1]
    import sentence_transformers
    print(f"Problem: {len(sentences)} sentences of {a.sentences.split('/')[-1]}, all-MiniLM-L6-v2, float32, "
          f"{a.threads} threads")
    print(f"PyTorch {torch.__version__}, sentence-transformers {sentence_transformers.__version__}: "
          f"CPU capability {torch.backends.cpu.get_cpu_capability()}, torch threads {torch.get_num_threads()}")
    print(f"Course: chapter 16's forward, a batch per thread, packed; {context.get('cpu', '?')}")
    print(f"  {context.get('blas', '?').split(' NO_')[0]}, kernel {context.get('blas_kernel', '?')}")
    print()
    header = f"{'batch':<6} {'course sentences/s':>18} {'sentence-transformers':>21} {'course/them':>11}"
    print(header)
    print("-" * len(header))
    for batch, ours, theirs in ((32, c32, t32), (1, c1, t1)):
        print(f"{batch:<6} {ours:>18.1f} {theirs[0]:>21.1f} {ours / theirs[0]:>10.2f}x")
    print()
    print("course/them > 1 means the course's forward embeds more sentences per second.")
    print(f"sentence-transformers per CPU-second: {t32[1]:.1f} (batch 32), {t1[1]:.1f} (batch 1) sentences.")
    print(f"{a.rounds} rounds, each: the course ({a.repeats} Google Benchmark repetitions), then sentence-")
    print(f"  transformers (a warm-up pass, then {a.repeats} timed passes over all sentences, each batch size);")
    print("  medians over all.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
