#!/usr/bin/env python3
"""make_seeds.py - write the hand-made seeds of test/fuzz/corpus/.

Run from the repository root (after `make unit`, for the sample GGUF):
    python3 test/fuzz/make_seeds.py
Writes seed-*.bin files; the other files in the corpus directories are
inputs libFuzzer found (minimised with -merge=1, see test/fuzz/README).
"""
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
C = os.path.join(ROOT, "test", "fuzz", "corpus")
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def put(target, name, data):
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(C, target, "seed-" + name + ".bin"), "wb") as f:
        f.write(data)


# --- gguf: the real model's header, truncated; the writer's sample file
if os.path.exists(MODEL):
    with open(MODEL, "rb") as f:
        put("gguf", "model-head-4k", f.read(4096))
    with open(MODEL, "rb") as f:
        put("gguf", "model-head-12k", f.read(12288))
sample = os.path.join(ROOT, "build", "unit", "test_gguf")
if os.path.exists(sample):
    out = os.path.join(C, "gguf", "seed-sample.bin")
    subprocess.run([sample, "--write-sample", out], check=True)

# --- tokenizer: byte 0 = vocabulary (>> 2) and add/parse-special flags (& 3)
texts = [
    "Hello world",
    "The capital of France is Paris.",
    "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n",
    "  leading spaces\t\ttabs\r\n\r\nnewlines   ",
    "numbers 1234567890 3.14159 -42 1e10",
    "émoji 🦙🐘 日本語のテキスト 한국어 Ελληνικά русский",
    "don't won't I'm you're they've we'll she'd",
    "\x00\x01\x02 control \x7f bytes",
    "<|endoftext|><|endoftext|><s></s><unk>",
    "a" * 300,
    "\xff\xfe invalid utf8 \xc3\x28 \xe2\x82",
]
for v in range(6):
    for i, t in enumerate(texts):
        data = t.encode("utf-8", "surrogateescape") if isinstance(t, str) else t
        if i == 10:
            data = b"\xff\xfe invalid utf8 \xc3\x28 \xe2\x82"
        put("tokenizer", "v%d-%02d" % (v, i), bytes([(v << 2) | (i & 3)]) + data)

# --- chat: byte 0 template (< 16: by number, else detect from segment 1),
# byte 1 flags; NUL-separated segments, first byte of a message = role
msgs = [b"\x00You are terse.", b"\x01Name three colours.", b"\x02Red, green, blue.",
        b"\x01  And two more?  "]
for t in range(16):
    put("chat", "tmpl-%02d" % t, bytes([t, 1]) + b"\x00".join(msgs))
templates = {
    "chatml": "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}",
    "llama3": "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' %}<|eot_id|>",
    "llama2": "{% if messages[0]['role'] == 'system' %}<<SYS>>\\n[INST] {{ bos_token }}",
    "mistral": "{{ bos_token }}{% for message in messages %}[INST] {{ message['content'] }} [/INST]{% endfor %}",
    "gemma": "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}",
    "phi3": "{{'<|user|>' + '\\n' + message['content'] + '<|end|>' + '\\n' + '<|assistant|>' + '\\n'}}",
    "zephyr": "{{ '<|user|>\\n' + message['content'] + eos_token }}",
    "v7": "[SYSTEM_PROMPT] {{ system_message }}[/SYSTEM_PROMPT][INST]",
    "name": "mistral-v7-tekken",
    "empty": "",
}
for name, src in templates.items():
    put("chat", "detect-" + name, bytes([200, 1]) + src.encode() + b"\x00" + b"\x00".join(msgs))
put("chat", "badrole", bytes([1, 0]) + b"\x05tool\x00\x01hi")
put("chat", "nomsg", bytes([1, 1]))
put("chat", "sys-only-gemma", bytes([5, 1]) + b"\x00  system only  ")

# --- model: a tiny llama (2 layers, n_embd 32, 4 heads, 2 KV heads, n_ff 64)
# with the SentencePiece test vocabulary (1500 tokens) and random weights:
# F32 norms and attention, Q8_0 token embeddings and feed-forward (written as
# raw blocks), tied output.  A second seed adds an output tensor and F16 ffn.
try:
    import numpy as np
    import gguf

    rng = np.random.default_rng(1)
    src = gguf.GGUFReader(os.path.join(ROOT, "test", "golden", "tokenizer", "spm-vocab.gguf"))
    E, H, HKV, FF, L = 32, 4, 2, 64, 2

    def q8_0(a):
        """Raw Q8_0 blocks (f16 scale + 32 int8) of a float32 matrix, row-major."""
        a = a.reshape(-1, 32)
        d = np.abs(a).max(axis=1) / 127.0
        d[d == 0] = 1.0
        q = np.round(a / d[:, None]).astype(np.int8)
        out = np.zeros((a.shape[0], 34), dtype=np.uint8)
        out[:, 0:2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
        out[:, 2:] = q.view(np.uint8)
        return out

    def write_tiny(path, variant):
        w = gguf.GGUFWriter(path, "llama")
        for k, f in src.fields.items():
            if k.startswith("GGUF.") or k == "general.architecture" or k.startswith("llama."):
                continue
            t = f.types[0]
            if t == gguf.GGUFValueType.ARRAY:
                w.add_array(k, f.contents())
            elif t == gguf.GGUFValueType.STRING:
                w.add_string(k, f.contents())
            elif t == gguf.GGUFValueType.BOOL:
                w.add_bool(k, f.contents())
            elif t == gguf.GGUFValueType.UINT32:
                w.add_uint32(k, f.contents())
            elif t == gguf.GGUFValueType.INT32:
                w.add_int32(k, f.contents())
            elif t == gguf.GGUFValueType.FLOAT32:
                w.add_float32(k, f.contents())
        V = len(src.fields["tokenizer.ggml.tokens"].data)
        w.add_name("opus_pg fuzz seed: tiny llama")
        w.add_block_count(L)
        w.add_context_length(256)
        w.add_embedding_length(E)
        w.add_feed_forward_length(FF)
        w.add_head_count(H)
        w.add_head_count_kv(HKV)
        w.add_rope_freq_base(10000.0)
        w.add_layer_norm_rms_eps(1e-5)
        w.add_rope_dimension_count(E // H)
        w.add_file_type(7)  # mostly Q8_0

        def t(name, shape, kind):
            # shape as GGUF ne: (columns, rows)
            a = (rng.standard_normal(shape[::-1]) * 0.1).astype(np.float32)
            if kind == "f32":
                w.add_tensor(name, a)
            elif kind == "f16":
                w.add_tensor(name, a.astype(np.float16))
            else:
                w.add_tensor(name, q8_0(a), raw_shape=(shape[1], 34 * shape[0] // 32),
                             raw_dtype=gguf.GGMLQuantizationType.Q8_0)

        t("token_embd.weight", (E, V), "q8")
        w.add_tensor("output_norm.weight", np.ones(E, dtype=np.float32))
        if variant == 1:
            t("output.weight", (E, V), "q8")
        for i in range(L):
            w.add_tensor("blk.%d.attn_norm.weight" % i, np.ones(E, dtype=np.float32))
            w.add_tensor("blk.%d.ffn_norm.weight" % i, np.ones(E, dtype=np.float32))
            t("blk.%d.attn_q.weight" % i, (E, E), "f32")
            t("blk.%d.attn_k.weight" % i, (E, E // H * HKV), "f32")
            t("blk.%d.attn_v.weight" % i, (E, E // H * HKV), "f32")
            t("blk.%d.attn_output.weight" % i, (E, E), "f32")
            kind = "f16" if variant == 1 else "q8"
            t("blk.%d.ffn_gate.weight" % i, (E, FF), kind)
            t("blk.%d.ffn_up.weight" % i, (E, FF), kind)
            t("blk.%d.ffn_down.weight" % i, (FF, E), kind)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()

    os.makedirs(os.path.join(C, "model"), exist_ok=True)
    write_tiny(os.path.join(C, "model", "seed-tiny-llama.bin"), 0)
    write_tiny(os.path.join(C, "model", "seed-tiny-llama-output-f16.bin"), 1)

    # a tiny bert encoder (model_bert.c): the WordPiece test vocabulary,
    # 1 layer, n_embd 32, 2 heads, n_ff 64, context 64, mean pooling; Q8_0
    # token embeddings, F16 feed-forward, F32 attention and vectors
    wsrc = gguf.GGUFReader(os.path.join(ROOT, "test", "golden", "tokenizer", "wpm-vocab.gguf"))

    def write_tiny_bert(path):
        w = gguf.GGUFWriter(path, "bert")
        for k, f in wsrc.fields.items():
            if not k.startswith("tokenizer."):
                continue
            t = f.types[0]
            if t == gguf.GGUFValueType.ARRAY:
                w.add_array(k, f.contents())
            elif t == gguf.GGUFValueType.STRING:
                w.add_string(k, f.contents())
            elif t == gguf.GGUFValueType.BOOL:
                w.add_bool(k, f.contents())
            elif t == gguf.GGUFValueType.UINT32:
                w.add_uint32(k, f.contents())
        V = len(wsrc.fields["tokenizer.ggml.tokens"].data)
        E, FF, CTX = 32, 64, 64
        w.add_name("opus_pg fuzz seed: tiny bert")
        w.add_block_count(1)
        w.add_context_length(CTX)
        w.add_embedding_length(E)
        w.add_feed_forward_length(FF)
        w.add_head_count(2)
        w.add_layer_norm_eps(1e-12)
        w.add_causal_attention(False)
        w.add_pooling_type(gguf.PoolingType.MEAN)
        w.add_file_type(0)

        def t(name, shape, kind):
            a = (rng.standard_normal(shape[::-1]) * 0.1).astype(np.float32)
            if kind == "f32":
                w.add_tensor(name, a)
            elif kind == "f16":
                w.add_tensor(name, a.astype(np.float16))
            else:
                w.add_tensor(name, q8_0(a), raw_shape=(shape[1], 34 * shape[0] // 32),
                             raw_dtype=gguf.GGMLQuantizationType.Q8_0)

        t("token_embd.weight", (E, V), "q8")
        t("position_embd.weight", (E, CTX), "f32")
        t("token_types.weight", (E, 2), "f32")
        w.add_tensor("token_embd_norm.weight", np.ones(E, dtype=np.float32))
        w.add_tensor("token_embd_norm.bias", np.zeros(E, dtype=np.float32))
        for m in ("attn_q", "attn_k", "attn_v", "attn_output"):
            t("blk.0.%s.weight" % m, (E, E), "f32")
            t("blk.0.%s.bias" % m, (E, 1), "f32")
        for m in ("attn_output_norm", "layer_output_norm"):
            w.add_tensor("blk.0.%s.weight" % m, np.ones(E, dtype=np.float32))
            w.add_tensor("blk.0.%s.bias" % m, np.zeros(E, dtype=np.float32))
        t("blk.0.ffn_up.weight", (E, FF), "f16")
        t("blk.0.ffn_up.bias", (FF, 1), "f32")
        t("blk.0.ffn_down.weight", (FF, E), "f16")
        t("blk.0.ffn_down.bias", (E, 1), "f32")
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()

    write_tiny_bert(os.path.join(C, "model", "seed-tiny-bert.bin"))

    # a tiny nomic-bert encoder (model_bert.c): the same vocabulary, 1
    # layer, n_embd 32, 2 heads, n_ff 64, context 64, RoPE base 1000, a
    # fused Q8_0 attn_qkv, SwiGLU (F16 gate and up), no biases
    def write_tiny_nomic(path):
        w = gguf.GGUFWriter(path, "nomic-bert")
        for k, f in wsrc.fields.items():
            if not k.startswith("tokenizer."):
                continue
            t = f.types[0]
            if t == gguf.GGUFValueType.ARRAY:
                w.add_array(k, f.contents())
            elif t == gguf.GGUFValueType.STRING:
                w.add_string(k, f.contents())
            elif t == gguf.GGUFValueType.BOOL:
                w.add_bool(k, f.contents())
            elif t == gguf.GGUFValueType.UINT32:
                w.add_uint32(k, f.contents())
        V = len(wsrc.fields["tokenizer.ggml.tokens"].data)
        E, FF, CTX = 32, 64, 64
        w.add_name("opus_pg fuzz seed: tiny nomic-bert")
        w.add_block_count(1)
        w.add_context_length(CTX)
        w.add_embedding_length(E)
        w.add_feed_forward_length(FF)
        w.add_head_count(2)
        w.add_layer_norm_eps(1e-12)
        w.add_causal_attention(False)
        w.add_pooling_type(gguf.PoolingType.MEAN)
        w.add_rope_freq_base(1000.0)
        w.add_file_type(0)

        def t(name, shape, kind):
            a = (rng.standard_normal(shape[::-1]) * 0.1).astype(np.float32)
            if kind == "f32":
                w.add_tensor(name, a)
            elif kind == "f16":
                w.add_tensor(name, a.astype(np.float16))
            else:
                w.add_tensor(name, q8_0(a), raw_shape=(shape[1], 34 * shape[0] // 32),
                             raw_dtype=gguf.GGMLQuantizationType.Q8_0)

        t("token_embd.weight", (E, V), "q8")
        t("token_types.weight", (E, 2), "f32")
        w.add_tensor("token_embd_norm.weight", np.ones(E, dtype=np.float32))
        w.add_tensor("token_embd_norm.bias", np.zeros(E, dtype=np.float32))
        t("blk.0.attn_qkv.weight", (E, 3 * E), "q8")
        t("blk.0.attn_output.weight", (E, E), "f32")
        for m in ("attn_output_norm", "layer_output_norm"):
            w.add_tensor("blk.0.%s.weight" % m, np.ones(E, dtype=np.float32))
            w.add_tensor("blk.0.%s.bias" % m, np.zeros(E, dtype=np.float32))
        t("blk.0.ffn_up.weight", (E, FF), "f16")
        t("blk.0.ffn_gate.weight", (E, FF), "f16")
        t("blk.0.ffn_down.weight", (FF, E), "f32")
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()

    write_tiny_nomic(os.path.join(C, "model", "seed-tiny-nomic-bert.bin"))
except ImportError as e:
    print("make_seeds: no tiny model seeds (%s)" % e)

# --- jsonschema: the converter's corpus (test/golden/json_schema/corpus.py),
# and response_format wrappers; regex: patterns and choices lists
import json  # noqa: E402
import sys  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "test", "golden", "json_schema"))
import corpus as schema_corpus  # noqa: E402

os.makedirs(os.path.join(C, "jsonschema"), exist_ok=True)
os.makedirs(os.path.join(C, "regex"), exist_ok=True)
for i, case in enumerate(schema_corpus.CASES):
    put("jsonschema", "%02d" % i, json.dumps(case["schema"]))
    pat = case["schema"].get("pattern") if isinstance(case["schema"], dict) else None
    if pat:
        put("regex", "pattern-%02d" % i, pat)
put("jsonschema", "rf-text", '{"type":"text"}')
put("jsonschema", "rf-object", '{"type":"json_object"}')
put("jsonschema", "rf-schema", json.dumps({"type": "json_schema", "json_schema": {
    "name": "p", "strict": True, "schema": schema_corpus.PERSON}}))
for name, rx in [("email", "[a-z0-9._]+@[a-z]+\\.(com|org|net)"), ("phone", "^\\+?\\d{1,3}[ -]?\\d{6,10}$"),
                 ("classes", "[^\\s\\d][\\w-]*\\.?(?:x|y){2,5}"), ("unicode", "caf\u00e9|\u6771\u4eac+"),
                 ("bad", "(a|b"), ("lookahead", "a(?=b)")]:
    put("regex", name, rx)
put("regex", "choices", "yes\0no\0maybe")
put("regex", "choices-dup", "a\0b\0a")

# --- modeldecl: opus.models values (docs/models.md), accepted and refused
os.makedirs(os.path.join(C, "modeldecl"), exist_ok=True)
for name, value in [
        ("one", "small=smollm2"),
        ("two", "a=/models/a.gguf;threads=2;kv_cache_size=64, b=b.gguf;device=cuda:0;kv_cache_type=q8_0"),
        ("fallback", "big=big.gguf;fallback=small;max_ttft=500, small=small.gguf"),
        ("fallback-default", "big=big.gguf;fallback=default;max_ttft=1"),
        ("embed", "emb=minilm;query_prefix='search_query: ';document_prefix='search_document: ';role=app"),
        ("all", "m=x;device=auto;threads=1024;kv_cache_size=1;kv_cache_type=f16;max_batch_tokens=65536;role=r"),
        ("trailing-comma", "a=x,"),
        ("empty-item", "a=x,,b=y"),
        ("dup", "a=x, a=y"),
        ("default", "default=x"),
        ("upper", "Big=x"),
        ("no-path", "a=;threads=2"),
        ("self-fallback", "a=x;fallback=a;max_ttft=5"),
        ("ttft-alone", "a=x;max_ttft=5"),
        ("unknown", "a=x;colour=blue"),
        ("bad-int", "a=x;threads=2x"),
        ("overflow", "a=x;kv_cache_size=99999999999999999999"),
        ("nine", ",".join("m%d=x" % i for i in range(9))),
        ("long-name", "a" * 70 + "=x"),
        ("long-path", "a=" + "p" * 1100),
        ("quote-inside", "a=x;query_prefix='it''s'"),
]:
    put("modeldecl", name, value)
