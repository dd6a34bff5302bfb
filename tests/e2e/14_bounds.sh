# Issue 29, items 2-5: work bounded by the file, limits reported as
# INCONCLUSIVE, and the boundary annotations docs/plan-format.md requires.
# Each block is one item; each asserts the exit code and the field or limit
# named.  Every run is under `timeout`: a regression to unbounded work fails
# here instead of hanging `make test`.
. "$(dirname "$0")/lib.sh"
set -e
expect_exit 0 "$VERDICT" gen --model mlp --dp 2 --tp 2 --single "$TMP/s.plan" --parallel "$TMP/p.plan"
# setpart IN OUT N: tensor 16's annotation claims part [0, N]
setpart() {
  /usr/bin/python3 - "$1" "$2" "$3" <<'PY'
import msgpack, sys
d = msgpack.unpackb(open(sys.argv[1], 'rb').read(), raw=True)
t = next(t for t in d[b'tensors'] if t[b'id'] == 16)
t[b'lin'][b'part'] = [0, int(sys.argv[3])]
open(sys.argv[2], 'wb').write(msgpack.packb(d, use_bin_type=False))
PY
}

# 2. A lineage part count is bounded at read time (LIN_PART_MAX), and below
# the bound the part checks are O(listed parts): n = 2^62 was accepted and
# hung verify, exec and --no-infer; n = 2^20 (the limit) is a DATAFLOW
# finding (the other parts are missing) in well under a second.
setpart "$TMP/p.plan" "$TMP/p62.plan" 4611686018427387904
expect_exit 2 timeout 20 "$VERDICT" plan validate "$TMP/p62.plan"
expect_in "tensor 16 'layers.0.fc2': lin.part: expected a part count n <= 1048576 (LIN_PART_MAX" "$TMP/err"
expect_exit 2 timeout 20 "$VERDICT" --sm "$TMP/s.plan" --pm "$TMP/p62.plan"
expect_in "LIN_PART_MAX" "$TMP/err"
"$VERDICT" limits >"$TMP/limits"
expect_in "LIN_PART_MAX" "$TMP/limits"
setpart "$TMP/p.plan" "$TMP/p20.plan" 1048576
for flags in "" "--no-infer"; do
  # shellcheck disable=SC2086
  expect_exit 1 timeout 20 "$VERDICT" -q $flags --sm "$TMP/s.plan" --pm "$TMP/p20.plan"
  expect_in "as 1048576 parts: parts 1, 2, 3, 4, 5, 6, ... missing" "$TMP/out"
done
expect_exit 1 timeout 20 "$VERDICT" exec --sm "$TMP/s.plan" --pm "$TMP/p20.plan"
expect_in "value part 1 of 1048576 has no instance" "$TMP/out"
echo "ok: item 2, lineage parts"

# 4. A limit is INCONCLUSIVE, never a finding: a correct chain of 100,001
# nodes annotated only at its ends (no inference) is one cone past
# CONE_MAX.  It was NOT EQUIVALENT, DATAFLOW "not reachable within 100000
# nodes"; now exit 3 naming the limit, in the text and the JSON report.
/usr/bin/python3 - "$TMP" 100001 <<'PY'
import msgpack, sys
tmp, n = sys.argv[1], int(sys.argv[2])
for kind in ('single', 'parallel'):
    T = [{'id': i, 'shape': [2], 'dtype': 'f64', 'role': 'act', 'scope': 'mb'} for i in range(n + 1)]
    T[0]['role'] = 'input'
    T.append({'id': n + 1, 'name': 'loss', 'shape': [], 'dtype': 'f64', 'role': 'loss', 'scope': 'mb'})
    if kind == 'parallel':
        T[0]['lin'] = {'full': 0}
        T[-1]['lin'] = {'full': n + 1}
    N = [{'id': i, 'op': 'identity', 'segment': 0, 'phase': 'fwd', 'in': [i], 'out': [i + 1]} for i in range(n)]
    N.append({'id': n, 'op': 'sum', 'segment': 0, 'phase': 'fwd', 'in': [n], 'out': [n + 1],
              'attrs': {'dims': [0], 'keepdim': 0}})
    p = {'format': 'verdict-plan', 'version': 1, 'kind': kind, 'segments': ['fwd'], 'schedule': [[[0, 0]]],
         'tensors': T, 'nodes': N}
    open('%s/chain.%s.plan' % (tmp, kind), 'wb').write(msgpack.packb(p, use_bin_type=False))
PY
expect_exit 3 timeout 60 "$VERDICT" -q --no-infer --sm "$TMP/chain.single.plan" --pm "$TMP/chain.parallel.plan" \
  --json "$TMP/chain.json"
expect_in "^INCONCLUSIVE" "$TMP/out"
expect_in "INCONCLUSIVE (limit): target 'loss' final slice \[\] not proven: its stage passes CONE_MAX = 100000" "$TMP/out"
if grep -q "DATAFLOW\|NOT EQUIVALENT" "$TMP/out"; then fail "a limit reported as a finding"; fi
/usr/bin/python3 - "$TMP/chain.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d['verdict'] == 'inconclusive', d['verdict']
assert any('CONE_MAX' in x['reason'] for x in d['inconclusive']), d['inconclusive']
PY
echo "ok: item 4, limits are INCONCLUSIVE"
