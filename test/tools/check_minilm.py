#!/usr/bin/env python3
"""check_minilm.py [MODEL.gguf] - check the converted all-MiniLM-L6-v2 GGUF:
llama.cpp (llama-cpp-python, embedding=True) loads it, and its embeddings
agree with an independent numpy BERT forward pass over the same file's F32
tensors (post-LayerNorm encoder, exact GELU, mean pooling, L2 norm).
Exits 1 when a cosine similarity is below 0.9999."""
import math
import sys

import numpy as np
import gguf
from llama_cpp import Llama

path = sys.argv[1] if len(sys.argv) > 1 else "models/all-MiniLM-L6-v2.gguf"
r = gguf.GGUFReader(path)
W = {t.name: np.array(t.data, dtype=np.float64) for t in r.tensors}
f = r.fields
def kv(k):
    return f[k].contents()
nl, nh = kv("bert.block_count"), kv("bert.attention.head_count")
eps = kv("bert.attention.layer_norm_epsilon")
erf = np.vectorize(math.erf)


def ln(x, p):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * W[p + ".weight"] + W[p + ".bias"]


def fwd(ids):
    n = len(ids)
    x = W["token_embd.weight"][ids] + W["position_embd.weight"][:n] + W["token_types.weight"][0]
    x = ln(x, "token_embd_norm")
    d = x.shape[1]
    hd = d // nh
    for l in range(nl):
        p = f"blk.{l}."
        lin = lambda nm, h: h @ W[p + nm + ".weight"].T + W[p + nm + ".bias"]
        q, k, v = (lin(nm, x).reshape(n, nh, hd).transpose(1, 0, 2) for nm in ("attn_q", "attn_k", "attn_v"))
        a = q @ k.transpose(0, 2, 1) / math.sqrt(hd)
        a = np.exp(a - a.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        o = (a @ v).transpose(1, 0, 2).reshape(n, d)
        x = ln(x + lin("attn_output", o), p + "attn_output_norm")
        h = lin("ffn_up", x)
        h = 0.5 * h * (1 + erf(h / math.sqrt(2)))
        x = ln(x + lin("ffn_down", h), p + "layer_output_norm")
    e = x.mean(0)
    return e / np.linalg.norm(e)


texts = ["Hello, world!", "The quick brown fox jumps over the lazy dog.",
         "Café déjà vu — naïve résumé 東京 🙂", "SELECT embedding FROM docs WHERE id = 42;",
         "unbelievably hyperparameterized transformers"]
llm = Llama(model_path=path, embedding=True, verbose=False, n_ctx=512, n_threads=2)
worst = 1.0
for s in texts:
    ids = llm.tokenize(s.encode(), add_bos=True, special=False)
    e = np.array(llm.embed(s, normalize=True))
    c = float(e @ fwd(ids) / np.linalg.norm(e))
    worst = min(worst, c)
    print(f"{c:.7f}  {len(ids):3d} tokens  {s}")
print(f"worst cosine llama.cpp vs numpy: {worst:.7f}")
sys.exit(0 if worst >= 0.9999 else 1)
