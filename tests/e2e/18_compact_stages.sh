# Every report on a run whose class members were compacted (stages/stage.h
# vd_stage_compact: a member's body is freed once its class is proven).  A
# MoE dp2 x tp2 x ep2 plan has members in many classes; the JUnit writer read
# a member's freed values to name its tensor, and --dot-stage drew a member
# without its body (both crashed, exit 139).  Now each output is written and
# names what it should.
. "$(dirname "$0")/lib.sh"
set -e
"$VERDICT" gen --model moe --dp 2 --tp 2 --ep 2 --single "$TMP/s.plan" --parallel "$TMP/p.plan" >/dev/null
V="$VERDICT -q --sm $TMP/s.plan --pm $TMP/p.plan"

# A class member: the last stage of the dump whose class an earlier stage has.
expect_exit 0 $V --dump-stages "$TMP/stages.txt"
member=$(awk '/^stage [0-9]+ class / { if (seen[$4]++) m = $2 } END { print m }' "$TMP/stages.txt")
[ -n "$member" ] || fail "no class member among the stages"

expect_exit 0 $V --junit "$TMP/j.xml"
python3 - "$TMP/j.xml" <<'PY' || fail "JUnit report"
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
cases = root.findall(".//testcase")
names = {c.get("name") for c in cases}
assert int(root.get("failures")) == 0 and int(root.get("errors")) == 0, root.attrib
# one case per proven tensor: the expert weights' gradients are among them
assert any("experts.w1.grad" in n for n in names), sorted(names)[:5]
PY

expect_exit 0 $V --dot-stage "$member" "$TMP/m.dot"
expect_in "digraph stage_$member " "$TMP/m.dot"
expect_in "stage $member: equivalent" "$TMP/m.dot"
grep -q -- '->' "$TMP/m.dot" || fail "the member's graph has no edges"
for out in "--json $TMP/r.json" "--sarif $TMP/r.sarif" "--html $TMP/r.html" "--summary $TMP/s.md"; do
  expect_exit 0 $V $out
done
echo "ok 18_compact_stages (member stage $member)"
