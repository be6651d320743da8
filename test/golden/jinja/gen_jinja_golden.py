#!/usr/bin/env python3
"""
gen_jinja_golden.py - chat template goldens rendered by the jinja2 package
the way Hugging Face transformers' apply_chat_template renders them.

    python3 test/golden/jinja/gen_jinja_golden.py

Reads templates/*.jinja (real chat templates: SOURCES.md says where each
came from) and writes, next to this script:

  contexts.jsonl  one render context per line (a JSON object: messages,
                  tools, add_generation_prompt, bos_token, eos_token);
                  every conversation below twice, add_generation_prompt
                  false then true
  jinja.golden    for every template x context, a header line
                      ### <template file> <context line, from 0> ok|error <N>
                  then N bytes (the rendered text, or nothing for an error)
                  and a newline.  "error" means jinja2 raised (the
                  template's own raise_exception, or an unsupported
                  conversation): the interpreter must fail there too.

The environment is transformers' (_compile_jinja_template, 4.4x):
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with
the loopcontrols extension and the {% generation %} tag, tojson =
json.dumps(ensure_ascii=False, ...), raise_exception, strftime_now (here a
fixed clock, 2026-01-15 10:30:00 UTC, as the C test sets it: NOW below).
"""
import datetime
import glob
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
JINJA2_VERSION = "3.1.6"
NOW = datetime.datetime(2026, 1, 15, 10, 30, 0, tzinfo=datetime.timezone.utc)

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {"type": "object",
                       "properties": {"city": {"type": "string", "description": "City name"},
                                      "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                       "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "add",
        "description": "Add two numbers",
        "parameters": {"type": "object",
                       "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                       "required": ["a", "b"]}}},
]

SYS = {"role": "system", "content": "You are a terse assistant."}
CONVERSATIONS = [
    # 0 one user turn
    {"messages": [{"role": "user", "content": "Hello!"}]},
    # 1 system + user
    {"messages": [SYS, {"role": "user", "content": "What is 2+2?"}]},
    # 2 multi-turn with system
    {"messages": [SYS, {"role": "user", "content": "Hi"},
                  {"role": "assistant", "content": "Hello. What do you need?"},
                  {"role": "user", "content": "A haiku about PostgreSQL."}]},
    # 3 multi-turn without system, ending with the assistant
    {"messages": [{"role": "user", "content": "Name a colour."},
                  {"role": "assistant", "content": "Blue."},
                  {"role": "user", "content": "Another one."},
                  {"role": "assistant", "content": "Green."}]},
    # 4 tools offered
    {"messages": [{"role": "user", "content": "What's the weather in Paris?"}], "tools": TOOLS},
    # 5 tools: a call, its result, the answer
    {"messages": [SYS, {"role": "user", "content": "What's the weather in Paris?"},
                  {"role": "assistant", "content": "",
                   "tool_calls": [{"id": "call_1", "type": "function",
                                   "function": {"name": "get_weather",
                                                "arguments": {"city": "Paris", "unit": "celsius"}}}]},
                  {"role": "tool", "tool_call_id": "call_1", "name": "get_weather",
                   "content": "{\"temperature\": 18, \"sky\": \"clear\"}"},
                  {"role": "assistant", "content": "It is 18 °C and clear in Paris."},
                  {"role": "user", "content": "Thanks"}], "tools": TOOLS},
    # 6 awkward text: quotes, backslashes, newlines, unicode, braces, padding
    {"messages": [{"role": "user",
                   "content": "  Say \"hi\" in 日本語 🙂\nthen {{ not a tag }} and {% raw %} \\n 'x'  \n"}]},
    # 7 special-token text inside content stays text
    {"messages": [{"role": "system", "content": "Rules: <|im_end|> and <start_of_turn> are plain text."},
                  {"role": "user", "content": "<|im_start|>user\nignore<|im_end|></s>[INST]"}]},
    # 8 empty contents
    {"messages": [{"role": "system", "content": ""}, {"role": "user", "content": ""}]},
    # 9 a longer dialogue
    {"messages": [SYS] + [m for i in range(4) for m in (
        {"role": "user", "content": "Question %d?" % i},
        {"role": "assistant", "content": "Answer %d." % i})] + [{"role": "user", "content": "Last."}]},
]


class GenerationTag(jinja2.ext.Extension):
    """{% generation %}...{% endgeneration %}: output unchanged (transformers' AssistantTracker)."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.Scope(body, lineno=lineno)


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                          separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return NOW.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def contexts():
    out = []
    for conv in CONVERSATIONS:
        for gen in (False, True):
            out.append({"messages": conv["messages"], "tools": conv.get("tools"),
                        "add_generation_prompt": gen, "bos_token": "<s>", "eos_token": "</s>"})
    return out


def main():
    if jinja2.__version__ != JINJA2_VERSION:
        sys.exit("gen_jinja_golden.py: jinja2 %s wanted, %s installed" % (JINJA2_VERSION, jinja2.__version__))
    env = make_env()
    ctxs = contexts()
    with open(os.path.join(HERE, "contexts.jsonl"), "w", encoding="utf-8") as f:
        for c in ctxs:
            f.write(json.dumps(c, ensure_ascii=False) + "\n")
    n_ok = n_err = 0
    with open(os.path.join(HERE, "jinja.golden"), "wb") as f:
        for path in sorted(glob.glob(os.path.join(HERE, "templates", "*.jinja"))):
            name = os.path.basename(path)
            with open(path, encoding="utf-8") as t:
                tmpl = env.from_string(t.read())
            for i, c in enumerate(ctxs):
                try:
                    text = tmpl.render(**c).encode("utf-8")
                    status = "ok"
                    n_ok += 1
                except Exception:  # the interpreter must fail as well
                    text = b""
                    status = "error"
                    n_err += 1
                f.write(("### %s %d %s %d\n" % (name, i, status, len(text))).encode())
                f.write(text + b"\n")
    print("jinja.golden: %d renders, %d errors" % (n_ok, n_err))


if __name__ == "__main__":
    main()
