#!/usr/bin/env python3
"""Chapter 05's fast kernel beside PyTorch's scaled_dot_product_attention on the CPU, in one run.

usage: sdpa_cpu_compare.py CH05_EXECUTABLE [--n 4096] [--repeats 7] [--rounds 2]

Both get the same problem: batch 1, 8 heads, n = 4096, d = 64, float32, random normal Q, K, V, 2 threads
(torch.set_num_threads; the course kernel's FastConfig::threads is 2 in its benchmark), non-causal and
causal. PyTorch: 3 warm-up calls, then --repeats timed calls. The course: `CH05 bench` filtered to
flash_fast at this n, --repeats repetitions (Google Benchmark warms up while it picks the iteration
count). --rounds rounds of both, one after the other; medians over all. FLOPs are counted as chapter 05 counts them: 4·n²·d per head, half of it
causal. Called by `./course bench 05 --vs-torch`; book page: book/05_flash_cpu.md.
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


def torch_sdpa(torch, heads, n, d, causal, repeats):
    """Median wall and CPU seconds of one SDPA call, and the kernel PyTorch ran (its profiler, its choice)."""
    gen = torch.Generator().manual_seed(n)
    q, k, v = (torch.randn(1, heads, n, d, generator=gen, dtype=torch.float32) for _ in range(3))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    for _ in range(3):
        sdpa(q, k, v, is_causal=causal)
    times, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        sdpa(q, k, v, is_causal=causal)
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    with quiet_stderr(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        sdpa(q, k, v, is_causal=causal)
    ops = sorted({e.key for e in prof.key_averages() if "attention" in e.key and e.key != "aten::scaled_dot_product_attention"})
    try:
        from torch.nn.attention import SDPBackend
        choice = SDPBackend(torch._fused_sdp_choice(q, k, v, is_causal=causal)).name
    except Exception:  # private API: only a label, the profiler's op names are the evidence
        choice = "?"
    return statistics.median(times), statistics.median(cpu), f"{choice}: {', '.join(ops) or 'no fused op seen'}"


def course_flash_fast(exe, n, repeats):
    """Median seconds of flash_attention_fast (non-causal, causal), its counters, and the run's context."""
    out = subprocess.run(
        [exe, "bench", f"--benchmark_filter=^flash_fast/n:{n}/", f"--benchmark_repetitions={repeats}",
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


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("exe", help="build/default/bin/ch05_flash_cpu")
    p.add_argument("--n", type=int, default=4096, choices=(1024, 4096), help="a length chapter 05's bench runs")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args()
    a.heads, a.d, a.threads = 8, 64, 2  # chapter 05's benchmark: kHeads, kD and FastConfig::threads
    try:
        import torch
    except ImportError:
        print("sdpa_cpu_compare: PyTorch is not installed (./course bench 05 --vs-torch installs it)", file=sys.stderr)
        return 2
    torch.set_num_threads(a.threads)

    # Two rounds, each contender in turn, so that a change in the machine's load hits both alike; each
    # contender's figure is the median over both rounds.
    runs_course, runs_torch = {False: [], True: []}, {False: [], True: []}
    for _ in range(a.rounds):
        course, context = course_flash_fast(a.exe, a.n, a.repeats)
        for c in (False, True):
            runs_course[c].append(course[c])
            runs_torch[c].append(torch_sdpa(torch, a.heads, a.n, a.d, c, a.repeats))
    course = {c: (statistics.median(r[0] for r in runs_course[c]),
                  statistics.median(r[1]["GFLOPS_per_core"] for r in runs_course[c]), runs_course[c][0][1])
              for c in (False, True)}
    theirs = {c: (statistics.median(r[0] for r in runs_torch[c]), statistics.median(r[1] for r in runs_torch[c]),
                  runs_torch[c][0][2]) for c in (False, True)}

    def gflops(seconds, causal):
        work = 4.0 * a.n * a.n * a.d * a.heads
        return (work / 2 if causal else work) / seconds / 1e9

    print(f"Problem: batch 1 x {a.heads} heads x n = {a.n} x d = {a.d}, float32, {a.threads} threads;")
    print("  FLOPs 4·n²·d per head (half of it causal)")
    print(f"PyTorch {torch.__version__}: CPU capability {torch.backends.cpu.get_cpu_capability()}, "
          f"torch threads {torch.get_num_threads()}")
    print(f"Course: {context.get('cpu', '?')}")
    print(f"  {context.get('blas', '?').split(' NO_')[0]}, kernel {context.get('blas_kernel', '?')}")
    for key in sorted(k for k in context if k.startswith("ceilings_")):
        print(f"  {key}: {context[key]}")
    print()
    header = (f"{'causal':<7} {'PyTorch ms':>10} {'GFLOP/s':>8}   {'course ms':>9} {'GFLOP/s':>8} "
              f"{'%sgemm_sq':>9} {'%fma_peak':>9}   {'course/PyTorch':>14} {'per CPU-s':>9}")
    print(header)
    print("-" * len(header))
    for causal in (False, True):
        t_torch, cpu_torch, _ = theirs[causal]
        t_course, per_core, b = course[causal]
        torch_per_core = gflops(cpu_torch, causal)
        print(f"{'yes' if causal else 'no':<7} {t_torch * 1e3:>10.1f} {gflops(t_torch, causal):>8.1f}   "
              f"{t_course * 1e3:>9.1f} {gflops(t_course, causal):>8.1f} {b.get('pct_sgemm_sq', float('nan')):>9.1f} "
              f"{b.get('pct_fma_peak', float('nan')):>9.1f}   {t_torch / t_course:>13.2f}x "
              f"{per_core / torch_per_core:>8.2f}x")
    print()
    print(f"causal speed-up (non-causal time / causal time): PyTorch {theirs[False][0] / theirs[True][0]:.2f}x, "
          f"course {course[False][0] / course[True][0]:.2f}x")
    print("course/PyTorch > 1 means the course's kernel is faster (PyTorch's time / the course's).")
    print("per CPU-s: the same ratio in FLOPs per second of CPU time (all the process's threads),")
    print("  which other jobs on the machine disturb less than the wall clock.")
    for causal in (False, True):
        print(f"PyTorch's kernel, {'causal' if causal else 'non-causal'}: {theirs[causal][2]}")
    print(f"{a.rounds} rounds, each: the course ({a.repeats} Google Benchmark repetitions, each the mean of")
    print(f"  its iterations), then PyTorch ({a.repeats} calls after 3 warm-up calls); medians over all.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
