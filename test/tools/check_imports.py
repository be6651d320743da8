#!/usr/bin/env python3
"""check_imports.py - no import circles among the PostgreSQL-side files.

A file imports another when it uses a function or variable the other one
defines (read from the compiled objects with `nm`: the object's undefined
symbols against every other object's defined ones).  Files that share an
internal header (`NAME_int.h`, included by each of them) are one module:
they are one concept cut into files, and may call each other.  The
modules' import relation must have no cycle, so that the files can be read
in an order: each one only needs what comes before it.

Prints every cycle (its modules and, per edge, the symbols that make it)
and exits 1 if there is any; with -v also prints the order.

usage: check_imports.py [-v] DIR OBJECT...   (DIR: the sources, src/pg)
"""
import os
import re
import subprocess
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"/]+_int\.h)"', re.M)


def symbols(obj):
    """(defined, undefined) global symbols of an object file."""
    out = subprocess.run(["nm", "-g", obj], check=True, capture_output=True,
                         text=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "U":
            undefined.add(parts[1])
        elif len(parts) == 3:
            defined.add(parts[2])
    return defined, undefined


def module_of(src_dir, obj):
    """The module a file belongs to: its internal header, or the file."""
    name = os.path.splitext(os.path.basename(obj))[0]
    src = os.path.join(src_dir, name + ".c")
    if os.path.exists(src):
        with open(src, encoding="utf-8") as f:
            m = INCLUDE.findall(f.read())
        if m:
            return m[0]
    return name + ".c"


def main():
    args = sys.argv[1:]
    verbose = bool(args) and args[0] == "-v"
    if verbose:
        args = args[1:]
    if len(args) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    src_dir, objs = args[0], args[1:]
    owner = {}                  # symbol -> module that defines it
    uses = {}                   # module -> set of symbols it needs
    for obj in objs:
        mod = module_of(src_dir, obj)
        defined, undefined = symbols(obj)
        for s in defined:
            owner[s] = mod
        uses.setdefault(mod, set()).update(undefined)
    edges = {m: {} for m in uses}
    for m, syms in uses.items():
        for s in syms:
            o = owner.get(s)
            if o is not None and o != m:
                edges[m].setdefault(o, set()).add(s)

    # strongly connected components (Tarjan), each of size > 1 is a cycle
    index, low, stack, on, sccs = {}, {}, [], set(), []

    def strong(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            sccs.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            strong(v)
    cycles = [c for c in sccs if len(c) > 1]
    for c in cycles:
        print("import cycle among: " + " ".join(c))
        for a in c:
            for b in c:
                if b in edges[a]:
                    print(f"  {a} -> {b}: {' '.join(sorted(edges[a][b]))}")
    if verbose and not cycles:
        # Tarjan emits components callees first: an order to read them in
        print("order: " + " ".join(c[0] for c in sccs))
    if cycles:
        return 1
    print(f"check_imports: {len(edges)} modules, no import cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
