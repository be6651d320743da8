#!/bin/bash
# cli_args_compare.sh OLD_ENGINE NEW_ENGINE: runs the opus_engine subcommands'
# argument cases (good args, missing value, unknown option, bad number,
# --help) with both binaries and fails when stdout, stderr or the exit code
# differ.  Used when a subcommand moves onto the shared parser (cli/args.h).
# Cases need no model: they stop at argument checks or at opening a file
# that does not exist.
set -u
old=${1:?usage: cli_args_compare.sh OLD_ENGINE NEW_ENGINE}
new=${2:?usage: cli_args_compare.sh OLD_ENGINE NEW_ENGINE}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
nf=/nonexistent/x.gguf
cases=(
	"run --help"
	"run -h"
	"run --model"
	"run --bogus 1"
	"run --bogus"
	"run --model $nf --threads x --prompt hi"
	"run --model $nf --prompt hi -n 2"
	"bench --model $nf --gen-tokens -1"
	"logits --help"
	"quantize"
	"quantize --help"
	"quantize -h"
	"quantize a b"
	"quantize $nf $tmp/o.gguf Q8_0"
	"quantize --threads 2 $nf $tmp/o.gguf Q4_0"
	"quantize -t 2 $nf $tmp/o.gguf Q4_0"
	"quantize $nf $tmp/o.gguf Q4_0 --threads"
	"quantize --threads 0 $nf o Q4_0"
	"quantize --threads x $nf o Q4_0"
	"quantize --threads 99999 $nf o Q4_0"
	"quantize --threads --help"
	"quantize --bogus $nf o Q4_0"
	"quantize -x"
	"quantize a b c d"
	"quantize - - Q4_0"
	"quantize a b NOPE"
	"quantize a b Q4_0 --help"
	"serve"
	"serve --help"
	"serve -h"
	"serve --fd"
	"serve --fd 999"
	"serve --fd x"
	"serve --fd -3"
	"serve --fd 70000"
	"serve --fd 999 --kv-fd 5"
	"serve --kv-fd 5"
	"serve --bogus 1"
	"serve pos"
	"serve --fd 999 --help"
	"serve --fd --help"
	"embed"
	"embed --help"
	"embed -h"
	"embed --model $nf hello"
	"embed --model $nf --threads 2 --batch-tokens 64 --no-normalize --truncate --quiet a b"
	"embed --model $nf --input /nonexistent/in.txt"
	"embed --model $nf --input /nonexistent/in.txt extra"
	"embed --model"
	"embed --model $nf"
	"embed hello"
	"embed --model $nf --threads x hi"
	"embed --model $nf --bogus hi"
	"embed --model $nf -x hi"
	"embed --model $nf hi --help"
	"embed --model $nf --input"
	"genmodel"
	"genmodel --help"
	"genmodel -h"
	"genmodel --shape tiny"
	"genmodel --shape tiny --type Q4_0 --out $tmp/g.gguf --dry-run"
	"genmodel --shape tiny --type Q4_0 --out $tmp/g.gguf --dry-run --seed 7 --layers 2 --no-rope-freqs"
	"genmodel --shape"
	"genmodel --bogus 1"
	"genmodel --seed x --shape tiny"
	"genmodel --layers 0 --shape tiny"
	"genmodel --shape nope --type Q4_0 --out x --dry-run"
	"genmodel --dry-run pos"
	"genmodel --list"
	"genmodel --list --bogus"
	"genmodel --bogus --list"
	"genmodel --shape --list"
	"genmodel --seed -1 --shape tiny"
	"genmodel --experts 0 --shape tiny --type Q8_0 --dry-run"
	"genmodel --experts-used 99 --shape tiny-moe"
	"genmodel --threads 0"
	"genmodel --ctx 99999999999999999999"
	"genmodel --shape tiny --type F16 --dry-run --embd 64 --ff 128 --vocab 300 --heads 4 --kv-heads 2 --shrink 2 --ctx 64"
	"genmodel --shape tiny --type Q4_0"
	"serve --fd 5 --fd x"
	"embed --model $nf --input x --quiet --help"
)
fail=0
for c in "${cases[@]}"; do
	# shellcheck disable=SC2086
	"$old" $c >"$tmp/o1" 2>"$tmp/e1"; r1=$?
	# shellcheck disable=SC2086
	"$new" $c >"$tmp/o2" 2>"$tmp/e2"; r2=$?
	if [ $r1 != $r2 ] || ! cmp -s "$tmp/o1" "$tmp/o2" || ! cmp -s "$tmp/e1" "$tmp/e2"; then
		echo "not ok: opus_engine $c (exit $r1 -> $r2)"
		diff "$tmp/e1" "$tmp/e2" | head -5
		diff "$tmp/o1" "$tmp/o2" | head -5
		fail=1
	else
		echo "ok: opus_engine $c (exit $r1)"
	fi
done
echo "${#cases[@]} cases, $([ $fail = 0 ] && echo all equal || echo DIFFERENCES)"
exit $fail
