#!/usr/bin/env bash
# run_tests.sh - everything `make test` (and so CI) runs, from a bare Debian 12
# machine to a verdict:
#
#   setup   install missing packages (test/tools/install_deps.sh), fetch the
#           default model (make model), build the engine and the extension
#           with warnings as errors, make install
#   suites  unit     engine unit tests (make unit, ASan + UBSan)
#           fuzz     fuzz corpora and regression inputs replayed (make fuzz-regress)
#           golden   make golden, when the engine defines that target
#           moe      make golden-moe: generate the MoE test models
#                    (models/moe/) and check them against llama.cpp's goldens
#           gpufake  make gpu-fake: the CUDA backend's host side on the CPU
#                    with a fake CUDA runtime (test/gpu/README), when the CUDA
#                    toolkit is installed (it needs no GPU)
#           regress  pg_regress on a temporary instance (test/run_regress.sh)
#           tap      TAP tests, test/t/*.pl (test/run_tap.sh)
#
# Every suite runs even when an earlier one fails; a summary line per suite
# and a final "N passed, N failed" line (counting suites) close the output,
# and the exit status is non-zero if any setup step or suite failed.
#
# PostgreSQL refuses to run as root, so when this script runs as root the
# server-side suites run as the `postgres` user in a postgres-owned copy of
# the work tree under /tmp; logs of failed suites are copied back
# to tmp_check/ in the repository.  Every process started there is ended on
# exit, whatever happens.
#
# Environment: JOBS (make -j, default 2), KEEP_TMP=1 keeps the temp copy,
# SUITES="unit regress tap" runs only those suites.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
JOBS=${JOBS:-2}
MAKE=${MAKE:-make}
SUITES=${SUITES:-unit fuzz golden moe gpufake regress tap}
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
export PG_CONFIG

T0=$(date +%s)
summary=()
failure_details=()
npass=0
nfail=0
setup_ok=1
WORK=
PGUSER_RUN=

say()
{
	printf '\n===== %s =====\n' "$*"
}

# record KIND NAME RC SECONDS [NOTE]
record()
{
	local kind=$1 name=$2 rc=$3 secs=$4 note=${5:-}
	local verdict=ok
	if [ "$rc" -ne 0 ]; then
		verdict="FAILED (exit $rc)"
	fi
	[ -n "$note" ] && verdict="$verdict $note"
	summary+=("$(printf '%-6s %-8s %-36s %5ss' "$kind" "$name" "$verdict" "$secs")")
	if [ "$kind" = suite ]; then
		if [ "$rc" -eq 0 ]; then
			npass=$((npass + 1))
		else
			nfail=$((nfail + 1))
		fi
	elif [ "$rc" -ne 0 ]; then
		setup_ok=0
	fi
}

# step KIND NAME CMD... - run CMD, record its verdict
step()
{
	local kind=$1 name=$2
	shift 2
	say "$kind: $name"
	local t=$(date +%s)
	"$@"
	local rc=$?
	record "$kind" "$name" "$rc" $(($(date +%s) - t))
	return $rc
}

# End every process whose working directory is inside $WORK (postmasters of
# the temporary clusters, their children and any engine they spawned), by pid.
kill_leftovers()
{
	[ -n "$WORK" ] && [ -d "$WORK" ] || return 0
	local sig pid cwd found
	for sig in TERM KILL; do
		found=0
		for d in /proc/[0-9]*; do
			pid=${d#/proc/}
			cwd=$(readlink "$d/cwd" 2>/dev/null) || continue
			case "$cwd" in
			"$WORK"/*)
				[ "$pid" = "$$" ] && continue
				kill -s "$sig" "$pid" 2>/dev/null && found=1
				;;
			esac
		done
		[ $found -eq 0 ] && break
		sleep 2
	done
}

cleanup()
{
	kill_leftovers
	if [ -n "$WORK" ] && [ -z "${KEEP_TMP:-}" ]; then
		rm -rf "$WORK"
	elif [ -n "$WORK" ]; then
		echo "run_tests: kept $WORK"
	fi
}
trap cleanup EXIT
trap 'echo "run_tests: interrupted"; exit 130' INT TERM

# as_pg CMD... - run CMD as the unprivileged user the server-side suites use.
as_pg()
{
	if [ -n "$PGUSER_RUN" ]; then
		runuser -u "$PGUSER_RUN" -- env PATH="$PATH" PG_CONFIG="$PG_CONFIG" \
			CI="${CI:-}" "$@"
	else
		"$@"
	fi
}

want()
{
	case " $SUITES " in *" $1 "*) return 0 ;; esac
	return 1
}

# save_logs NAME DIR... - copy a failed suite's logs back into the repo.
save_logs()
{
	local name=$1
	shift
	mkdir -p "$ROOT/tmp_check/$name"
	for d in "$@"; do
		[ -e "$d" ] && cp -r "$d" "$ROOT/tmp_check/$name/" 2>/dev/null
	done
	echo "run_tests: logs of $name in $ROOT/tmp_check/$name"
}

echo "run_tests: opus_pg at $ROOT ($(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')), $(nproc) cores"

# ---- setup ---------------------------------------------------------------
step setup deps test/tools/install_deps.sh
[ $setup_ok -eq 1 ] && step setup model $MAKE model
# the embedding model the regress test embed serves (SHA-checked; make install copies it)
[ $setup_ok -eq 1 ] && step setup model-minilm $MAKE model-minilm
if [ $setup_ok -eq 1 ]; then
	# COPT reaches PGXS's CFLAGS: -Werror for the extension; the engine's own
	# flags already carry -Werror.
	step setup build $MAKE -j"$JOBS" PG_CONFIG="$PG_CONFIG" COPT=-Werror all
fi
if [ $setup_ok -eq 1 ]; then
	if [ "$(id -u)" -eq 0 ]; then
		step setup install $MAKE PG_CONFIG="$PG_CONFIG" install
	elif command -v sudo >/dev/null 2>&1; then
		step setup install sudo $MAKE PG_CONFIG="$PG_CONFIG" install
	else
		step setup install $MAKE PG_CONFIG="$PG_CONFIG" install
	fi
fi
export PATH="$("$PG_CONFIG" --bindir 2>/dev/null || echo /usr/lib/postgresql/15/bin):$PATH"

# ---- postgres-owned work area -------------------------------------------
if [ $setup_ok -eq 1 ]; then
	WORK=$(mktemp -d /tmp/opus_pg_test.XXXXXX)
	mkdir -p "$WORK/repo"
	# A copy of the work tree (without .git and build outputs) that the
	# unprivileged user can read and write.
	# models/moe (generated MoE models, GBs) stays out; the moe suite
	# copies the one model the TAP tests use.
	tar -C "$ROOT" --exclude=./.git --exclude=./build --exclude=./tmp_check \
		--exclude=./results --exclude=./models/moe -cf - . | tar -C "$WORK/repo" -xf -
	if [ "$(id -u)" -eq 0 ]; then
		PGUSER_RUN=postgres
		chown -R postgres: "$WORK"
		chmod 755 "$WORK"
	fi
fi

# ---- suites --------------------------------------------------------------
run_suite()
{
	local name=$1
	shift
	if [ $setup_ok -ne 1 ]; then
		say "suite: $name"
		echo "not run: setup failed"
		record suite "$name" 1 0 "(setup failed)"
		return
	fi
	step suite "$name" "$@"
}

# unit: the sanitized build of the engine and ~40 test programs, then the
# tests: ~120-250 s idle; at load ~20 the build alone passed 1,200 s, so the
# limit is 30 minutes.
if want unit; then
	run_suite unit timeout -k 10 1800 $MAKE -j"$JOBS" unit
fi

# fuzz: replay the committed fuzz corpora and regression inputs (gcc +
# ASan/UBSan, no libFuzzer needed; test/fuzz/README)
if want fuzz; then
	run_suite fuzz timeout -k 10 600 $MAKE -j"$JOBS" fuzz-regress
fi

# golden: ~225 s on an idle machine (12 tensor types x 2 orders, grammar and
# embedding goldens); a fresh-clone run at load 5-9 passed 900 s, so the
# limit is 30 minutes.
if want golden; then
	if $MAKE -n golden >/dev/null 2>&1; then
		run_suite golden timeout -k 10 1800 $MAKE golden
	else
		echo "run_tests: no golden target; skipped"
	fi
fi

# moe: the generated MoE models against llama.cpp's goldens (~1 min on 2
# cores, generation included).  The TAP test of the expert-load view uses
# mixtral-q4_k.gguf: it is copied into the server-side suites' work tree
# (made before the models were).
if want moe; then
	if $MAKE -n golden-moe >/dev/null 2>&1; then
		run_suite moe timeout -k 10 900 $MAKE golden-moe
		if [ -n "$WORK" ] && [ -f models/moe/mixtral-q4_k.gguf ] &&
			[ ! -f "$WORK/repo/models/moe/mixtral-q4_k.gguf" ]; then
			mkdir -p "$WORK/repo/models/moe"
			cp models/moe/mixtral-q4_k.gguf "$WORK/repo/models/moe/"
			[ -n "$PGUSER_RUN" ] && chown -R "$PGUSER_RUN": "$WORK/repo/models"
		fi
	else
		echo "run_tests: no golden-moe target; skipped"
	fi
fi

if want gpufake; then
	if [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ] || command -v nvcc >/dev/null 2>&1; then
		run_suite gpufake timeout -k 10 600 $MAKE gpu-fake
	else
		echo "run_tests: no CUDA toolkit; gpufake skipped"
	fi
fi

if want regress; then
	if [ -f test/run_regress.sh ]; then
		run_suite regress as_pg timeout -k 10 900 bash -c 'cd "$1" && bash test/run_regress.sh' _ "$WORK/repo"
		if [ "${summary[-1]}" != "${summary[-1]/FAILED/}" ] && [ -n "$WORK" ]; then
			save_logs regress "$WORK"/repo/regression.* "$WORK"/repo/log "$WORK"/repo/results \
				"$WORK"/repo/nopreload
			# name the failing tests in the summary line (CI shows the tail)
			failed_tests=$(cat "$WORK"/repo/regression.out "$WORK"/repo/nopreload/regression.out 2>/dev/null |
				sed -n 's/^\(not ok [0-9]* *- *\|test \)\([a-z_0-9]*\) .*\(FAILED\|failed\).*/\2/p' | tr '\n' ' ')
			summary[-1]="${summary[-1]} [${failed_tests% }]"
			failure_details+=("$(cat "$WORK"/repo/regression.diffs "$WORK"/repo/nopreload/regression.diffs 2>/dev/null | head -40)")
		fi
	else
		run_suite regress false
	fi
fi

if want tap; then
	run_suite tap as_pg timeout -k 10 1500 bash -c 'cd "$1" && bash test/run_tap.sh "$1/tap_out"' _ "$WORK/repo"
	if [ "${summary[-1]}" != "${summary[-1]/FAILED/}" ] && [ -n "$WORK" ]; then
		save_logs tap "$WORK/repo/tap_out/tmp_check/log"
		failed_tests=$(grep -l 'not ok\|Dubious\|Bail out' "$WORK"/repo/tap_out/tmp_check/log/regress_log_* 2>/dev/null |
			sed 's/.*regress_log_//' | tr '\n' ' ')
		summary[-1]="${summary[-1]} [${failed_tests% }]"
	fi
fi

kill_leftovers

# ---- summary -------------------------------------------------------------
if [ ${#failure_details[@]} -gt 0 ]; then
	say "first lines of the failures"
	printf '%s\n' "${failure_details[@]}"
fi
say "summary ($(($(date +%s) - T0)) s)"
printf '%s\n' "${summary[@]}"
echo "$npass passed, $nfail failed"
if [ $setup_ok -ne 1 ] || [ $nfail -ne 0 ]; then
	exit 1
fi
exit 0
