# Issue 11 (causes 3 and 4, and the oracle case): plan semantics that used
# to be silently reconciled or defaulted.  Every plan edit below is done on
# the msgpack file with python3-msgpack (integers and floats keep their kind).
#  - collective members that disagree (reduce=max on one all_reduce member,
#    another split_dim on one all_to_all member): NOT EQUIVALENT (exit 1)
#    naming member, attribute and both values, in verdict and exec alike,
#    whichever member is the odd one;
#  - mis-typed, unknown attributes and wrong arities: exit 2 naming file,
#    node and attribute, in plan validate, verdict and exec; dump prints 2.0;
#  - exec agrees only after comparing every annotated tensor.
. "$(dirname "$0")/lib.sh"
set -e
PY=/usr/bin/python3
# edit IN OUT PYTHON: runs PYTHON with the plan as `p` (nodes as `N`, a dict
# by op name to lists as `by`), writes OUT.
edit() {
  $PY - "$1" "$2" "$3" <<'PYEOF'
import sys, msgpack
src, dst, code = sys.argv[1], sys.argv[2], sys.argv[3]
p = msgpack.unpackb(open(src, 'rb').read(), raw=False, strict_map_key=False)
N = p['nodes']
by = {}
for n in N:
    by.setdefault(n['op'], []).append(n)
def coll(op):
    """The members of the first collective key of operator op, by rank."""
    k = by[op][0]['coll']
    return sorted([n for n in N if n.get('coll') == k], key=lambda n: n.get('rank', 0))
exec(code)
open(dst, 'wb').write(msgpack.packb(p, use_bin_type=True))
PYEOF
}
G="--layers 2 --hidden 16 --heads 2 --seq 8 --batch 4 --vocab 32"
expect_exit 0 "$VERDICT" gen --model llama3 $G --tp 2 --single "$TMP/s.plan" --parallel "$TMP/p.plan"
expect_exit 0 "$VERDICT" gen --model moe $G --experts 4 --ep 2 --single "$TMP/ms.plan" --parallel "$TMP/mp.plan"
expect_exit 0 "$VERDICT" -q --sm "$TMP/s.plan" --pm "$TMP/p.plan"
expect_exit 0 "$VERDICT" -q --sm "$TMP/ms.plan" --pm "$TMP/mp.plan"

# ---- cause 3: collective members that disagree --------------------------
for odd in 0 1; do
  edit "$TMP/p.plan" "$TMP/ar$odd.plan" "coll('all_reduce')[$odd].setdefault('attrs', {})['reduce'] = 'max'"
  expect_exit 1 "$VERDICT" --sm "$TMP/s.plan" --pm "$TMP/ar$odd.plan"
  expect_in "DATAFLOW (graph coll_mismatch) rank" "$TMP/out"
  expect_in "has attrs.reduce = .*, but all_reduce .* on rank [0-9]* (group position [01]) has " "$TMP/out"
  expect_in '"max"' "$TMP/out"
  expect_exit 1 "$VERDICT" exec --sm "$TMP/s.plan" --pm "$TMP/ar$odd.plan"
  expect_in "DISAGREE: dataflow (coll_mismatch)" "$TMP/out"
  expect_in "attrs.reduce" "$TMP/out"
  edit "$TMP/mp.plan" "$TMP/a2a$odd.plan" \
    "m = coll('all_to_all')[$odd]; m['attrs']['split_dim'] = m['attrs'].get('split_dim', 0) + 1"
  expect_exit 1 "$VERDICT" --sm "$TMP/ms.plan" --pm "$TMP/a2a$odd.plan"
  expect_in "attrs.split_dim" "$TMP/out"
  expect_exit 1 "$VERDICT" exec --sm "$TMP/ms.plan" --pm "$TMP/a2a$odd.plan"
  expect_in "attrs.split_dim" "$TMP/out"
done

# ---- cause 4: strict attribute typing and arity ---------------------------
# check_bad FILE FIELD TEXT: validate, verdict and exec all exit 2 with one
# line naming the file, the node and the field.
check_bad() {
  expect_exit 2 "$VERDICT" plan validate "$1"
  expect_in "$(basename "$1"): node " "$TMP/err"
  expect_in ": $2: $3" "$TMP/err"
  [ "$(wc -l <"$TMP/err")" = 1 ] || fail "error is not one line"
  expect_exit 2 "$VERDICT" --sm "$TMP/s.plan" --pm "$1"
  expect_in ": $2: " "$TMP/err"
  expect_exit 2 "$VERDICT" exec --sm "$TMP/s.plan" --pm "$1"
  expect_in ": $2: " "$TMP/err"
}
edit "$TMP/p.plan" "$TMP/sm.plan" "by['softmax'][0]['attrs']['dim'] = 2.0"
check_bad "$TMP/sm.plan" attrs.dim "expected an int (a dimension), got float 2.0"
expect_exit 0 "$VERDICT" plan dump "$TMP/sm.plan"
expect_in "softmax .* dim=2.0 " "$TMP/out"
edit "$TMP/p.plan" "$TMP/rope.plan" "[n for n in by['rope'] if n['attrs'].get('pos_offset', 0) == 0][0]['attrs']['pos_offset'] = 3.0"
check_bad "$TMP/rope.plan" attrs.pos_offset "expected an int, got float 3.0"
edit "$TMP/p.plan" "$TMP/red.plan" "by['all_reduce'][0].setdefault('attrs', {})['reduce'] = 1"
check_bad "$TMP/red.plan" attrs.reduce "expected a string, got int 1"
edit "$TMP/p.plan" "$TMP/unk.plan" "by['softmax'][0]['attrs']['dimm'] = -1"
check_bad "$TMP/unk.plan" attrs.dimm "unknown attribute of softmax"
edit "$TMP/p.plan" "$TMP/lin.plan" "by['linear'][0]['in'] = by['linear'][0]['in'][:1]"
check_bad "$TMP/lin.plan" in "expected 2 to 3 inputs, got 1"
expect_in "(linear)" "$TMP/err"

# ---- found by make soundness: a rope reading its positions along another
# dimension (seq_dim 0, the batch) was EQUIVALENT when shape reduction left
# one position per shard; rope's seq_dim now keeps two.
edit "$TMP/p.plan" "$TMP/ropedim.plan" "by['rope'][0]['attrs']['seq_dim'] = 0"
expect_exit 1 "$VERDICT" -q --sm "$TMP/s.plan" --pm "$TMP/ropedim.plan"
expect_exit 1 "$VERDICT" exec --sm "$TMP/s.plan" --pm "$TMP/ropedim.plan"

# ---- the oracle compares every annotated tensor -------------------------
expect_exit 0 "$VERDICT" exec --sm "$TMP/s.plan" --pm "$TMP/p.plan"
expect_in "exec: AGREE ([1-9][0-9]* tensors, [0-9]* instances, [1-9][0-9]* elements" "$TMP/out"
edit "$TMP/s.plan" "$TMP/empty.plan" "p['nodes'] = []"
expect_exit 1 "$VERDICT" exec --sm "$TMP/empty.plan" --pm "$TMP/p.plan"
expect_in "which the single plan never produces or reads" "$TMP/out"
# without any lineage the weights and the loss are outputs nothing states:
# refused before anything runs (issue 29 item 5)
edit "$TMP/p.plan" "$TMP/nolin.plan" "[t.pop('lin', None) for t in p['tensors']]"
expect_exit 2 "$VERDICT" exec --sm "$TMP/s.plan" --pm "$TMP/nolin.plan"
expect_in "lin: expected a lineage annotation (role weight)" "$TMP/err"
echo ok
