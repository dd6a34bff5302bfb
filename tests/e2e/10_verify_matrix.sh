# Issue 3: every configuration of the generators' matrix verifies as
# EQUIVALENT, and the numeric executor agrees on each.
. "$(dirname "$0")/lib.sh"
set -e
. "$(dirname "$0")/matrix.sh"
check() { # gen args...
  expect_exit 0 "$VERDICT" gen "$@" --single "$TMP/s.plan" --parallel "$TMP/p.plan"
  expect_exit 0 "$VERDICT" -q --sm "$TMP/s.plan" --pm "$TMP/p.plan"
  expect_in "^EQUIVALENT" "$TMP/out"
  expect_in "^  proof: \([0-9]*\) stages* (one proof obligation each): \1 proven equivalent$" "$TMP/out"
  expect_exit 0 "$VERDICT" exec --sm "$TMP/s.plan" --pm "$TMP/p.plan"
  echo "ok: $*"
}
for_each_config check
