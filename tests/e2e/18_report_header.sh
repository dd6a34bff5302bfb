# Issue 30: "what was proven" and report noise.  Every report (text, JSON,
# HTML) states the configuration, the model, the plans' SHA-256 content
# hashes (checked against sha256sum), the coverage and the limits; the
# first screen is in plain words (the proof's own counts only under -v);
# a structural failure leaves its hundreds of unsolved stages as one line,
# and the summary does not call them inconclusive; the HTML pictures carry
# no fixed width (they scale to the page, never clipping the diverging node).
. "$(dirname "$0")/lib.sh"
set -e
PY=/usr/bin/python3
"$VERDICT" gen --model llama3 --layers 2 --hidden 16 --heads 4 --seq 8 --batch 8 \
  --dp 2 --tp 2 --pp 2 --nm 2 --single "$TMP/s.plan" --parallel "$TMP/p.plan" >/dev/null
SM_SHA=$(sha256sum "$TMP/s.plan" | cut -d' ' -f1)
PM_SHA=$(sha256sum "$TMP/p.plan" | cut -d' ' -f1)
VERSION=$("$VERDICT" --version | cut -d' ' -f2)

# The default first screen: the header, no jargon.
expect_exit 0 "$VERDICT" --sm "$TMP/s.plan" --pm "$TMP/p.plan"
expect_in "^  plans: $TMP/p.plan against $TMP/s.plan: llama3 dp2 tp2 pp2 nm2; 8 ranks, 2 microbatches$" "$TMP/out"
expect_in "^  compared: [0-9]* of [0-9]* single-device tensors ([0-9]* weights, .*), up to the updated weights$" "$TMP/out"
expect_in "^  proof: [0-9]* stages (one proof obligation each): [0-9]* proven equivalent$" "$TMP/out"
expect_in "^  verdict $VERSION; " "$TMP/out"
for jargon in "classes solved" "by normal form" "sums by part" "Ts " "%2.0"; do
  ! grep -q -- "$jargon" "$TMP/out" || { cat "$TMP/out"; fail "'$jargon' on the first screen without -v"; }
done

# -v: hashes, limits and the proof's counts (explained); JSON and HTML carry the same.
expect_exit 0 "$VERDICT" --sm "$TMP/s.plan" --pm "$TMP/p.plan" -v --stage-timeout 7 --deadline 600 \
  --json "$TMP/r.json" --html "$TMP/r.html"
expect_in "^  single-device plan: $TMP/s.plan sha256 $SM_SHA$" "$TMP/out"
expect_in "^  parallel plan: $TMP/p.plan sha256 $PM_SHA$" "$TMP/out"
expect_in "^  limits: stage budget 5 M steps, stage timeout 7 s, deadline 600 s, seed 1$" "$TMP/out"
expect_in "^  model: llama3 layers=2 " "$TMP/out"
expect_in "^  stages [0-9]* (classes solved [0-9]*, reduced [0-9]*, by normal form [0-9]*)" "$TMP/out"
expect_in "^    (a class is a set of stages" "$TMP/out"
$PY - "$TMP" "$SM_SHA" "$PM_SHA" "$VERSION" <<'EOF' || fail "provenance in JSON and HTML"
import json, sys
import xml.etree.ElementTree as ET
tmp, sm_sha, pm_sha, version = sys.argv[1:5]
r = json.load(open(tmp + "/r.json"))
p = r["provenance"]
assert set(p) >= {"version", "configuration", "model", "sm", "pm", "coverage", "limits"}, sorted(p)
assert p["version"] == version == r["tool"]["version"], (p["version"], version)
assert p["sm"] == {"path": tmp + "/s.plan", "sha256": sm_sha}, p["sm"]
assert p["pm"] == {"path": tmp + "/p.plan", "sha256": pm_sha}, p["pm"]
c = p["configuration"]
assert (c["dp"], c["tp"], c["pp"], c["nm"], c["ranks"], c["microbatches"]) == (2, 2, 2, 2, 8, 2), c
assert p["model"].startswith("llama3 layers=2 "), p["model"]
cov = p["coverage"]
assert cov["weights"] > 0 and cov["gradients"] > 0 and cov["losses"] == 1, cov
assert cov["updated"] >= cov["weights"] and cov["up_to"] == "the updated weights", cov
assert p["limits"]["stage_timeout_s"] == 7 and p["limits"]["deadline_s"] == 600, p["limits"]
assert r["interrupted"] is None
ns = {"h": "http://www.w3.org/1999/xhtml"}
h = ET.parse(tmp + "/r.html").getroot()
assert h.find(".//h:td[@id='sm-sha256']", ns).text == sm_sha
assert h.find(".//h:td[@id='pm-sha256']", ns).text == pm_sha
assert h.find(".//h:td[@id='configuration']", ns).text.startswith("dp2 tp2 pp2 nm2; 8 ranks")
EOF

# A bug's picture scales to the page (no fixed width that clips its right edge).
expect_exit 0 "$VERDICT" mutate --bug 1 --layer 1 "$TMP/p.plan" "$TMP/b1.plan"
expect_exit 1 "$VERDICT" --sm "$TMP/s.plan" --pm "$TMP/b1.plan" --html "$TMP/b1.html"
expect_in "^   1\. a sum over ranks is missing: MISSING_REDUCTION at identity 'layers.1.attn.o.all_reduce'" "$TMP/out"
$PY - "$TMP/b1.html" <<'EOF' || fail "HTML picture"
import sys
import xml.etree.ElementTree as ET
svgs = list(ET.parse(sys.argv[1]).getroot().iter("{http://www.w3.org/2000/svg}svg"))
assert svgs, "no picture"
for s in svgs:
    assert "width" not in s.attrib and "height" not in s.attrib, s.attrib
    assert "max-width:100%" in s.get("style", ""), s.attrib
    assert s.get("viewBox"), s.attrib
EOF

# A structural failure (a DP reducer before the last microbatch's backward,
# on a boundary-only plan): the unsolved stages are one line, not hundreds.
"$VERDICT" plan strip --keep boundary "$TMP/p.plan" "$TMP/ps.plan" >/dev/null
expect_exit 0 "$VERDICT" mutate --bug 14 "$TMP/ps.plan" "$TMP/b14.plan"
expect_exit 1 "$VERDICT" --sm "$TMP/s.plan" --pm "$TMP/b14.plan" --html "$TMP/b14.html" --max-failures 0
expect_in "^  not solved: [0-9]* stages, because a structural problem of the plan already decides NOT EQUIVALENT" "$TMP/out"
expect_in "^   1\. an operation runs before all its inputs have arrived: SCHEDULE at all_reduce" "$TMP/out"
grep "^  proof: " "$TMP/out" | grep -q "0 proven equivalent, [0-9]* not solved (why below)$" || { cat "$TMP/out"; fail "proof line"; }
! grep -q "inconclusive" "$TMP/out" || { cat "$TMP/out"; fail "a structural failure's unsolved stages called inconclusive"; }
dups=$(grep -v '^$' "$TMP/out" | sort | uniq -d | head -3)
[ -z "$dups" ] || { cat "$TMP/out"; fail "repeated report lines: $dups"; }
$PY - "$TMP/b14.html" <<'EOF' || fail "HTML inconclusive list"
import sys
import xml.etree.ElementTree as ET
ns = {"h": "http://www.w3.org/1999/xhtml"}
ul = ET.parse(sys.argv[1]).getroot().find(".//h:ul[@id='inconclusive']", ns)
items = ul.findall("h:li", ns)
assert len(items) == 1 and "structural problem" in items[0].text, [i.text for i in items]
EOF
echo "ok 18_report_header"
