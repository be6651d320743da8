#!/usr/bin/env python3
"""
gen_nomic_model.py - write a small random-weight nomic-bert GGUF (the
architecture of nomic-embed-text: rotary positions, SwiGLU, no biases, a
fused QKV projection) that llama.cpp and opus_engine both load, for the
embedding goldens (test/golden/embed, test/unit/test_bert.c).

No nomic model is on PyPI, so the weights are random (a numpy Generator with
a fixed seed, drawn in a fixed order: the same bytes for the same seed and
gguf package).  The layout is what llama.cpp's convert_hf_to_gguf.py writes
for NomicBertModel and what its loader asks for:

  metadata   general.architecture = nomic-bert; nomic-bert.context_length,
             embedding_length, feed_forward_length, block_count,
             attention.head_count, attention.layer_norm_epsilon,
             attention.causal = false, pooling_type = 1 (mean),
             rope.freq_base = 1000 (nomic's rotary_emb_base);
             tokenizer.ggml.token_type_count = 2; the WordPiece vocabulary
             and tokenizer keys copied from test/golden/tokenizer/
             wpm-vocab.gguf (committed, so no download is needed)
  tensors    token_embd.weight [n_vocab][E], token_types.weight [2][E],
             token_embd_norm.{weight,bias}; per layer blk.N.attn_qkv.weight
             [3E][E], attn_output.weight [E][E], attn_output_norm.{weight,
             bias}, ffn_up.weight [F][E], ffn_gate.weight [F][E],
             ffn_down.weight [E][F], layer_output_norm.{weight,bias}
             (no position table, no projection or FFN biases)

Shape: n_embd 128, 2 layers, 4 heads of 32, n_ff 352, context 2048.

Usage (repository root):
  python3 test/tools/gen_nomic_model.py [--out models/nomic-bert-test.gguf]
      [--seed 19] [--force]
An existing file is kept unless --force.
"""

import argparse
import os
import sys

import numpy as np
import gguf

from gen_moe_model import field_value  # the reader-field helper, same directory

SEED = 19
N_EMBD = 128
N_LAYER = 2
N_HEAD = 4
N_FF = 352
CTX = 2048
ROPE_BASE = 1000.0
NORM_EPS = 1e-12
VOCAB_SRC = os.path.join("test", "golden", "tokenizer", "wpm-vocab.gguf")


def copy_tokenizer(w, src):
    """Every tokenizer.* key of src but the token type count (set here)."""
    r = gguf.GGUFReader(src)
    for key, f in r.fields.items():
        if not key.startswith("tokenizer.") or key == "tokenizer.ggml.token_type_count":
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
    return len(field_value(r.fields["tokenizer.ggml.tokens"]))


def generate(path, seed, vocab_src):
    E, NL, NH, F = N_EMBD, N_LAYER, N_HEAD, N_FF
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, "nomic-bert")
    w.add_type(gguf.GGUFType.MODEL)
    w.add_name("opus-nomic-bert-test")
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_context_length(CTX)
    w.add_embedding_length(E)
    w.add_feed_forward_length(F)
    w.add_block_count(NL)
    w.add_head_count(NH)
    w.add_layer_norm_eps(NORM_EPS)
    w.add_causal_attention(False)
    w.add_pooling_type(gguf.PoolingType.MEAN)
    w.add_rope_freq_base(ROPE_BASE)
    w.add_token_type_count(2)
    n_vocab = copy_tokenizer(w, vocab_src)

    def normal(shape, std):
        return (rng.standard_normal(shape, dtype=np.float32) * std).astype(np.float32)

    def norm_w(n):
        return (1.0 + rng.standard_normal(n, dtype=np.float32) * 0.1).astype(np.float32)

    # about 1 / sqrt(n_in), so activations keep unit scale; larger Q/K rows
    # give attention that is not uniform
    sd = 1.0 / np.sqrt(E)
    w.add_tensor("token_embd.weight", normal((n_vocab, E), 1.0))
    w.add_tensor("token_types.weight", normal((2, E), 0.5))
    w.add_tensor("token_embd_norm.weight", norm_w(E))
    w.add_tensor("token_embd_norm.bias", normal(E, 0.1))
    for il in range(NL):
        p = "blk.%d." % il
        qkv = np.concatenate([normal((E, E), 2.5 * sd), normal((E, E), 2.5 * sd),
                              normal((E, E), sd)])
        w.add_tensor(p + "attn_qkv.weight", qkv)
        w.add_tensor(p + "attn_output.weight", normal((E, E), sd))
        w.add_tensor(p + "attn_output_norm.weight", norm_w(E))
        w.add_tensor(p + "attn_output_norm.bias", normal(E, 0.1))
        w.add_tensor(p + "ffn_up.weight", normal((F, E), sd))
        w.add_tensor(p + "ffn_gate.weight", normal((F, E), 2.0 * sd))
        w.add_tensor(p + "ffn_down.weight", normal((E, F), 1.0 / np.sqrt(F)))
        w.add_tensor(p + "layer_output_norm.weight", norm_w(E))
        w.add_tensor(p + "layer_output_norm.bias", normal(E, 0.1))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join("models", "nomic-bert-test.gguf"))
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--vocab-from", default=VOCAB_SRC)
    ap.add_argument("--force", action="store_true")
    a = ap.parse_args()
    if not a.force and os.path.exists(a.out):
        return 0
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    tmp = a.out + ".tmp"
    generate(tmp, a.seed, a.vocab_from)
    os.replace(tmp, a.out)
    print("wrote %s" % a.out, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
