# Issue 30: `verdict gate MANIFEST` and the proof cache (docs/gate.md,
# docs/verifier.md section 9); nnScaler pickles given straight to verify;
# a larger global batch of the same model is BATCH (exit 1).
. "$(dirname "$0")/lib.sh"
set -e
V=$VERDICT
R=$(cd "$(dirname "$0")/../.." && pwd)
# the cache key file goes here, not into the user's ~/.config
export XDG_CONFIG_HOME="$TMP/cfg"
unset VERDICT_CACHE_KEY || true
G="--model llama3 --layers 2 --hidden 16 --heads 4 --seq 8 --dp 2 --tp 2 --pp 2 --nm 2"
expect_exit 0 "$V" gen $G --batch 8 --single "$TMP/s.plan" --parallel "$TMP/p.plan"
expect_exit 0 "$V" mutate --bug 1 --layer 0 "$TMP/p.plan" "$TMP/b1.plan"
# the same model on another global batch: batch 4 single, batch 8 parallel
expect_exit 0 "$V" gen --model llama3 --layers 2 --hidden 16 --heads 4 --seq 8 --batch 4 \
  --single "$TMP/s4.plan" --parallel "$TMP/p4.plan"
json() { /usr/bin/python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1"; }

# -- a larger global batch: NOT EQUIVALENT with a BATCH finding naming the
# tensor and both extents (it was refused as "do not belong together", exit 2)
expect_exit 1 "$V" --sm "$TMP/s4.plan" --pm "$TMP/p.plan" --json "$TMP/batch.json"
expect_in "BATCH" "$TMP/out"
expect_in "data input 'tokens' dim 0: .* read \[0:8), the single-device plan reads 4" "$TMP/out"
[ "$(json "$TMP/batch.json" 'j["findings"][0]["diagnosis"]')" = BATCH ] || fail "JSON: first finding not BATCH"
[ "$(json "$TMP/batch.json" 'j["failures"][0]["tensor"]["name"]')" = tokens ] || fail "JSON: BATCH tensor not named"

# -- the manifest: errors name the file, the line and the key (exit 2)
printf '[a]\nsingle = s.plan\nparallel = p.plan\n' >"$TMP/m1"
expect_exit 2 "$V" gate "$TMP/m1"
expect_in "m1: configuration 'a' (line 1): expect: missing" "$TMP/err"
printf '[a]\nsingle = s.plan\nparalel = p.plan\n' >"$TMP/m2"
expect_exit 2 "$V" gate "$TMP/m2"
expect_in "m2: line 3: paralel: unknown key" "$TMP/err"
printf '[a]\nsingle = s.plan\nparallel = p.plan\nexpect = not-equivalent SCALEE\n' >"$TMP/m3"
expect_exit 2 "$V" gate "$TMP/m3"
expect_in "line 4: expect:" "$TMP/err"
printf '[a]\nexpect = equivalent\n[a]\n' >"$TMP/m4"
expect_exit 2 "$V" gate "$TMP/m4"
expect_in "named twice" "$TMP/err"

# -- a gate run: one table, one exit code; classes shared between
# configurations proven once (a-copy takes them from the first)
cat >"$TMP/gate.manifest" <<'EOF'
# relative paths are relative to this file
[correct]
single   = s.plan
parallel = p.plan
expect   = equivalent

[bug1]
single   = s.plan
parallel = b1.plan
expect   = not-equivalent MISSING_REDUCTION

[batch]
single   = s4.plan
parallel = p.plan      # batch 8 against 4
expect   = not-equivalent BATCH
EOF
cd "$TMP"
expect_exit 0 "$V" gate gate.manifest --cache "$TMP/c" --json "$TMP/g1.json"
expect_in "^GATE PASSED: 3 of 3 configurations as expected" "$TMP/out"
expect_in "^  bug1 *NOT EQUIVALENT: MISSING_REDUCTION *NOT EQUIVALENT: MISSING_REDUCTION *yes" "$TMP/out"
expect_in "^  batch *NOT EQUIVALENT: BATCH" "$TMP/out"
[ "$(json "$TMP/g1.json" 'j["exit_code"], j["as_expected"]')" = "0 3" ] || fail "gate JSON: exit code / count"
# bug1 shares every class but the failing ones with 'correct': proven once
shared=$(json "$TMP/g1.json" 'j["proof_cache"]["from_process"]')
[ "$shared" -gt 50 ] || fail "expected classes shared between configurations, got $shared"
stored=$(json "$TMP/g1.json" 'j["proof_cache"]["stored"]')
classes=$(json "$TMP/g1.json" 'j["configurations"][0]["report"]["summary"]["classes"]')
[ "$stored" -ge "$classes" ] || fail "stored $stored < classes of the correct configuration $classes"

# the second run: the correct configuration is unchanged (nothing run), the
# buggy one re-proves only its failing classes
expect_exit 0 "$V" gate gate.manifest --cache "$TMP/c" --json "$TMP/g2.json"
expect_in "^  correct *EQUIVALENT *EQUIVALENT *yes *unchanged" "$TMP/out"
[ "$(json "$TMP/g2.json" 'j["proof_cache"]["configurations_unchanged"]')" = 1 ] || fail "correct config not unchanged"
reused=$(json "$TMP/g2.json" '[c for c in j["configurations"] if c["name"]=="bug1"][0]["classes_reused_from_cache"]')
[ "$reused" -gt 50 ] || fail "bug1: expected classes reused from the directory, got $reused"
[ "$(json "$TMP/g2.json" 'j["proof_cache"]["stored"]')" = 0 ] || fail "second run: nothing new to store"

# plain verify --cache: every class of the correct pair reused, the report says so
expect_exit 0 "$V" --sm s.plan --pm p.plan --cache "$TMP/c"
expect_in "proof cache: $classes of $classes classes reused ($classes from the cache directory" "$TMP/out"

# one_config FILE PARALLEL EXPECT: a manifest $TMP/FILE of one configuration x, s.plan against
# PARALLEL, expected to be EXPECT
one_config() { printf '[x]\nsingle = s.plan\nparallel = %s\nexpect = %s\n' "$2" "$3" >"$TMP/$1"; }
# -- exit codes: unexpected NOT EQUIVALENT 1, wrong class 1, bad input 2
one_config e1 b1.plan "equivalent"
expect_exit 1 "$V" gate e1 --no-cache
expect_in "^GATE FAILED: 0 of 1" "$TMP/out"
expect_in "^==== configuration x: NOT EQUIVALENT (expected EQUIVALENT)" "$TMP/out"
one_config e2 b1.plan "not-equivalent SCALE"
expect_exit 1 "$V" gate e2 --no-cache
printf '[x]\nsingle = s.plan\nparallel = nothere.plan\nexpect = equivalent\n[y]\nsingle = s.plan\nparallel = p.plan\nexpect = equivalent\n' >"$TMP/e3"
expect_exit 2 "$V" gate e3 --no-cache
expect_in "^  x *BAD INPUT" "$TMP/out"
expect_in "^  y *EQUIVALENT *EQUIVALENT *yes" "$TMP/out"

# a bug expected but the pair is correct: the gate would let it through, 1
one_config e4 p.plan "not-equivalent"
expect_exit 1 "$V" gate e4 --no-cache
# inconclusive (a work budget far too small), nothing else wrong: 3
one_config e5 p.plan "equivalent"
expect_exit 3 "$V" gate e5 --no-cache --stage-budget 0.000001
expect_in "^  x *INCONCLUSIVE *EQUIVALENT *NO" "$TMP/out"
one_config e6 p.plan "inconclusive"
expect_exit 0 "$V" gate e6 --no-cache --stage-budget 0.000001

# -- a corrupted cache: every entry ignored and reported, the verdicts unchanged
cp -r "$TMP/c" "$TMP/cc"
/usr/bin/python3 - "$TMP/cc" <<'EOF'
import os, sys
d = sys.argv[1]
for i, f in enumerate(sorted(os.listdir(d))):
    p = os.path.join(d, f)
    b = bytearray(open(p, "rb").read())
    if i % 2:
        b[len(b) // 2] ^= 1          # a flipped bit in the middle (the canonical form)
    else:
        b = b[: len(b) - 5]          # truncated
    open(p, "wb").write(bytes(b))
EOF
expect_exit 0 "$V" --sm s.plan --pm p.plan --cache "$TMP/cc"
expect_in "proof cache: 0 of $classes classes reused" "$TMP/out"
expect_in "entries ignored, not trusted" "$TMP/out"
expect_exit 1 "$V" --sm s.plan --pm b1.plan --cache "$TMP/cc"
expect_in "MISSING_REDUCTION" "$TMP/out"
expect_exit 0 "$V" gate gate.manifest --cache "$TMP/cc"
expect_in "entries ignored, not trusted" "$TMP/out"

# -- forged entries (docs/verifier.md section 9, what the cache guarantees)
# (a) a valid entry of one class under another class's name: ignored
cp -r "$TMP/c" "$TMP/cs"
/usr/bin/python3 - "$TMP/cs" <<'EOF'
import os, sys
d = sys.argv[1]
v = sorted(f for f in os.listdir(d) if f.endswith(".vdp"))
for a, b in zip(v[0::2], v[1::2]):
    pa, pb = os.path.join(d, a), os.path.join(d, b)
    os.rename(pa, pa + ".x"); os.rename(pb, pa); os.rename(pa + ".x", pb)
EOF
expect_exit 1 "$V" --sm s.plan --pm b1.plan --cache "$TMP/cs"
expect_in "its canonical form differs" "$TMP/out"
# (b) a whole-configuration entry for the buggy pair, forged by someone who
# can write the directory but lacks the cache key: ignored, still NOT EQUIVALENT
forge() { # KEYFILE|- OUTDIR
/usr/bin/python3 - "$V" "$TMP/s.plan" "$TMP/b1.plan" "$1" "$2" <<'EOF'
import hashlib, hmac, os, struct, sys
exe, s, p, keyf, out = sys.argv[1:]
sha = lambda f: hashlib.sha256(open(f, "rb").read()).digest()
what = b"plans\0\0\0" + sha(s) + sha(p)
ver = struct.pack("=I", 1)
xd = sha(exe)
key = hashlib.sha256(b"verdict config cache\0" + ver + xd + what).hexdigest()
body = b"VDCF0001" + ver + struct.pack("=I", 0) + xd + struct.pack("=Q", len(what)) + what + struct.pack("=3Q", 9, 9, 9)
k = open(keyf, "rb").read() if keyf != "-" else os.urandom(32)
open(os.path.join(out, key + ".vdc"), "wb").write(body + hmac.new(k, body, hashlib.sha256).digest())
EOF
}
printf '[bug1]\nsingle = s.plan\nparallel = b1.plan\nexpect = equivalent\n' >"$TMP/f.manifest"
forge - "$TMP/c"
expect_exit 1 "$V" gate f.manifest --cache "$TMP/c"
expect_in "^  bug1 *NOT EQUIVALENT: MISSING_REDUCTION" "$TMP/out"
expect_in "authentication failed" "$TMP/out"
# (c) the trust boundary, stated honestly: whoever holds the cache key (and
# this binary) can forge an entry, so the key is kept like the binary
forge "$XDG_CONFIG_HOME/verdict/cache.key" "$TMP/c"
expect_exit 0 "$V" gate f.manifest --cache "$TMP/c"
expect_in "unchanged" "$TMP/out"
rm -f "$TMP"/c/*.vdc
# (d) a structural failure is decided without any class: a full cache of
# proven classes does not make the batch pair pass
expect_exit 1 "$V" --sm s4.plan --pm p.plan --cache "$TMP/c"

# -- concurrency: two gate runs at once on one fresh cache directory
set +e
"$V" gate gate.manifest --cache "$TMP/cc2" -q >"$TMP/r1" 2>&1 &
p1=$!
"$V" gate gate.manifest --cache "$TMP/cc2" -q >"$TMP/r2" 2>&1 &
p2=$!
wait $p1; rc1=$?
wait $p2; rc2=$?
set -e
[ $rc1 = 0 ] && [ $rc2 = 0 ] || { cat "$TMP/r1" "$TMP/r2"; fail "concurrent gate runs: exit $rc1 and $rc2"; }
grep -q "^GATE PASSED: 3 of 3" "$TMP/r1" && grep -q "^GATE PASSED: 3 of 3" "$TMP/r2" || fail "concurrent runs"
ls -a "$TMP/cc2" | grep -q '^\.tmp-' && fail "temporary files left behind"
expect_exit 0 "$V" gate gate.manifest --cache "$TMP/cc2"
if grep -q "ignored" "$TMP/out"; then cat "$TMP/out"; fail "entries of concurrent runs ignored"; fi

# -- the size cap: a tiny cap evicts entries, the verdicts stay
expect_exit 0 "$V" gate gate.manifest --cache "$TMP/small" --cache-max-mb 1 -q
[ "$(du -sk "$TMP/small" | cut -f1)" -le 1100 ] || fail "cache over its cap"

# -- PyTorch programs captured in the run: torch2plan's exit 1 (the DP
# replicas ran different programs) is the configuration's NOT EQUIVALENT
# (the PyTorch tools run under the project's .venv, made by make deps: never skipped)
cat >"$TMP/t.manifest" <<EOF
[tiny-replica]
torch-single   = $R/tests/torch/tiny_single.py
torch-parallel = $R/tests/torch/tiny_parallel.py
nproc = 4
set = dp=2
set = variant=replica
expect = equivalent
EOF
expect_exit 1 "$V" gate t.manifest --no-cache
expect_in "^  tiny-replica *NOT EQUIVALENT *EQUIVALENT *NO" "$TMP/out"
expect_in "DP replica 1 (rank 2) ran a different program" "$TMP/out"

# -- nnScaler pickles given straight to verify (converted in the run)
C=$R/../shared/corpus/nnscaler
if [ -d "$C" ] && /usr/bin/python3 -c 'import msgpack' 2>/dev/null; then
  expect_exit 0 "$V" -q --sm "$C/mlp_mgener_dp1_pp1_tp1_nm1_gbs16_dim1024_ly2.pkl" \
    --pm "$C/mlp_mgener_dp1_pp2_tp1_nm1_gbs16_dim1024_ly2.pkl"
  expect_in "^EQUIVALENT" "$TMP/out"
  # the pair whose generator divided the global batch by dp: BATCH, exit 1
  expect_exit 1 "$V" -q --sm "$C/gpt_mgener_dp1_pp1_tp1_nm1_gbs16_dim1024_ly2_h16_hi1024_sq1024.pkl" \
    --pm "$C/gpt_mgener_dp8_pp1_tp1_nm1_gbs16_dim1024_ly2_h16_hi1024_sq1024.pkl" --json "$TMP/pk.json"
  expect_in "BATCH" "$TMP/out"
  expect_in "data input 'input_ids[^']*' dim 0: the parallel plan's 8 replica(s) x 1 microbatch(es) of 16 read \[0:128)" "$TMP/out"
  [ "$(json "$TMP/pk.json" 'j["inputs"]["parallel"].endswith(".pkl")')" = True ] || fail "JSON names the temporary plan"
  # a missing interpreter is a clear error
  expect_exit 2 env VERDICT_PYTHON=/nonexistent/python3 "$V" -q --sm "$C/mlp_mgener_dp1_pp1_tp1_nm1_gbs16_dim1024_ly2.pkl" \
    --pm "$C/mlp_mgener_dp1_pp2_tp1_nm1_gbs16_dim1024_ly2.pkl"
  expect_in "no Python interpreter" "$TMP/err"
  # an interpreter without python3-msgpack (the pyenv python3 first on PATH here): the importer says so
  PY=$(command -v python3 || true)
  if [ -n "$PY" ] && ! "$PY" -c 'import msgpack' 2>/dev/null; then
    expect_exit 2 env VERDICT_PYTHON="$PY" "$V" -q --sm "$C/mlp_mgener_dp1_pp1_tp1_nm1_gbs16_dim1024_ly2.pkl" \
      --pm "$C/mlp_mgener_dp1_pp2_tp1_nm1_gbs16_dim1024_ly2.pkl"
    expect_in "python3-msgpack is missing" "$TMP/err"
  fi
  ls "${TMPDIR:-/tmp}" | grep -q "^verdict-import" && fail "temporary conversion directory left behind"
fi
echo ok
