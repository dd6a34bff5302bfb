# Issue 30: the proof cache saves work, never changes a verdict.  Correct
# and buggy configurations of the bug suite's matrix (tests/bugs/run_suite.sh:
# the base configuration with twelve bug classes, and sp with two) are
# verified without any cache (`verdict --sm --pm`, one process each), then
# as one gate run on an empty cache directory (classes shared between the
# configurations) and again on the filled one (classes and unchanged
# configurations from the directory).  Every configuration must get the
# same exit code and the same findings (diagnosis, stages, counterexamples:
# the JSON "findings" array byte for byte) all three times.
. "$(dirname "$0")/lib.sh"
set -e
V=$VERDICT
export XDG_CONFIG_HOME="$TMP/cfg"
unset VERDICT_CACHE_KEY || true
B="--model llama3 --layers 2 --hidden 16 --heads 4 --seq 8 --batch 8 --dp 2 --tp 2 --pp 2 --nm 2"
expect_exit 0 "$V" gen $B --single "$TMP/base.s.plan" --parallel "$TMP/base.p.plan"
expect_exit 0 "$V" gen $B --sp --single "$TMP/sp.s.plan" --parallel "$TMP/sp.p.plan"
M="$TMP/m.manifest"
: >"$M"
add() { # NAME CONFIG PARALLEL
  printf '[%s]\nsingle = %s.s.plan\nparallel = %s\nexpect = %s\n\n' "$1" "$2" "$3" "$4" >>"$M"
}
add base base base.p.plan equivalent
add sp sp sp.p.plan equivalent
for b in 1 2 3 5 7 9 12 13 14 15 16 21; do
  site="--layer 1"
  case $b in 7|11|16) site="--layer 1 --rank 2" ;; 12|10|8) site="--layer 1 --rank 3" ;; 14) site="--layer 1 --rank 2" ;; 15) site="--rank 3" ;; esac
  # shellcheck disable=SC2086
  expect_exit 0 "$V" mutate --bug $b $site "$TMP/base.p.plan" "$TMP/base.b$b.plan"
  add "base-bug$b" base "base.b$b.plan" not-equivalent
done
for b in 4 18; do
  expect_exit 0 "$V" mutate --bug $b --layer 0 "$TMP/sp.p.plan" "$TMP/sp.b$b.plan"
  add "sp-bug$b" sp "sp.b$b.plan" not-equivalent
done
cd "$TMP"
# without any cache: one process per configuration
grep '^\[' "$M" | tr -d '[]' | while read -r name; do
  sm=$(sed -n "/^\[$name\]/,/^$/p" "$M" | sed -n 's/^single = //p')
  pm=$(sed -n "/^\[$name\]/,/^$/p" "$M" | sed -n 's/^parallel = //p')
  set +e
  "$V" --sm "$sm" --pm "$pm" --json "$TMP/$name.plain.json" >/dev/null 2>&1
  echo "$name $?" >>"$TMP/plain.codes"
  set -e
done
expect_exit 0 "$V" gate m.manifest --cache "$TMP/c" --json "$TMP/cold.json" -q
expect_exit 0 "$V" gate m.manifest --cache "$TMP/c" --json "$TMP/warm.json" -q
/usr/bin/python3 - "$TMP" <<'EOF'
import json, os, sys
t = sys.argv[1]
plain = dict(l.split() for l in open(os.path.join(t, "plain.codes")))
bad = []
for run in ("cold", "warm"):
    g = json.load(open(os.path.join(t, run + ".json")))
    for c in g["configurations"]:
        n = c["name"]
        p = json.load(open(os.path.join(t, n + ".plain.json")))
        if str(c["exit_code"]) != plain[n]:
            bad.append("%s %s: exit %s with the cache, %s without" % (run, n, c["exit_code"], plain[n]))
        elif c["exit_code"] != 0:
            if c["report"]["findings"] != p["findings"]:
                bad.append("%s %s: findings differ with the cache" % (run, n))
        elif run == "warm" and not c["unchanged_since_proven"]:
            bad.append("warm %s: not taken from the cache" % n)
    reused = g["proof_cache"]["from_directory"] + g["proof_cache"]["from_process"]
    if reused == 0:
        bad.append("%s: no class reused" % run)
if bad:
    print("\n".join(bad))
    sys.exit(1)
EOF
[ "$(wc -l <"$TMP/plain.codes")" = 16 ] || fail "expected 16 configurations"
grep -q " 0$" "$TMP/plain.codes" || fail "no correct configuration"
[ "$(grep -c " 1$" "$TMP/plain.codes")" = 14 ] || { cat "$TMP/plain.codes"; fail "expected 14 buggy configurations caught"; }
echo ok
