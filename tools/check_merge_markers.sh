#!/bin/sh
# tools/check_merge_markers.sh - fails when a tracked text file still holds
# the markers of an unresolved merge.  A leftover conflict in docs or code
# reached main once; a compiler catches it in C, nothing caught it in docs.
set -eu
cd "$(dirname "$0")/.."
found=$(grep -rnE '^(<<<<<<< |>>>>>>> )' --include='*.c' --include='*.h' --include='*.def' \
  --include='*.md' --include='*.sh' --include='*.py' --include='Makefile' \
  common plans ops graph oracle lineage stages solver bugs verifier tests tools docs bench \
  examples Makefile README.md 2>/dev/null || true)
if [ -n "$found" ]; then
  echo "$found"
  echo "merge markers left in the files above"
  exit 1
fi
echo "ok   no merge markers"
