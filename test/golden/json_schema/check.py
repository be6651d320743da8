#!/usr/bin/env python3
"""check.py - the JSON Schema -> GBNF converter against the PyPI jsonschema
package, over the corpus of corpus.py.

For every case:
  1. jsonschema (Draft 2020-12, with its format checker) must accept each
     `valid` instance and reject each `invalid` one: the corpus is right;
  2. our converter (build/unit/test_json_schema --convert schema) must give
     a grammar, and an independent GBNF recogniser (gbnf_match.py) must
     accept the canonical JSON text of every valid instance and reject
     every invalid one;
  3. the engine's grammar compiler (grammar.h, through the same binary's
     --match mode) must compile the grammar, and its automaton must accept
     every valid instance and reject every invalid one;
  4. where llama-cpp-python and the default model are there, llama.cpp's
     own GBNF parser must accept the grammar (llama_sampler_init_grammar);
  5. error cases must fail with the status and words given.

Usage: check.py [converter binary] (default build/unit/test_json_schema).
Exits non-zero on any failure; prints one line per failure and a summary.
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
import gbnf_match  # noqa: E402

ROOT = os.path.abspath(os.path.join(HERE, '..', '..', '..'))


def convert(binary, kind, text):
    p = subprocess.run([binary, '--convert', kind], input=text.encode(), capture_output=True)
    out = p.stdout.decode()
    if p.returncode == 0:
        return True, out
    if p.returncode == 1 and out.startswith('ERROR '):
        return False, out[6:].strip()
    raise RuntimeError('converter crashed (rc %d): %s' % (p.returncode, p.stderr.decode()[-2000:]))


def automaton(binary, grammar, texts):
    """What the engine's automaton says of each text: a list of bools, or an error string."""
    with tempfile.NamedTemporaryFile('w', suffix='.gbnf', delete=False) as f:
        f.write(grammar)
        path = f.name
    try:
        p = subprocess.run([binary, '--match', path], input=''.join(t + '\n' for t in texts).encode(),
                           capture_output=True)
    finally:
        os.unlink(path)
    out = p.stdout.decode()
    if p.returncode == 1 and out.startswith('ERROR '):
        return out[6:].strip()
    if p.returncode != 0:
        raise RuntimeError('matcher crashed (rc %d): %s' % (p.returncode, p.stderr.decode()[-2000:]))
    return [x == '1' for x in out.split()]


def llama_parser():
    """A function grammar -> bool using llama.cpp's parser, or None."""
    try:
        import llama_cpp
    except ImportError:
        return None
    model = os.environ.get('OPUS_MODEL') or os.path.join(ROOT, 'models', 'SmolLM2-135M-Instruct.Q4_1.gguf')
    if not os.path.exists(model):
        return None
    llama_cpp.llama_backend_init()
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    # the loader's log goes to stderr: keep it out of the report
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        m = llama_cpp.llama_model_load_from_file(model.encode(), params)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
    if not m:
        return None
    vocab = llama_cpp.llama_model_get_vocab(m)

    def ok(grammar):
        s = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode(), b'root')
        if not s:
            return False
        llama_cpp.llama_sampler_free(s)
        return True
    ok.model = m
    return ok


def canonical(x):
    return json.dumps(x, ensure_ascii=False)


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, 'build', 'unit', 'test_json_schema')
    llama_ok = llama_parser()
    fails = []
    n_schemas = n_inst = n_err = n_auto = 0
    names = set()
    for case in corpus.CASES:
        name = case['name']
        assert name not in names, 'duplicate case name ' + name
        names.add(name)
        schema = case['schema']
        ok, out = convert(binary, 'schema', json.dumps(schema))
        if 'error' in case:
            n_err += 1
            status, words = case['error']
            if ok:
                fails.append('%s: converted, expected %s error' % (name, status))
            elif not out.startswith(status + ':') or words not in out:
                fails.append('%s: error "%s", expected %s with "%s"' % (name, out, status, words))
            continue
        n_schemas += 1
        if not ok:
            fails.append('%s: conversion failed: %s' % (name, out))
            continue
        v = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
        try:
            m = gbnf_match.Matcher(out)
        except gbnf_match.GrammarError as e:
            fails.append('%s: our recogniser cannot read the grammar: %s\n%s' % (name, e, out))
            continue
        if llama_ok is not None and not llama_ok(out):
            fails.append("%s: llama.cpp's parser refuses the grammar:\n%s" % (name, out))
        texts = [canonical(x) for x in case.get('valid', []) + case.get('invalid', [])]
        want = [True] * len(case.get('valid', [])) + [False] * len(case.get('invalid', []))
        got = automaton(binary, out, texts)
        if isinstance(got, str):
            fails.append("%s: the engine's grammar compiler refuses the grammar: %s\n%s" % (name, got, out))
        else:
            n_auto += len(got)
            for t, w, g in zip(texts, want, got):
                if w != g:
                    fails.append("%s: the engine's automaton %s %s %s" % (
                        name, 'rejects' if w else 'accepts', 'valid' if w else 'invalid', t))
        for inst in case.get('valid', []):
            n_inst += 1
            if not v.is_valid(inst):
                fails.append('%s: corpus error: jsonschema rejects valid %s' % (name, canonical(inst)))
            if not m.accepts(canonical(inst)):
                fails.append('%s: grammar rejects valid %s\n%s' % (name, canonical(inst), out))
        for inst in case.get('invalid', []):
            n_inst += 1
            if v.is_valid(inst):
                fails.append('%s: corpus error: jsonschema accepts invalid %s' % (name, canonical(inst)))
            if m.accepts(canonical(inst)):
                fails.append('%s: grammar accepts invalid %s' % (name, canonical(inst)))
    n_rx = 0
    for rx, strings in corpus.REGEXES:
        ok, out = convert(binary, 'regex', rx)
        if not ok:
            fails.append('regex %r: conversion failed: %s' % (rx, out))
            continue
        m = gbnf_match.Matcher(out)
        got = automaton(binary, out, strings)
        if isinstance(got, str):
            fails.append("regex %r: the engine's grammar compiler refuses the grammar: %s" % (rx, got))
            got = [None] * len(strings)
        for s_, g in zip(strings, got):
            n_rx += 1
            want = re.fullmatch(rx, s_) is not None
            if m.accepts(s_) != want:
                fails.append('regex %r: grammar %s %r' % (rx, 'rejects' if want else 'accepts', s_))
            if '\n' not in s_ and g is not None and g != want:
                fails.append("regex %r: the engine's automaton %s %r" % (rx, 'rejects' if want else 'accepts', s_))
    for f in fails:
        print('FAIL', f)
    print('json_schema corpus: %d schemas, %d instances (%d through the engine automaton), %d error cases, '
          'llama.cpp parser %s; %d regexes, %d strings against re.fullmatch: %d failed'
          % (n_schemas, n_inst, n_auto, n_err, 'used' if llama_ok else 'not available',
             len(corpus.REGEXES), n_rx, len(fails)))
    return 1 if fails else 0


if __name__ == '__main__':
    sys.exit(main())
