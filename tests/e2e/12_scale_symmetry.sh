# Issue 15: replica and microbatch symmetry at dp64 nm16.  Replica 0's stages
# stand for all 64 replicas (one class per program, not per replica), and a
# bug on a late stored rank or a late microbatch is still caught and reported
# with that rank and that microbatch.  (A stored rank's program is every
# replica's copy of that rank: the compact plan format cannot hold a bug in
# one replica only; docs/verifier.md, Limits.)
. "$(dirname "$0")/lib.sh"
set -e
"$VERDICT" gen --model llama3 --layers 2 --hidden 16 --heads 4 --seq 8 --batch 1024 \
  --dp 64 --tp 2 --pp 2 --nm 16 --single "$TMP/s.plan" --parallel "$TMP/p.plan" >/dev/null
expect_exit 0 "$VERDICT" -q -v --sm "$TMP/s.plan" --pm "$TMP/p.plan"
expect_in "^EQUIVALENT" "$TMP/out"
expect_in "replica and microbatch symmetry: the [0-9]* stages stand for" "$TMP/out"
cut=$(sed -n 's/.*symmetry: the \([0-9]*\) stages stand for \([0-9]*\).*/\1/p' "$TMP/out")
rep=$(sed -n 's/.*symmetry: the \([0-9]*\) stages stand for \([0-9]*\).*/\2/p' "$TMP/out")
# replica 0's and microbatch 0's stages stand for the other replicas and
# microbatches: far fewer stages are cut than proven
[ "$rep" -ge $((cut * 16)) ] || fail "dp64 nm16: $cut stages cut for $rep per-replica, per-microbatch stages"
# the same model at nm1 and nm16 (dp1): microbatch classes keep the stage count
# from growing with nm (the per-microbatch loss stages still do: docs/verifier.md)
for nm in 1 16; do
  "$VERDICT" gen --model llama3 --layers 2 --hidden 16 --heads 4 --seq 8 --batch $((nm * 2)) \
    --dp 1 --tp 2 --pp 2 --nm $nm --single "$TMP/s$nm.plan" --parallel "$TMP/p$nm.plan" >/dev/null
  expect_exit 0 "$VERDICT" -q --sm "$TMP/s$nm.plan" --pm "$TMP/p$nm.plan"
  eval "n$nm=\$(sed -n 's/^  proof: \([0-9]*\) stage.*/\1/p' \"\$TMP/out\")"
done
[ "$n16" -lt $((n1 * 2)) ] || fail "nm16 cuts $n16 stages, nm1 $n1"
bug() { n=$1; shift; mutant_not_equivalent "$n" -q "$@"; } # the JSON report in $TMP/r.json
# A different constant on the last stored rank (3): only rank 3's copies flagged.
bug 7 --rank 3 --layer 1
[ "$(json "d['failures'][0]['diagnosis']")" = WRONG_VALUE ] || fail "bug 7 diagnosis"
[ "$(json "d['failures'][0]['ranks']")" = "[3]" ] || fail "bug 7 ranks: $(json "d['failures'][0]['ranks']")"
# The DP reducer overtakes the last microbatch's backward: SCHEDULE naming mb 15.
bug 14 --rank 0 --microbatch 15
expect_in "SCHEDULE" "$TMP/out"
expect_in "15" "$TMP/out"
[ "$(json "[i['mb'] for i in d['failures'] if i['diagnosis'] == 'SCHEDULE'][0]")" = 15 ] || \
  fail "bug 14 microbatch: $(json "[i for i in d['failures'] if i['diagnosis'] == 'SCHEDULE'][:1]")"
# A different constant on the last stored rank in the last microbatch only:
# microbatch 15's stage differs from microbatch 0's, so it is cut on its own
# and reported with rank 3 and mb 15.
bug 7 --rank 3 --layer 1 --microbatch 15
[ "$(json "d['failures'][0]['diagnosis']")" = WRONG_VALUE ] || fail "bug 7 mb 15 diagnosis"
[ "$(json "d['failures'][0]['ranks']")" = "[3]" ] || fail "bug 7 mb 15 ranks: $(json "d['failures'][0]['ranks']")"
[ "$(json "len(d['failures'])")" = 1 ] || fail "bug 7 mb 15: $(json "len(d['failures'])") failures"
[ "$(json "d['failures'][0]['microbatches']")" = "[15]" ] || fail "bug 7 mb 15 microbatch: $(json "d['failures'][0]['microbatches']")"
# A different attention scale on rank 1 in microbatch 13 (forward and backward)
bug 12 --rank 1 --layer 0 --microbatch 13
[ "$(json "sorted(set(m for f in d['failures'] for m in f['microbatches']))")" = "[13]" ] || \
  fail "bug 12 mb 13: $(json "[(f['diagnosis'], f['microbatches'], f['ranks']) for f in d['failures']]")"
[ "$(json "d['failures'][0]['diagnosis']")" = SCALE ] || fail "bug 12 mb 13 diagnosis: $(json "d['failures'][0]['diagnosis']")"
echo "ok dp64 nm16: $cut stages for $rep per-replica stages; late rank and late microbatch bugs named"
