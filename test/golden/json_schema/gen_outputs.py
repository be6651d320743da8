#!/usr/bin/env python3
"""gen_outputs.py - constrained generation end to end, checked by jsonschema.

For 20 schemas of corpus.py and 5 prompts each (100 outputs), plus the
regexes of corpus.REGEXES (one output each): convert the constraint with our
converter (build/unit/test_json_schema --convert), generate with the default
model under the grammar (build/opus_engine run --grammar-file, greedy), and
check the output: the JSON must parse and validate (PyPI jsonschema, with the
format checker), the regex output must satisfy re.fullmatch.  An output cut
by the token limit (finish_reason length) is counted apart, as the issue
allows; every other output must be valid (100%).

Usage: gen_outputs.py [-n MAX_TOKENS]   (run from the repository root after
`make` and `make unit`; about 5 s per output on a busy 2-core machine).
"""
import json
import os
import re
import subprocess
import sys
import tempfile

import jsonschema

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import corpus  # noqa: E402

ROOT = os.path.abspath(os.path.join(HERE, '..', '..', '..'))
MODEL = os.environ.get('OPUS_MODEL') or os.path.join(ROOT, 'models', 'SmolLM2-135M-Instruct.Q4_1.gguf')
CONVERT = os.path.join(ROOT, 'build', 'unit', 'test_json_schema')
ENGINE = os.path.join(ROOT, 'build', 'opus_engine')

SCHEMAS = ["person", "sentiment", "invoice", "event", "tool call", "address book", "product",
           "classification with reason", "nested objects", "array of objects", "recursive tree",
           "ref defs", "oneOf objects", "nullable object member", "string enum", "integer range",
           "number range", "format date", "format uuid", "array bounds", "format date-time",
           "pattern anchored"]
PROMPTS = [
    "Give one example of a JSON value for a '{name}'.",
    "Reply with JSON only: a realistic {name}.",
    "Produce a {name} record as JSON for a small bakery in Lyon.",
    "Output JSON describing a {name} about a space mission.",
    "Make up a {name} in JSON for a customer called Ada.",
]


def convert(kind, text):
    p = subprocess.run([CONVERT, '--convert', kind], input=text.encode(), capture_output=True, check=True)
    return p.stdout.decode()


def generate(grammar, prompt, n):
    with tempfile.NamedTemporaryFile('w', suffix='.gbnf', delete=False) as f:
        f.write(grammar)
        path = f.name
    try:
        p = subprocess.run([ENGINE, 'run', '--model', MODEL, '--chat', '--prompt', prompt, '-n', str(n),
                            '--grammar-file', path], capture_output=True)
    finally:
        os.unlink(path)
    if p.returncode != 0:
        raise RuntimeError('opus_engine run failed: %s' % p.stderr.decode()[-500:])
    m = re.search(r'generated: (\d+) tokens', p.stderr.decode())
    return p.stdout.decode().rstrip('\n'), int(m.group(1)) if m else -1


def main():
    n = 256
    if len(sys.argv) > 2 and sys.argv[1] == '-n':
        n = int(sys.argv[2])
    cases = {c['name']: c for c in corpus.CASES}
    valid = invalid = cut = 0
    for name in SCHEMAS:
        schema = cases[name]['schema']
        grammar = convert('schema', json.dumps(schema))
        v = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
        for prompt in PROMPTS:
            out, ntok = generate(grammar, prompt.format(name=name), n)
            try:
                ok = v.is_valid(json.loads(out))
            except ValueError:
                ok = False
            if ok:
                valid += 1
            elif ntok >= n:
                cut += 1
                print('LENGTH %s: %s...' % (name, out[:80]))
            else:
                invalid += 1
                print('INVALID %s: %r' % (name, out))
    rx_ok = rx_bad = 0
    for rx, _ in corpus.REGEXES:
        out, ntok = generate(convert('regex', rx), 'Write something that matches the regular expression ' + rx, 64)
        if re.fullmatch(rx, out):
            rx_ok += 1
        elif ntok < 64:
            rx_bad += 1
            print('INVALID regex %r: %r' % (rx, out))
    total = valid + invalid + cut
    print('json schema: %d outputs over %d schemas: %d valid, %d cut by max_tokens=%d, %d invalid '
          '(%.1f%% of the finished ones valid)' % (total, len(SCHEMAS), valid, cut, n, invalid,
                                                   100.0 * valid / max(1, valid + invalid)))
    print('regex: %d outputs: %d match, %d do not' % (len(corpus.REGEXES), rx_ok, rx_bad))
    return 1 if invalid or rx_bad else 0


if __name__ == '__main__':
    sys.exit(main())
