# Issue 3: broken plans are reported with the right class, ranks and
# microbatches (asserted on the JSON report), output is identical across
# thread counts and with reuse or the fast path off.
. "$(dirname "$0")/lib.sh"
set -e
"$VERDICT" gen --model llama3 --layers 2 --hidden 32 --heads 4 --seq 8 --batch 4 \
  --dp 2 --tp 2 --pp 2 --nm 2 --single "$TMP/s.plan" --parallel "$TMP/p.plan" >/dev/null
bug() { mutant_not_equivalent "$@"; } # the JSON report in $TMP/r.json
# A forward all-reduce replaced by identity: missing reduction on both TP ranks.
bug 1 --rank 0
[ "$(json "d['failures'][0]['diagnosis']")" = MISSING_REDUCTION ] || fail "bug 1 diagnosis"
[ "$(json "d['failures'][0]['ranks']")" = "[0, 1]" ] || fail "bug 1 ranks: $(json "d['failures'][0]['ranks']")"
# The all-reduce removed: a dataflow error naming the tensor nothing produces.
bug 2 --rank 0
[ "$(json "d['failures'][0]['diagnosis']")" = DATAFLOW ] || fail "bug 2 diagnosis"
expect_in "unproduced" "$TMP/out"
# A different constant on one rank: only that rank flagged.
bug 7 --rank 1
[ "$(json "d['failures'][0]['diagnosis']")" = WRONG_VALUE ] || fail "bug 7 diagnosis"
[ "$(json "d['failures'][0]['ranks']")" = "[1]" ] || fail "bug 7 ranks: $(json "d['failures'][0]['ranks']")"
[ "$(json "d['failures'][0]['first_diverging_node']['rank']")" = 1 ] || fail "bug 7 diverging node"
# A wrong attention scale on one rank: SCALE with the factor.
bug 12 --rank 0
[ "$(json "d['failures'][0]['diagnosis']")" = SCALE ] || fail "bug 12 diagnosis"
[ -n "$(json "d['failures'][0]['factor']")" ] || fail "bug 12 factor"
# The DP reducer averaging: SCALE 1/2.
bug 15
[ "$(json "d['failures'][0]['diagnosis']")" = SCALE ] || fail "bug 15 diagnosis"
[ "$(json "d['failures'][0]['factor']")" = "1/2" ] || fail "bug 15 factor $(json "d['failures'][0]['factor']")"
# The reducer before the last microbatch: a schedule error naming microbatch 1.
bug 14
[ "$(json "d['failures'][0]['diagnosis']")" = SCHEDULE ] || fail "bug 14 diagnosis"
expect_in "mb 1" "$TMP/out"

# Determinism: identical reports at 1 and 2 threads, and with reuse or the
# fast path off (the verdicts and failures must not depend on them).
"$VERDICT" mutate --bug 7 --rank 1 "$TMP/p.plan" "$TMP/b.plan" >/dev/null
for opt in "--threads 1" "--threads 2" "--threads 2 --no-reuse" "--threads 2 --no-fast-path"; do
  set +e
  "$VERDICT" -q $opt --sm "$TMP/s.plan" --pm "$TMP/b.plan" >"$TMP/run.$(echo $opt | tr -d ' -')" 2>&1
  set -e
done
cmp "$TMP/run.threads1" "$TMP/run.threads2" || fail "output differs between 1 and 2 threads"
for f in "$TMP/run.threads2noreuse" "$TMP/run.threads2nofastpath"; do
  sed 1,2d "$TMP/run.threads1" >"$TMP/a"; sed 1,2d "$f" >"$TMP/b"
  cmp "$TMP/a" "$TMP/b" || fail "failures differ with $f"
  head -1 "$f" | grep -q "NOT EQUIVALENT" || fail "verdict differs with $f"
done
# -v lists the slowest stages (at most five), each with its time and size
expect_exit 0 "$VERDICT" -v --sm "$TMP/s.plan" --pm "$TMP/p.plan"
expect_in "^  slowest stages: [0-9]* ([0-9.]*s, work [0-9]*, [0-9]* nodes, [0-9]* values)" "$TMP/out"
expect_in "^  hardest stages by work: [0-9]* ([0-9.]*s, work [0-9]*, [0-9]* nodes" "$TMP/out"
n=$(grep '^  slowest stages:' "$TMP/out" | grep -o 's, work [0-9]*, [0-9]* nodes' | wc -l)
[ "$n" -ge 1 ] && [ "$n" -le 5 ] || fail "expected 1 to 5 slowest stages, got $n"
echo ok
