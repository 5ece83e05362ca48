#!/usr/bin/env python3
"""Chapter 06's GPU check, second half: PyTorch's scaled_dot_product_attention on the shapes the ladder
was timed on, and one table with every rung's throughput as a percentage of SDPA's.

usage: sdpa_compare.py LADDER_CSV [--repeats N] [--record FILE --device-name NAME --sources-hash HASH]

LADDER_CSV is what `ch06_flash_cuda --csv` wrote (rung,n,d,causal,ms,tflops,pct_ceiling; bh fixed by the
run). SDPA runs in bf16 (the tensor-core rung's precision) with shape (1, bh, n, d), timed like the ladder:
CUDA events, a warm-up, the median of the repeats. Called by `./course gpu-check`; book page:
book/06_flash_cuda.md.
"""
import argparse
import csv
import datetime
import statistics
import sys


def sdpa_ms(torch, bh, n, d, causal, repeats):
    q, k, v = (torch.randn(1, bh, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    for _ in range(3):
        sdpa(q, k, v, is_causal=causal)
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        sdpa(q, k, v, is_causal=causal)
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def flops(bh, n, d, causal):
    pairs = n * (n + 1) / 2 if causal else n * n
    return 4.0 * pairs * d * bh


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("ladder_csv")
    p.add_argument("--bh", type=int, default=64)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--record", help="also write the table here, for the book (book/recorded/)")
    p.add_argument("--device-name", default="")
    p.add_argument("--sources-hash", default="")
    a = p.parse_args()
    try:
        import torch
    except ImportError:
        print("sdpa_compare: PyTorch is not installed: no SDPA column", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("sdpa_compare: PyTorch sees no CUDA device", file=sys.stderr)
        return 2

    with open(a.ladder_csv) as f:
        rows = list(csv.DictReader(f))
    shapes = sorted({(int(r["n"]), int(r["d"]), r["causal"] == "1") for r in rows})
    sdpa = {}
    for n, d, causal in shapes:
        ms = sdpa_ms(torch, a.bh, n, d, causal, a.repeats)
        sdpa[(n, d, causal)] = (ms, flops(a.bh, n, d, causal) / (ms * 1e-3) / 1e12)

    lines = []
    header = f"{'rung':<20} {'n':>6} {'d':>4} {'causal':>6} {'time (ms)':>10} {'TFLOP/s':>8} {'% of SDPA':>9}"
    lines.append(header)
    lines.append("-" * len(header))
    for n, d, causal in shapes:
        ms, tf = sdpa[(n, d, causal)]
        lines.append(f"{'PyTorch SDPA bf16':<20} {n:>6} {d:>4} {'yes' if causal else 'no':>6} {ms:>10.3f} {tf:>8.1f} {100:>8.0f}%")
        for r in rows:
            if (int(r["n"]), int(r["d"]), r["causal"] == "1") != (n, d, causal):
                continue
            pct = 100.0 * float(r["tflops"]) / tf
            lines.append(f"{r['rung']:<20} {n:>6} {d:>4} {'yes' if causal else 'no':>6} {float(r['ms']):>10.3f} "
                         f"{float(r['tflops']):>8.1f} {pct:>8.0f}%")
        lines.append("")

    # The targets, at n = 4096, d = 128, non-causal.
    def tflops_of(prefix):
        for r in rows:
            if r["rung"].startswith(prefix) and r["n"] == "4096" and r["d"] == "128" and r["causal"] == "0":
                return float(r["tflops"])
        return None

    key = (4096, 128, False)
    if key in sdpa:
        tc, r1, r3 = tflops_of("4"), tflops_of("1"), tflops_of("3")
        if tc is not None:
            pct = 100 * tc / sdpa[key][1]
            lines.append(f"target: rung 4 >= 50% of SDPA at n = 4096, d = 128: {pct:.0f}% "
                         f"({'met' if pct >= 50 else 'NOT met'})")
        if r1 and r3:
            lines.append(f"target: rung 3 >= 3x rung 1: {r3 / r1:.1f}x ({'met' if r3 / r1 >= 3 else 'NOT met'})")

    text = "\n".join(lines)
    print(text)
    if a.record:
        with open(a.record, "w") as f:
            f.write(f"sources {a.sources_hash}\n")
            f.write(f"Recorded {datetime.date.today().isoformat()} on {a.device_name} by ./course gpu-check "
                    f"(bh = {a.bh}, torch {torch.__version__})\n\n")
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
