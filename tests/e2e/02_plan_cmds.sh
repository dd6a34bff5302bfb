# Issue 2: plan validate / dump / stats on generated plans, and clear errors
# naming the file, the record and the field on broken ones.
. "$(dirname "$0")/lib.sh"
set -e
expect_exit 0 "$VERDICT" gen --model llama3 --layers 2 --hidden 32 --heads 4 --seq 8 --batch 4 \
  --dp 2 --tp 2 --pp 2 --nm 2 --single "$TMP/s.plan" --parallel "$TMP/p.plan"
expect_exit 0 "$VERDICT" plan validate "$TMP/p.plan"
expect_in "valid parallel plan" "$TMP/out"
expect_exit 0 "$VERDICT" plan stats "$TMP/p.plan"
expect_in "ranks:    8 (4 stored x 2 replicas)" "$TMP/out"
expect_in "all_reduce" "$TMP/out"
expect_in "by phase: fwd" "$TMP/out"
expect_exit 0 "$VERDICT" plan dump "$TMP/s.plan"
expect_in "plan: single" "$TMP/out"
expect_in "rms_norm" "$TMP/out"
expect_exit 0 "$VERDICT" plan dump --json "$TMP/p.plan"
python3 -c "
import json, sys
d = json.load(open('$TMP/out'))
assert d['format'] == 'verdict-plan' and d['version'] == 1 and d['kind'] == 'parallel'
assert d['world']['dp'] == 2 and d['world']['replicas'] == 2 and d['world']['stored_ranks'] == 4
assert any(t.get('lin') for t in d['tensors'])
assert any(n['op'] == 'all_reduce' and n.get('group') for n in d['nodes'])
" || fail "plan dump --json is not the expected JSON"
# Broken files: truncated, and a byte flipped in the middle.
head -c 3000 "$TMP/p.plan" >"$TMP/trunc.plan"
expect_exit 2 "$VERDICT" plan validate "$TMP/trunc.plan"
expect_in "trunc.plan" "$TMP/err"
[ "$(wc -l <"$TMP/err")" = 1 ] || fail "error is not one line"
expect_exit 2 "$VERDICT" --sm "$TMP/s.plan" --pm "$TMP/trunc.plan"
expect_in "trunc.plan" "$TMP/err"
# A single plan where a parallel one is expected, and the reverse.
expect_exit 2 "$VERDICT" --sm "$TMP/p.plan" --pm "$TMP/s.plan"
expect_in "kind" "$TMP/err"
echo ok
