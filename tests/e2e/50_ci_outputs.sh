# Issue 30: the CI outputs of a verify run (docs/report-format.md).
#  - JSON: reports of an equivalent, a not-equivalent (a failing stage), a structural (bug 14,
#    SCHEDULE) and an inconclusive run validate against docs/report.schema.json, and a report with
#    a key taken out or retyped does not (the validation can fail).
#  - JUnit: every file validates against tests/ci/junit.xsd (xmllint) and its counts agree with its
#    test cases; a scheduling bug is 1 finding plus skipped proofs, no <error>; test names stay the
#    same at 1 and 2 threads (the whole file, times aside), on a renumbered plan (ids shifted, an
#    extra unrelated node) and on a plan with one more layer (other stage ids and counts).
#  - SARIF: every file validates against the OASIS SARIF 2.1.0 schema (fetched from PyPI by
#    tests/ci/sarif_schema.sh, checked by its SHA-256), one result per finding.
#  - GitHub: --github annotations with GitHub's escaping of a file property holding ',' and ':',
#    the step summary appended to $GITHUB_STEP_SUMMARY.
. "$(dirname "$0")/lib.sh"
set -e
PY=/usr/bin/python3
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CHK="$PY $ROOT/tests/ci/check_ci.py"
XSD=$ROOT/tests/ci/junit.xsd
SARIF_SCHEMA=$(sh "$ROOT/tests/ci/sarif_schema.sh" "$ROOT/build/ci-schemas") || fail "no SARIF schema"
G="--model llama3 --hidden 16 --heads 4 --seq 8 --batch 8 --dp 2 --tp 2 --pp 2 --nm 2"
"$VERDICT" gen $G --layers 2 --single "$TMP/s.plan" --parallel "$TMP/p.plan" >/dev/null
"$VERDICT" gen $G --layers 3 --single "$TMP/s3.plan" --parallel "$TMP/p3.plan" >/dev/null
"$VERDICT" gen $G --layers 2 --zero 1 --single "$TMP/sz.plan" --parallel "$TMP/pz.plan" >/dev/null
mkdir -p "$TMP/a" "$TMP/b" "$TMP/c"
expect_exit 0 "$VERDICT" mutate --bug 1 --layer 1 "$TMP/p.plan" "$TMP/a/bug.plan"
expect_exit 0 "$VERDICT" mutate --bug 1 --layer 1 "$TMP/p3.plan" "$TMP/c/bug.plan"
$PY "$ROOT/tests/ci/renumber.py" "$TMP/a/bug.plan" "$TMP/b/bug.plan"
expect_exit 0 "$VERDICT" mutate --bug 14 --rank 1 "$TMP/pz.plan" "$TMP/b14.plan"

# run NAME EXIT ARGS...: verify with every CI output into $TMP/NAME.*
run() {
  n=$1; want=$2; shift 2
  expect_exit "$want" "$VERDICT" -q "$@" --json "$TMP/$n.json" --junit "$TMP/$n.xml" --sarif "$TMP/$n.sarif"
}
run eq 0 --sm "$TMP/s.plan" --pm "$TMP/p.plan"
run b1 1 --sm "$TMP/s.plan" --pm "$TMP/a/bug.plan" --threads 2
run b1t1 1 --sm "$TMP/s.plan" --pm "$TMP/a/bug.plan" --threads 1
run b1r 1 --sm "$TMP/s.plan" --pm "$TMP/b/bug.plan" --threads 2
run b1l3 1 --sm "$TMP/s3.plan" --pm "$TMP/c/bug.plan"
run b14 1 --sm "$TMP/sz.plan" --pm "$TMP/b14.plan"
run inc 3 --sm "$TMP/s.plan" --pm "$TMP/p.plan" --stage-budget 0.000001

# JSON Schema: versioned with VD_REPORT_SCHEMA_VERSION; the four kinds of report validate; a
# broken one does not.
V=$(sed -n 's/^#define VD_REPORT_SCHEMA_VERSION \([0-9]*\)$/\1/p' "$ROOT/verifier/report.h")
$PY -c "import json,sys; s=json.load(open('$ROOT/docs/report.schema.json')); sys.exit(s['properties']['schema_version']['const'] != $V)" ||
  fail "docs/report.schema.json is not the schema of VD_REPORT_SCHEMA_VERSION $V"
$CHK report "$ROOT/docs/report.schema.json" "$TMP/eq.json" "$TMP/b1.json" "$TMP/b14.json" "$TMP/inc.json" ||
  fail "a JSON report does not validate against docs/report.schema.json"
$PY - "$TMP" <<'PY'
import json, sys
t = sys.argv[1]
kinds = {json.load(open("%s/%s.json" % (t, n)))["verdict"] for n in ("eq", "b1", "b14", "inc")}
assert kinds == {"equivalent", "not_equivalent", "inconclusive"}, kinds
assert json.load(open(t + "/b14.json"))["findings"][0]["representative"]["kind"] == "structural"
assert json.load(open(t + "/b1.json"))["findings"][0]["representative"]["kind"] == "stage"
r = json.load(open(t + "/b1.json"))
del r["findings"][0]["node"]
json.dump(r, open(t + "/broken1.json", "w"))
r = json.load(open(t + "/b14.json"))
r["findings"][0]["representative"]["rank"] = -1          # a negative placeholder
json.dump(r, open(t + "/broken2.json", "w"))
r = json.load(open(t + "/eq.json"))
r["provenance"] = {"version": "0.1.0", "configuration": {}, "model": "m", "sm": {"path": "s", "sha256": "xyz"},
                   "pm": {"path": "p", "sha256": None}, "coverage": {}, "limits": {}}
json.dump(r, open(t + "/broken3.json", "w"))             # a sha256 that is not one
r["provenance"]["sm"]["sha256"] = "0" * 64
json.dump(r, open(t + "/prov.json", "w"))
PY
for b in broken1 broken2 broken3; do
  expect_exit 1 $CHK report "$ROOT/docs/report.schema.json" "$TMP/$b.json"
done
$CHK report "$ROOT/docs/report.schema.json" "$TMP/prov.json" || fail "the provenance object's shape is refused"

# JUnit: schema, counts, stable names.
for n in eq b1 b1t1 b1r b1l3 b14 inc; do
  xmllint --noout --schema "$XSD" "$TMP/$n.xml" 2>"$TMP/xmllint.err" || { cat "$TMP/xmllint.err"; fail "$n.xml: not valid"; }
done
$CHK junit "$TMP"/eq.xml "$TMP"/b1.xml "$TMP"/b1r.xml "$TMP"/b1l3.xml "$TMP"/b14.xml "$TMP"/inc.xml || fail "JUnit counts"
# a scheduling bug: outcome + finding fail, the proofs it left unsolved are skipped, no error
set -- $($CHK counts "$TMP/b14.xml")
[ "$2" = 2 ] && [ "$3" = 0 ] && [ "$4" -gt 100 ] && [ "$1" = $((2 + $4)) ] ||
  fail "bug 14: tests/failures/errors/skipped = $*, expected 2 failures, 0 errors, the rest skipped"
grep -q 'name="finding: SCHEDULE at reduce_scatter' "$TMP/b14.xml" || fail "bug 14: no SCHEDULE finding case"
# inconclusive: an error per undecided proof, never a failure
set -- $($CHK counts "$TMP/inc.xml")
[ "$2" = 0 ] && [ "$3" -gt 1 ] || fail "inconclusive: failures/errors = $2/$3"
# names (and the whole file, times aside) do not depend on the thread count
sed 's/ time="[0-9.]*"//' "$TMP/b1.xml" >"$TMP/b1.notime"
sed 's/ time="[0-9.]*"//' "$TMP/b1t1.xml" >"$TMP/b1t1.notime"
cmp -s "$TMP/b1.notime" "$TMP/b1t1.notime" || fail "JUnit differs between 1 and 2 threads"
grep -E 'name="[^"]*(node [0-9]|stage [0-9]|\[mb [0-9])' "$TMP/b1.xml" && fail "a test name carries a node, stage or microbatch"
# a renumbered plan: the same cases with the same outcomes
$CHK cases "$TMP/b1.xml" >"$TMP/b1.cases"
$CHK cases "$TMP/b1r.xml" >"$TMP/b1r.cases"
diff "$TMP/b1.cases" "$TMP/b1r.cases" || fail "test cases change when the plan is renumbered"
grep -q "verdict.bug_plan.findings|finding: MISSING_REDUCTION at identity 'layers.1.attn.o.all_reduce'|failure" \
  "$TMP/b1.cases" || fail "the finding's test case"
# one more layer: other stage ids and counts, the same finding name; every 2-layer case is there
grep '|finding: ' "$TMP/b1.cases" >"$TMP/f2"
$CHK cases "$TMP/b1l3.xml" >"$TMP/b1l3.cases"
grep '|finding: ' "$TMP/b1l3.cases" >"$TMP/f3"
diff "$TMP/f2" "$TMP/f3" || fail "the finding's test name changes with the layer count"
$PY -c "import json,sys; a=json.load(open('$TMP/b1.json'))['findings'][0]['node']['node']; b=json.load(open('$TMP/b1l3.json'))['findings'][0]['node']['node']; sys.exit(a == b)" ||
  fail "the 3-layer plan has the same node ids (no renumbering tested)"
cut -d'|' -f1,2 "$TMP/b1.cases" | grep -v '|outcome$' | sort >"$TMP/n2"
cut -d'|' -f1,2 "$TMP/b1l3.cases" | sort >"$TMP/n3"
[ -z "$(comm -23 "$TMP/n2" "$TMP/n3")" ] || { comm -23 "$TMP/n2" "$TMP/n3" | head; fail "2-layer cases missing on 3 layers"; }

# SARIF: the official schema, one result per finding, the plan file as location (no source line)
$CHK sarif "$SARIF_SCHEMA" "$TMP"/eq.sarif "$TMP"/b1.sarif "$TMP"/b14.sarif "$TMP"/inc.sarif || fail "SARIF"
$PY - "$TMP" <<'PY'
import json, sys
t = sys.argv[1]
for n, want in (("eq", []), ("b1", ["MISSING_REDUCTION"]), ("b14", ["SCHEDULE"]), ("inc", ["INCONCLUSIVE"])):
    res = json.load(open("%s/%s.sarif" % (t, n)))["runs"][0]["results"]
    assert [r["ruleId"] for r in res] == want, (n, res)
r = json.load(open(t + "/b1.sarif"))["runs"][0]["results"][0]
loc = r["locations"][0]
assert loc["physicalLocation"]["artifactLocation"]["uri"].endswith("a/bug.plan"), loc
assert loc["logicalLocations"][0]["name"] == "identity 'layers.1.attn.o.all_reduce'", loc
assert r["level"] == "error"
PY

# GitHub: a node whose src holds ',' and ':' in its file name; annotations and the step summary.
$PY - "$TMP/a/bug.plan" "$TMP/src.plan" <<'PY'
import sys, msgpack
p = msgpack.unpackb(open(sys.argv[1], "rb").read(), raw=False, strict_map_key=False)
for n in p["nodes"]:
    if n["name"] == "layers.1.attn.o.all_reduce":
        n["src"] = "dir,v2/gpt:x.py:84 torch.add"
open(sys.argv[2], "wb").write(msgpack.packb(p, use_bin_type=True))
PY
printf 'earlier step\n' >"$TMP/summary.md"
GITHUB_STEP_SUMMARY="$TMP/summary.md" expect_exit 1 "$VERDICT" -q --sm "$TMP/s.plan" --pm "$TMP/src.plan" --github \
  --sarif "$TMP/src.sarif"
grep '^::' "$TMP/out" >"$TMP/ann"
[ "$(wc -l <"$TMP/ann")" = 1 ] || fail "expected one annotation"
expect_in '^::error file=dir%2Cv2/gpt%3Ax.py,line=84,title=verdict MISSING_REDUCTION (src.plan)::MISSING_REDUCTION at identity' "$TMP/ann"
expect_in '%0Aranks 2,3,6,7; microbatches 0,1; layers 1' "$TMP/ann"
expect_in '^earlier step$' "$TMP/summary.md"
expect_in '^| src.plan | NOT EQUIVALENT | EQUIVALENT | 1 | \*\*no\*\* |$' "$TMP/summary.md"
expect_in "^1\. \*\*MISSING_REDUCTION\*\* at identity 'layers.1.attn.o.all\\\\_reduce' in dir,v2/gpt:x.py line 84" "$TMP/summary.md"
$CHK sarif "$SARIF_SCHEMA" "$TMP/src.sarif" || fail "SARIF with a source line"
$PY -c "
import json; r = json.load(open('$TMP/src.sarif'))['runs'][0]['results'][0]['locations'][0]['physicalLocation']
assert r['artifactLocation']['uri'] == 'dir%2Cv2/gpt%3Ax.py' and r['region']['startLine'] == 84, r" || fail "SARIF location"
# without GITHUB_STEP_SUMMARY: annotations only; --summary alone: the summary only
env -u GITHUB_STEP_SUMMARY "$VERDICT" -q --sm "$TMP/s.plan" --pm "$TMP/p.plan" --github >"$TMP/out" 2>&1 || fail "equivalent run"
grep -q '^::' "$TMP/out" && fail "annotations on an equivalent run"
expect_exit 0 "$VERDICT" -q --sm "$TMP/s.plan" --pm "$TMP/p.plan" --summary "$TMP/s2.md"
grep -q '^::' "$TMP/out" && fail "--summary alone printed annotations"
expect_in '^| p.plan | EQUIVALENT | EQUIVALENT | 0 | yes |$' "$TMP/s2.md"
expect_exit 2 "$VERDICT" -q --sm "$TMP/s.plan" --pm "$TMP/p.plan" --sarif "$TMP/no/such/dir/x.sarif"
expect_in "\-\-sarif" "$TMP/err"
echo "ci outputs ok"
