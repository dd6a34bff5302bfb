# Helpers sourced by the end-to-end scripts.  $VERDICT is the binary under test.
set -u
: "${VERDICT:?VERDICT must point at bin/verdict}"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# expect_exit CODE CMD...: runs CMD, captures stdout/stderr in $TMP/out, $TMP/err
expect_exit() {
  want=$1; shift
  set +e
  "$@" >"$TMP/out" 2>"$TMP/err"
  got=$?
  set -e
  [ "$got" = "$want" ] || { cat "$TMP/out" "$TMP/err"; fail "$* exited $got, expected $want"; }
}
expect_in() { grep -q -- "$1" "$2" || { cat "$2"; fail "expected '$1' in $2"; }; }
# json EXPR: the Python expression EXPR over the JSON report $TMP/r.json (read as d)
json() { python3 -c "import json,sys; d=json.load(open('$TMP/r.json')); print(eval(sys.argv[1]))" "$1"; }
# mutant_not_equivalent N MUTATE-OPTIONS...: `verdict mutate --bug N` makes $TMP/b.plan of
# $TMP/p.plan, and the verifier finds it NOT EQUIVALENT to $TMP/s.plan (exit 1), the JSON
# report left in $TMP/r.json
mutant_not_equivalent() {
  _bug=$1
  shift
  expect_exit 0 "$VERDICT" mutate --bug "$_bug" "$@" "$TMP/p.plan" "$TMP/b.plan"
  expect_exit 1 "$VERDICT" -q --sm "$TMP/s.plan" --pm "$TMP/b.plan" --json "$TMP/r.json"
  expect_in "^NOT EQUIVALENT" "$TMP/out"
}
