#!/usr/bin/env python3
"""Compare the engine's embeddings with llama.cpp's goldens (this folder,
gen_embed_golden.py) and explain every top-5 difference of the retrieval
check (test/unit/test_bert.c) by the similarities on both sides.

  compare_embed.py TAG MODEL [--engine build/opus_engine] [--ours FILE]
                    [--tie-tol T] [--control TAG2 ...]

TAG is a golden (minilm, minilm-f16, minilm-q8_0); MODEL the GGUF file it
was made on (its SHA-256 is checked against TAG.sha256).  The engine embeds
texts.txt with `opus_engine embed --no-normalize --threads 1` (or --ours
reads such output: one line of floats per text).  Prints:

  - the cosine of each embedding to llama.cpp's (worst, median);
  - the similarity shift of the retrieval pairs: for each of the 40 queries
    q and every other text i, d(q, i) = cos_ours(q, i) - cos_llama(q, i);
    max |d| and its 99th percentile.  Two neighbours a, b of q can swap
    places only when llama.cpp's gap cos_llama(q, a) - cos_llama(q, b) is
    below d(q, b) - d(q, a) <= 2 max |d|;
  - how much that moves the gap cos(q, a) - cos(q, b) between two of the
    6 nearest neighbours of a query (our gap minus llama.cpp's), and how
    many of llama.cpp's gaps between consecutive ranks are within T;
  - for each query whose top-5 differs, the ranks that differ, llama.cpp's
    similarity gap between the two texts at that rank, and ours.

  - how many queries pass test_bert.c's rule with tie tolerance T (rank j
    agrees when the neighbour is the same or llama.cpp's similarities of
    the two differ by at most T), and, with --control, how many pass when
    the vectors of another golden TAG2 (llama.cpp's own, e.g. minilm for
    the F32 file) stand in for ours: a control that shows the rule fails
    for vectors that far from the golden.

With --json FILE the per-query details are written there as well.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def unit(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def top5(sim, q):
    s = sim[q].astype(np.float64).copy()
    s[q] = -np.inf
    return [int(i) for i in np.argsort(-s, kind="stable")[:5]]


def rule(sim, sim_g, want_all, tol):
    """queries whose top-5 passes test_bert.c's check with tie tolerance tol"""
    ok = 0
    for q in range(40):
        got, want = top5(sim, q), want_all[q]
        ok += all(g == w or abs(sim_g[q, g] - sim_g[q, w]) <= tol for g, w in zip(got, want))
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tag")
    ap.add_argument("model")
    ap.add_argument("--engine", default="build/opus_engine")
    ap.add_argument("--ours")
    ap.add_argument("--json")
    ap.add_argument("--tie-tol", type=float, default=2e-3)
    ap.add_argument("--control", action="append", default=[])
    a = ap.parse_args()

    with open(os.path.join(HERE, "texts.txt"), encoding="utf-8") as f:
        texts = f.read().split("\n")[:-1]
    n = len(texts)
    want_sha = open(os.path.join(HERE, f"{a.tag}.sha256")).read().split()[0]
    got_sha = sha256(a.model)
    if got_sha != want_sha:
        sys.exit(f"{a.model}: SHA-256 {got_sha}, the goldens of {a.tag} were made on {want_sha}")
    gold = np.fromfile(os.path.join(HERE, f"{a.tag}.f32"), dtype="<f4").reshape(n, -1)
    if a.ours:
        out = open(a.ours).read()
    else:
        out = subprocess.run([a.engine, "embed", "--model", a.model, "--no-normalize",
                              "--threads", "1", "--quiet", "--input",
                              os.path.join(HERE, "texts.txt")],
                             check=True, capture_output=True, text=True).stdout
    ours = np.array([[float(v) for v in line.split()] for line in out.splitlines()],
                    dtype=np.float64)
    assert ours.shape == gold.shape, (ours.shape, gold.shape)

    ug, uo = unit(gold.astype(np.float64)), unit(ours)
    cos = np.sum(ug * uo, axis=1)
    print(f"{a.tag}: {n} texts, cosine to llama.cpp: worst {cos.min():.7f} (text {cos.argmin()}),"
          f" median {np.median(cos):.7f}, 1 - cos median {np.median(1 - cos):.2e}")

    sim_g, sim_o = ug @ ug.T, uo @ uo.T
    mask = np.ones((40, n), dtype=bool)
    mask[np.arange(40), np.arange(40)] = False
    d = (sim_o - sim_g)[:40][mask]
    print(f"similarity shift d = cos_ours(q,i) - cos_llama(q,i) over 40 x {n - 1} pairs: "
          f"max |d| {np.abs(d).max():.2e}, p99 {np.percentile(np.abs(d), 99):.2e}, "
          f"median {np.median(np.abs(d)):.2e}")

    # how far our distance to llama.cpp moves the gap between two neighbours
    rel = []
    for q in range(40):
        s = sim_g[q].copy()
        s[q] = -np.inf
        nb = np.argsort(-s, kind="stable")[:6]
        for i in range(6):
            for j in range(i + 1, 6):
                rel.append(abs((sim_o[q, nb[i]] - sim_o[q, nb[j]]) -
                               (sim_g[q, nb[i]] - sim_g[q, nb[j]])))
    rel = np.array(rel)
    gaps = []
    for q in range(40):
        s = np.sort(np.where(np.arange(n) == q, -np.inf, sim_g[q]))[::-1][:6]
        gaps.extend(s[:-1] - s[1:])
    gaps = np.array(gaps)
    print(f"gap movement |gap_ours - gap_llama| over the {len(rel)} pairs among each query's 6"
          f" nearest: median {np.median(rel):.2e}, p90 {np.percentile(rel, 90):.2e},"
          f" max {rel.max():.2e}; llama.cpp's {len(gaps)} gaps between consecutive ranks"
          f" 1-6: {int((gaps <= a.tie_tol).sum())} at most {a.tie_tol:g}")

    with open(os.path.join(HERE, f"{a.tag}.top5")) as f:
        want_all = [[int(v) for v in line.split()] for line in f]
    same, report = 0, []
    worst_gap = 0.0
    for q in range(40):
        want, got = want_all[q], top5(sim_o, q)
        # the file's order must be what llama.cpp's own vectors give
        assert top5(sim_g, q) == want, (q, top5(sim_g, q), want)
        if got == want:
            same += 1
            continue
        ranks = []
        for j in range(5):
            if got[j] != want[j]:
                gl = sim_g[q, want[j]] - sim_g[q, got[j]]
                go = sim_o[q, got[j]] - sim_o[q, want[j]]
                worst_gap = max(worst_gap, abs(gl))
                ranks.append({"rank": j, "llama": want[j], "ours": got[j],
                              "llama_gap": float(gl), "our_gap": float(go)})
        report.append({"query": q, "want": want, "got": got, "ranks": ranks})
        print(f"  query {q}: llama.cpp {want}, ours {got}")
        for r in ranks:
            print(f"    rank {r['rank']}: llama.cpp {r['llama']} vs ours {r['ours']}: "
                  f"llama.cpp gap {r['llama_gap']:.2e}, ours {r['our_gap']:.2e}")
    print(f"top-5 equal for {same}/40 queries; largest llama.cpp gap at a differing rank "
          f"{worst_gap:.2e}")
    print(f"test_bert rule, tie tolerance {a.tie_tol:g}: {rule(sim_o, sim_g, want_all, a.tie_tol)}/40"
          f" pass (exact: {rule(sim_o, sim_g, want_all, 0.0)}/40)")
    for tag2 in a.control:
        other = np.fromfile(os.path.join(HERE, f"{tag2}.f32"), dtype="<f4").reshape(n, -1)
        uc = unit(other.astype(np.float64))
        c2 = np.sum(ug * uc, axis=1)
        print(f"control: llama.cpp's {tag2} vectors (1 - cos to {a.tag}'s median "
              f"{np.median(1 - c2):.2e}, worst {c2.min():.7f}) pass the rule for "
              f"{rule(uc @ uc.T, sim_g, want_all, a.tie_tol)}/40")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"tag": a.tag, "worst_cos": float(cos.min()),
                       "max_shift": float(np.abs(d).max()), "same": same,
                       "queries": report}, f, indent=1)


if __name__ == "__main__":
    main()
