"""The PyTorch half of `./course crosscheck`: the course's outputs against PyTorch on the same inputs.

attn_crosscheck_cases (tests/crosscheck/crosscheck_cases.cpp) ran the course's functions on seeded inputs
and wrote inputs and outputs as .npy files, one folder per case. This script loads them, runs the PyTorch
equivalent of each function in float32 and prints the largest absolute and relative difference. Where
PyTorch's convention differs from the course's (causal alignment, mask polarity, weight layout, GQA
grouping, fully masked rows, RoPE's pair layout, ALiBi's slopes, ignore_index, AdamW's default weight decay,
Mamba's softplus on Δ) it runs the call both ways: the right way agrees to float32 rounding, the
wrong way shows how far off it silently is.

usage: crosscheck.py CASES_DIR [--record FILE --header LINE...]
"""
import argparse
import math
import pathlib
import sys
import unicodedata
import warnings

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


def compare_all(chapter, what, call, gots, wants):
    """compare() over several tensors at once (a model's gradients, dQ dK dV): flattened, then concatenated."""
    compare(chapter, what, call, torch.cat([g.detach().reshape(-1) for g in gots]),
            torch.cat([w.reshape(-1) for w in wants]))


def autograd_sdpa(Q, K, V, dO, **kw):
    """dQ, dK, dV of sdpa by torch.autograd, for the loss Σ dO ∘ O (so ∂loss/∂O = dO, as in chapter 10)."""
    q, k, v = (t.clone().requires_grad_(True) for t in (Q, K, V))
    sdpa(q, k, v, **kw).backward(dO)
    return q.grad, k.grad, v.grad


def chapter_10(root):
    from torch.nn.attention.bias import causal_lower_right

    for name, what in (("10_grad", "∇ n = 37, d_v = 8 ≠ d_k = 16"), ("10_grad_causal", "∇ causal, n = 37"),
                       ("10_grad_causal_short_q", "∇ causal, n_q = 20 < n_kv = 45")):
        c = root / name
        Q, K, V, dO, dQ, dK, dV = (load(c, n) for n in ("Q", "K", "V", "dO", "dQ", "dK", "dV"))
        n_q, n_kv = Q.shape[0], K.shape[0]
        if name == "10_grad":
            compare_all("10", what, "autograd of sdpa(Q, K, V): dQ, dK, dV", autograd_sdpa(Q, K, V, dO), (dQ, dK, dV))
            full = tuple(load(c, n) for n in ("dQ_full", "dK_full", "dV_full"))
            compare_all("10", "  attention_backward (keeps P)", "the same", autograd_sdpa(Q, K, V, dO), full)
        elif n_q == n_kv:
            compare_all("10", what, "autograd of sdpa(.., is_causal=True)", autograd_sdpa(Q, K, V, dO, is_causal=True),
                        (dQ, dK, dV))
        else:
            compare_all("10", what, "autograd of sdpa(.., attn_mask=causal_lower_right(20, 45))",
                        autograd_sdpa(Q, K, V, dO, attn_mask=causal_lower_right(n_q, n_kv)), (dQ, dK, dV))
            compare_all("10", "  wrong: upper-left causal", "autograd of sdpa(.., is_causal=True)",
                        autograd_sdpa(Q, K, V, dO, is_causal=True), (dQ, dK, dV))
    c = root / "10_dominant"
    Q, K, V, dO, dQ, dK, dV = (load(c, n) for n in ("Q", "K", "V", "dO", "dQ", "dK", "dV"))
    gq, gk, gv = autograd_sdpa(Q, K, V, dO)
    compare("10", "one key 60 above the rest: dV", "autograd of sdpa (its dV is dO exactly)", gv, dV)
    compare("10", "  dQ, dK (exactly ~1e-20)", "the same", torch.cat([gq.reshape(-1), gk.reshape(-1)]),
            torch.cat([dQ.reshape(-1), dK.reshape(-1)]))


def rope_reference(X, first, base, layout):
    """RoPE by its definition, angles in float64: 'interleaved' turns pairs (2i, 2i + 1) as complex numbers
    (RoFormer, Meta's Llama: view_as_complex); 'half' turns (i, i + d/2) (GPT-NeoX, Hugging Face's rotate_half)."""
    n, d = X.shape
    angle = torch.arange(first, first + n, dtype=torch.float64)[:, None] * base ** (
        -torch.arange(0, d, 2, dtype=torch.float64) / d)  # (n, d/2)
    if layout == "interleaved":
        turn = torch.polar(torch.ones_like(angle), angle).to(torch.complex64)
        return torch.view_as_real(torch.view_as_complex(X.reshape(n, d // 2, 2).contiguous()) * turn).reshape(n, d)
    cos, sin = torch.cos(angle).float().repeat(1, 2), torch.sin(angle).float().repeat(1, 2)
    return X * cos + torch.cat([-X[:, d // 2:], X[:, :d // 2]], -1) * sin


def alibi_paper_slopes(h):
    """ALiBi's slopes as the paper's code chooses them: 2^(-8k/h) for h a power of two; otherwise those of the
    closest power of two c below h, then every other slope of 2c."""
    if math.log2(h).is_integer():
        return [2 ** (-8 * k / h) for k in range(1, h + 1)]
    c = 2 ** math.floor(math.log2(h))
    return alibi_paper_slopes(c) + alibi_paper_slopes(2 * c)[0::2][:h - c]


def chapter_11(root):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    # Eager flex_attention warns that it is unfused (it materialises the scores): the header says so once.
    warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")

    c = root / "11_rope"
    X, out = load(c, "X"), load(c, "out")
    d = X.shape[1]
    compare("11", "RoPE, pairs (2i, 2i + 1), pos 3-12", "view_as_complex(x.reshape(n, d/2, 2)) * e^{iθ}",
            rope_reference(X, 3, 10000.0, "interleaved"), out)
    split = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])  # interleaved → half-split columns
    compare("11", "  half-split, columns reordered", "rotate_half on X[:, evens ++ odds], reordered back",
            rope_reference(X[:, split], 3, 10000.0, "half")[:, torch.argsort(split)], out)
    compare("11", "  wrong: rotate_half as is", "HF Llama's rotate_half on the same X",
            rope_reference(X, 3, 10000.0, "half"), out)

    c = root / "11_alibi"
    Q, K, V, slopes, out = (load(c, n) for n in ("Q", "K", "V", "slopes", "out"))
    h, n_q, n_kv = Q.shape[0], Q.shape[1], K.shape[1]
    off = n_kv - n_q
    i, j = torch.arange(n_q)[:, None], torch.arange(n_kv)[None, :]

    def alibi_bias(s, aligned=True):
        distance = ((i + off if aligned else i) - j).abs()
        bias = -torch.tensor(s)[:, None, None] * distance
        return bias.masked_fill(j > (i + off if aligned else i), float("-inf"))

    paper = alibi_paper_slopes(h)
    compare("11", "ALiBi, h = 6, causal, n_q < n_kv", "the paper's get_slopes(6) (1/4, …, 1/256, 1/2, 1/8)",
            slopes, torch.tensor(paper))
    compare("11", "", "sdpa(.., attn_mask=−m_h·|i + 25 − j|, −inf above)",
            sdpa(Q, K, V, attn_mask=alibi_bias(paper)), out)
    sl = torch.tensor(paper)
    causal_br = create_block_mask(lambda b, hh, q, k: k <= q + off, None, None, n_q, n_kv, device="cpu")
    compare("11", "", "flex_attention(score_mod=alibi, block_mask=causal)",
            flex_attention(Q[None], K[None], V[None], score_mod=lambda s, b, hh, q, k: s - sl[hh] * (q + off - k).abs(),
                           block_mask=causal_br)[0], out)
    compare("11", "  wrong: slopes 2^(−8k/6)", "a geometric sequence for h = 6",
            sdpa(Q, K, V, attn_mask=alibi_bias([2 ** (-8 * k / h) for k in range(1, h + 1)])), out)
    compare("11", "  wrong: aligned top-left", "|i − j| and is_causal's alignment",
            sdpa(Q, K, V, attn_mask=alibi_bias(paper, aligned=False)), out)

    masks = {  # name: (what, rule as the course aligns it, the same rule aligned top-left or None)
        "11_causal": ("causal, n_q = 20 < n_kv = 45", lambda q, k: k <= q + off, lambda q, k: k <= q),
        "11_window": ("sliding window 8, causal", lambda q, k: (k <= q + off) & (q + off < k + 8),
                      lambda q, k: (k <= q) & (q < k + 8)),
        "11_prefix": ("prefix-LM, prefix 10", lambda q, k: (k < 10) | (k <= q + off), lambda q, k: (k < 10) | (k <= q)),
        "11_documents": ("documents of 12, causal", lambda q, k: ((q + off) // 12 == k // 12) & (k <= q + off),
                         lambda q, k: (q // 12 == k // 12) & (k <= q)),
    }
    for name, (what, rule, top_left) in masks.items():
        c = root / name
        Q, K, V, out = (load(c, n) for n in ("Q", "K", "V", "out"))
        compare("11", what, "sdpa(.., attn_mask=mask)  (bool, the rule at position i + 25)",
                sdpa(Q, K, V, attn_mask=rule(i, j)), out)
        block = create_block_mask(lambda b, hh, q, k, rule=rule: rule(q, k), None, None, n_q, n_kv, device="cpu")
        compare("11", "", "flex_attention(.., block_mask=create_block_mask(rule))",
                flex_attention(Q[None], K[None], V[None], block_mask=block)[0], out)
        compare("11", "  wrong: aligned top-left", "the rule at position i", sdpa(Q, K, V, attn_mask=top_left(i, j)),
                out)
    c = root / "11_softcap"
    Q, K, V, out = (load(c, n) for n in ("Q", "K", "V", "out"))
    S = Q @ K.transpose(-1, -2) / math.sqrt(Q.shape[-1])
    compare("11", "soft-capping at 1.5", "softmax(1.5·tanh(S / 1.5)) @ V", torch.softmax(1.5 * torch.tanh(S / 1.5), -1)
            @ V, out)
    compare("11", "", "flex_attention(score_mod=1.5·tanh(s / 1.5))",
            flex_attention(Q[None], K[None], V[None], score_mod=lambda s, b, hh, q, k: 1.5 * torch.tanh(s / 1.5))[0],
            out)


def chapter_12(root):
    c = root / "12_model"
    heads, base = (float(x) for x in np.load(c / "config.npy"))
    heads = int(heads)
    count = len(list(c.glob("p*_grad.npy")))
    P = [load(c, f"p{i}").clone().requires_grad_(True) for i in range(count)]
    tokens = torch.from_numpy(np.load(c / "tokens.npy"))
    targets = torch.from_numpy(np.load(c / "targets.npy"))
    targets = targets.masked_fill(targets < 0, -100)  # the course's kIgnore → F.cross_entropy's ignore_index

    def rope(x):  # the course's interleaved pairs, positions 0 … n − 1
        return rope_reference(x, 0, base, "interleaved")

    X = P[0][tokens]  # (n, d_model)
    d_k = X.shape[1] // heads
    for layer in range(1, count - 1, 4):
        W_Q, W_K, W_V, W_O = P[layer:layer + 4]
        q, k, v = X @ W_Q, X @ W_K, X @ W_V
        heads_out = [sdpa(rope(q[:, s]), rope(k[:, s]), v[:, s], is_causal=True)
                     for s in (slice(hh * d_k, (hh + 1) * d_k) for hh in range(heads))]
        X = X + torch.cat(heads_out, -1) @ W_O
    logits = X @ P[-1]
    compare("12", "the model's forward", "embed, RoPE, sdpa(is_causal=True) per head, W_O, unembed", logits,
            load(c, "logits"))
    loss = F.cross_entropy(logits, targets)
    compare("12", "cross-entropy", "F.cross_entropy(logits, t)  (kIgnore → −100)", loss[None],
            torch.from_numpy(np.load(c / "loss.npy")))
    compare("12", "  wrong: ignored rows counted", "F.cross_entropy(.., reduction='sum') / n",
            (F.cross_entropy(logits, targets, reduction="sum") / len(targets))[None],
            torch.from_numpy(np.load(c / "loss.npy")))
    loss.backward()
    grads = [load(c, f"p{i}_grad") for i in range(count)]
    compare_all("12", "one step's gradients", "loss.backward(): embed, W_Q … W_O, unembed", [p.grad for p in P],
                grads)
    after = [load(c, f"p{i}_after") for i in range(count)]

    def adamw_step(**kw):
        params = [load(c, f"p{i}").clone().requires_grad_(True) for i in range(count)]
        for p, g in zip(params, grads):
            p.grad = g.clone()
        torch.optim.AdamW(params, lr=3e-3, betas=(0.9, 0.98), eps=1e-8, **kw).step()
        return params

    compare_all("12", "AdamW, β = (0.9, 0.98), no decay", "torch.optim.AdamW(.., weight_decay=0.0).step()",
                adamw_step(weight_decay=0.0), after)
    compare_all("12", "  wrong: AdamW's default decay", "torch.optim.AdamW(..)  (weight_decay=0.01)", adamw_step(),
                after)


def selective_scan_loop(u, delta, A, B, C, delta_softplus=False):
    """Mamba's selective_scan_ref semantics, one batch, in a plain loop: u, delta (d, L), A (d, N), B, C (N, L);
    h ← exp(Δ A) ∘ h + Δ B u per token, y = h C. Left out, as the course leaves them out: the skip D·u, the
    gating by silu(z), the Δ bias, groups of B and C. delta_softplus: Mamba's Δ = softplus(Δ)."""
    if delta_softplus:
        delta = F.softplus(delta)
    h = torch.zeros(A.shape, dtype=u.dtype)  # (d, N)
    ys = []
    for t in range(u.shape[1]):
        h = torch.exp(delta[:, t, None] * A) * h + (delta[:, t] * u[:, t])[:, None] * B[None, :, t]
        ys.append(h @ C[:, t])
    return torch.stack(ys, 1)  # (d, L)


def chapter_14(root):
    for name, what in (("14_zoh_small", "ZOH, Δ = 0.001: B̄"), ("14_zoh", "ZOH, Δ = 0.1: B̄")):
        c = root / name
        A, B, A_bar, B_bar = (load(c, n) for n in ("A", "B", "A_bar", "B_bar"))
        delta = float(np.load(c / "delta.npy")[0])
        for dtype in (torch.complex64, torch.complex128):
            M = torch.zeros(A.shape[0], 2, 2, dtype=dtype)  # per entry [[ΔA, ΔB], [0, 0]]: exp is [[Ā, B̄], [0, 1]]
            M[:, 0, 0] = torch.complex(A[:, 0], A[:, 1]).to(dtype) * delta
            M[:, 0, 1] = torch.complex(B[:, 0], B[:, 1]).to(dtype) * delta
            E = torch.linalg.matrix_exp(M)
            compare("14", what if dtype == torch.complex64 else "",
                    f"torch.linalg.matrix_exp([[ΔA, ΔB], [0, 0]]), {str(dtype)[6:]}", torch.view_as_real(E[:, 0, 1]),
                    B_bar)
        compare("14", "  wrong: Euler's B̄ = Δ·B", "Δ·B", delta * B, B_bar)
        compare("14", "  and Ā", "matrix_exp's, complex128", torch.view_as_real(E[:, 0, 0]), A_bar)

    c = root / "14_conv"
    K, u, out = (load(c, n) for n in ("K", "u", "out"))
    n = u.shape[0]
    conv = F.conv1d(u[None, None], K.flip(0)[None, None], padding=n - 1)[0, 0, :n]  # causal: y_t = Σ K_j u_{t−j}
    compare("14", "S4D conv, n = 4,096, Δ = 0.001", "F.conv1d(u, K.flip(0), padding=n − 1)[:n]  (float32)", conv,
            out)
    exact = F.conv1d(u.double()[None, None], K.double().flip(0)[None, None], padding=n - 1)[0, 0, :n]
    compare("14", "", "the same in float64", exact, out)

    c = root / "14_scan"
    x, delta, A, B, C, out = (load(c, n) for n in ("x", "delta", "A", "B", "C", "out"))
    compare("14", "selective scan, n = 64, d = 4", "selective_scan_ref's loop (no D, z, Δ bias, groups)",
            selective_scan_loop(x.T, delta.T, A, B.T, C.T).T, out)
    compare("14", "  wrong: delta_softplus=True", "the same with Δ = softplus(Δ), as Mamba calls it",
            selective_scan_loop(x.T, delta.T, A, B.T, C.T, delta_softplus=True).T, out)


def table():
    headers = ("case", "PyTorch", "max |Δ|", "rel")
    rows = [row[1:] for row in ROWS]
    def width(text):  # as printed: a combining accent (the bar of B̄) takes no column
        return sum(not unicodedata.combining(ch) for ch in text)

    widths = [max(width(h), *(width(row[i]) for row in rows)) for i, h in enumerate(headers)]

    def line(cells):
        pads = [" " * (w - width(v)) for v, w in zip(cells, widths)]
        return "  ".join(v + pad if i < 2 else pad + v for i, (v, pad) in enumerate(zip(cells, pads)))

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
    for chapter in (chapter_02, chapter_03, chapter_05, chapter_07, chapter_08, chapter_09, chapter_10, chapter_11,
                    chapter_12, chapter_14):
        chapter(args.cases)
    text = (
        "The course's functions against PyTorch on the same seeded float32 inputs (tests/crosscheck/).\n"
        "max |Δ|: largest absolute difference from the course's output; rel: that ÷ the largest |output|.\n"
        "Rows marked wrong use the other convention on purpose: they show how far off it silently is.\n"
        "sdpa = F.scaled_dot_product_attention; MHA = nn.MultiheadAttention(d_model, h, bias=False,\n"
        "batch_first=True); masks are bool, the course's True = may attend; rel of a NaN row: how many.\n"
        "∇: dQ, dK, dV together. flex_attention runs eagerly (unfused) on the CPU. Chapter 11's masks put\n"
        "query i at position i + n_kv − n_q, as chapter 02's causal mask does.\n\n"
        + table() + "\n")
    sys.stdout.write(text)
    if args.record:
        header = "".join(f"# {line}\n" for line in args.header)
        args.record.write_text(header + text, encoding="utf-8")
        print(f"\nrecorded in {args.record}")


if __name__ == "__main__":
    main()
