#!/usr/bin/env python3
"""The course's fast CPU kernels beside PyTorch's scaled_dot_product_attention on the CPU, in one run.

usage: sdpa_cpu_compare.py EXECUTABLE [--pass forward|backward] [--n 4096] [--repeats 7] [--rounds 2]

--pass forward (EXECUTABLE = ch05_flash_cpu): chapter 05's flash_attention_fast against SDPA's forward.
--pass backward (EXECUTABLE = ch10_backward): chapter 10's flash_backward_fast against SDPA's backward
(torch.autograd.grad through SDPA, the forward's graph kept, so only the backward is timed, as chapter 10
times only its backward from the forward's O and lse).
Both get the same problem: batch 1, 8 heads, n = 4096, d = 64, float32, random normal Q, K, V (and dO),
2 threads (torch.set_num_threads; the course's kernels run on 2 threads in their benchmarks), non-causal
and causal. PyTorch: 3 warm-up calls, then --repeats timed calls. The course: `EXECUTABLE bench` filtered
to its kernel at this n, --repeats repetitions (Google Benchmark warms up while it picks the iteration
count). --rounds rounds of both, one after the other; medians over all. FLOPs are counted as the chapters
count them: the forward's 2 products, 4·n²·d per head; the backward's 5, 10·n²·d; half of it causal.
Called by `./course bench 05 --vs-torch` and `./course bench 10 --vs-torch`; book pages:
book/05_flash_cpu.md, book/10_backward.md.
"""
import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time


@contextlib.contextmanager
def quiet_stderr():
    """The profiler's native library logs its start and stop (and a failed GPU probe) on stderr: not ours."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def torch_sdpa(torch, heads, n, d, causal, repeats, backward):
    """Median wall and CPU seconds of one SDPA call (forward, or backward only), and the kernel PyTorch ran
    (its profiler, its choice)."""
    gen = torch.Generator().manual_seed(n)
    q, k, v, do = (torch.randn(1, heads, n, d, generator=gen, dtype=torch.float32) for _ in range(4))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    if backward:
        for t in (q, k, v):
            t.requires_grad_(True)
        o = sdpa(q, k, v, is_causal=causal)  # the graph is kept: each call below runs the backward alone

        def call():
            return torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
    else:
        def call():
            return sdpa(q, k, v, is_causal=causal)
    for _ in range(3):
        call()
    times, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        call()
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    with quiet_stderr(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        call()
    ops = sorted({e.key for e in prof.key_averages()
                  if "attention" in e.key and e.key != "aten::scaled_dot_product_attention"
                  and (not backward or "backward" in e.key)})
    try:
        from torch.nn.attention import SDPBackend
        choice = SDPBackend(torch._fused_sdp_choice(q, k, v, is_causal=causal)).name
    except Exception:  # private API: only a label, the profiler's op names are the evidence
        choice = "?"
    return statistics.median(times), statistics.median(cpu), f"{choice}: {', '.join(ops) or 'no fused op seen'}"


def course_kernel(exe, benchmark, n, repeats):
    """Median seconds of the course's \p benchmark (non-causal, causal), its counters, and the run's context."""
    out = subprocess.run(
        [exe, "bench", f"--benchmark_filter=^{benchmark}/n:{n}/", f"--benchmark_repetitions={repeats}",
         "--benchmark_report_aggregates_only=true", "--benchmark_format=json"],
        check=True, capture_output=True, text=True).stdout
    run = json.loads(out)
    result = {}
    for b in run["benchmarks"]:
        if b.get("aggregate_name") != "median":
            continue
        causal = "causal:1" in b["run_name"]
        unit = {"ms": 1e-3, "us": 1e-6, "ns": 1e-9, "s": 1.0}[b["time_unit"]]
        result[causal] = (b["real_time"] * unit, b)
    return result, run["context"]


# What each pass runs: the course's benchmark, the FLOPs per head as its chapter counts them (n²·d times
# this factor, halved by the causal mask), and the words for the table.
PASSES = {
    "forward": {"benchmark": "flash_fast", "flops": 4.0, "ns": (1024, 4096),
                "course": "chapter 05's flash_attention_fast", "torch": "SDPA forward"},
    "backward": {"benchmark": "backward_fast", "flops": 10.0, "ns": (4096,),
                 "course": "chapter 10's flash_backward_fast", "torch": "SDPA backward (autograd.grad)"},
}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("exe", help="build/default/bin/ch05_flash_cpu (forward) or build/default/bin/ch10_backward")
    p.add_argument("--pass", dest="which", choices=sorted(PASSES), default="forward")
    p.add_argument("--n", type=int, default=4096, help="a length the chapter's bench runs")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args()
    what = PASSES[a.which]
    if a.n not in what["ns"]:
        p.error(f"--n {a.n}: the {a.which} benchmark runs n = {', '.join(map(str, what['ns']))}")
    a.heads, a.d, a.threads = 8, 64, 2  # the chapters' benchmarks: kHeads, kD and 2 threads
    try:
        import torch
    except ImportError:
        print("sdpa_cpu_compare: PyTorch is not installed (./course bench NN --vs-torch installs it)", file=sys.stderr)
        return 2
    torch.set_num_threads(a.threads)

    # Rounds of each contender in turn, so that a change in the machine's load hits both alike; each figure is
    # the median over the rounds. A pause between contenders lets the other's idle threads stop spinning.
    backward = a.which == "backward"
    runs_course, runs_torch, contexts = {False: [], True: []}, {False: [], True: []}, []
    for _ in range(a.rounds):
        course, context = course_kernel(a.exe, what["benchmark"], a.n, a.repeats)
        contexts.append(context)
        time.sleep(0.5)
        for c in (False, True):
            runs_course[c].append(course[c])
            runs_torch[c].append(torch_sdpa(torch, a.heads, a.n, a.d, c, a.repeats, backward))
        time.sleep(0.5)

    def median_counter(c, name):
        return statistics.median(r[1].get(name, float("nan")) for r in runs_course[c])

    course = {c: (statistics.median(r[0] for r in runs_course[c]), median_counter(c, "GFLOPS_per_core"))
              for c in (False, True)}
    theirs = {c: (statistics.median(r[0] for r in runs_torch[c]), statistics.median(r[1] for r in runs_torch[c]),
                  runs_torch[c][0][2]) for c in (False, True)}

    def gflops(seconds, causal):
        work = what["flops"] * a.n * a.n * a.d * a.heads
        return (work / 2 if causal else work) / seconds / 1e9

    context = contexts[-1]
    print(f"Problem: {a.which}, batch 1 x {a.heads} heads x n = {a.n} x d = {a.d}, float32, {a.threads} threads;")
    print(f"  FLOPs {what['flops']:.0f}·n²·d per head (half of it causal)")
    print(f"PyTorch {torch.__version__}: CPU capability {torch.backends.cpu.get_cpu_capability()}, "
          f"torch threads {torch.get_num_threads()}; {what['torch']}")
    if os.environ.get("ATTN_FORCED_TO_AVX2"):  # ./course bench sets it with ATTN_VECTOR_ISA=avx2
        print(f"  forced to AVX2 with the course: {os.environ['ATTN_FORCED_TO_AVX2']}")
    print(f"Course: {what['course']}; {context.get('cpu', '?')}")
    print(f"  {context.get('blas', '?').split(' NO_')[0]}, kernel {context.get('blas_kernel', '?')}")
    for round_number, ctx in enumerate(contexts, 1):  # each round measured its own ceilings
        for key in sorted(k for k in ctx if k.startswith("ceilings_")):
            print(f"  round {round_number}, {key}: {ctx[key]}")
    print()
    header = (f"{'causal':<7} {'PyTorch ms':>10} {'GFLOP/s':>8}   {'course ms':>9} {'GFLOP/s':>8} "
              f"{'%sgemm_sq':>9} {'%fma_peak':>9}   {'course/PyTorch':>14} {'per CPU-s':>9}")
    print(header)
    print("-" * len(header))
    for causal in (False, True):
        t_torch, cpu_torch, _ = theirs[causal]
        t_course, per_core = course[causal]
        torch_per_core = gflops(cpu_torch, causal)
        print(f"{'yes' if causal else 'no':<7} {t_torch * 1e3:>10.1f} {gflops(t_torch, causal):>8.1f}   "
              f"{t_course * 1e3:>9.1f} {gflops(t_course, causal):>8.1f} {median_counter(causal, 'pct_sgemm_sq'):>9.1f} "
              f"{median_counter(causal, 'pct_fma_peak'):>9.1f}   {t_torch / t_course:>13.2f}x "
              f"{per_core / torch_per_core:>8.2f}x")
    print()
    print(f"causal speed-up (non-causal time / causal time): PyTorch {theirs[False][0] / theirs[True][0]:.2f}x, "
          f"course {course[False][0] / course[True][0]:.2f}x")
    print("course/PyTorch > 1 means the course's kernel is faster (PyTorch's time / the course's).")
    print("%sgemm_sq, %fma_peak: the course's rate over its run's ceilings (2 threads), median over the rounds.")
    print("per CPU-s: the same ratio in FLOPs per second of CPU time (all the process's threads),")
    print("  which other jobs on the machine disturb less than the wall clock.")
    for causal in (False, True):
        print(f"PyTorch's kernel, {'causal' if causal else 'non-causal'}: {theirs[causal][2]}")
    print(f"{a.rounds} rounds, each: the course ({a.repeats} Google Benchmark repetitions, each the mean of")
    print(f"  its iterations), then PyTorch ({a.repeats} calls after 3 warm-up calls); medians over all.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
