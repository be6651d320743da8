#!/bin/sh
# bench_jinja.sh [REPS] - chat template rendering: the engine's Jinja
# interpreter (test/bench/bench_jinja.c) vs the jinja2 package as Hugging
# Face configures it (gen_jinja_golden.py's environment), on every template
# and context of test/golden/jinja, parse/compile included, REPS times each
# (default 5; median of 3 runs).  Run from the repo root.
set -e
REPS=${1:-5}
OUT=build/bench
mkdir -p $OUT
gcc -std=gnu11 -D_GNU_SOURCE -iquote src/engine -O2 test/bench/bench_jinja.c \
	src/engine/text/jinja_*.c src/engine/base/status.c -o $OUT/bench_jinja -lm
median() { sort -n | sed -n 2p; }
ours=$(for i in 1 2 3; do $OUT/bench_jinja "$REPS" test/golden/jinja/templates/*.jinja | awk '{print $3}'; done | median)
theirs=$(for i in 1 2 3; do python3 - "$REPS" <<'PY'
import glob, sys, time
sys.path.insert(0, "test/golden/jinja")
import gen_jinja_golden as g
env, ctxs, reps = g.make_env(), g.contexts(), int(sys.argv[1])
n, t0 = 0, time.perf_counter()
for p in sorted(glob.glob("test/golden/jinja/templates/*.jinja")):
    src = open(p, encoding="utf-8").read()
    for _ in range(reps):
        t = env.from_string(src)
        for c in ctxs:
            try:
                t.render(**c)
            except Exception:
                pass
            n += 1
print("%.2f" % ((time.perf_counter() - t0) / n * 1e6))
PY
done | median)
echo "chat template render, us per render (parse/compile included), median of 3; load: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-28s %12s\n' "opus_pg (C interpreter)" "$ours" "jinja2 $(python3 -c 'import jinja2; print(jinja2.__version__)')" "$theirs"
python3 -c "print('%-28s %11.1fx' % ('speed-up', $theirs / $ours))"
