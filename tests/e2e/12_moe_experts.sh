# Issue 15: the expert dimension of MoE stages is reduced (topk_gate keeps
# k + 1 experts, grouped_mlp's experts are a contraction with every EP shard
# kept; the all_to_all of the EP dispatch keeps its P chunks), so 256 experts
# top-8 (the DeepSeek-V3-like shape) verify in seconds instead of minutes
# (docs/shape-reduction.md).  Soundness side: a wrong EP group on a late
# layer's dispatch and a late rank's bug in a late microbatch are still
# caught and named with 64 experts at dp2 ep2 tp2 pp2 nm4.
. "$(dirname "$0")/lib.sh"
set -e
"$VERDICT" gen --model moe --layers 2 --hidden 16 --heads 4 --seq 8 --batch 16 --experts 256 --topk 8 \
  --dp 1 --ep 8 --tp 1 --pp 1 --nm 2 --single "$TMP/s.plan" --parallel "$TMP/p.plan" >/dev/null
expect_exit 0 "$VERDICT" -q --sm "$TMP/s.plan" --pm "$TMP/p.plan" --dump-stages "$TMP/d.txt"
expect_in "^EQUIVALENT" "$TMP/out"
# the gate's row keeps k + 1 = 9 of 256 experts; the expert MLP 2 per EP rank (16 of 256)
expect_in "single 'layers.0.moe.gate' \[8,256\] -> \[1,9\]" "$TMP/d.txt"
expect_in "single 'layers.0.moe.experts.w1' \[256,32,16\] -> \[16,2,2\]" "$TMP/d.txt"
"$VERDICT" gen --model moe --layers 2 --hidden 16 --heads 4 --seq 8 --batch 16 --experts 64 --topk 8 \
  --dp 2 --ep 2 --tp 2 --pp 2 --nm 4 --single "$TMP/s.plan" --parallel "$TMP/p.plan" >/dev/null
expect_exit 0 "$VERDICT" -q --sm "$TMP/s.plan" --pm "$TMP/p.plan"
expect_in "^EQUIVALENT" "$TMP/out"
bug() { n=$1; shift; mutant_not_equivalent "$n" -q "$@"; } # the JSON report in $TMP/r.json
# The EP dispatch of layer 1 (ranks 4-7) runs over the DP group: wrong values
# on exactly those ranks, through the reduced expert stages.
bug 21 --rank 6 --layer 1
[ "$(json "sorted(set(f['diagnosis'] for f in d['failures']))")" = "['WRONG_VALUE']" ] || \
  fail "bug 21: $(json "[(f['diagnosis'], f['ranks']) for f in d['failures']]")"
[ "$(json "sorted(set(r for f in d['failures'] for r in f['ranks']))")" = "[4, 5, 6, 7]" ] || \
  fail "bug 21 ranks: $(json "[f['ranks'] for f in d['failures']]")"
# A different constant on the last stored rank in the last microbatch only.
bug 7 --rank 7 --layer 1 --microbatch 3
[ "$(json "len(d['failures'])")" = 1 ] || fail "bug 7: $(json "len(d['failures'])") failures"
[ "$(json "d['failures'][0]['ranks']")" = "[7]" ] || fail "bug 7 ranks: $(json "d['failures'][0]['ranks']")"
[ "$(json "d['failures'][0]['microbatches']")" = "[3]" ] || fail "bug 7 microbatch: $(json "d['failures'][0]['microbatches']")"
echo "ok moe experts reduced (256 -> 9 at the gate, 16 in the expert MLP); EP group and late rank/microbatch bugs named"
