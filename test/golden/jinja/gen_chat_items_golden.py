#!/usr/bin/env python3
"""
gen_chat_items_golden.py - goldens for the engine's chat renderer
(src/engine/text/chat_jinja.c) with OpenAI-shaped tool conversations:
assistant messages that carry tool_calls (content null, arguments a JSON
string), tool results with tool_call_id, tool definitions, rendered by every
template of templates/ with jinja2 in the environment of
gen_jinja_golden.py (imported from there: same jinja2 version, filters,
globals and clock).

    python3 test/golden/jinja/gen_chat_items_golden.py

The conversations are given to jinja2 as the engine receives them from
PostgreSQL: every JSON object with its keys in jsonb's order (shorter keys
first, then bytewise), each message {"role", "content", <its other members
in jsonb order>}, a content that is not a string (null) sent as the
message's member "content" (src/pg/input.c, docs/tools.md).

Writes, next to this script:

  chat_items.txt     the contexts split as the wire carries them:
                         === <ctx> gen=<0|1> n=<messages> tools=<bytes|-1>
                         <tools JSON>            (when bytes >= 0)
                         --- <role> <content bytes> <members bytes|-1>
                         <content>
                         <members JSON object>   (when bytes >= 0)
                     each payload followed by a newline
  chat_items.golden  for every template x context, as jinja.golden:
                         ### <template file> <context> ok|error <N>
                     then N bytes and a newline
"""
import glob
import json
import os
import sys

import jinja2

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_jinja_golden as g  # noqa: E402

HERE = g.HERE

WEATHER = {"type": "function", "function": {
    "name": "get_weather",
    "description": "Get the current weather in a city",
    "parameters": {"type": "object",
                   "properties": {"city": {"type": "string", "description": "City name"}},
                   "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The time in a time zone",
    "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}}}
# user text that looks like markup: it must render as text (and the engine
# keeps it text: test_jinja's special-token check)
TRICKY = {"type": "function", "function": {
    "name": "echo",
    "description": "Repeats <|im_end|><|im_start|>system and <start_of_turn>model verbatim",
    "parameters": {"type": "object", "properties": {"text": {"type": "string"}}}}}

CALL1 = {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}
CALL2 = {"id": "call_2", "type": "function",
         "function": {"name": "get_time", "arguments": "{\"tz\": \"Europe/Paris\"}"}}

CONVERSATIONS = [
    # 0 a call (content null), its result, the answer, a new question
    {"messages": [{"role": "user", "content": "Weather in Paris?"},
                  {"role": "assistant", "content": None, "tool_calls": [CALL1]},
                  {"role": "tool", "tool_call_id": "call_1", "content": "{\"temperature\": 18}"},
                  {"role": "assistant", "content": "It is 18 degrees in Paris."},
                  {"role": "user", "content": "And the time?"}],
     "tools": [WEATHER, TIME]},
    # 1 text beside two calls, two results, system message
    {"messages": [{"role": "system", "content": "You are a terse assistant."},
                  {"role": "user", "content": "Weather and time in Paris?"},
                  {"role": "assistant", "content": "Checking both.", "tool_calls": [CALL1, CALL2]},
                  {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
                  {"role": "tool", "tool_call_id": "call_2", "content": "10:30"}],
     "tools": [WEATHER, TIME]},
    # 2 arguments as an object (clients send both), no content member at all
    {"messages": [{"role": "user", "content": "Weather in Rome?"},
                  {"role": "assistant", "tool_calls": [
                      {"id": "call_9", "type": "function",
                       "function": {"name": "get_weather", "arguments": {"city": "Rome"}}}]},
                  {"role": "tool", "tool_call_id": "call_9", "name": "get_weather", "content": "rain"}],
     "tools": [WEATHER]},
    # 3 markup-like text in a tool definition and in a call's arguments
    {"messages": [{"role": "user", "content": "Echo something."},
                  {"role": "assistant", "content": None, "tool_calls": [
                      {"id": "call_3", "type": "function",
                       "function": {"name": "echo", "arguments": "{\"text\": \"<|im_end|>\"}"}}]},
                  {"role": "tool", "tool_call_id": "call_3", "content": "done"}],
     "tools": [TRICKY]},
]


def jsonb_order(x):
    """x with every object's keys in jsonb's order (what PostgreSQL sends)."""
    if isinstance(x, dict):
        keys = sorted(x, key=lambda k: (len(k.encode()), k.encode()))
        return {k: jsonb_order(x[k]) for k in keys}
    if isinstance(x, list):
        return [jsonb_order(v) for v in x]
    return x


def split(msg):
    """(role, content text, members dict or None, the message as the template sees it)."""
    m = jsonb_order(msg)
    text = m.get("content") if isinstance(m.get("content"), str) else None
    members = {k: v for k, v in m.items()
               if k != "role" and not (k == "content" and text is not None)}
    if text is None and "content" not in members:
        members = jsonb_order(dict(members, content=None))
    seen = {"role": m["role"], "content": text if text is not None else ""}
    for k, v in members.items():
        seen[k] = v
    return m["role"], text if text is not None else "", members or None, seen


def main():
    if jinja2.__version__ != g.JINJA2_VERSION:
        sys.exit("gen_chat_items_golden.py: jinja2 %s wanted, %s installed"
                 % (g.JINJA2_VERSION, jinja2.__version__))
    env = g.make_env()
    ctxs = []
    with open(os.path.join(HERE, "chat_items.txt"), "wb") as f:
        for conv in CONVERSATIONS:
            tools = jsonb_order(conv.get("tools"))
            parts = [split(m) for m in conv["messages"]]
            for gen in (False, True):
                i = len(ctxs)
                tj = json.dumps(tools, ensure_ascii=False).encode() if tools is not None else None
                f.write(("=== %d gen=%d n=%d tools=%d\n" % (i, gen, len(parts), len(tj) if tj else -1)).encode())
                if tj:
                    f.write(tj + b"\n")
                for role, text, members, _ in parts:
                    mj = json.dumps(members, ensure_ascii=False).encode() if members else None
                    f.write(("--- %s %d %d\n" % (role, len(text.encode()), len(mj) if mj else -1)).encode())
                    f.write(text.encode() + b"\n")
                    if mj:
                        f.write(mj + b"\n")
                ctxs.append({"messages": [p[3] for p in parts], "tools": tools,
                             "add_generation_prompt": gen, "bos_token": "<s>", "eos_token": "</s>"})
    n_ok = n_err = 0
    with open(os.path.join(HERE, "chat_items.golden"), "wb") as f:
        for path in sorted(glob.glob(os.path.join(HERE, "templates", "*.jinja"))):
            name = os.path.basename(path)
            with open(path, encoding="utf-8") as t:
                tmpl = env.from_string(t.read())
            for i, c in enumerate(ctxs):
                try:
                    text = tmpl.render(**c).encode("utf-8")
                    status = "ok"
                    n_ok += 1
                except Exception:  # the renderer must fail as well
                    text = b""
                    status = "error"
                    n_err += 1
                f.write(("### %s %d %s %d\n" % (name, i, status, len(text))).encode())
                f.write(text + b"\n")
    print("chat_items.golden: %d renders, %d errors" % (n_ok, n_err))


if __name__ == "__main__":
    main()
