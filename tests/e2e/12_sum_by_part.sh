# Issue 15: a weight gradient annotated per replica and microbatch (a sum of
# dp x nm parts) is proven part by part (docs/verifier.md section 2, "Sums by
# part"): each part's stage on its own batch rows, one stage per class of
# parts, plus the check that the parts' rows tile the batch.  A bug confined
# to the weight-gradient contribution of one late microbatch on one late
# stored rank (a stale saved activation: the input gradient is unchanged) is
# seen only by that part's proof; it must be caught and reported with that
# rank and microbatch.  If the odd part were taken as a translate of part 0
# (its proof skipped), the plan would pass and this test fail.
. "$(dirname "$0")/lib.sh"
set -e
# stale_caught WHAT MB RANK: $TMP/b.plan is NOT EQUIVALENT with one failure, in microbatch MB
# on stored rank RANK (the JSON report left in $TMP/r.json)
stale_caught() {
  expect_exit 1 "$VERDICT" -q --sm "$TMP/s.plan" --pm "$TMP/b.plan" --json "$TMP/r.json"
  expect_in "^NOT EQUIVALENT" "$TMP/out"
  [ "$(json "len(d['failures'])")" = 1 ] || fail "$1: $(json "len(d['failures'])") failures"
  [ "$(json "d['failures'][0]['microbatches']")" = "[$2]" ] || \
    fail "$1 microbatch: $(json "d['failures'][0]['microbatches']")"
  [ "$(json "d['failures'][0]['ranks']")" = "[$3]" ] || fail "$1 ranks: $(json "d['failures'][0]['ranks']")"
}
"$VERDICT" gen --model llama3 --layers 2 --hidden 16 --heads 4 --seq 8 --batch 1024 \
  --dp 64 --tp 2 --pp 2 --nm 16 --single "$TMP/s.plan" --parallel "$TMP/p.plan" >/dev/null
expect_exit 0 "$VERDICT" -q -v --sm "$TMP/s.plan" --pm "$TMP/p.plan" --dump-stages "$TMP/stages.txt"
expect_in "^EQUIVALENT" "$TMP/out"
expect_in "sums by part: [0-9]* stages prove [0-9]* parts" "$TMP/out"
# every weight gradient of the FFN down projection is a sum of 1024 parts,
# proven by one stage per (rank, slice) standing for all 64 replicas and 16
# microbatches, on one batch row of 1024
grep -A1 "part 0 of a sum of 1024 by part, rows \[0, 1) of 1024" "$TMP/stages.txt" | \
  grep -q "target 'layers.1.ffn.down.weight.grad'" || fail "ffn.down weight gradient not proven by part"
grep "layers.1.ffn.down.weight.grad" "$TMP/stages.txt" | grep -q "parts 1024" && \
  fail "ffn.down weight gradient still proven as one stage of 1024 parts"
# the stale activation in microbatch 15 on stored rank 3 (every replica's rank 3)
/usr/bin/python3 "$(dirname "$0")/stale_wgrad_mutant.py" "$TMP/p.plan" "$TMP/b.plan" 3 1 15 || fail "mutant"
expect_exit 0 "$VERDICT" plan validate "$TMP/b.plan"
stale_caught "stale wgrad" 15 3
[ "$(json "d['failures'][0]['replicas']")" = 64 ] || fail "stale wgrad: not every replica's rank 3"
expect_in "target: single 'layers.1.ffn.down.weight.grad'" "$TMP/out"
expect_in "rank 3 mb 15 linear_backward 'layers.1.ffn.down'" "$TMP/out"
echo "ok dp64 nm16: weight gradients proven by part; a stale activation in mb 15 on rank 3 caught there"
# MoE with expert parallelism: the EP ranks of one replica are data parallel for
# the dense weights, so their weight gradients are sums of dp x ep x nm parts,
# several per (replica, microbatch).  Each part is proven on its own rows (one
# stage per EP rank and slice, standing for the replicas and microbatches), and
# a stale activation in microbatch 3 on EP rank 1 (stored rank 6) is caught there.
"$VERDICT" gen --model moe --layers 2 --hidden 16 --heads 4 --seq 8 --batch 64 --experts 8 --topk 2 \
  --dp 2 --ep 2 --tp 2 --pp 2 --nm 4 --single "$TMP/s.plan" --parallel "$TMP/p.plan" >/dev/null
expect_exit 0 "$VERDICT" -q -v --sm "$TMP/s.plan" --pm "$TMP/p.plan" --dump-stages "$TMP/stages.txt"
expect_in "^EQUIVALENT" "$TMP/out"
grep -A1 "part 1 of a sum of 16 by part, rows \[4, 8) of 64" "$TMP/stages.txt" | \
  grep -q "target 'layers.1.moe.shared.down.weight.grad'" || fail "EP rank 1's shared-expert gradient part not proven by part"
grep "layers.1.moe.shared.down.weight.grad" "$TMP/stages.txt" | grep -q "parts 16" && \
  fail "shared-expert weight gradient still proven as one stage of 16 parts"
/usr/bin/python3 "$(dirname "$0")/stale_wgrad_mutant.py" "$TMP/p.plan" "$TMP/b.plan" 6 1 3 moe.shared || fail "moe mutant"
stale_caught "moe stale wgrad" 3 6
expect_in "rank 6 mb 3 linear_backward 'layers.1.moe.shared.down'" "$TMP/out"
echo "ok moe dp2 ep2 nm4: dense weight gradients proven by part per EP rank; a stale activation in mb 3 on EP rank 1 caught there"
