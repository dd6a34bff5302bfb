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
