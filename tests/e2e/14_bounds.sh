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
