# Issue 16: the report formats.  Bug 1 (a forward all_reduce replaced by
# identity in layer 1) on the llama3 dp2 tp2 pp2 nm2 pair is one finding
# with its footprint; the JSON carries the contract keys; the HTML page and
# its inline SVG pictures are well-formed XML with the diverging node
# present; the JUnit file parses and has the finding's case; --json -
# writes stdout; an unwritable output is exit 2 before any work;
# --dot-stage writes any stage's graph.
. "$(dirname "$0")/lib.sh"
set -e
PY=/usr/bin/python3
"$VERDICT" gen --model llama3 --layers 2 --hidden 16 --heads 4 --seq 8 --batch 8 \
  --dp 2 --tp 2 --pp 2 --nm 2 --single "$TMP/s.plan" --parallel "$TMP/p.plan" >/dev/null
expect_exit 0 "$VERDICT" mutate --bug 1 --layer 1 "$TMP/p.plan" "$TMP/b.plan"
expect_exit 1 "$VERDICT" --sm "$TMP/s.plan" --pm "$TMP/b.plan" --json "$TMP/r.json" --html "$TMP/r.html" \
  --junit "$TMP/r.xml"
expect_in "^== finding 1 of 1: MISSING_REDUCTION at identity 'layers.1.attn.o.all_reduce'" "$TMP/out"
# microbatch 0's stage stands for microbatch 1 too (docs/verifier.md, microbatch classes)
expect_in "footprint: ranks 2,3,6,7; microbatches 0,1; layers 1; 1 failing stage (4 per replica)" "$TMP/out"
expect_in "hint: the copies add up to the right value" "$TMP/out"
[ "$(grep -c '^-- stage [0-9]*: NOT EQUIVALENT' "$TMP/out")" = 1 ] || fail "more than the representative stage printed"
REP=$($PY -c "import json; print(json.load(open('$TMP/r.json'))['findings'][0]['representative']['stage'])")

$PY - "$TMP" "$TMP/s.plan" "$TMP/b.plan" <<'EOF' || fail "report formats"
import json, re, sys
import xml.etree.ElementTree as ET
tmp, sm, pm = sys.argv[1:4]
r = json.load(open(tmp + "/r.json"))
assert r["schema_version"] == 2, r["schema_version"]
assert r["tool"]["name"] == "verdict" and r["tool"]["version"]
assert r["inputs"] == {"single": sm, "parallel": pm}, r["inputs"]
fs = r["findings"]
assert len(fs) == 1, len(fs)
f = fs[0]
assert f["diagnosis"] == "MISSING_REDUCTION"
assert f["node"]["op"] == "identity" and f["node"]["name"] == "layers.1.attn.o.all_reduce", f["node"]
assert f["node"]["plan"] == "parallel" and f["node"]["layer"] == 1
assert f["ranks"] == [2, 3, 6, 7] and f["microbatches"] == [0, 1] and f["layers"] == [1], f
assert len(f["stages"]) == 1 and f["per_replica_stages"] == 4  # mb 0's stage stands for mb 1
assert f["hint"]
rep = f["representative"]
assert rep["kind"] == "stage" and rep["stage"] in f["stages"] and rep["has_counterexample"]
assert all(isinstance(n, dict) and "op" in n for n in rep["nodes"])
# "failures" keeps every failing stage; structural entries have no placeholders
assert sorted(x["stage"] for x in r["failures"] if x["kind"] == "stage") == f["stages"]
s = r["summary"]
assert s["findings"] == 1

# HTML: the whole page parses as XML; one SVG per finding, with the
# diverging node (class "diverging") naming the all_reduce's source name.
ns = {"h": "http://www.w3.org/1999/xhtml", "s": "http://www.w3.org/2000/svg"}
html = ET.parse(tmp + "/r.html").getroot()
assert "http://www.w3.org" not in "".join(a for e in html.iter() for a in (e.get("src") or "", e.get("href") or "")), \
    "the page loads something from the network"
svgs = html.findall(".//s:svg", ns)
assert len(svgs) == 1, len(svgs)
div = [g for g in svgs[0].iter("{http://www.w3.org/2000/svg}g") if "diverging" in (g.get("class") or "").split()]
assert len(div) == 1, "no diverging node in the picture"
txt = " ".join(t.text or "" for t in div[0].iter("{http://www.w3.org/2000/svg}text"))
assert "layers.1.attn.o.all_reduce" in txt and "172" in txt, txt
alltxt = " ".join(t.text or "" for t in svgs[0].iter("{http://www.w3.org/2000/svg}text"))
assert "single-device plan" in alltxt and "parallel plan" in alltxt
assert "(differs)" in alltxt, "no counterexample values on the edges"
assert html.find(".//*[@id='n-findings']").text == "1"

# JUnit: the outcome, one failing case per finding, one case per proven
# single-device tensor (tests/e2e/50_ci_outputs.sh checks the schema and the
# stable names).
ju = ET.parse(tmp + "/r.xml").getroot()
suite = ju.find("testsuite")
cases = suite.findall("testcase")
assert cases[0].get("name") == "outcome" and cases[0].find("failure") is not None
finds = [c for c in cases if c.get("name").startswith("finding: ")]
assert len(finds) == len(fs), (len(finds), len(fs))
assert all(c.find("failure") is not None for c in finds)
assert int(suite.get("tests")) == len(cases)
assert int(suite.get("failures")) == sum(c.find("failure") is not None for c in cases)
assert finds[0].find("failure").get("type") == "MISSING_REDUCTION"
assert "layers.1.attn.o.all_reduce" in finds[0].find("failure").text
assert finds[0].get("name") == "finding: MISSING_REDUCTION at identity 'layers.1.attn.o.all_reduce'", finds[0].get("name")
EOF

# --json - : the JSON on stdout (parseable), the text report on stderr.
expect_exit 1 "$VERDICT" -q --sm "$TMP/s.plan" --pm "$TMP/b.plan" --json -
$PY -c "import json; d=json.load(open('$TMP/out')); assert d['findings'][0]['diagnosis'] == 'MISSING_REDUCTION'" ||
  fail "--json - did not write the JSON alone to stdout"
expect_in "^NOT EQUIVALENT" "$TMP/err"

# Unwritable outputs: exit 2 at once, naming the option, before any work.
for opt in --json --html --junit --dump-stages; do
  expect_exit 2 "$VERDICT" --sm "$TMP/s.plan" --pm "$TMP/b.plan" $opt "$TMP/no/such/dir/r.out"
  expect_in "$opt" "$TMP/err"
  grep -q "EQUIVALENT" "$TMP/out" && fail "$opt: the run went ahead"
done
expect_exit 2 "$VERDICT" --sm "$TMP/s.plan" --pm "$TMP/b.plan" --html -

# --dot-stage: the failing representative and a passing stage, both valid dot.
expect_exit 1 "$VERDICT" -q --sm "$TMP/s.plan" --pm "$TMP/b.plan" --dot-stage "$REP" "$TMP/f.dot"
expect_in "^digraph stage_$REP" "$TMP/f.dot"
expect_in 'class="diverging"' "$TMP/f.dot"
expect_exit 1 "$VERDICT" -q --sm "$TMP/s.plan" --pm "$TMP/b.plan" --dot-stage 0 "$TMP/z.dot"
expect_in "equivalent" "$TMP/z.dot"
if command -v dot >/dev/null 2>&1; then
  dot -Tsvg "$TMP/f.dot" >"$TMP/f.svg" && dot -Tsvg "$TMP/z.dot" >"$TMP/z.svg" || fail "dot rejects the stage graphs"
fi
expect_exit 2 "$VERDICT" -q --sm "$TMP/s.plan" --pm "$TMP/b.plan" --dot-stage 99999 "$TMP/n.dot"
expect_in "no stage 99999" "$TMP/err"

# An equivalent pair: no findings, a JUnit file without failures.
expect_exit 0 "$VERDICT" -q --sm "$TMP/s.plan" --pm "$TMP/p.plan" --junit "$TMP/ok.xml" --html "$TMP/ok.html" \
  --json "$TMP/ok.json"
$PY - "$TMP" <<'EOF' || fail "equivalent pair reports"
import json, sys
import xml.etree.ElementTree as ET
tmp = sys.argv[1]
r = json.load(open(tmp + "/ok.json"))
assert r["findings"] == [] and r["verdict"] == "equivalent"
s = ET.parse(tmp + "/ok.xml").getroot().find("testsuite")
assert s.get("failures") == "0" and s.get("errors") == "0" and int(s.get("tests")) == len(s.findall("testcase")) > 1
h = ET.parse(tmp + "/ok.html").getroot()
assert h.find(".//*[@id='verdict']").text == "EQUIVALENT"
EOF
echo "reports ok"
