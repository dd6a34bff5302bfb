# Issue 30 (and issue 29 item 8): run control.  A run killed by SIGTERM
# after 5 s leaves a partial INCONCLUSIVE report in every requested format
# (text, JSON, HTML, JUnit) and exit 3, with heartbeat lines on a piped
# stderr; --deadline stops a run the same way; a second Ctrl-C exits at
# once (130).  The plan: a 64-layer llama3 at dp64 tp4 pp8 nm16 (2048
# ranks), about 10 s of CPU at one thread.
. "$(dirname "$0")/lib.sh"
set -e
PY=/usr/bin/python3
"$VERDICT" gen --model llama3 --layers 64 --tp 4 --pp 8 --dp 64 --nm 16 --batch 2048 \
  --single "$TMP/s.plan" --parallel "$TMP/p.plan" >/dev/null

# SIGTERM after 5.5 s (past the first heartbeat at 5 s): partial reports, exit 3.
set +e
"$VERDICT" --sm "$TMP/s.plan" --pm "$TMP/p.plan" --threads 1 --json "$TMP/r.json" --html "$TMP/r.html" \
  --junit "$TMP/r.xml" >"$TMP/out" 2>"$TMP/err" &
pid=$!
sleep 5.5
kill -TERM "$pid"
t0=$(date +%s%N)
wait "$pid"
got=$?
t1=$(date +%s%N)
set -e
[ "$got" = 3 ] || { cat "$TMP/out" "$TMP/err"; fail "SIGTERM: exit $got, expected 3"; }
# promptly: within 3 s of the signal
[ $(( (t1 - t0) / 1000000 )) -lt 3000 ] || fail "SIGTERM: the run took $(( (t1 - t0) / 1000000 )) ms to stop"
expect_in "^INCONCLUSIVE$" "$TMP/out"
expect_in "^  run interrupted by SIGTERM while [a-z ]*, after [0-9.]* s: no verdict (exit 3)" "$TMP/out"
expect_in "^  proven before the stop: " "$TMP/out"
! grep -q "^EQUIVALENT" "$TMP/out" || fail "an interrupted run printed EQUIVALENT"
# heartbeat lines on a stderr that is not a terminal, with a counter
expect_in "^verdict: \[[0-9]* s\] [a-z ]*\(: [0-9/]* [a-z ]*\| \.\.\.\)" "$TMP/err"
$PY - "$TMP" <<'EOF' || fail "partial reports"
import json, re, sys
import xml.etree.ElementTree as ET
tmp = sys.argv[1]
r = json.load(open(tmp + "/r.json"))
assert r["verdict"] == "inconclusive" and r["exit_code"] == 3, (r["verdict"], r["exit_code"])
it = r["interrupted"]
assert it and it["reason"] == "SIGTERM", it
assert it["stages_proven"] == r["summary"]["equivalent"], (it, r["summary"])
assert r["summary"]["not_equivalent"] == 0 and not r["findings"], r["summary"]
assert r["provenance"]["configuration"]["text"] == "dp64 tp4 pp8 nm16", r["provenance"]["configuration"]
text = open(tmp + "/out").read()
m = re.search(r"proven before the stop: (nothing|(\d+) of (\d+) stages equivalent)", text)
assert m, text
if m.group(2):
    assert int(m.group(2)) == it["stages_proven"], (m.group(0), it)
else:
    assert it["stages_proven"] == 0, it
h = ET.parse(tmp + "/r.html").getroot()
ns = {"h": "http://www.w3.org/1999/xhtml"}
v = h.find(".//h:span[@id='verdict']", ns)
assert v is not None and v.text == "INCONCLUSIVE", v
row = h.find(".//h:td[@id='interrupted']", ns)
assert row is not None and "SIGTERM" in row.text, row
j = ET.parse(tmp + "/r.xml").getroot()
props = {p.get("name"): p.get("value") for p in j.iter("property")}
assert props.get("outcome") == "INCONCLUSIVE", props
EOF

# --deadline: the same partial report, from the run itself.
t0=$(date +%s%N)
expect_exit 3 "$VERDICT" --sm "$TMP/s.plan" --pm "$TMP/p.plan" --threads 1 --deadline 1.5 --json "$TMP/d.json"
t1=$(date +%s%N)
[ $(( (t1 - t0) / 1000000 )) -lt 4500 ] || fail "--deadline 1.5: the run took $(( (t1 - t0) / 1000000 )) ms"
expect_in "^  run interrupted by the --deadline while " "$TMP/out"
$PY -c "import json,sys; r=json.load(open(sys.argv[1])); assert r['interrupted']['reason']=='deadline' and r['verdict']=='inconclusive', r['interrupted']; assert r['provenance']['limits']['deadline_s']==1.5" "$TMP/d.json" || fail "--deadline JSON"
expect_exit 2 "$VERDICT" --sm "$TMP/s.plan" --pm "$TMP/p.plan" --deadline 0
expect_in "deadline: expected seconds > 0" "$TMP/err"

# A second SIGINT exits at once, without a report.
set +e
"$VERDICT" --sm "$TMP/s.plan" --pm "$TMP/p.plan" --threads 1 --json "$TMP/i.json" >"$TMP/out" 2>"$TMP/err" &
pid=$!
sleep 1
kill -INT "$pid"
sleep 0.1
kill -INT "$pid" 2>/dev/null
wait "$pid"
got=$?
set -e
[ "$got" = 130 ] || [ "$got" = 3 ] || { cat "$TMP/out" "$TMP/err"; fail "two SIGINTs: exit $got, expected 130 (or 3 when the first stop won)"; }
[ "$got" = 3 ] || expect_in "interrupted again: exiting at once" "$TMP/err"
"$VERDICT" --sm x --pm y --help | grep -q "second Ctrl-C" || fail "--help does not mention the second Ctrl-C"
echo "ok 18_run_control"
