#!/usr/bin/env python3
"""check_quantize.py - acceptance check for `opus_engine quantize`.

For each GGUF written by the quantizer: (1) every tensor, dequantized by the
python gguf package (an independent implementation of the block layouts), is
close to the same tensor of the source file (relative RMSE per type below);
(2) llama.cpp (llama-cpp-python) loads the file and a greedy completion of a
fixed chat prompt is printed, so a human (or the caller) can see it is
sensible text.

usage: check_quantize.py SOURCE.gguf OUT1.gguf [OUT2.gguf ...]
Exit status 1 if any file fails to load or a tensor is off.
"""
import sys

import numpy as np
import gguf
from gguf.quants import dequantize

# worst acceptable relative RMSE of a tensor versus the source, by type
BOUND = {"F32": 1e-6, "F16": 1e-3, "BF16": 5e-3, "Q8_0": 0.02, "Q6_K": 0.04,
         "Q5_0": 0.08, "Q5_1": 0.08, "Q5_K": 0.08, "Q4_0": 0.16,
         "Q4_1": 0.16, "Q4_K": 0.16}


def tensors(path):
    r = gguf.GGUFReader(path)
    return r, {t.name: t for t in r.tensors}


def deq(t):
    if t.tensor_type.name == "F32":
        return np.asarray(t.data, dtype=np.float32).reshape(-1)
    if t.tensor_type.name == "F16":
        return np.asarray(t.data).view(np.float16).astype(np.float32).reshape(-1)
    return dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1)


def check_tensors(src, path):
    _, a = tensors(src)
    r, b = tensors(path)
    ok = True
    worst = {}
    for name, t in b.items():
        if name not in a:
            print(f"  {name}: not in source"); ok = False; continue
        x, y = deq(a[name]), deq(t)
        rel = float(np.sqrt(np.mean((x - y) ** 2) / max(np.mean(x ** 2), 1e-30)))
        ty = t.tensor_type.name
        worst[ty] = max(worst.get(ty, 0.0), rel)
        if rel > BOUND.get(ty, 0.0) or list(t.shape) != list(a[name].shape):
            print(f"  {name}: {ty} rel RMSE {rel:.4f} shape {list(t.shape)}"); ok = False
    ft = r.fields["general.file_type"].parts[-1][0]
    print(f"  file_type {ft}; worst rel RMSE vs source by type: " +
          ", ".join(f"{k} {v:.4f}" for k, v in sorted(worst.items())))
    return ok


def generate(path):
    from llama_cpp import Llama
    llm = Llama(model_path=path, n_ctx=128, verbose=False, seed=0)
    out = llm.create_chat_completion(
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        max_tokens=24, temperature=0.0)
    return out["choices"][0]["message"]["content"]


def main():
    if len(sys.argv) < 3:
        print(__doc__); return 2
    src, ok = sys.argv[1], True
    for path in sys.argv[2:]:
        print(path)
        ok &= check_tensors(src, path)
        try:
            text = generate(path)
            print("  llama.cpp:", repr(text))
            ok &= len(text.strip()) > 0
        except Exception as e:  # noqa: BLE001 - report any load failure
            print("  llama.cpp FAILED:", e); ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
