#!/bin/sh
# Prints the example report of docs/reading-a-report.md from a real run:
# bug 1 in layer 1 of the llama3 dp2 tp2 pp2 nm2 pair of `make demo`, text
# report with -q (no timings: the same bytes on every machine), indented by
# four spaces as the page shows it.  --write replaces the page's block (between
# its "example: begin" and "example: end" comments); tests/e2e/19_reading_doc.sh
# fails when the page and this output differ.  Run from the repository root
# after `make`; VERDICT overrides bin/verdict.
set -eu
V=${VERDICT:-bin/verdict}
V=$(cd "$(dirname "$V")" && pwd)/$(basename "$V")
DOC=$(pwd)/docs/reading-a-report.md
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
(
  cd "$T"
  "$V" gen --model llama3 --layers 2 --hidden 64 --heads 4 --seq 16 --batch 8 \
    --dp 2 --tp 2 --pp 2 --nm 2 --single single.plan --parallel tp2pp2dp2.plan >/dev/null
  "$V" mutate --bug 1 --layer 1 tp2pp2dp2.plan bug1.plan >/dev/null
  set +e
  "$V" -q --sm single.plan --pm bug1.plan >report.txt
  rc=$?
  set -e
  [ "$rc" = 1 ] || { echo "reading_example: expected exit 1, got $rc" >&2; exit 1; }
  sed 's/^\(.\)/    \1/' report.txt >block.txt
)
if [ "${1:-}" = --write ]; then
  awk -v blk="$T/block.txt" '
    /<!-- example: begin/ { print; print ""; while ((getline l < blk) > 0) print l; print ""; skip = 1; next }
    /<!-- example: end/ { skip = 0 }
    !skip { print }' "$DOC" >"$T/doc.md"
  cat "$T/doc.md" >"$DOC"
else
  cat "$T/block.txt"
fi
