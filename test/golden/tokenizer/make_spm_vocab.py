#!/usr/bin/env python3
"""
make_spm_vocab.py - build spm-vocab.gguf, a small SentencePiece vocabulary
for the `llama` tokenizer family goldens.

No small Llama/SentencePiece GGUF is available from the package registries
this project may use, so this script trains one: a SentencePiece BPE model
(sentencepiece from PyPI) with byte fallback, 1,500 pieces, on the tokenizer
corpus plus the license texts Debian ships in /usr/share/common-licenses.
Two USER_DEFINED pieces (<|user|>, <|assistant|>) and two CONTROL pieces
(<|im_start|>, <|im_end|>) are added so special-token handling is covered.

The pieces, scores and types are written the way llama.cpp's converter
writes a SentencePiece vocabulary (tokenizer.ggml.model = "llama"), together
with the default model's llama.* hyper-parameters so that llama.cpp can load
the file with vocab_only.  The file has no tensors.  The committed
spm-vocab.gguf was produced by this script; regenerating it may give a
different vocabulary (then regenerate spm.golden too).

    python3 test/golden/tokenizer/make_spm_vocab.py \
        [--model models/SmolLM2-135M-Instruct.Q4_1.gguf]
"""
import argparse
import glob
import io
import os
import sys

import gguf
import sentencepiece as spm

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from corpus import CORPUS  # noqa: E402


def training_text():
    lines = []
    for data in CORPUS:
        s = data.decode("utf-8", errors="ignore")
        lines.extend(x for x in s.split("\n") if x.strip())
    for path in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="ignore") as f:
                lines.extend(x.rstrip("\n") for x in f if x.strip())
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--out", default=os.path.join(HERE, "spm-vocab.gguf"))
    args = ap.parse_args()

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(training_text()), model_writer=model,
        model_type="bpe", vocab_size=1500, byte_fallback=True,
        character_coverage=0.9995, split_digits=True,
        normalization_rule_name="identity", remove_extra_whitespaces=False,
        allow_whitespace_only_pieces=True,
        user_defined_symbols=["<|user|>", "<|assistant|>"],
        control_symbols=["<|im_start|>", "<|im_end|>"],
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, num_threads=1,
        minloglevel=2)
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())

    tokens, scores, types = [], [], []
    for i in range(sp.get_piece_size()):
        tokens.append(sp.id_to_piece(i).encode("utf-8"))
        scores.append(sp.get_score(i))
        if sp.is_unknown(i):
            types.append(gguf.TokenType.UNKNOWN)
        elif sp.is_control(i):
            types.append(gguf.TokenType.CONTROL)
        elif sp.is_unused(i):
            types.append(gguf.TokenType.UNUSED)
        elif sp.is_byte(i):
            types.append(gguf.TokenType.BYTE)
        elif tokens[-1].decode() in ("<|user|>", "<|assistant|>"):
            types.append(gguf.TokenType.USER_DEFINED)
        else:
            types.append(gguf.TokenType.NORMAL)

    src = gguf.GGUFReader(args.model)
    w = gguf.GGUFWriter(args.out, arch="llama")
    w.add_name("opus_pg SentencePiece test vocabulary")
    for name, field in src.fields.items():
        if name.startswith("llama.") and name != "llama.vocab_size":
            w.add_key_value(name, field.parts[field.data[0]][0].item(), field.types[0])
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {args.out}: {len(tokens)} tokens")


if __name__ == "__main__":
    main()
