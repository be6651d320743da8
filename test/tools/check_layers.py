#!/usr/bin/env python3
"""check_layers.py - the engine's include rules (src/engine/README.md).

Each folder src/engine/<layer>/ has a README.md with one line
`may include: <folders>` (or `may include: (none)`).  Every `#include "..."`
of a .c/.h file in a layer must name a header by its path under src/engine
("format/gguf.h") in its own folder or one of the listed folders; the
listed folders must exist and the may-include relation must have no cycle;
and no two headers may include each other, directly or through others.
Prints each violation as FILE:LINE: message and exits 1 if there is any.

usage: check_layers.py [ENGINE_DIR]   (default src/engine)
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "src/engine"
    errors = []
    layers = sorted(d for d in os.listdir(root)
                    if os.path.isdir(os.path.join(root, d)))
    allowed = {}
    for layer in layers:
        readme = os.path.join(root, layer, "README.md")
        lines = []
        if os.path.exists(readme):
            with open(readme, encoding="utf-8") as f:
                lines = [(i, l) for i, l in enumerate(f, 1)
                         if l.startswith("may include:")]
        if len(lines) != 1:
            errors.append(f"{readme}:1: needs exactly one 'may include:' line")
            allowed[layer] = set()
            continue
        lineno, line = lines[0]
        names = line[len("may include:"):].split()
        if names == ["(none)"]:
            names = []
        for n in names:
            if n not in layers:
                errors.append(f"{readme}:{lineno}: '{n}' is not a folder of {root}")
        allowed[layer] = set(names) - {layer}

    # the layer relation must be acyclic (a layer order exists)
    state = {}

    def visit(layer, path):
        state[layer] = 1
        for n in sorted(allowed.get(layer, ())):
            if state.get(n) == 1:
                errors.append(f"{root}/{layer}/README.md:1: layer cycle "
                              + " -> ".join(path + [n]))
            elif n in allowed and not state.get(n):
                visit(n, path + [n])
        state[layer] = 2

    for layer in layers:
        if not state.get(layer):
            visit(layer, [layer])

    headers = {}        # "layer/x.h" -> [(lineno, "layer2/y.h")]
    for layer in layers:
        for name in sorted(os.listdir(os.path.join(root, layer))):
            if not name.endswith((".c", ".h")):
                continue
            path = os.path.join(root, layer, name)
            incs = []
            with open(path, encoding="utf-8", errors="replace") as f:
                for lineno, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    inc = m.group(1)
                    where = f"{path}:{lineno}"
                    if os.path.exists(os.path.join(root, layer, inc)) and "/" not in inc:
                        errors.append(f"{where}: include \"{inc}\" as \"{layer}/{inc}\"")
                        continue
                    top = inc.split("/")[0]
                    if "/" not in inc or top not in layers:
                        continue        # outside the engine (protocol.h, kernels/)
                    if not os.path.exists(os.path.join(root, inc)):
                        errors.append(f"{where}: \"{inc}\" does not exist")
                    elif top != layer and top not in allowed[layer]:
                        errors.append(f"{where}: {layer}/ may not include \"{inc}\" "
                                      f"({layer}/README.md: may include: "
                                      f"{' '.join(sorted(allowed[layer])) or '(none)'})")
                    incs.append((lineno, inc))
            if name.endswith(".h"):
                headers[f"{layer}/{name}"] = incs

    # no include cycle among headers
    state = {}

    def visit_h(h, path):
        state[h] = 1
        for lineno, inc in headers.get(h, ()):
            if state.get(inc) == 1:
                errors.append(f"{root}/{h}:{lineno}: include cycle "
                              + " -> ".join(path + [inc]))
            elif inc in headers and not state.get(inc):
                visit_h(inc, path + [inc])
        state[h] = 2

    for h in sorted(headers):
        if not state.get(h):
            visit_h(h, [h])

    for e in errors:
        print(e)
    if errors:
        print(f"check-layers: {len(errors)} violation(s)")
        return 1
    print(f"check-layers: ok ({len(layers)} layers, {len(headers)} headers)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
