#!/usr/bin/env python3
"""minilm_to_gguf.py MODEL_DIR OUT.gguf [--outtype f32|f16]

Convert a Hugging Face BERT sentence-embedding model (safetensors +
tokenizer.json + config.json + the sentence-transformers pooling config) into
GGUF laid out the way llama.cpp's convert_hf_to_gguf.py writes a BertModel:
architecture "bert", the WordPiece vocabulary in "phantom space" form (a word
start gets U+2581, a "##" continuation loses its prefix, "[X]" tokens stay
as they are), token types, the special-token ids from gguf.SpecialVocab and
llama.cpp's tensor names (gguf.TensorNameMap).  Needs only numpy,
safetensors and gguf (no torch, no transformers).  The output is
deterministic: the same inputs give the same bytes.
"""
import argparse
import json
import os
import sys

import numpy as np
import gguf
from safetensors.numpy import load_file


def pooling_type(model_dir):
    """The sentence-transformers pooling mode, as llama.cpp's converter reads it."""
    modules = os.path.join(model_dir, "modules.json")
    if not os.path.exists(modules):
        return None
    with open(modules) as f:
        for mod in json.load(f):
            if mod.get("type") == "sentence_transformers.models.Pooling":
                with open(os.path.join(model_dir, mod["path"], "config.json")) as g:
                    cfg = json.load(g)
                if cfg.get("pooling_mode_mean_tokens"):
                    return gguf.PoolingType.MEAN
                if cfg.get("pooling_mode_cls_token"):
                    return gguf.PoolingType.CLS
                if cfg.get("pooling_mode_lasttoken"):
                    return gguf.PoolingType.LAST
                raise SystemExit("minilm_to_gguf: unsupported pooling mode")
    return None


def vocab(model_dir):
    """Tokens (by id) and their types, like get_vocab_base() + BertModel.set_vocab()."""
    with open(os.path.join(model_dir, "tokenizer.json"), encoding="utf-8") as f:
        tok = json.load(f)
    if tok["model"]["type"] != "WordPiece":
        raise SystemExit("minilm_to_gguf: tokenizer.json is not WordPiece")
    v = tok["model"]["vocab"]
    added = {a["id"]: a for a in tok.get("added_tokens", [])}
    rev = {i: t for t, i in v.items()}
    for i, a in added.items():
        rev[i] = a["content"]
    n = max(rev) + 1
    tokens, types = [], []
    for i in range(n):
        if i not in rev:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
            continue
        t = rev[i]
        if i in added:
            types.append(gguf.TokenType.CONTROL if added[i].get("special")
                         else gguf.TokenType.USER_DEFINED)
        else:
            types.append(gguf.TokenType.NORMAL)
        tokens.append(t)

    def phantom(t):
        if t.startswith("[") and t.endswith("]"):
            return t
        if t.startswith("##"):
            return t[2:]
        return "\u2581" + t
    return [phantom(t) for t in tokens], types


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("out")
    ap.add_argument("--outtype", choices=["f32", "f16"], default="f32")
    ap.add_argument("--name", default="all-MiniLM-L6-v2")
    a = ap.parse_args()

    with open(os.path.join(a.model_dir, "config.json")) as f:
        hp = json.load(f)
    if hp.get("model_type") != "bert":
        raise SystemExit("minilm_to_gguf: not a BERT model")
    if hp.get("position_embedding_type", "absolute") != "absolute":
        raise SystemExit("minilm_to_gguf: only absolute position embeddings")
    nblk = hp["num_hidden_layers"]
    arch = gguf.MODEL_ARCH.BERT
    ftype = gguf.LlamaFileType.ALL_F32 if a.outtype == "f32" else gguf.LlamaFileType.MOSTLY_F16

    w = gguf.GGUFWriter(a.out, gguf.MODEL_ARCH_NAMES[arch])
    w.add_type(gguf.GGUFType.MODEL)
    w.add_name(a.name)
    w.add_context_length(hp["max_position_embeddings"])
    w.add_embedding_length(hp["hidden_size"])
    w.add_feed_forward_length(hp["intermediate_size"])
    w.add_block_count(nblk)
    w.add_head_count(hp["num_attention_heads"])
    w.add_layer_norm_eps(hp["layer_norm_eps"])
    w.add_file_type(ftype)
    w.add_causal_attention(False)
    pt = pooling_type(a.model_dir)
    if pt is not None:
        w.add_pooling_type(pt)

    tokens, types = vocab(a.model_dir)
    w.add_token_type_count(hp.get("type_vocab_size", 1))
    w.add_tokenizer_model("bert")
    w.add_tokenizer_pre("bert-bge")
    w.add_token_list(tokens)
    w.add_token_types(types)
    sv = gguf.SpecialVocab(a.model_dir, n_vocab=len(tokens))
    sv.add_to_gguf(w, quiet=True)

    tmap = gguf.get_tensor_name_map(arch, nblk)
    tensors = load_file(os.path.join(a.model_dir, "model.safetensors"))
    for name in sorted(tensors, key=lambda s: (s.split(".")[:3], s)):
        data = tensors[name]
        hf = name[5:] if name.startswith("bert.") else name
        if hf in ("embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias"):
            continue
        if hf.startswith("cls."):
            continue
        new = tmap.get_name(hf, try_suffixes=(".weight", ".bias"))
        if new is None:
            raise SystemExit(f"minilm_to_gguf: cannot map tensor {name}")
        data = data.astype(np.float32)
        keep32 = (data.ndim <= 1 or not new.endswith(".weight")
                  or new in ("token_types.weight", "position_embd.weight"))
        if ftype == gguf.LlamaFileType.MOSTLY_F16 and not keep32:
            data = data.astype(np.float16)
        w.add_tensor(new, data)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    sys.exit(main())
