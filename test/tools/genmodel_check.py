#!/usr/bin/env python3
"""genmodel_check.py - check a model written by `opus_engine genmodel` with
the python `gguf` package, independently of the engine's reader and kernels.

For each FILE: gguf.GGUFReader opens it; the llama.* hyperparameters give
the expected tensor set (names, shapes, 1-D tensors F32, MoE router F32,
stacked experts); the vocabulary size matches the embedding and the merges
are pairs of tokens whose concatenation is a token; every tensor's first
rows dequantize (gguf.quants.dequantize) to finite values - norms within
[0.95, 1.05], matrices with mean about 0 and standard deviation about
1/sqrt(row length) (that the block layout is the one ggml reads).

Usage: genmodel_check.py FILE [FILE...]; prints one line per file and exits
0 when every check passes, 1 otherwise.

       genmodel_check.py --llama-cpp "ID ID ..." TEXT FILE [FILE...]
runs llama.cpp (llama-cpp-python) on each FILE: writes the logits after
the token ids (float32) to FILE.logits and its tokenization of TEXT (with
the model's BOS rule, int32) to FILE.tokens, for the unit test to compare
with the engine.  Exit 3 when llama_cpp cannot be imported.
"""
import math
import sys

import numpy as np
import gguf
from gguf.quants import dequantize


def field(r, key, default=None):
    f = r.fields.get(key)
    if f is None:
        return default
    return f.contents()


def check(path):
    errors = []

    def expect(cond, msg):
        if not cond:
            errors.append(msg)

    r = gguf.GGUFReader(path)
    expect(field(r, "general.architecture") == "llama", "architecture is not llama")
    n_embd = field(r, "llama.embedding_length")
    n_layer = field(r, "llama.block_count")
    n_head = field(r, "llama.attention.head_count")
    n_kv = field(r, "llama.attention.head_count_kv")
    n_ff = field(r, "llama.feed_forward_length")
    n_vocab = field(r, "llama.vocab_size")
    n_exp = field(r, "llama.expert_count", 0)
    head_dim = n_embd // n_head
    kv_dim = head_dim * n_kv

    tensors = {t.name: t for t in r.tensors}
    want = {"token_embd.weight": [n_embd, n_vocab], "output_norm.weight": [n_embd]}
    if "output.weight" in tensors:
        want["output.weight"] = [n_embd, n_vocab]
    if "rope_freqs.weight" in tensors:
        want["rope_freqs.weight"] = [head_dim // 2]
    for i in range(n_layer):
        b = f"blk.{i}."
        want[b + "attn_norm.weight"] = [n_embd]
        want[b + "ffn_norm.weight"] = [n_embd]
        want[b + "attn_q.weight"] = [n_embd, n_embd]
        want[b + "attn_k.weight"] = [n_embd, kv_dim]
        want[b + "attn_v.weight"] = [n_embd, kv_dim]
        want[b + "attn_output.weight"] = [n_embd, n_embd]
        if n_exp:
            want[b + "ffn_gate_inp.weight"] = [n_embd, n_exp]
            want[b + "ffn_gate_exps.weight"] = [n_embd, n_ff, n_exp]
            want[b + "ffn_up_exps.weight"] = [n_embd, n_ff, n_exp]
            want[b + "ffn_down_exps.weight"] = [n_ff, n_embd, n_exp]
        else:
            want[b + "ffn_gate.weight"] = [n_embd, n_ff]
            want[b + "ffn_up.weight"] = [n_embd, n_ff]
            want[b + "ffn_down.weight"] = [n_ff, n_embd]
    expect(set(tensors) == set(want),
           f"tensor set differs: extra {sorted(set(tensors) - set(want))[:4]}, "
           f"missing {sorted(set(want) - set(tensors))[:4]}")

    tokens = field(r, "tokenizer.ggml.tokens")
    merges = field(r, "tokenizer.ggml.merges")
    expect(len(tokens) == n_vocab, f"{len(tokens)} tokens, vocab_size {n_vocab}")
    expect(len(set(tokens)) == len(tokens), "duplicate tokens")
    vocab = set(tokens)
    for m in merges[:2000]:
        a, b = m.split(" ")
        if not (a in vocab and b in vocab and a + b in vocab):
            errors.append(f"merge {m!r} is not a pair of tokens making a token")
            break
    for key in ("tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"):
        v = field(r, key)
        expect(v is not None and 0 <= v < n_vocab, f"{key} = {v}")

    for name, t in tensors.items():
        shape = [int(x) for x in t.shape]
        if name in want:
            expect(shape == want[name], f"{name}: shape {shape}, expected {want[name]}")
        if len(shape) == 1 or "ffn_gate_inp" in name:
            expect(t.tensor_type == gguf.GGMLQuantizationType.F32, f"{name} is {t.tensor_type.name}")
        rows = t.data if len(t.data.shape) == 2 else t.data.reshape(-1, t.data.shape[-1])
        x = dequantize(np.asarray(rows[:64]), t.tensor_type).astype(np.float64)
        if not np.all(np.isfinite(x)):
            errors.append(f"{name}: non-finite values")
            continue
        if name.endswith("norm.weight"):
            expect(x.min() >= 0.95 and x.max() <= 1.05, f"{name}: norm values out of [0.95, 1.05]")
        elif name == "rope_freqs.weight":
            expect(x.min() >= 1.0 and x.max() <= 8.0, f"{name}: factors out of [1, 8]")
        else:
            sigma = 1.0 / math.sqrt(shape[0])
            sd = x.std()
            expect(abs(x.mean()) < 0.05 * sigma + 4 * sigma / math.sqrt(x.size),
                   f"{name}: mean {x.mean():.3g} for sigma {sigma:.3g}")
            expect(0.85 * sigma < sd < 1.15 * sigma, f"{name}: std {sd:.4g}, expected {sigma:.4g}")
    return errors, len(tensors)


def llama_cpp(ids, text, paths):
    try:
        from llama_cpp import Llama
    except ImportError:
        print("skip: llama_cpp not importable")
        return 3
    toks = [int(x) for x in ids.split()]
    for path in paths:
        llm = Llama(model_path=path, n_ctx=64, n_batch=64, logits_all=True, verbose=False,
                    n_threads=2)
        llm.eval(toks)
        np.asarray(llm.scores[len(toks) - 1], dtype=np.float32).tofile(path + ".logits")
        tk = llm.tokenize(text.encode(), add_bos=True, special=False)
        np.asarray(tk, dtype=np.int32).tofile(path + ".tokens")
        del llm
    return 0


def main():
    if len(sys.argv) >= 5 and sys.argv[1] == "--llama-cpp":
        return llama_cpp(sys.argv[2], sys.argv[3], sys.argv[4:])
    bad = 0
    for path in sys.argv[1:]:
        errors, n = check(path)
        if errors:
            bad += 1
            print(f"FAIL {path}:")
            for e in errors[:10]:
                print("   ", e)
        else:
            print(f"ok {path}: {n} tensors")
    return 1 if bad or len(sys.argv) < 2 else 0


if __name__ == "__main__":
    sys.exit(main())
