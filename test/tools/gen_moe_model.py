#!/usr/bin/env python3
"""
gen_moe_model.py - write small random-weight Mixture-of-Experts GGUF models
that both llama.cpp and opus_engine load, for the MoE goldens and tests.

Architectures (as llama.cpp names them in GGUF):

  mixtral         arch "llama" with llama.expert_count; stacked
                  ffn_{gate,up,down}_exps; top-2 of 8, weights renormalised
  mixtral-legacy  the same weights as "mixtral" written as the older
                  per-expert tensors blk.N.ffn_{gate,up,down}.E.weight
  qwen2moe        QKV biases, NeoX RoPE, top-2 of 8 without renormalisation,
                  a shared expert (n_ff 768) gated by sigmoid(ffn_gate_inp_shexp . x)
  qwen3moe        per-head q/k RMS norms, NeoX RoPE, top-2 of 8 renormalised
  olmoe           q/k RMS norms over the whole projection, NeoX RoPE,
                  top-2 of 8 without renormalisation
  bench-moe, bench-dense  (not made by default) for test/bench/bench_moe.sh:
                  n_embd 512, 8 layers, 8 heads; 8 experts of n_ff 1024 top-2,
                  and a dense llama with n_ff 2048 (the same active parameters)

Shape: n_embd 256, 4 layers, 4 heads of 64 (2 KV heads; olmoe 4), 8 experts
of n_ff 512, vocabulary and tokenizer metadata copied from SmolLM2
(models/SmolLM2-135M-Instruct.Q4_1.gguf) so both engines tokenize alike.

Types: the generator writes <name>-f32.gguf (every weight F32) from a numpy
Generator with a fixed seed (drawn in a fixed order, so the file is the same
bytes for the same seed and gguf package), then makes f16, q8_0 and q4_k
variants with `build/opus_engine quantize` (every weight matrix converted,
router ffn_gate_inp kept F32, as llama.cpp's quantizer does).

Usage (repository root):
  python3 test/tools/gen_moe_model.py [--out models/moe] [--seed 20240607]
      [--names mixtral,qwen2moe,...] [--types f32,f16,q8_0,q4_k]
      [--engine build/opus_engine] [--force]
Existing files are kept unless --force.
"""

import argparse
import os
import subprocess
import sys

import numpy as np
import gguf

SEED = 20240607
N_EMBD = 256
N_LAYER = 4
N_HEAD = 4
HEAD_DIM = N_EMBD // N_HEAD
N_EXPERT = 8
N_USED = 2
N_FF_EXP = 512
N_FF_SHEXP = 768
CTX = 2048
TOKENIZER_SRC = os.path.join("models", "SmolLM2-135M-Instruct.Q4_1.gguf")

NAMES = ["mixtral", "mixtral-legacy", "qwen2moe", "qwen3moe", "olmoe"]
BENCH_NAMES = ["bench-moe", "bench-dense"]
TYPES = ["f32", "f16", "q8_0", "q4_k"]

# shapes of the test models; the bench models (bench_moe.sh) override them
DIMS = dict(n_embd=N_EMBD, n_layer=N_LAYER, n_head=N_HEAD, n_expert=N_EXPERT,
            n_used=N_USED, n_ff_exp=N_FF_EXP, n_ff_shexp=N_FF_SHEXP)

SPEC = {
    "mixtral": dict(arch="llama", n_head_kv=2, bias=False, qk_norm=None,
                    shared=False, legacy=False),
    # bench_moe.sh: 8 experts top-2, and a dense model with the same active
    # parameter count (n_ff = 2 x the expert n_ff)
    "bench-moe": dict(arch="llama", n_head_kv=4, bias=False, qk_norm=None,
                      shared=False, legacy=False,
                      dims=dict(n_embd=512, n_layer=8, n_head=8, n_ff_exp=1024)),
    "bench-dense": dict(arch="llama", n_head_kv=4, bias=False, qk_norm=None,
                        shared=False, legacy=False, dense=True,
                        dims=dict(n_embd=512, n_layer=8, n_head=8, n_ff_exp=2048)),
    "mixtral-legacy": dict(arch="llama", n_head_kv=2, bias=False,
                           qk_norm=None, shared=False, legacy=True),
    "qwen2moe": dict(arch="qwen2moe", n_head_kv=2, bias=True, qk_norm=None,
                     shared=True, legacy=False),
    "qwen3moe": dict(arch="qwen3moe", n_head_kv=2, bias=False,
                     qk_norm="head", shared=False, legacy=False),
    "olmoe": dict(arch="olmoe", n_head_kv=4, bias=False, qk_norm="full",
                  shared=False, legacy=False),
}


def field_value(f):
    """A reader field as a Python value (scalars, strings, arrays)."""
    t = f.types[0]
    if t == gguf.GGUFValueType.ARRAY:
        sub = f.types[1]
        if sub == gguf.GGUFValueType.STRING:
            return [bytes(f.parts[i]).decode("utf-8", errors="surrogateescape")
                    for i in f.data]
        return [f.parts[i][0].item() for i in f.data]
    if t == gguf.GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode("utf-8")
    return f.parts[f.data[0]][0].item()


def copy_tokenizer(w, src):
    r = gguf.GGUFReader(src)
    for key, f in r.fields.items():
        if not key.startswith("tokenizer."):
            continue
        t = f.types[0]
        v = field_value(f)
        if t == gguf.GGUFValueType.ARRAY:
            w.add_array(key, v if f.types[1] != gguf.GGUFValueType.INT32
                        else [int(x) for x in v])
        elif t == gguf.GGUFValueType.STRING:
            w.add_string(key, v)
        elif t == gguf.GGUFValueType.BOOL:
            w.add_bool(key, bool(v))
        elif t == gguf.GGUFValueType.UINT32:
            w.add_uint32(key, int(v))
        elif t == gguf.GGUFValueType.INT32:
            w.add_int32(key, int(v))
        else:
            raise SystemExit("unexpected tokenizer field type %s for %s" % (t, key))
    n_vocab = len(field_value(r.fields["tokenizer.ggml.tokens"]))
    return n_vocab


def gen_f32(name, path, seed, tok_src):
    sp = SPEC[name]
    arch = sp["arch"]
    d = dict(DIMS, **sp.get("dims", {}))
    E, NL, NH = d["n_embd"], d["n_layer"], d["n_head"]
    HD = E // NH
    NX, NU, FF, FS = d["n_expert"], d["n_used"], d["n_ff_exp"], d["n_ff_shexp"]
    dense = sp.get("dense", False)
    # mixtral-legacy draws exactly what mixtral draws
    all_names = NAMES + BENCH_NAMES
    rng = np.random.default_rng(seed + (0 if name.startswith("mixtral")
                                        else all_names.index(name)))
    w = gguf.GGUFWriter(path, arch)
    n_vocab = copy_tokenizer(w, tok_src)
    kv = sp["n_head_kv"]

    w.add_name("opus-moe-test-" + name)
    w.add_file_type(0)  # ALL_F32
    w.add_context_length(CTX)
    w.add_embedding_length(E)
    w.add_block_count(NL)
    w.add_feed_forward_length(FF if arch in ("llama", "olmoe") else 1024)
    w.add_head_count(NH)
    w.add_head_count_kv(kv)
    w.add_rope_dimension_count(HD)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    if not dense:
        w.add_expert_count(NX)
        w.add_expert_used_count(NU)
    if arch in ("qwen2moe", "qwen3moe"):
        w.add_expert_feed_forward_length(FF)
    if arch == "qwen2moe":
        w.add_expert_shared_feed_forward_length(FS)

    def normal(shape, std):
        return (rng.standard_normal(shape, dtype=np.float32) * std).astype(np.float32)

    def norm_w(n):
        return (1.0 + rng.standard_normal(n, dtype=np.float32) * 0.1).astype(np.float32)

    # std of a matrix: about 1 / sqrt(n_in) so activations keep unit scale
    sd = 0.06 * (256.0 / E) ** 0.5
    w.add_tensor("token_embd.weight", normal((n_vocab, E), 1.0))
    for il in range(NL):
        p = "blk.%d." % il
        w.add_tensor(p + "attn_norm.weight", norm_w(E))
        w.add_tensor(p + "attn_q.weight", normal((NH * HD, E), sd))
        w.add_tensor(p + "attn_k.weight", normal((kv * HD, E), sd))
        w.add_tensor(p + "attn_v.weight", normal((kv * HD, E), sd))
        if sp["bias"]:
            w.add_tensor(p + "attn_q.bias", normal(NH * HD, 0.1))
            w.add_tensor(p + "attn_k.bias", normal(kv * HD, 0.1))
            w.add_tensor(p + "attn_v.bias", normal(kv * HD, 0.1))
        if sp["qk_norm"] == "head":
            w.add_tensor(p + "attn_q_norm.weight", norm_w(HD))
            w.add_tensor(p + "attn_k_norm.weight", norm_w(HD))
        elif sp["qk_norm"] == "full":
            w.add_tensor(p + "attn_q_norm.weight", norm_w(NH * HD))
            w.add_tensor(p + "attn_k_norm.weight", norm_w(kv * HD))
        w.add_tensor(p + "attn_output.weight", normal((E, NH * HD), sd))
        w.add_tensor(p + "ffn_norm.weight", norm_w(E))
        if dense:
            w.add_tensor(p + "ffn_gate.weight", normal((FF, E), sd))
            w.add_tensor(p + "ffn_down.weight", normal((E, FF), sd))
            w.add_tensor(p + "ffn_up.weight", normal((FF, E), sd))
            continue
        w.add_tensor(p + "ffn_gate_inp.weight", normal((NX, E), 0.3 * (256.0 / E) ** 0.5))
        gate = normal((NX, FF, E), sd)
        up = normal((NX, FF, E), sd)
        down = normal((NX, E, FF), sd)
        if sp["legacy"]:
            for e in range(NX):
                w.add_tensor(p + "ffn_gate.%d.weight" % e, gate[e])
                w.add_tensor(p + "ffn_down.%d.weight" % e, down[e])
                w.add_tensor(p + "ffn_up.%d.weight" % e, up[e])
        else:
            w.add_tensor(p + "ffn_gate_exps.weight", gate)
            w.add_tensor(p + "ffn_down_exps.weight", down)
            w.add_tensor(p + "ffn_up_exps.weight", up)
        if sp["shared"]:
            w.add_tensor(p + "ffn_gate_inp_shexp.weight", normal(E, sd))
            w.add_tensor(p + "ffn_gate_shexp.weight", normal((FS, E), sd))
            w.add_tensor(p + "ffn_up_shexp.weight", normal((FS, E), sd))
            w.add_tensor(p + "ffn_down_shexp.weight", normal((E, FS), sd))
    w.add_tensor("output_norm.weight", norm_w(E))
    w.add_tensor("output.weight", normal((n_vocab, E), 0.3 * (256.0 / E) ** 0.5))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join("models", "moe"))
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--names", default=",".join(NAMES))
    ap.add_argument("--types", default=",".join(TYPES))
    ap.add_argument("--engine", default=os.path.join("build", "opus_engine"))
    ap.add_argument("--tokenizer-from", default=TOKENIZER_SRC)
    ap.add_argument("--force", action="store_true")
    a = ap.parse_args()

    os.makedirs(a.out, exist_ok=True)
    for name in a.names.split(","):
        if name not in SPEC:
            raise SystemExit("unknown model name %r (have %s)"
                             % (name, ", ".join(NAMES + BENCH_NAMES)))
        f32 = os.path.join(a.out, "%s-f32.gguf" % name)
        if a.force or not os.path.exists(f32):
            tmp = f32 + ".tmp"
            gen_f32(name, tmp, a.seed, a.tokenizer_from)
            os.replace(tmp, f32)
            print("wrote %s" % f32, file=sys.stderr)
        for t in a.types.split(","):
            if t == "f32":
                continue
            out = os.path.join(a.out, "%s-%s.gguf" % (name, t))
            if not a.force and os.path.exists(out):
                continue
            subprocess.run([a.engine, "quantize", f32, out + ".tmp", t.upper()],
                           check=True, stdout=subprocess.DEVNULL)
            os.replace(out + ".tmp", out)
            print("wrote %s" % out, file=sys.stderr)


if __name__ == "__main__":
    main()
