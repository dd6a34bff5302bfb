# Issue 29 item 6: names reach every output escaped and whole characters.
# Both plans of a small MLP pair get nasty tensor and node names and source
# locations (tests/e2e/nasty_names.py: a long multi-byte run that every
# fixed buffer cuts, ESC sequences, a line "EQUIVALENT", U+FFFF, C0/DEL/C1,
# U+2028, a bidi override, ]]>, --, &, quotes, dot's backslash escapes).
# Every output must stay well-formed (tests/e2e/check_outputs.py: UTF-8;
# JSON and XML parse; text has no raw control character and no forged
# verdict line), the verdicts must not change, and the JSON must carry the
# names exactly.  Also: plan dump (text and JSON), exec, --dump-stages,
# dot -> SVG, and error lines that quote a name or a path.
. "$(dirname "$0")/lib.sh"
set -e
PY=/usr/bin/python3
HERE=$(dirname "$0")
CHECK="$PY $HERE/check_outputs.py"
"$VERDICT" gen --model mlp --dp 2 --tp 2 --single "$TMP/s0.plan" --parallel "$TMP/p0.plan" >/dev/null
expect_exit 0 "$VERDICT" mutate --bug 1 "$TMP/p0.plan" "$TMP/b0.plan"
for v in long short; do
  for f in s0 p0 b0; do $PY "$HERE/nasty_names.py" "$TMP/$f.plan" "$TMP/$f.$v.plan" $v; done
  expect_exit 0 "$VERDICT" plan validate "$TMP/b0.$v.plan"

  # A failing pair: every format.
  expect_exit 1 "$VERDICT" --sm "$TMP/s0.$v.plan" --pm "$TMP/b0.$v.plan" --json "$TMP/r.$v.json" \
    --html "$TMP/r.$v.html" --junit "$TMP/r.$v.xml" --dump-stages "$TMP/stages.$v.txt"
  cp "$TMP/out" "$TMP/text.$v.txt"
  cp "$TMP/err" "$TMP/stderr.$v.txt"
  STAGE=$($PY -c "import json,sys; print(json.load(open(sys.argv[1]))['findings'][0]['representative']['stage'])" "$TMP/r.$v.json")
  expect_exit 1 "$VERDICT" -q --sm "$TMP/s0.$v.plan" --pm "$TMP/b0.$v.plan" --dot-stage "$STAGE" "$TMP/g.$v.dot"
  dot -Tsvg "$TMP/g.$v.dot" >"$TMP/g.$v.svg" 2>"$TMP/dot.err" || { cat "$TMP/dot.err"; fail "dot refused the stage graph ($v)"; }
  $CHECK --verdict "NOT EQUIVALENT" "$TMP/text.$v.txt" "$TMP/r.$v.json" "$TMP/r.$v.html" "$TMP/r.$v.xml" \
    "$TMP/g.$v.svg" || fail "outputs of the failing pair ($v names)"
  $CHECK "$TMP/stages.$v.txt" "$TMP/stderr.$v.txt" || fail "stage dump / stderr ($v names)"
  grep -q 'MISSING_REDUCTION at identity' "$TMP/text.$v.txt" || fail "diagnosis changed with $v names"

  # The JSON carries the names exactly (not escaped twice, not cut).
  $PY - "$TMP/r.$v.json" "$TMP/b0.$v.plan" <<'PYEOF' || fail "JSON names ($v)"
import json, sys, msgpack
r = json.load(open(sys.argv[1]))
p = msgpack.unpackb(open(sys.argv[2], "rb").read(), raw=False)
names = {n["name"] for n in p["nodes"]}
srcs = {n["src"] for n in p["nodes"]}
rep = r["findings"][0]["representative"]
got = [n for n in rep["nodes"] if n["plan"] == "parallel"]
assert got and all(n["name"] in names and n["src"] in srcs for n in got), got[:1]
assert r["findings"][0]["node"]["name"] in names
assert "\nEQUIVALENT\n" in r["findings"][0]["node"]["name"] and "\uffff" in r["findings"][0]["node"]["name"]
PYEOF

  # The correct pair: EQUIVALENT, one verdict line only.
  expect_exit 0 "$VERDICT" --sm "$TMP/s0.$v.plan" --pm "$TMP/p0.$v.plan" --json "$TMP/ok.$v.json" --junit "$TMP/ok.$v.xml" -v
  cp "$TMP/out" "$TMP/ok.$v.txt"
  $CHECK --verdict EQUIVALENT "$TMP/ok.$v.txt" "$TMP/ok.$v.json" "$TMP/ok.$v.xml" || fail "outputs of the correct pair ($v)"

  # plan dump, text and JSON; exec.
  expect_exit 0 "$VERDICT" plan dump "$TMP/b0.$v.plan"
  cp "$TMP/out" "$TMP/dump.$v.txt"
  expect_exit 0 "$VERDICT" plan dump --json "$TMP/b0.$v.plan"
  cp "$TMP/out" "$TMP/dump.$v.json"
  $CHECK "$TMP/dump.$v.txt" "$TMP/dump.$v.json" || fail "plan dump ($v)"
  expect_exit 1 "$VERDICT" exec --sm "$TMP/s0.$v.plan" --pm "$TMP/b0.$v.plan"
  cp "$TMP/out" "$TMP/exec.$v.txt"
  $CHECK "$TMP/exec.$v.txt" || fail "exec output ($v)"
done

# In the pictures the escapes are visible (short names fit the label budget).
grep -q 'x1B\[31m' "$TMP/g.short.svg" || fail "the ESC of a name is not shown escaped in the SVG"

# Error lines quoting a name from the file, or a path from the command line.
$PY - "$TMP/b0.short.plan" "$TMP/badop.plan" <<'PYEOF'
import sys, msgpack
d = msgpack.unpackb(open(sys.argv[1], "rb").read(), raw=False)
d["nodes"][3]["op"] = "\x1b[2J\nEQUIVALENT\n\uffff"
d["nodes"][3]["layer"] = "x"  # the error names the record: node 3 and its (nasty) name
open(sys.argv[2], "wb").write(msgpack.packb(d, use_bin_type=True))
PYEOF
expect_exit 2 "$VERDICT" plan validate "$TMP/badop.plan"
cp "$TMP/err" "$TMP/badop.err"
$CHECK "$TMP/badop.err" || fail "the error line quoting a name"
grep -q "x1B" "$TMP/badop.err" || fail "the record's name is not in the error line"
[ "$(wc -l <"$TMP/badop.err")" = 1 ] || fail "the error is not one line"
expect_exit 2 "$VERDICT" --sm "$TMP/badop.plan" --pm "$TMP/b0.short.plan"
cp "$TMP/err" "$TMP/badop2.err"
$CHECK "$TMP/badop2.err" || fail "verify's error line quoting a name"
BADPATH="$TMP/$(printf 'x\033[2Jy\nEQUIVALENT\n')z.plan"
expect_exit 2 "$VERDICT" plan validate "$BADPATH"
cp "$TMP/err" "$TMP/badpath.err"
$CHECK "$TMP/badpath.err" || fail "the error line quoting a path"
[ "$(wc -l <"$TMP/badpath.err")" = 1 ] || fail "the path error is not one line"
echo "ok names"
