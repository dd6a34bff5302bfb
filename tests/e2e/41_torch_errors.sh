# tools/torch2plan refuses what it cannot capture faithfully, with the aten operator and the
# user's source line, and reports DP replicas that ran different programs (a bug, exit 1).
# Programs: tests/torch/tiny_single.py, tiny_parallel.py (--set variant=NAME injects a problem).
. "$(dirname "$0")/lib.sh"
set -e
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
T2P="/usr/bin/python3 $ROOT/tools/torch2plan"
S=$ROOT/tests/torch/tiny_single.py
P=$ROOT/tests/torch/tiny_parallel.py
cap() { $T2P --single "$S" --parallel "$P" --out-single "$TMP/s.plan" --out-parallel "$TMP/p.plan" "$@"; }

# the clean program captures, and the oracle agrees on it (TP2, then TP2 x DP2)
expect_exit 0 cap --nproc 2
expect_exit 0 "$VERDICT" exec --sm "$TMP/s.plan" --pm "$TMP/p.plan"
expect_in "AGREE" "$TMP/out"
expect_exit 0 cap --nproc 4 --set dp=2
expect_in "2 stored ranks x 2 replicas" "$TMP/out"
expect_exit 0 "$VERDICT" exec --sm "$TMP/s.plan" --pm "$TMP/p.plan"
expect_in "AGREE" "$TMP/out"

# an aten operator without a mapping: named with the user's line, never dropped
expect_exit 2 cap --nproc 2 --set variant=unmapped
expect_in "tiny_single.py:31: aten.cumsum.default has no mapping" "$TMP/err"
# a tensor read in the step that was neither declared nor produced there
expect_exit 2 cap --nproc 2 --set variant=undeclared
expect_in "tiny_single.py:33: aten.add reads a tensor of shape \[8\] that was neither declared" "$TMP/err"
# Python control flow on a data value
expect_exit 2 cap --nproc 2 --set variant=item
expect_in "tiny_single.py:34: .item()" "$TMP/err"
# a placement that does not describe the tensor the rank holds
expect_exit 2 cap --nproc 2 --set variant=shape
expect_in "w2: the declared placements give a slice of shape \[2, 8\]" "$TMP/err"
# DP replica 1 runs one more operator: reported with its rank and first differing operator
expect_exit 1 cap --nproc 4 --set dp=2 --set variant=replica
expect_in "DP replica 1 (rank 2) ran a different program than replica 0 (rank 0): first difference at operator #2" "$TMP/err"
expect_in "rank 2 runs mul 'tiny_parallel.py:63'" "$TMP/err"
# an input both programs declare and neither step reads: a warning, not a failure
expect_exit 0 cap --nproc 2 --set variant=unread
expect_exit 0 "$VERDICT" --sm "$TMP/s.plan" --pm "$TMP/p.plan"
expect_in "^EQUIVALENT" "$TMP/out"
expect_in "warning: declared input 'unused' (rank 1, as 'unused') is read by neither step" "$TMP/out"
echo ok
