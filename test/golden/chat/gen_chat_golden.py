#!/usr/bin/env python3
"""
gen_chat_golden.py - chat template goldens from llama.cpp's
llama_chat_apply_template (through llama-cpp-python's low-level API).

    python3 test/golden/chat/gen_chat_golden.py \
        [--model models/SmolLM2-135M-Instruct.Q4_1.gguf]

writes chat.golden next to this script.  Format (TAB-separated fields):
  tmpl  id  expected-family  hex(template)
        the template is either a llama.cpp built-in name or a Jinja source;
        expected-family is the name opus_chat_detect must return ("unknown"
        when llama.cpp has no renderer for it or opus_pg does not implement
        that family).  For every template with a family, this script checks
        that llama.cpp renders the source exactly as the built-in of that
        name, so the labels follow llama.cpp's own detection.
  msgs  id  role=hex(content) ...   (space separated)
  out   tmpl-id  msgs-id  add_generation_prompt  hex(rendered)
"""
import argparse
import ctypes
import os

import llama_cpp

HERE = os.path.dirname(os.path.abspath(__file__))

FAMILIES = ["chatml", "llama3", "llama2", "llama2-sys", "llama2-sys-bos",
            "llama2-sys-strip", "mistral-v1", "mistral-v3", "mistral-v3-tekken",
            "mistral-v7", "mistral-v7-tekken", "gemma", "phi3", "zephyr",
            "falcon3"]

# (label, expected family, Jinja source).  The sources are the published
# templates of these models (abridged where the abridged part does not
# affect detection).
SOURCES = [
    ("qwen2.5", "chatml",
     "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
     "{%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}{%- endif %}"
     "{%- for message in messages %}{%- if (message.role == 'user') or (message.role == 'system' and not loop.first) %}"
     "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}{%- endif %}{%- endfor %}"
     "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"),
    ("llama-3-instruct", "llama3",
     "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
     "message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
     "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
     "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"),
    ("llama-2-chat", "llama2-sys-strip",
     "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}"
     "{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
     "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
     "{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
     "{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}"
     "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
     "{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}"),
    ("mistral-7b-instruct-v0.1", "llama2",
     "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
     "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
     "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
     "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}"
     "{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"),
    ("llama2-sys-bos-style", "llama2-sys-bos",
     "{% for message in messages %}{% if message['role'] == 'system' %}{{ '<<SYS>>\\n' + message['content'] + '\\n<</SYS>>\\n\\n' }}"
     "{% elif message['role'] == 'user' %}{{ bos_token + '[INST] ' + message['content'] + ' [/INST]' }}"
     "{% else %}{{ message['content'] + eos_token }}{% endif %}{% endfor %}"),
    ("mistral-v1-official", "mistral-v1",
     "{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content'] %}{%- set loop_messages = messages[1:] %}"
     "{%- else %}{%- set loop_messages = messages %}{%- endif %}{{- bos_token }}{%- for message in loop_messages %}"
     "{%- if message['role'] == 'user' %}{%- if loop.first and system_message is defined %}"
     "{{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}{%- else %}"
     "{{- ' [INST] ' + message['content'] + ' [/INST]' }}{%- endif %}{%- elif message['role'] == 'assistant' %}"
     "{{- ' ' + message['content'] + eos_token}}{%- endif %}{%- endfor %}"),
    ("mistral-v3-official", "mistral-v3",
     "{%- if messages[0][\"role\"] == \"system\" %}{%- set system_message = messages[0][\"content\"] %}{%- set loop_messages = messages[1:] %}"
     "{%- else %}{%- set loop_messages = messages %}{%- endif %}{{- bos_token }}{%- for message in loop_messages %}"
     "{%- if message[\"role\"] == \"user\" %}{%- if tools is not none and (message == user_messages[-1]) %}"
     "{{- \"[AVAILABLE_TOOLS][\" }}{%- endif %}{%- if loop.last and system_message is defined %}"
     "{{- \"[INST] \" + system_message + \"\\n\\n\" + message[\"content\"] + \"[/INST]\" }}{%- else %}"
     "{{- \"[INST] \" + message[\"content\"] + \"[/INST]\" }}{%- endif %}{%- elif message[\"role\"] == \"assistant\" %}"
     "{{- \" \" + message[\"content\"]|trim + eos_token}}{%- endif %}{%- endfor %}"),
    ("mistral-v7-official", "mistral-v7",
     "{%- set today = strftime_now(\"%Y-%m-%d\") %}{{- bos_token }}{%- if messages[0]['role'] == 'system' %}"
     "{{- '[SYSTEM_PROMPT]' + messages[0]['content'] + '[/SYSTEM_PROMPT]' }}{%- set loop_messages = messages[1:] %}"
     "{%- else %}{%- set loop_messages = messages %}{%- endif %}{%- for message in loop_messages %}"
     "{%- if message['role'] == 'user' %}{{- '[INST]' + message['content'] + '[/INST]' }}"
     "{%- elif message['role'] == 'assistant' %}{{- message['content'] + eos_token }}{%- endif %}{%- endfor %}"),
    ("gemma-it", "gemma",
     "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
     "{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
     "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
     "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}"
     "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}"
     "{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}"),
    ("phi-3-mini", "phi3",
     "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\\n' + message['content'] + '<|end|>\\n'}}"
     "{% elif message['role'] == 'user' %}{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}"
     "{% elif message['role'] == 'assistant' %}{{'<|assistant|>\\n' + message['content'] + '<|end|>\\n'}}{% endif %}{% endfor %}"
     "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}"),
    ("mistral-v3-tekken-official", "mistral-v3-tekken",
     "{%- if messages[0][\"role\"] == \"system\" %}{%- set system_message = messages[0][\"content\"] %}{%- set loop_messages = messages[1:] %}"
     "{%- else %}{%- set loop_messages = messages %}{%- endif %}{{- bos_token }}{%- for message in loop_messages %}"
     "{%- if message[\"role\"] == \"user\" %}{%- if tools is not none and (message == user_messages[-1]) %}"
     "{{- \"[AVAILABLE_TOOLS][\" }}{%- endif %}{{- \"[INST]\" + message[\"content\"] + \"[/INST]\" }}"
     "{%- elif message[\"role\"] == \"assistant\" %}{{- message[\"content\"] + eos_token}}{%- endif %}{%- endfor %}"),
    ("zephyr-style", "zephyr",
     "{% for message in messages %}{% if message['role'] == 'user' %}{{ '<|user|>\\n' + message['content'] + '<|endoftext|>\\n' }}"
     "{% else %}{{ '<|' + message['role'] + '|>\\n' + message['content'] + '<|endoftext|>\\n' }}{% endif %}{% endfor %}"
     "{% if add_generation_prompt %}{{ '<|' + 'assistant|>\\n' }}{% endif %}"),
    ("stablelm-zephyr (glmedge in llama.cpp)", "unknown",
     "{% for message in messages %}{% if message['role'] == 'user' %}{{'<|user|>\\n' + message['content'] + '<|endoftext|>'}}"
     "{% elif message['role'] == 'system' %}{{'<|system|>\\n' + message['content'] + '<|endoftext|>'}}"
     "{% elif message['role'] == 'assistant' %}{{'<|assistant|>\\n'  + message['content'] + '<|endoftext|>'}}{% endif %}"
     "{% if loop.last and add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}{% endfor %}"),
    ("tinyllama-chat", "falcon3",
     "{% for message in messages %}\\n{% if message['role'] == 'user' %}\\n{{ '<|user|>\\n' + message['content'] + eos_token }}\\n"
     "{% elif message['role'] == 'system' %}\\n{{ '<|system|>\\n' + message['content'] + eos_token }}\\n"
     "{% elif message['role'] == 'assistant' %}\\n{{ '<|assistant|>\\n'  + message['content'] + eos_token }}\\n{% endif %}\\n"
     "{% if loop.last and add_generation_prompt %}\\n{{ '<|assistant|>' }}\\n{% endif %}\\n{% endfor %} </s>"),
    ("phi-4", "unknown",
     "{% for message in messages %}{% if (message['role'] == 'system') %}{{'<|im_start|>system<|im_sep|>' + message['content'] + '<|im_end|>'}}"
     "{% elif (message['role'] == 'user') %}{{'<|im_start|>user<|im_sep|>' + message['content'] + '<|im_end|>'}}"
     "{% elif (message['role'] == 'assistant') %}{{'<|im_start|>assistant<|im_sep|>' + message['content'] + '<|im_end|>'}}{% endif %}{% endfor %}"
     "{% if add_generation_prompt %}{{ '<|im_start|>assistant<|im_sep|>' }}{% endif %}"),
    ("command-r", "unknown",
     "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
     "{{ '<|START_OF_TURN_TOKEN|><|USER_TOKEN|>' + message['content'] | trim + '<|END_OF_TURN_TOKEN|>' }}"
     "{% elif message['role'] == 'assistant' %}{{ '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>'  + message['content'] | trim + '<|END_OF_TURN_TOKEN|>' }}"
     "{% endif %}{% endfor %}"),
    ("plain-unknown", "unknown",
     "{% for message in messages %}{{ message['content'] }}\\n{% endfor %}"),
]

MESSAGES = [
    [("user", "Hello!")],
    [("system", "You are a helpful assistant."), ("user", "What is 2+2?")],
    [("system", "Be brief."), ("user", "Hi"), ("assistant", "Hello! How can I help?"),
     ("user", "Tell me a joke.")],
    [("user", "First question"), ("assistant", "First answer"), ("user", "Second question")],
    [("user", "  padded question \n"), ("assistant", "\n answer with spaces  "),
     ("user", "\ttabs\there\t")],
    [("system", "Rule one."), ("system", " Rule two. "), ("user", "Go")],
    [("user", "Gr\u00fc\u00dfe \U0001F44B \u2014 \u4f60\u597d")],
    [("system", "sys"), ("user", "q"), ("assistant", "a")],
    [("user", "")],
]


def apply(tmpl, msgs, add_ass):
    arr = (llama_cpp.llama_chat_message * len(msgs))()
    keep = []
    for i, (role, content) in enumerate(msgs):
        r = role.encode()
        c = content.encode()
        keep += [r, c]
        arr[i].role = r
        arr[i].content = c
    cap = 4096
    buf = ctypes.create_string_buffer(cap)
    n = llama_cpp.llama_chat_apply_template(tmpl, arr, len(msgs), add_ass, buf, cap)
    if n < 0:
        return None
    if n > cap:
        raise SystemExit("buffer too small")
    return buf.raw[:n]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    args = ap.parse_args()

    import gguf
    r = gguf.GGUFReader(args.model)
    f = r.fields["tokenizer.chat_template"]
    smollm = bytes(f.parts[f.data[0]]).decode()

    templates = [(name, name, name) for name in FAMILIES]
    templates.append(("smollm2-instruct", "chatml", smollm))
    templates += SOURCES

    lines = ["# generated by gen_chat_golden.py from llama.cpp "
             f"(llama-cpp-python {llama_cpp.__version__}); do not edit"]
    for i, msgs in enumerate(MESSAGES):
        fields = " ".join(f"{role}={content.encode().hex() or '-'}" for role, content in msgs)
        lines.append(f"msgs\t{i}\t{fields}")
    for ti, (label, family, src) in enumerate(templates):
        lines.append(f"tmpl\t{ti}\t{family}\t{src.encode().hex()}\t# {label}")
        for mi, msgs in enumerate(MESSAGES):
            for add in (False, True):
                got = apply(src.encode(), msgs, add)
                if family == "unknown":
                    continue
                want = apply(family.encode(), msgs, add)
                if got != want:
                    raise SystemExit(f"{label}: llama.cpp does not detect it as {family}")
                lines.append(f"out\t{ti}\t{mi}\t{int(add)}\t{got.hex() or '-'}")
    out = os.path.join(HERE, "chat.golden")
    with open(out, "w") as fp:
        fp.write("\n".join(lines) + "\n")
    print(f"wrote {out}: {len(templates)} templates x {len(MESSAGES)} conversations")


if __name__ == "__main__":
    main()
