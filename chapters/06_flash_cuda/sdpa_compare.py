#!/usr/bin/env python3
"""Chapter 06's GPU check, last step: PyTorch's scaled_dot_product_attention on the shapes the ladder was
timed on, one summary table of every rung's TFLOP/s and "% of SDPA", and the recording for the book.

usage: sdpa_compare.py LADDER_CSV --n N... --d D... [--bh BH] [--repeats R] [--csv SDPA_CSV]
                       [--record FILE --device-name NAME --sources-hash HASH] [--status FILE]
                       [--time-limit SECONDS] [--skip-sdpa REASON] [--dry-run]

LADDER_CSV is what `ch06_flash_cuda --csv` wrote (rung,n,d,causal,bh,ms,tflops,pct_ceiling). SDPA runs in
bf16 (the tensor-core rung's precision) with shape (1, bh, n, d), timed like the ladder: CUDA events
around enough back-to-back calls to last about 2 ms, after a warm-up, the median of the samples. Each
shape's result is appended to SDPA_CSV as soon as it is measured. --dry-run (no GPU): no PyTorch, no
timing; the table and the recording are written from whatever the ladder CSV holds. --time-limit: no new
shape is timed once that many seconds have passed since the start (the recording then has the shapes
timed before; exit status 4). --skip-sdpa REASON: no PyTorch; the recording has the ladder alone and says
why. Exit status 3 when PyTorch or its CUDA support is missing (the recording then has the ladder alone).
Called by chapters/06_flash_cuda/gpu_run.sh (the GPU pack's run.sh); book page: book/06_flash_cuda.md.
"""
import argparse
import csv
import datetime
import itertools
import math
import statistics
import sys
import time


def sdpa_ms(torch, bh, n, d, causal, repeats):
    q, k, v = (torch.randn(1, bh, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def timed(count):
        start.record()
        for _ in range(count):
            sdpa(q, k, v, is_causal=causal)
        stop.record()
        stop.synchronize()
        return start.elapsed_time(stop)

    for _ in range(3):  # warm-up: kernel selection, code loading
        sdpa(q, k, v, is_causal=causal)
    torch.cuda.synchronize()
    per_sample = min(1000, max(1, math.ceil(2.0 / max(timed(1), 1e-3))))
    return statistics.median(timed(per_sample) / per_sample for _ in range(repeats))


def flops(bh, n, d, causal):
    """4·n_q·n_kv·d per head, the causal pairs j ≤ i counted exactly (as the ladder's attention_flops)."""
    pairs = n * (n + 1) / 2 if causal else n * n
    return 4.0 * pairs * d * bh


def load_torch():
    try:
        import torch
    except ImportError:
        print("sdpa_compare: PyTorch is not installed: no SDPA column", file=sys.stderr)
        return None
    if not torch.cuda.is_available():
        print("sdpa_compare: PyTorch sees no CUDA device: no SDPA column", file=sys.stderr)
        return None
    return torch


def summary(rows, sdpa, shapes):
    """The one table: per shape, SDPA first, then every rung with its TFLOP/s and % of SDPA."""
    header = (f"{'rung':<20} {'n':>6} {'d':>4} {'causal':>6} {'time (ms)':>10} {'TFLOP/s':>8} {'% of SDPA':>9} "
              f"{'% of ceiling':>12}")
    lines = [header, "-" * len(header)]
    for n, d, causal in shapes:
        yes = "yes" if causal else "no"
        base = sdpa.get((n, d, causal))
        timed = [r for r in rows if (int(r["n"]), int(r["d"]), r["causal"] == "1") == (n, d, causal)]
        if not base and not timed:
            lines.append(f"{'(not timed)':<20} {n:>6} {d:>4} {yes:>6}")
            continue
        if base:
            lines.append(f"{'PyTorch SDPA bf16':<20} {n:>6} {d:>4} {yes:>6} {base[0]:>10.3f} {base[1]:>8.1f} "
                         f"{100:>8.0f}% {'-':>12}")
        for r in timed:
            pct = f"{100.0 * float(r['tflops']) / base[1]:>8.0f}%" if base else f"{'-':>9}"
            lines.append(f"{r['rung']:<20} {n:>6} {d:>4} {yes:>6} {float(r['ms']):>10.3f} {float(r['tflops']):>8.1f} "
                         f"{pct} {float(r['pct_ceiling']):>11.0f}%")
        lines.append("")
    return lines


def targets(rows, sdpa):
    """The chapter's two targets, at n = 4096, d = 128, non-causal."""
    def tflops_of(prefix):
        for r in rows:
            if r["rung"].startswith(prefix) and (r["n"], r["d"], r["causal"]) == ("4096", "128", "0"):
                return float(r["tflops"])
        return None

    lines = []
    tc, r1, r3 = tflops_of("4"), tflops_of("1"), tflops_of("3")
    base = sdpa.get((4096, 128, False))
    if tc is not None and base:
        pct = 100 * tc / base[1]
        lines.append(f"target: rung 4 >= 50% of SDPA at n = 4096, d = 128: {pct:.0f}% ({'met' if pct >= 50 else 'NOT met'})")
    else:
        lines.append("target: rung 4 >= 50% of SDPA at n = 4096, d = 128: not measured")
    if r1 and r3:
        lines.append(f"target: rung 3 >= 3x rung 1 at n = 4096, d = 128: {r3 / r1:.1f}x "
                     f"({'met' if r3 / r1 >= 3 else 'NOT met'})")
    else:
        lines.append("target: rung 3 >= 3x rung 1 at n = 4096, d = 128: not measured")
    return lines


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("ladder_csv")
    p.add_argument("--n", type=int, nargs="+", required=True)
    p.add_argument("--d", type=int, nargs="+", required=True)
    p.add_argument("--bh", type=int, default=64)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--csv", help="append SDPA's timings here, one line per shape as it is measured")
    p.add_argument("--record", help="write the recording here (first line: 'sources HASH')")
    p.add_argument("--device-name", default="")
    p.add_argument("--sources-hash", default="unknown")
    p.add_argument("--status", help="a file of status lines (tests, sanitizers) to copy into the recording")
    p.add_argument("--time-limit", type=float, help="time no new shape after this many seconds from the start")
    p.add_argument("--skip-sdpa", metavar="REASON", help="no PyTorch: the recording has the ladder alone, and why")
    p.add_argument("--dry-run", action="store_true", help="no PyTorch, no timing: exercise the recording step")
    a = p.parse_args()
    started = time.monotonic()

    with open(a.ladder_csv) as f:
        rows = list(csv.DictReader(f))
    shapes = list(itertools.product(a.n, a.d, (False, True)))
    torch = None if (a.dry_run or a.skip_sdpa) else load_torch()
    sdpa = {}
    stopped_early = False
    if torch is not None:
        out = open(a.csv, "w") if a.csv else None
        if out:
            out.write("n,d,causal,bh,ms,tflops\n")
            out.flush()
        for n, d, causal in shapes:
            if a.time_limit is not None and time.monotonic() - started > a.time_limit:
                print(f"sdpa_compare: {a.time_limit:.0f} s have passed: SDPA timed on {len(sdpa)} of {len(shapes)} "
                      "shapes", file=sys.stderr)
                stopped_early = True
                break
            ms = sdpa_ms(torch, a.bh, n, d, causal, a.repeats)
            sdpa[(n, d, causal)] = (ms, flops(a.bh, n, d, causal) / (ms * 1e-3) / 1e12)
            if out:
                out.write(f"{n},{d},{int(causal)},{a.bh},{ms},{sdpa[(n, d, causal)][1]}\n")
                out.flush()
        if out:
            out.close()

    text = "\n".join(summary(rows, sdpa, shapes) + targets(rows, sdpa))
    print(text)
    if a.record:
        how = ("DRY RUN: no kernel was launched and nothing was timed" if a.dry_run else
               f"no SDPA column: {a.skip_sdpa}" if a.skip_sdpa else
               f"torch {torch.__version__}" + (f", SDPA on {len(sdpa)} of {len(shapes)} shapes (time limit)"
                                               if stopped_early else "") if torch is not None else
               "no PyTorch: no SDPA column")
        status = open(a.status).read().rstrip() if a.status else ""
        with open(a.record, "w") as f:
            f.write(f"sources {a.sources_hash}\n")
            f.write(f"Recorded {datetime.date.today().isoformat()} on {a.device_name} by chapter 06's run.sh "
                    f"(bh = {a.bh}, median of {a.repeats} samples; {how})\n\n")
            f.write(text + "\n")
            if status:
                f.write("\n" + status + "\n")
    if a.dry_run or a.skip_sdpa:
        return 0
    return 3 if torch is None else 4 if stopped_early else 0


if __name__ == "__main__":
    sys.exit(main())
