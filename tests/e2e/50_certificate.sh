# Issue 28: certificates and their independent re-check.
#  - verdict --certificate DIR writes one SMT-LIB2 obligation per class and a
#    manifest; the same bytes at 1 and 2 threads;
#  - verdict recheck DIR re-proves every class with cvc5 (and Z3), checks the
#    plans' hashes, refuses a changed obligation, a vacuous one (hypotheses
#    unsat) and a stage without a class;
#  - a verdict built with one normal-form rule flipped (VD_TEST_BREAK_NF,
#    c * x -> x; $VERDICT_BROKEN_NF, built by `make e2e`) proves a scaling bug
#    EQUIVALENT: recheck catches it (DISAGREEMENT, exit 1, the file named) and
#    so does --cross-check (exit 3);
#  - the real build's counterexample of that bug is checked by evaluation.
# Uses /usr/bin/python3 (standard library only) to edit the manifest.
. "$(dirname "$0")/lib.sh"
set -e
: "${VERDICT_BROKEN_NF:=$(dirname "$VERDICT")/../build/broken-nf/verdict}"
[ -x "$VERDICT_BROKEN_NF" ] || fail "no broken-NF build at $VERDICT_BROKEN_NF (make build/broken-nf/verdict)"
command -v cvc5 >/dev/null || [ -x /usr/bin/cvc5 ] || fail "cvc5 is not installed (apt-get install cvc5)"

"$VERDICT" gen --model mlp --dp 2 --nm 2 --single "$TMP/s.plan" --parallel "$TMP/p.plan" >/dev/null

# certificate of an EQUIVALENT run, deterministic across thread counts
expect_exit 0 "$VERDICT" -q --threads 1 --sm "$TMP/s.plan" --pm "$TMP/p.plan" --certificate "$TMP/c1"
# one obligation per class (18 since a broadcast scalar hypothesis is
# computed in its stage: two stages of one obligation got another node)
N=$(sed -n 's/^certificate: \([0-9]*\) obligation(s) of \1 class(es).*/\1/p' "$TMP/out")
[ -n "$N" ] && [ "$N" -gt 0 ] || fail "no 'certificate: N obligation(s) of N class(es)' line"
expect_exit 0 "$VERDICT" -q --threads 2 --sm "$TMP/s.plan" --pm "$TMP/p.plan" --certificate "$TMP/c2"
diff -r "$TMP/c1" "$TMP/c2" >/dev/null || fail "certificate differs between 1 and 2 threads"
[ -s "$TMP/c1/manifest.json" ] || fail "no manifest"
grep -q '"format": "verdict-certificate/1"' "$TMP/c1/manifest.json" || fail "manifest format"
grep -q '"reduction_rules"' "$TMP/c1/manifest.json" || fail "manifest has no reduction rules"
f=$(ls "$TMP/c1"/class-*.smt2 | head -1)
grep -q '^(set-logic ALL)$' "$f" || fail "obligation without set-logic"
grep -q '^; goal$' "$f" || fail "obligation without its goal marker"
echo "ok: certificate written, identical at 1 and 2 threads"

# recheck with cvc5 and with Z3, plans' hashes checked
expect_exit 0 "$VERDICT" recheck "$TMP/c1" --sm "$TMP/s.plan" --pm "$TMP/p.plan"
expect_in "$N of $N class(es) proved equivalent re-proven by cvc5" "$TMP/out"
expect_in "$N of $N obligation(s) not vacuous" "$TMP/out"
expect_in "30 stage(s) mapped to their class, 0 unmapped; 0 disagreement(s)" "$TMP/out"
expect_exit 0 "$VERDICT" recheck "$TMP/c1" --solver z3 -q
expect_in "$N of $N class(es) proved equivalent re-proven by z3" "$TMP/out"
echo "ok: every class re-proven by cvc5 and by Z3"

# the certificate of other plans
expect_exit 1 "$VERDICT" recheck "$TMP/c1" --sm "$TMP/s.plan" --pm "$TMP/s.plan"
expect_in "MISMATCH: parallel plan" "$TMP/out"

# edit_manifest DIR STATEMENT [NAME]: the Python STATEMENT edits m, the certificate DIR's
# manifest.json (d is DIR, name NAME), which is written back
edit_manifest() {
  /usr/bin/python3 - "$1" "$2" "${3-}" <<'EOF'
import hashlib, json, sys
d, statement, name = sys.argv[1], sys.argv[2], sys.argv[3]
m = json.load(open(d + "/manifest.json"))
exec(statement)
json.dump(m, open(d + "/manifest.json", "w"), indent=1)
EOF
}

# a changed obligation is refused
cp -r "$TMP/c1" "$TMP/t1"
printf ' ' >>"$TMP/t1/$(basename "$f")"
expect_exit 1 "$VERDICT" recheck "$TMP/t1" -q
expect_in "CHANGED: class .* does not have the SHA-256 the manifest recorded" "$TMP/out"
echo "ok: a changed obligation is refused"

# a vacuous obligation (hypotheses unsat), even with its hash updated
cp -r "$TMP/c1" "$TMP/t2"
g="$TMP/t2/$(basename "$f")"
sed 's/^; goal$/(assert false)\n; goal/' "$g" >"$TMP/x" && mv "$TMP/x" "$g"
edit_manifest "$TMP/t2" 'for c in m["classes"]:
    if c.get("file") == name:
        c["sha256"] = hashlib.sha256(open(d + "/" + name, "rb").read()).hexdigest()' "$(basename "$f")"
expect_exit 1 "$VERDICT" recheck "$TMP/t2" -q
expect_in "VACUOUS: class" "$TMP/out"
echo "ok: a vacuous obligation is refused"

# a stage mapped to a class without an obligation
cp -r "$TMP/c1" "$TMP/t3"
edit_manifest "$TMP/t3" 'm["stages"][3] = 999999'
expect_exit 1 "$VERDICT" recheck "$TMP/t3" -q
expect_in "UNMAPPED: stage 3" "$TMP/out"
echo "ok: a stage without a class is refused"

# usage and bad input: a class id beyond the stages is refused (no table of its size)
cp -r "$TMP/c1" "$TMP/t4"
edit_manifest "$TMP/t4" 'm["classes"][0]["class"] = 10 ** 15'
expect_exit 2 "$VERDICT" recheck "$TMP/t4" -q
expect_in "manifest.json: record classes\[0\]: field class: expected a stage id below 30" "$TMP/err"
expect_exit 2 "$VERDICT" recheck "$TMP/nonexistent"
expect_exit 2 "$VERDICT" -q --sm "$TMP/s.plan" --pm "$TMP/p.plan" --certificate "$TMP/no/such/dir"
expect_in "certificate" "$TMP/err"
expect_exit 2 "$VERDICT" recheck "$TMP/c1" --solver yices

# the broken normal form: a false EQUIVALENT, caught twice
"$VERDICT" mutate --bug 15 "$TMP/p.plan" "$TMP/b15.plan" >/dev/null
expect_exit 1 "$VERDICT" -q --sm "$TMP/s.plan" --pm "$TMP/b15.plan"
# the counterexample, run through the numeric evaluators, reproduces the disagreement
expect_in "checked by evaluation: these values, run through the numeric evaluators (real kernels), reproduce the disagreement (target 0 element 0: a copy evaluates to" "$TMP/out"
expect_exit 0 "$VERDICT_BROKEN_NF" -q --sm "$TMP/s.plan" --pm "$TMP/b15.plan" --certificate "$TMP/cb"
expect_exit 1 "$VERDICT" recheck "$TMP/cb"
expect_in "DISAGREEMENT: class .* verdict says equivalent, cvc5 says sat (a counterexample exists); attach .*class-.*smt2" "$TMP/out"
expect_exit 3 "$VERDICT_BROKEN_NF" -q --sm "$TMP/s.plan" --pm "$TMP/b15.plan" --cross-check
expect_in "cross-check: .* [1-9][0-9]* disagreement(s)" "$TMP/out"
expect_in "INTERNAL ERROR" "$TMP/out"
# the real build agrees with Z3 on the correct plan
expect_exit 0 "$VERDICT" -q --sm "$TMP/s.plan" --pm "$TMP/p.plan" --cross-check
expect_in "cross-check: $N class(es) proved by the normal form also proved by Z3, 0 undecided by Z3, 0 disagreement(s)" "$TMP/out"
echo "ok: a flipped normal-form rule is caught by recheck and by --cross-check"
