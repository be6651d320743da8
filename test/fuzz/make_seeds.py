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
