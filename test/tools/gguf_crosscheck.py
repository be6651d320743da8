#!/usr/bin/env python3
"""gguf_crosscheck.py - cross-check the engine's GGUF reader and writer
against the python `gguf` package and llama.cpp (llama-cpp-python).

  1. For the default model, a sample file written by our writer
     (test_gguf --write-sample), and a file written by gguf.GGUFWriter with
     every value type and a few tensor types: the canonical dump of our
     reader (test_gguf --dump) must equal the one made from gguf.GGUFReader
     (keys, value types, raw value bytes, tensor shapes, types, absolute
     data offsets, sizes and data checksums).
  2. The model copied through our writer (test_gguf --copy) must load in
     llama.cpp and give the same greedy continuation as the original.

Usage: test/tools/gguf_crosscheck.py [--bin build/unit/test_gguf] [--model M]
Exit status 0 when everything matches.  Needs `pip install gguf numpy`
(and llama-cpp-python for step 2, skipped if absent).
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import gguf


def checksum(buf):
    b = np.frombuffer(buf, dtype=np.uint8).astype(np.uint64)
    idx = np.arange(1, len(b) + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return int(b.sum(dtype=np.uint64)), int((b * idx).sum(dtype=np.uint64))


def py_dump(path):
    r = gguf.GGUFReader(path)
    align = 32
    lines = []
    for name, f in r.fields.items():
        if name.startswith("GGUF."):
            continue
        raw = b"".join(p.tobytes() for p in f.parts[3:])
        s1, s2 = checksum(raw)
        lines.append("kv %s %d %d %d %d" % (name, int(f.types[0]), len(raw), s1, s2))
        if name == "general.alignment":
            align = int(f.parts[f.data[0]][0])
    ver = int(r.fields["GGUF.version"].parts[-1][0])
    out = ["version %d" % ver, "alignment %d" % align] + lines
    for t in r.tensors:
        ne = [int(x) for x in t.shape] + [1] * (4 - len(t.shape))
        s1, s2 = checksum(bytes(r.data[t.data_offset:t.data_offset + t.n_bytes]))
        out.append("tensor %s %d %d %d %d %d %d %d %d %d %d" % (
            t.name, int(t.tensor_type), len(t.shape), ne[0], ne[1], ne[2], ne[3],
            t.data_offset, t.n_bytes, s1, s2))
    return out


def c_dump(binary, path):
    res = subprocess.run([binary, "--dump", path], capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError("test_gguf --dump %s failed: %s" % (path, res.stderr))
    return res.stdout.splitlines()


def compare(label, binary, path):
    a = py_dump(path)
    b = c_dump(binary, path)
    if a == b:
        print("ok   %s: %d lines identical" % (label, len(a)))
        return True
    print("FAIL %s" % label)
    for x, y in zip(a, b):
        if x != y:
            print("  gguf-py: %s\n  ours:    %s" % (x, y))
            break
    if len(a) != len(b):
        print("  %d vs %d lines" % (len(a), len(b)))
    return False


def write_py_sample(path):
    w = gguf.GGUFWriter(path, arch="llama")
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -5)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -300)
    w.add_uint32("t.u32", 4000000000)
    w.add_int32("t.i32", -70000)
    w.add_float32("t.f32", 0.125)
    w.add_uint64("t.u64", 2**64 - 1)
    w.add_int64("t.i64", -2**63)
    w.add_float64("t.f64", -2.5)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "h\u00e9llo \U0001F600")
    w.add_array("t.arr_i32", [1, -2, 3])
    w.add_array("t.arr_str", ["a", "", "\u00e9t\u00e9"])
    w.add_array("t.arr_f32", [0.5, 1.5])
    w.add_array("t.arr_bool", [True, False])
    w.add_tensor("a", np.arange(64, dtype=np.float32).reshape(2, 32))
    w.add_tensor("h", np.arange(48, dtype=np.float16).reshape(3, 16))
    q8 = (np.arange(2 * 34, dtype=np.uint8) % 251).reshape(2, 34)
    w.add_tensor("q", q8, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def llama_check(model, copy):
    try:
        import llama_cpp
    except ImportError:
        print("skip llama.cpp load: llama_cpp not installed")
        return True
    outs = []
    for p in (model, copy):
        llm = llama_cpp.Llama(model_path=p, n_ctx=128, n_threads=2, verbose=False)
        r = llm.create_completion("The capital of France is", max_tokens=8,
                                  temperature=0.0)
        outs.append(r["choices"][0]["text"])
        del llm
    ok = outs[0] == outs[1]
    print("%s llama.cpp loads our copy: %r vs original %r" %
          ("ok  " if ok else "FAIL", outs[1], outs[0]))
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/unit/test_gguf")
    ap.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    args = ap.parse_args()
    ok = True
    with tempfile.TemporaryDirectory() as d:
        ok &= compare("default model", args.bin, args.model)
        ours = os.path.join(d, "ours.gguf")
        subprocess.run([args.bin, "--write-sample", ours], check=True)
        ok &= compare("sample written by our writer", args.bin, ours)
        theirs = os.path.join(d, "theirs.gguf")
        write_py_sample(theirs)
        ok &= compare("sample written by gguf.GGUFWriter", args.bin, theirs)
        copy = os.path.join(d, "copy.gguf")
        subprocess.run([args.bin, "--copy", args.model, copy], check=True)
        ok &= compare("model copied by our writer", args.bin, copy)
        ok &= llama_check(args.model, copy)
    print("all ok" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
