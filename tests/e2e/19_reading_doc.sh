# Issue 30: docs/reading-a-report.md's example is the output of a real run.
# tools/reading_example.sh prints it (bug 1 in layer 1 of the make-demo
# pair); the page's block between its "example: begin" and "example: end"
# comments must be exactly that output (regenerate the page with
# `sh tools/reading_example.sh --write` after a change to the report).
. "$(dirname "$0")/lib.sh"
set -e
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
(cd "$ROOT" && VERDICT="$VERDICT" sh tools/reading_example.sh) >"$TMP/run.txt"
awk '/<!-- example: begin/ { on = 1; next } /<!-- example: end/ { on = 0 } on' "$ROOT/docs/reading-a-report.md" |
  sed '1{/^$/d}' | sed '${/^$/d}' >"$TMP/doc.txt"
[ -s "$TMP/doc.txt" ] || fail "docs/reading-a-report.md has no example block"
diff -u "$TMP/doc.txt" "$TMP/run.txt" >"$TMP/diff" || { cat "$TMP/diff"; fail "docs/reading-a-report.md's example differs from a real run (sh tools/reading_example.sh --write)"; }
echo "ok 19_reading_doc"
