#!/usr/bin/env bash
# demo.sh [PROMPT [QUESTION]] - `make run`: the main job on the default
# model, from a fresh clone.  Installs what is missing, fetches the default
# model, builds and installs opus_pg, creates a local PostgreSQL 15 cluster
# with opus_pg preloaded, creates the extension, completes PROMPT with
# opus_generate, answers QUESTION with opus_chat and prints both.  The
# server is left running; the last lines say how to connect to it and how to
# stop it.
#
# Environment: PROMPT and QUESTION (instead of the arguments), OPUS_DEMO_DIR
# (default /tmp/opus_pg_demo), OPUS_DEMO_PORT (default 5499).  Running it
# again replaces the previous demo cluster.
set -euo pipefail
cd "$(dirname "$0")/../.."

PROMPT=${1:-${PROMPT:-PostgreSQL is}}
QUESTION=${2:-${QUESTION:-What is PostgreSQL? Answer in one sentence.}}
DIR=${OPUS_DEMO_DIR:-/tmp/opus_pg_demo}
PORT=${OPUS_DEMO_PORT:-5499}
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
MAKE=${MAKE:-make}

step()
{
	printf '\n==> %s\n' "$*"
}

step "installing dependencies"
test/tools/install_deps.sh
step "fetching the default model"
$MAKE -s model
step "building"
$MAKE -s -j2 PG_CONFIG="$PG_CONFIG" all
step "installing (make install)"
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then
	sudo $MAKE -s PG_CONFIG="$PG_CONFIG" install
else
	$MAKE -s PG_CONFIG="$PG_CONFIG" install
fi

BIN=$("$PG_CONFIG" --bindir)
# PostgreSQL refuses to run as root: the cluster belongs to `postgres`.
if [ "$(id -u)" -eq 0 ]; then
	RUNAS=(runuser -u postgres --)
	OWNER=postgres
else
	RUNAS=()
	OWNER=$(id -un)
fi
as_owner()
{
	"${RUNAS[@]}" "$@"
}

# Replace an earlier demo cluster.
if [ -f "$DIR/data/postmaster.pid" ]; then
	step "stopping the previous demo server"
	as_owner "$BIN/pg_ctl" -D "$DIR/data" -m fast -w stop || true
fi
rm -rf "$DIR"
mkdir -p "$DIR"
if [ "$(id -u)" -eq 0 ]; then
	chown postgres: "$DIR"
fi

step "creating a cluster in $DIR/data"
as_owner "$BIN/initdb" -D "$DIR/data" -U postgres -A trust --no-sync >"$DIR/initdb.log" 2>&1 ||
	{ cat "$DIR/initdb.log"; exit 1; }
as_owner tee -a "$DIR/data/postgresql.conf" >/dev/null <<EOF

# opus_pg demo
port = $PORT
listen_addresses = ''
unix_socket_directories = '$DIR'
shared_preload_libraries = 'opus_pg'
opus.threads = 0
EOF

step "starting PostgreSQL on port $PORT (log: $DIR/server.log)"
as_owner "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w start >/dev/null

PSQL=("$BIN/psql" -X -h "$DIR" -p "$PORT" -U postgres -d postgres)
"${PSQL[@]}" -q -c 'CREATE EXTENSION opus_pg'
"${PSQL[@]}" -c 'SELECT name, architecture, parameters, tensor_type, context_length FROM opus_model'

step "SELECT opus_generate(...) and opus_chat(...)"
"${PSQL[@]}" -q -v prompt="$PROMPT" -v question="$QUESTION" -v ON_ERROR_STOP=1 <<'EOF'
\pset tuples_only on
\pset format unaligned
\timing on
\echo '-- opus_generate(' :'prompt' ')'
SELECT :'prompt' || opus_generate(:'prompt', max_tokens => 48, temperature => 0,
                                  stop => ARRAY[E'\n\n']);
\echo
\echo '-- opus_chat(' :'question' ')'
SELECT opus_chat(jsonb_build_array(jsonb_build_object('role', 'user', 'content', :'question')),
                 max_tokens => 64, temperature => 0);
EOF

cat <<EOF

The demo server is still running.
  connect:  ${PSQL[*]}
  try:      SELECT opus_chat('[{"role":"user","content":"Tell me a joke."}]', max_tokens => 64);
  stop it:  ${RUNAS[*]}${RUNAS:+ }$BIN/pg_ctl -D $DIR/data stop
EOF
