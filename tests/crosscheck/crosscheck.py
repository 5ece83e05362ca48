"""The PyTorch half of `./course crosscheck`: the course's outputs against PyTorch on the same inputs.

attn_crosscheck_cases (tests/crosscheck/crosscheck_cases.cpp) ran the course's functions on seeded inputs
and wrote inputs and outputs as .npy files, one folder per case. This script loads them, runs the PyTorch
equivalent of each function in float32 and prints the largest absolute and relative difference. Where
PyTorch's convention differs from the course's (causal alignment, mask polarity, weight layout, GQA
grouping, fully masked rows) it runs the call both ways: the right way agrees to float32 rounding, the
wrong way shows how far off it silently is.

usage: crosscheck.py CASES_DIR [--record FILE --header LINE...]
"""
import argparse
import math
import pathlib
import sys

import numpy as np
import torch
import torch.nn.functional as F

torch.manual_seed(0)
ROWS = []  # (chapter, what, call, max abs, max rel)


def load(case_dir, name):
    array = np.load(case_dir / f"{name}.npy")
    if array.dtype == np.uint8:
        return torch.from_numpy(array.astype(bool))  # masks: True = may attend (the course's convention)
    return torch.from_numpy(array.astype(np.float32))


def compare(chapter, what, call, got, want):
    """Largest |got - want| and that divided by the largest |want|; NaN when PyTorch returned any NaN."""
    got = got.detach().to(torch.float64)
    want = want.to(torch.float64)
    nan_rows = int(torch.isnan(got).reshape(got.shape[0], -1).any(dim=1).sum()) if got.dim() > 1 else 0
    if torch.isnan(got).any():
        abs_err, rel_err = "NaN", f"{nan_rows} row{'s' if nan_rows != 1 else ''}"
    else:
        diff = (got - want).abs().max().item()
        scale = want.abs().max().item()
        abs_err, rel_err = f"{diff:.1e}", f"{diff / scale:.1e}" if scale > 0 else "-"
    ROWS.append((chapter, what, call, abs_err, rel_err))


def sdpa(q, k, v, **kw):
    return F.scaled_dot_product_attention(q, k, v, **kw)


def chapter_02(root):
    c = root / "02_project"
    X, W, out = load(c, "X"), load(c, "W"), load(c, "out")
    compare("02", "X·W, W (d_in, d_out)", "F.linear(X, W.T)  (nn.Linear's weight is Wᵀ)", F.linear(X, W.T), out)
    compare("02", "  wrong: W as (out, in)", "F.linear(X, W)", F.linear(X, W), out)

    c = root / "02_sdpa"
    Q, K, V, out = (load(c, n) for n in ("Q", "K", "V", "out"))
    compare("02", "attention, d_v = 6 ≠ d_k = 4", "sdpa(Q, K, V)", sdpa(Q, K, V), out)

    c = root / "02_causal_short_q"
    Q, K, V, mask, out = (load(c, n) for n in ("Q", "K", "V", "mask", "out"))
    from torch.nn.attention.bias import causal_lower_right

    n_q, n_kv = Q.shape[0], K.shape[0]
    compare("02", "causal, n_q = 3 < n_kv = 7", "sdpa(.., attn_mask=causal_lower_right(3, 7))",
            sdpa(Q, K, V, attn_mask=causal_lower_right(n_q, n_kv)), out)
    compare("02", "", "sdpa(.., attn_mask=mask)  (bool, True = attend)", sdpa(Q, K, V, attn_mask=mask), out)
    compare("02", "  wrong: upper-left causal", "sdpa(.., is_causal=True)", sdpa(Q, K, V, is_causal=True), out)

    c = root / "02_mask"
    Q, K, V, mask, out = (load(c, n) for n in ("Q", "K", "V", "mask", "out"))
    compare("02", "mask, True = may attend", "sdpa(.., attn_mask=mask)", sdpa(Q, K, V, attn_mask=mask), out)
    compare("02", "  wrong: True = masked out", "sdpa(.., attn_mask=~mask)", sdpa(Q, K, V, attn_mask=~mask), out)

    c = root / "02_masked_row"
    Q, K, V, mask, out = (load(c, n) for n in ("Q", "K", "V", "mask", "out"))
    compare("02", "a fully masked row: zeros", "sdpa(.., attn_mask=mask)", sdpa(Q, K, V, attn_mask=mask), out)
    S = (Q @ K.T / math.sqrt(Q.shape[1])).masked_fill(~mask, float("-inf"))
    compare("02", "  by hand: NaN", "softmax(S.masked_fill(~mask, -inf)) @ V", torch.softmax(S, -1) @ V, out)


def chapter_03(root):
    c = root / "03_multi_head"
    X, WQ, WK, WV, WO, mask, out = (load(c, n) for n in ("X", "W_Q", "W_K", "W_V", "W_O", "mask", "out"))
    d_model, h = X.shape[1], 2

    def layer(in_proj, out_proj, attn_mask, need_weights=False):
        mha = torch.nn.MultiheadAttention(d_model, h, bias=False, batch_first=True)
        with torch.no_grad():
            mha.in_proj_weight.copy_(in_proj)
            mha.out_proj.weight.copy_(out_proj)
        y, _ = mha(X[None], X[None], X[None], attn_mask=attn_mask, need_weights=need_weights)
        return y[0]

    right = torch.cat([WQ.T, WK.T, WV.T])
    compare("03", "multi-head, causal", "MHA: in_proj [W_Qᵀ; W_Kᵀ; W_Vᵀ], out W_Oᵀ, ~mask",
            layer(right, WO.T, ~mask), out)
    compare("03", "  wrong: W not transposed", "MHA: in_proj [W_Q; W_K; W_V], out W_O, ~mask",
            layer(torch.cat([WQ, WK, WV]), WO, ~mask), out)
    compare("03", "  wrong: the course's mask", "MHA(.., attn_mask=mask)  (True = masked out)",
            layer(right, WO.T, mask), out)
    compare("03", "  the same, need_weights", "MHA(.., attn_mask=mask, need_weights=True)",
            layer(right, WO.T, mask, need_weights=True), out)


def chapter_05(root):
    for name, causal in (("05_flash", False), ("05_flash_causal", True)):
        c = root / name
        Q, K, V, out, lse = (load(c, n) for n in ("Q", "K", "V", "out", "lse"))
        what = "flash, n = 300, causal" if causal else "flash, n = 300"
        compare("05", what, f"sdpa(Q, K, V{', is_causal=True' if causal else ''})",
                sdpa(Q, K, V, is_causal=causal), out)
        S = Q @ K.T / math.sqrt(Q.shape[1])
        if causal:
            S = S.masked_fill(~torch.ones(S.shape, dtype=torch.bool).tril(), float("-inf"))
        compare("05", "  its log-sum-exp", "torch.logsumexp(S, -1)", torch.logsumexp(S, -1), lse)


def chapter_07(root):
    c = root / "07_window"
    Q, K, V, mask, out = (load(c, n) for n in ("Q", "K", "V", "mask", "out"))
    compare("07", "sliding window, w = 4", "sdpa(.., attn_mask=window)  (|i - j| ≤ w)",
            sdpa(Q, K, V, attn_mask=mask), out)
    compare("07", "  wrong: True = masked out", "sdpa(.., attn_mask=~window)", sdpa(Q, K, V, attn_mask=~mask), out)


def chapter_08(root):
    def phi(x):
        return F.elu(x) + 1

    c = root / "08_linear"
    Q, K, V, out = (load(c, n) for n in ("Q", "K", "V", "out"))
    pq, pk = phi(Q), phi(K)
    compare("08", "linear attention, elu+1", "(φQ @ (φKᵀ @ V)) / (φQ @ φK.sum(0))[:, None]",
            (pq @ (pk.T @ V)) / (pq @ pk.sum(0))[:, None], out)
    compare("08", "  wrong: F.elu without +1", "the same with φ = F.elu", (F.elu(Q) @ (F.elu(K).T @ V))
            / (F.elu(Q) @ F.elu(K).sum(0))[:, None], out)
    c = root / "08_causal_linear"
    Q, K, V, out = (load(c, n) for n in ("Q", "K", "V", "out"))
    pq, pk = phi(Q), phi(K)
    S = torch.cumsum(pk[:, :, None] * V[:, None, :], 0)  # (n, m, d_v): the state after each token
    z = torch.cumsum(pk, 0)                              # (n, m)
    compare("08", "causal linear attention", "cumsum of φ(k_t)ᵀv_t and φ(k_t), then divide",
            torch.einsum("tm,tmv->tv", pq, S) / (pq * z).sum(1, keepdim=True), out)


def chapter_09(root):
    c = root / "09_gqa"
    Q, K, V, out = (load(c, n) for n in ("Q", "K", "V", "out"))
    r = Q.shape[0] // K.shape[0]
    compare("09", "GQA, h = 8, g = 2, causal", "sdpa(Q, K, V, is_causal=True, enable_gqa=True)",
            sdpa(Q, K, V, is_causal=True, enable_gqa=True), out)
    compare("09", "", "K.repeat_interleave(4, 0), same for V, then sdpa",
            sdpa(Q, K.repeat_interleave(r, 0), V.repeat_interleave(r, 0), is_causal=True), out)
    compare("09", "  wrong: K.repeat(4, 1, 1)", "heads 0,1,2,3 read K/V heads 0,1,0,1",
            sdpa(Q, K.repeat(r, 1, 1), V.repeat(r, 1, 1), is_causal=True), out)


def table():
    headers = ("case", "PyTorch", "max |Δ|", "rel")
    rows = [row[1:] for row in ROWS]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(headers)]

    def line(cells):
        return "  ".join(v.ljust(w) if i < 2 else v.rjust(w) for i, (v, w) in enumerate(zip(cells, widths)))

    lines = [line(headers), "  ".join("-" * w for w in widths)]
    chapter = None
    for row in ROWS:
        if row[0] != chapter:
            chapter = row[0]
            lines.append(f"chapter {chapter}:")
        lines.append(line(row[1:]))
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("cases", type=pathlib.Path)
    parser.add_argument("--record", type=pathlib.Path)
    parser.add_argument("--header", action="append", default=[])
    args = parser.parse_args()
    for chapter in (chapter_02, chapter_03, chapter_05, chapter_07, chapter_08, chapter_09):
        chapter(args.cases)
    text = (
        "The course's functions against PyTorch on the same seeded float32 inputs (tests/crosscheck/).\n"
        "max |Δ|: largest absolute difference from the course's output; rel: that ÷ the largest |output|.\n"
        "Rows marked wrong use the other convention on purpose: they show how far off it silently is.\n"
        "sdpa = F.scaled_dot_product_attention; MHA = nn.MultiheadAttention(d_model, h, bias=False,\n"
        "batch_first=True); masks are bool, the course's True = may attend; rel of a NaN row: how many.\n\n"
        + table() + "\n")
    sys.stdout.write(text)
    if args.record:
        header = "".join(f"# {line}\n" for line in args.header)
        args.record.write_text(header + text, encoding="utf-8")
        print(f"\nrecorded in {args.record}")


if __name__ == "__main__":
    main()
