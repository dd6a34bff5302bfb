# Issue 30: the example workflow (examples/ci/verdict-workflow.yml) run "GitHub-style": its verify
# step's command, taken from the YAML, with GITHUB_ACTIONS and GITHUB_STEP_SUMMARY set, on a
# correct configuration and on two of the torch examples' bugs (CI_ALL=1: every target of the
# matrix).  The bugs' annotations carry file:line of the user's Python code
# (examples/torch/llama_parallel.py, the line of the mistake where the finding names it), the step
# summary gets every configuration, the SARIF files validate against the OASIS schema and name the
# same lines, the JUnit files against tests/ci/junit.xsd.  Captures use Debian's python3 with
# python3-torch (tools/torch2plan).
. "$(dirname "$0")/lib.sh"
set -e
PY=/usr/bin/python3
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WF=$ROOT/examples/ci/verdict-workflow.yml
EX=$ROOT/examples/torch/llama_parallel.py
SARIF_SCHEMA=$(sh "$ROOT/tests/ci/sarif_schema.sh" "$ROOT/build/ci-schemas") || fail "no SARIF schema"
# the workflow (parsed as YAML): its matrix and its verify step's command
TARGETS=$($PY -c "import yaml,sys; w=yaml.safe_load(open(sys.argv[1])); print(' '.join(w['jobs']['verify']['strategy']['matrix']['target']))" "$WF") ||
  fail "$WF: no matrix"
CMD=$($PY -c "import yaml,sys; w=yaml.safe_load(open(sys.argv[1])); print([s['run'] for s in w['jobs']['verify']['steps'] if s.get('name') == 'verify'][0].strip())" "$WF") ||
  fail "$WF: no verify step"
[ -n "$TARGETS" ] && [ -n "$CMD" ] || fail "no matrix or verify step in $WF"
for t in $TARGETS; do
  sh "$ROOT/examples/torch/demo.sh" --settings "$t" >/dev/null || fail "the workflow's target $t is unknown"
done
line() { grep -n "$1" "$EX" | head -1 | cut -d: -f1; }
SEL="tp2pp2dp2 bug=no_allreduce bug=grad_scale"
[ "${CI_ALL:-0}" = 1 ] && SEL=$TARGETS
export GITHUB_ACTIONS=true GITHUB_STEP_SUMMARY="$TMP/summary.md" OUT="$TMP/ci" VERDICT
: >"$GITHUB_STEP_SUMMARY"
for t in $SEL; do
  case " $TARGETS " in *" $t "*) ;; *) fail "$t is not a target of the workflow" ;; esac
  # the step as GitHub runs it: ${{ matrix.target }} replaced, run by sh from the checkout
  step=$(printf '%s\n' "$CMD" | sed "s/\${{ matrix.target }}/$t/")
  (cd "$ROOT" && sh -c "$step") >"$TMP/$t.out" 2>&1 || { cat "$TMP/$t.out"; fail "$t: the verify step failed"; }
  n=$(printf '%s' "$t" | tr -c 'a-zA-Z0-9_' '_')
  grep '^::' "$TMP/$t.out" >"$TMP/$t.ann" || true
  case $t in
    bug=*)
      grep -q '^::error file=examples/torch/llama_parallel.py,line=[0-9][0-9]*,title=verdict ' "$TMP/$t.ann" ||
        { cat "$TMP/$t.out"; fail "$t: no annotation with file:line of llama_parallel.py"; } ;;
    *) [ -s "$TMP/$t.ann" ] && { cat "$TMP/$t.ann"; fail "$t: annotations on an equivalent configuration"; } ;;
  esac
  case $t in
    bug=no_allreduce) want=$(line 'h = h + attention') ;;
    bug=grad_scale) want=$(line '/ loss_divisor()') ;;
    *) want="" ;;
  esac
  [ -z "$want" ] || grep -q "^::error file=examples/torch/llama_parallel.py,line=$want," "$TMP/$t.ann" ||
    { cat "$TMP/$t.ann"; fail "$t: the annotation is not on line $want"; }
  xmllint --noout --schema "$ROOT/tests/ci/junit.xsd" "$OUT/$n.junit.xml" 2>"$TMP/x.err" || { cat "$TMP/x.err"; fail "$t: JUnit"; }
  $PY "$ROOT/tests/ci/check_ci.py" sarif "$SARIF_SCHEMA" "$OUT/$n.sarif" || fail "$t: SARIF"
  $PY - "$OUT/$n.sarif" "$TMP/$t.ann" <<'PY' || fail "$t: SARIF and annotations disagree"
import json, re, sys
res = json.load(open(sys.argv[1]))["runs"][0]["results"]
ann = [l for l in open(sys.argv[2]) if l.startswith("::error file=")]
where = sorted((r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
                r["locations"][0]["physicalLocation"]["region"]["startLine"]) for r in res)
got = sorted((m.group(1), int(m.group(2))) for m in (re.match(r"::error file=([^,]*),line=(\d+),", l) for l in ann))
assert where == got, (where, got)
PY
  md=$(printf '%s.parallel.plan' "$n" | sed 's/_/\\_/g')    # as Markdown: '_' escaped
  grep -qF "| $md | " "$GITHUB_STEP_SUMMARY" ||
    { cat "$GITHUB_STEP_SUMMARY"; fail "$t: not in the step summary"; }
done
echo "ci workflow ok ($SEL)"
