# Issue 29 item 1: what an output path may be, for every writer (common/outfile.h,
# tools/safe_output.py; docs/guarantees.md).  An output that exists and is
# not a regular file (FIFO, character device, directory) or is a symbolic link is
# refused with exit 2 and one line naming it, and is left as it was; a missing
# directory is refused; an existing file keeps its mode; a planted PATH.tmp
# symlink is never followed.  Checked for verdict gen, plan strip, mutate, exec
# --dump, the report outputs, nnscaler2plan and torch2plan.
. "$(dirname "$0")/lib.sh"
set -e
ROOT=$(cd "$(dirname "$0")/../.." && pwd)

# A directory of hostile outputs: a FIFO, a link to a regular file, a dangling
# link, a character device (mknod when we may, else a link's target is not
# needed: /dev/null itself is used), a directory.
mkfifo "$TMP/fifo"
echo keep >"$TMP/victim"
ln -s "$TMP/victim" "$TMP/link"
ln -s "$TMP/nowhere" "$TMP/dangling"
mkdir "$TMP/dir"
if mknod "$TMP/null" c 1 3 2>/dev/null; then DEV="$TMP/null"; else DEV=/dev/null; fi

# refused PATH WHY CMD...: exit 2, one line naming PATH and WHY, PATH unchanged.
refused() {
  p=$1; why=$2; shift 2
  before=$(ls -la "$p" 2>&1 | sed 's/ [A-Z][a-z][a-z] .*//')
  expect_exit 2 timeout 60 "$@"
  [ "$(wc -l <"$TMP/err")" -eq 1 ] || { cat "$TMP/err"; fail "$*: expected one line on stderr"; }
  expect_in "$p" "$TMP/err"
  expect_in "$why" "$TMP/err"
  after=$(ls -la "$p" 2>&1 | sed 's/ [A-Z][a-z][a-z] .*//')
  [ "$before" = "$after" ] || fail "$*: $p changed: '$before' -> '$after'"
  [ "$(cat "$TMP/victim")" = keep ] || fail "$*: the link's target was written"
  [ ! -e "$TMP/nowhere" ] || fail "$*: the dangling link's target was created"
}
# all_refused CMD-PREFIX...: the command with each hostile path appended.
all_refused() {
  refused "$TMP/fifo" "is a FIFO" "$@" "$TMP/fifo"
  refused "$TMP/link" "symbolic link" "$@" "$TMP/link"
  refused "$TMP/dangling" "symbolic link" "$@" "$TMP/dangling"
  refused "$DEV" "character device" "$@" "$DEV"
  refused "$TMP/dir" "a directory" "$@" "$TMP/dir"
  refused "$TMP/missing/out" "does not exist" "$@" "$TMP/missing/out"
}

GEN="$VERDICT gen --model mlp --dp 2 --tp 2"
expect_exit 0 $GEN --single "$TMP/s.plan" --parallel "$TMP/p.plan"

# verdict gen: each output in turn
all_refused $GEN --single "$TMP/s2.plan" --parallel
all_refused $GEN --parallel "$TMP/p2.plan" --single
[ ! -e "$TMP/s2.plan" ] && [ ! -e "$TMP/p2.plan" ] || fail "gen wrote one plan before refusing the other"
# plan strip, mutate, exec --dump
all_refused "$VERDICT" plan strip --keep boundary "$TMP/p.plan"
all_refused "$VERDICT" mutate --bug 1 "$TMP/p.plan"
all_refused "$VERDICT" exec --sm "$TMP/s.plan" --dump
# the report outputs of verify (refused before the run)
for opt in --json --html --junit --dump-stages; do
  all_refused "$VERDICT" --sm "$TMP/s.plan" --pm "$TMP/p.plan" -q $opt
done
all_refused "$VERDICT" --sm "$TMP/s.plan" --pm "$TMP/p.plan" -q --dot-stage 0

# An existing file keeps its mode (0600 stays 0600) and its new content is
# complete; no temporary is left beside it.
for f in s.plan p.plan; do chmod 600 "$TMP/$f"; done
expect_exit 0 $GEN --single "$TMP/s.plan" --parallel "$TMP/p.plan"
[ "$(stat -c %a "$TMP/s.plan")" = 600 ] || fail "gen: 0600 became $(stat -c %a "$TMP/s.plan")"
expect_exit 0 "$VERDICT" plan validate "$TMP/p.plan"
touch "$TMP/r.json" "$TMP/r.html" "$TMP/j.xml"
chmod 640 "$TMP/r.json" "$TMP/r.html" "$TMP/j.xml"
expect_exit 0 "$VERDICT" --sm "$TMP/s.plan" --pm "$TMP/p.plan" -q --json "$TMP/r.json" --html "$TMP/r.html" \
  --junit "$TMP/j.xml"
for f in r.json r.html j.xml; do
  [ "$(stat -c %a "$TMP/$f")" = 640 ] || fail "$f: 0640 became $(stat -c %a "$TMP/$f")"
  [ -s "$TMP/$f" ] || fail "$f is empty"
done
if ls -a "$TMP" | grep -q '\.tmp'; then ls -la "$TMP"; fail "a temporary was left behind"; fi
# "-" is stdout for --json only
expect_exit 0 "$VERDICT" --sm "$TMP/s.plan" --pm "$TMP/p.plan" -q --json -
expect_in '"verdict":"equivalent"' "$TMP/out"
expect_exit 2 "$VERDICT" --sm "$TMP/s.plan" --pm "$TMP/p.plan" -q --html -

# The Python tools (Debian's python3: msgpack, torch).
C="$ROOT/../shared/corpus/nnscaler"
if [ -d "$C" ]; then
  CONV="/usr/bin/python3 $ROOT/tools/nnscaler2plan"
  S1="$C/mlp_mgener_dp1_pp1_tp1_nm1_gbs16_dim1024_ly2.pkl"
  P1="$C/mlp_mgener_dp2_pp2_tp2_nm2_gbs16_dim1024_ly2.pkl"
  all_refused $CONV --sm "$S1" --pm "$P1" --single "$TMP/ns.plan" --parallel
  all_refused $CONV --sm "$S1" --pm "$P1" --parallel "$TMP/np.plan" --single
  # a planted PATH.tmp symlink (the old fixed temporary) is not followed
  ln -s "$TMP/victim" "$TMP/np.plan.tmp"
  ln -s "$TMP/victim" "$TMP/ns.plan.tmp"
  echo old >"$TMP/np.plan"
  chmod 600 "$TMP/np.plan"
  expect_exit 0 $CONV --sm "$S1" --pm "$P1" --single "$TMP/ns.plan" --parallel "$TMP/np.plan"
  [ "$(cat "$TMP/victim")" = keep ] || fail "nnscaler2plan followed a planted .tmp link"
  [ -L "$TMP/np.plan.tmp" ] || fail "nnscaler2plan replaced the planted .tmp link"
  [ "$(stat -c %a "$TMP/np.plan")" = 600 ] || fail "nnscaler2plan: 0600 became $(stat -c %a "$TMP/np.plan")"
  expect_exit 0 "$VERDICT" plan validate "$TMP/np.plan"
  rm -f "$TMP/np.plan.tmp" "$TMP/ns.plan.tmp"
fi
# (the PyTorch tools run under the project's .venv, made by make deps: never skipped)
T2P="/usr/bin/python3 $ROOT/tools/torch2plan --single $ROOT/tests/torch/tiny_single.py"
all_refused $T2P --out-single
ln -s "$TMP/victim" "$TMP/t.plan.tmp"
echo old >"$TMP/t.plan"
chmod 600 "$TMP/t.plan"
expect_exit 0 $T2P --out-single "$TMP/t.plan"
[ "$(cat "$TMP/victim")" = keep ] || fail "torch2plan followed a planted .tmp link"
[ "$(stat -c %a "$TMP/t.plan")" = 600 ] || fail "torch2plan: 0600 became $(stat -c %a "$TMP/t.plan")"
expect_exit 0 "$VERDICT" plan validate "$TMP/t.plan"
# the parallel output too, refused before anything is captured
refused "$TMP/fifo" "is a FIFO" $T2P --parallel "$ROOT/tests/torch/tiny_parallel.py" --nproc 2 \
  --out-single "$TMP/t2.plan" --out-parallel "$TMP/fifo"
echo ok
