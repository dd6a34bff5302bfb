#!/bin/sh
# Runs the main paths (gen, plan validate/stats, exec, verify, mutate) under
# valgrind and fails on any memory error or definite/indirect leak.
# `make valgrind`; not part of `make test` (slow).
set -eu
V=${1:-bin/verdict}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
vg() { valgrind -q --leak-check=full --errors-for-leak-kinds=definite,indirect --error-exitcode=9 "$V" "$@" >/dev/null 2>"$T/vg.err" || {
  rc=$?; [ $rc -ne 9 ] && [ $rc -le 3 ] && return 0; cat "$T/vg.err"; echo "valgrind: verdict $*: exit $rc"; exit 1; }; }
vg gen --model llama3 --layers 1 --hidden 16 --heads 2 --seq 4 --batch 4 --dp 2 --tp 2 --pp 1 --nm 2 --single "$T/s.plan" --parallel "$T/p.plan"
vg plan validate "$T/p.plan"
vg plan stats "$T/p.plan"
vg plan dump --json "$T/p.plan"
vg exec --sm "$T/s.plan" --pm "$T/p.plan"
vg -q --threads 1 --sm "$T/s.plan" --pm "$T/p.plan"
"$V" mutate --bug 7 "$T/p.plan" "$T/b.plan" >/dev/null
vg -q --threads 1 --sm "$T/s.plan" --pm "$T/b.plan" --json "$T/r.json"
head -c 2000 "$T/p.plan" >"$T/t.plan"
vg plan validate "$T/t.plan"
echo "valgrind: main paths clean"
