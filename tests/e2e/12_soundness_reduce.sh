# Issue 11, shape reduction soundness (docs/shape-reduction.md): one-rank
# rewrites of a generated Llama-3 pair that reduction could hide.  Every
# buggy rewrite must be NOT EQUIVALENT (and `exec --no-reduce` must disagree,
# which shows the rewrite really changes values; `exec --reduce` shares the
# ORDER rule and must disagree on cause 1 too; it keeps plain averages, see
# docs/shape-reduction.md AVG); every value-preserving rewrite must be
# EQUIVALENT.  The rewrites are made by reduce_mutants.py on the
# plan file format.
. "$(dirname "$0")/lib.sh"
set -e
PY=/usr/bin/python3
MUT="$(dirname "$0")/reduce_mutants.py"
expect_exit 0 "$VERDICT" gen --model llama3 --layers 2 --hidden 64 --heads 4 --seq 16 --batch 8 \
  --dp 2 --tp 2 --pp 2 --nm 2 --single "$TMP/s.plan" --parallel "$TMP/p.plan"
buggy() { # mutation [reduced-exec-too]
  "$PY" "$MUT" "$1" "$TMP/p.plan" "$TMP/$1.plan" || fail "reduce_mutants.py $1"
  expect_exit 1 "$VERDICT" -q --sm "$TMP/s.plan" --pm "$TMP/$1.plan"
  expect_exit 1 "$VERDICT" exec --no-reduce --sm "$TMP/s.plan" --pm "$TMP/$1.plan"
  expect_in "DISAGREE" "$TMP/out"
  [ $# -lt 2 ] || expect_exit 1 "$VERDICT" exec --reduce --sm "$TMP/s.plan" --pm "$TMP/$1.plan"
}
correct() { # mutation
  "$PY" "$MUT" "$1" "$TMP/p.plan" "$TMP/$1.plan" || fail "reduce_mutants.py $1"
  expect_exit 0 "$VERDICT" -q --sm "$TMP/s.plan" --pm "$TMP/$1.plan"
  expect_exit 0 "$VERDICT" exec --no-reduce --sm "$TMP/s.plan" --pm "$TMP/$1.plan"
}
# Cause 1: a permutation inside head_dim (interleaved rope pairs).
buggy interleave reduced-exec-too
buggy interleave_flat reduced-exec-too
correct interleave_ok
correct interleave_flat_ok
# Cause 2: constants tied to extents.  A written-out rms_norm whose 1/h is
# 0.5 equals the reduced mean when h shrinks to 2; the true 1/64 (also with
# the statistic split over the TP pair and all-reduced) is equivalent.
buggy norm_half
buggy norm_tp_half
correct norm_inv_h
correct norm_tp_inv_h
# Counts: a sum of 64 copies of x is 64 x.  Times 0.5 it equals x only once
# the copies' extent is reduced to 2 (EQUIVALENT before COUNT); times 1/64 it
# is x (NOT EQUIVALENT before: the reduced sum was 2 x).
buggy count_half
correct count_inv
# Two ranks' hypotheses on related single values (the labels and their
# flattened view): the stage computes one from the other (it used to take
# them as unrelated symbols: NOT EQUIVALENT, a false alarm).
correct labels_tpose_ok
echo ok
