# Issue 29 item 7: the nnScaler importer ends in exit 2 with one line for any file, at
# bounded depth and size (tools/nnscaler/pickle_safe.py MAX_DEPTH, the integer bounds of
# convert.py and bounds.py, the record budget of convert.py, nnscaler2plan's top-level
# handler; docs/guarantees.md).
# Each hostile pickle is a real corpus pickle with one value changed
# (tests/fuzz/picklelib.py), or a small hand-made one.
. "$(dirname "$0")/lib.sh"
set -e
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
C="$ROOT/../shared/corpus/nnscaler"
[ -d "$C" ] || { echo "skip: no corpus at $C"; exit 0; }
PY=/usr/bin/python3
CONV="$ROOT/tools/nnscaler2plan"
S1="$C/mlp_mgener_dp1_pp1_tp1_nm1_gbs16_dim1024_ly2.pkl"
P1="$C/mlp_mgener_dp2_pp2_tp2_nm2_gbs16_dim1024_ly2.pkl"

$PY - "$TMP" "$S1" "$P1" "$ROOT/tests/fuzz" <<'PY'
import sys
tmp, s1, p1, lib = sys.argv[1:5]
sys.path.insert(0, lib)
import picklelib as pl
P = open(p1, "rb").read()
S = open(s1, "rb").read()
def put(name, data):
    open("%s/%s.pkl" % (tmp, name), "wb").write(data)
# the crash of the issue: a 150 KB tuple nested 150,000 deep as a dict key (was SIGSEGV)
put("deep_key", pl.deep_tuple_key(150000))
# its siblings: a deep list, a deep tuple inside the plan (key of an attribute dict)
put("deep_list", pl.deep_list(100000))
ops = pl.raw_ops(P)
i = next(k for k, (n, a, _) in enumerate(ops) if n == "SHORT_BINUNICODE" and a == "runtime_ndevs")
deep = pl.pickle.NONE + pl.pickle.TUPLE1 * 5000
ops[i + 2] = ("RAW", None, deep)  # runtime_ndevs = (((None,),),...)
put("deep_value", pl.join(ops))
# time: 20,000 dict keys that hash alike (11 s of quadratic inserts before)
put("collide", pl.colliding_keys(20000))
# work: one memoized program run by 12,000 devices (a 220 KB file; the old importer took
# 39 s and 520 MB at 20,000 devices and wrote a 35 MB plan)
put("shared", pl.shared_program(S, 12000))
# integers that size something
put("ndevs_2e70", pl.set_after_key(P, "runtime_ndevs", pl.enc_int(2 ** 70)))
put("ndevs_2e31", pl.set_after_key(P, "runtime_ndevs", pl.enc_int(2 ** 31)))
put("ndevs_neg", pl.set_after_key(P, "runtime_ndevs", pl.enc_int(-8)))
put("nm_2e40", pl.set_after_key(P, "_num_microbatches", pl.enc_int(2 ** 40)))
put("nm_2e70", pl.set_after_key(P, "_num_microbatches", pl.enc_int(2 ** 70)))
# runtime_ndevs just under the bound: a plan verdict accepts, or a refusal; never a plan
# verdict refuses (2^31 - 4 ranks = 4 devices x 536870911 replicas)
put("ndevs_max", pl.set_after_key(P, "runtime_ndevs", pl.enc_int(2 ** 31 - 4)))
# integers of the first records (one in 50 of the first 400): 2^70, 2^63, 2^62, -1, 0
ints = pl.int_positions(P)[:400]
for k, pos in enumerate(ints[::50]):
    for tag, v in (("a", 2 ** 70), ("b", 2 ** 63), ("c", 2 ** 62), ("d", -1), ("e", 0)):
        o = pl.raw_ops(P)
        o[pos] = ("RAW", None, pl.enc_int(v))
        put("int%02d%s" % (k, tag), pl.join(o))
# an integer of 48,000 decimal digits (str() of it raises in Python 3.11)
put("huge_digits", pl.set_after_key(P, "runtime_ndevs", pl.pickle.LONG4 + (20000).to_bytes(4, "little") + b"\x01" * 20000))
PY

# one_line FILE: exit 2 or exit 0; on exit 2 one line naming the file, never a traceback;
# on exit 0 both plans are accepted by verdict.
check() {
  f=$1
  set +e
  timeout 120 $PY "$CONV" --sm "$S1" --pm "$f" --single "$TMP/o.s.plan" --parallel "$TMP/o.p.plan" >"$TMP/out" 2>"$TMP/err"
  rc=$?
  set -e
  case $rc in
  0)
    expect_exit 0 "$VERDICT" plan validate "$TMP/o.s.plan"
    expect_exit 0 "$VERDICT" plan validate "$TMP/o.p.plan" ;;
  2)
    [ "$(wc -l <"$TMP/err")" -eq 1 ] || { cat "$TMP/err"; fail "$f: expected one line"; }
    expect_in "$(basename "$f")" "$TMP/err"
    if grep -q "Traceback\|internal error" "$TMP/err"; then cat "$TMP/err"; fail "$f: not a refusal of the input"; fi ;;
  *) cat "$TMP/err"; fail "$f: exit $rc" ;;
  esac
}
refused() { # refused NAME WHAT: exit 2 and WHAT in the message
  check "$TMP/$1.pkl"
  [ "$rc" = 2 ] || fail "$1.pkl: accepted"
  expect_in "$2" "$TMP/err"
}
refused deep_key "nested more than 1000 deep"
refused deep_list "nested more than 1000 deep"
refused deep_value "nested more than 1000 deep"
refused ndevs_2e70 "runtime_ndevs: expected an integer in \[1, 2147483647\], got a 71-bit integer"
refused ndevs_2e31 "runtime_ndevs: expected an integer in \[1, 2147483647\], got 2147483648"
refused ndevs_neg "runtime_ndevs"
refused nm_2e40 "_num_microbatches: expected an integer in \[1, 2147483647\]"
refused nm_2e70 "_num_microbatches"
refused huge_digits "runtime_ndevs"
refused shared "the plan would hold more than"
refused collide "more than 32 keys with one hash"
check "$TMP/ndevs_max.pkl"
for f in "$TMP"/int*.pkl; do check "$f"; done

# A bug of the importer (an exception no input check knows) is one line that says so, exit 2.
set +e
$PY - "$ROOT/tools" "$CONV" "$S1" "$P1" "$TMP" >"$TMP/out" 2>"$TMP/err" <<'PY'

import runpy, sys
tools, conv, s1, p1, tmp = sys.argv[1:6]
sys.path.insert(0, tools)
from nnscaler import convert
class Boom(Exception):
    pass
def run(self):
    raise Boom("injected")
convert.Conv.run = run
sys.argv = [conv, "--sm", s1, "--pm", p1, "--single", tmp + "/i.s", "--parallel", tmp + "/i.p"]
runpy.run_path(conv, run_name="__main__")
PY
rc=$?
set -e
[ "$rc" = 2 ] || { cat "$TMP/err"; fail "internal error: exit $rc, expected 2"; }
[ "$(wc -l <"$TMP/err")" -eq 1 ] || { cat "$TMP/err"; fail "internal error: expected one line"; }
expect_in "internal error (a bug of the importer" "$TMP/err"
expect_in "Boom: injected" "$TMP/err"
echo ok
