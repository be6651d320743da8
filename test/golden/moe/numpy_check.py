#!/usr/bin/env python3
"""
numpy_check.py - a third opinion on the MoE goldens: a plain numpy (float64)
forward pass of the F32 models of test/tools/gen_moe_model.py, written from
the architectures' definitions, compared with llama.cpp's golden logits.

It pins down the routing rules the engine must follow (softmax over all
experts, top-k, renormalised for mixtral and qwen3moe only, the qwen2moe
shared expert gated by a sigmoid, q/k norms per head for qwen3moe and over
the whole projection for olmoe, NeoX RoPE for the three non-llama
architectures) and measures how far llama.cpp's F32 run is from exact
arithmetic (its KV cache is F16).  A wrong rule shows as differences of
whole units; the expected agreement is about 1e-2.

Usage (repository root): python3 test/golden/moe/numpy_check.py [mixtral ...]
"""

import os
import sys

import numpy as np
import gguf

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))

RULES = {
    # arch: (renormalise top-k weights, NeoX rope, q/k norm kind, shared expert)
    "llama": (True, False, None, False),
    "qwen2moe": (False, True, None, True),
    "qwen3moe": (True, True, "head", False),
    "olmoe": (False, True, "full", False),
}


def load(path):
    r = gguf.GGUFReader(path)
    kv = {}
    for k, f in r.fields.items():
        if len(f.types) == 1 and f.types[0] != gguf.GGUFValueType.STRING:
            kv[k] = f.parts[f.data[0]][0].item()
        elif len(f.types) == 1:
            kv[k] = bytes(f.parts[f.data[0]]).decode()
    t = {x.name: np.array(x.data, dtype=np.float64) for x in r.tensors}
    return kv, t


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, pos, n_rot, base, neox):
    """x: [n_tok, n_head, hd]"""
    half = n_rot // 2
    inv = base ** (-2.0 * np.arange(half) / n_rot)
    ang = pos[:, None] * inv[None, :]
    c = np.cos(ang)[:, None, :]
    s = np.sin(ang)[:, None, :]
    y = x.copy()
    if neox:
        a, b = x[..., :half], x[..., half:n_rot]
        y[..., :half] = a * c - b * s
        y[..., half:n_rot] = a * s + b * c
    else:
        a, b = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
        y[..., 0:n_rot:2] = a * c - b * s
        y[..., 1:n_rot:2] = a * s + b * c
    return y


def silu(x):
    return x / (1.0 + np.exp(-x))


def forward(kv, t, toks):
    arch = kv["general.architecture"]
    renorm, neox, qkn, shared = RULES[arch]
    E = kv[arch + ".embedding_length"]
    L = kv[arch + ".block_count"]
    H = kv[arch + ".attention.head_count"]
    HKV = kv[arch + ".attention.head_count_kv"]
    eps = kv[arch + ".attention.layer_norm_rms_epsilon"]
    base = kv[arch + ".rope.freq_base"]
    K = kv[arch + ".expert_used_count"]
    hd = E // H
    n = len(toks)
    pos = np.arange(n, dtype=np.float64)
    x = t["token_embd.weight"][toks]
    mask = np.triu(np.full((n, n), -np.inf), 1)
    for il in range(L):
        p = "blk.%d." % il
        xn = rmsnorm(x, t[p + "attn_norm.weight"], eps)
        q = xn @ t[p + "attn_q.weight"].T
        k = xn @ t[p + "attn_k.weight"].T
        v = xn @ t[p + "attn_v.weight"].T
        if p + "attn_q.bias" in t:
            q += t[p + "attn_q.bias"]
            k += t[p + "attn_k.bias"]
            v += t[p + "attn_v.bias"]
        if qkn == "full":
            q = rmsnorm(q, t[p + "attn_q_norm.weight"], eps)
            k = rmsnorm(k, t[p + "attn_k_norm.weight"], eps)
        q = q.reshape(n, H, hd)
        k = k.reshape(n, HKV, hd)
        v = v.reshape(n, HKV, hd)
        if qkn == "head":
            q = rmsnorm(q, t[p + "attn_q_norm.weight"], eps)
            k = rmsnorm(k, t[p + "attn_k_norm.weight"], eps)
        q = rope(q, pos, hd, base, neox)
        k = rope(k, pos, hd, base, neox)
        att = np.zeros((n, H, hd))
        for h in range(H):
            kh = h // (H // HKV)
            s = q[:, h, :] @ k[:, kh, :].T / np.sqrt(hd) + mask
            s = np.exp(s - s.max(axis=1, keepdims=True))
            s /= s.sum(axis=1, keepdims=True)
            att[:, h, :] = s @ v[:, kh, :]
        x = x + att.reshape(n, H * hd) @ t[p + "attn_output.weight"].T

        xn = rmsnorm(x, t[p + "ffn_norm.weight"], eps)
        lg = xn @ t[p + "ffn_gate_inp.weight"].T
        pr = np.exp(lg - lg.max(axis=1, keepdims=True))
        pr /= pr.sum(axis=1, keepdims=True)
        out = np.zeros_like(x)
        G, U, D = t[p + "ffn_gate_exps.weight"], t[p + "ffn_up_exps.weight"], \
            t[p + "ffn_down_exps.weight"]
        for i in range(n):
            sel = np.argsort(-pr[i], kind="stable")[:K]
            w = pr[i][sel]
            if renorm:
                w = w / w.sum()
            for e, we in zip(sel, w):
                h_ = silu(G[e] @ xn[i]) * (U[e] @ xn[i])
                out[i] += we * (D[e] @ h_)
        if shared:
            g = 1.0 / (1.0 + np.exp(-(xn @ t[p + "ffn_gate_inp_shexp.weight"])))
            h_ = silu(xn @ t[p + "ffn_gate_shexp.weight"].T) * (xn @ t[p + "ffn_up_shexp.weight"].T)
            out += g[:, None] * (h_ @ t[p + "ffn_down_shexp.weight"].T)
        x = x + out
    x = rmsnorm(x, t["output_norm.weight"], eps)
    return x @ t["output.weight"].T


def read_golden(path):
    prompts = []
    sample = None
    with open(path) as f:
        for line in f:
            w = line.split()
            if not w or w[0].startswith("#"):
                continue
            if w[0] == "sample_ids":
                sample = [int(x) for x in w[2:]]
            elif w[0] == "P":
                prompts.append(([int(x) for x in w[4:]], []))
            elif w[0].isdigit() and prompts:
                bar = w.index("|")
                top = [(int(w[i]), float(w[i + 1])) for i in range(1, bar, 2)]
                prompts[-1][1].append((top, [float(x) for x in w[bar + 1:]]))
    return sample, prompts


def main():
    os.chdir(ROOT)
    names = sys.argv[1:] or ["mixtral", "qwen2moe", "qwen3moe", "olmoe"]
    worst_all = 0.0
    for name in names:
        kv, t = load(os.path.join("models", "moe", name + "-f32.gguf"))
        sample, prompts = read_golden(os.path.join(HERE, "logits_%s-f32.txt" % name))
        worst = 0.0
        top1 = 0
        n = 0
        for toks, rows in prompts:
            lg = forward(kv, t, toks)
            for pos, (top, samp) in enumerate(rows):
                d = max(abs(lg[pos][tok] - l) for tok, l in top)
                d = max(d, max(abs(lg[pos][s] - l) for s, l in zip(sample, samp)))
                worst = max(worst, d)
                top1 += int(np.argmax(lg[pos]) == top[0][0])
                n += 1
        worst_all = max(worst_all, worst)
        print("%-9s numpy f64 vs llama.cpp f32: max |logit diff| %.4f over %d positions, "
              "top-1 equal at %d" % (name, worst, n, top1))
    return 0 if worst_all < 0.1 else 1


if __name__ == "__main__":
    sys.exit(main())
