#!/bin/sh
# tests/bugs/corpus_mutations.sh - docs/bugs.md classes injected into imported
# (nnScaler) plans: every class that applies to a converted parallel plan is
# injected (`verdict mutate --bug N`, seed 0) and must be caught by the
# verifier with a diagnosis the class accepts (`verdict mutate --list --tsv`),
# and, with EXEC=1, by the numeric executor (exit 1).  Classes that do not
# apply (the plan has no such site: e.g. no ZeRO, no context parallelism) are
# listed as n/a with the mutator's one-line reason.
#
#   sh tests/bugs/corpus_mutations.sh VERDICT SINGLE.plan PARALLEL.plan [SINGLE PARALLEL ...]
#
# Environment: BUGS="1 7" (only these classes), VERIFY_TIMEOUT (seconds per
# run, default 120), EXEC=1 (also run the executor), KEEP=dir.
# Prints one row per (pair, class); exit 0 when every applicable class was
# caught and at least one class applied to every pair.
VERDICT=${1:?usage: corpus_mutations.sh VERDICT SINGLE PARALLEL ...}
shift
[ $# -ge 2 ] || { echo "corpus_mutations: expected SINGLE PARALLEL pairs" >&2; exit 2; }
TO=${VERIFY_TIMEOUT:-120}
EXEC=${EXEC:-0}
if [ -n "$KEEP" ]; then WORK=$KEEP; mkdir -p "$WORK"; else
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/verdict-cmut.XXXXXX") || exit 2
  trap 'rm -rf "$WORK"' EXIT INT TERM
fi
LIST=$("$VERDICT" mutate --list --tsv) || { echo "corpus_mutations: verdict mutate --list failed" >&2; exit 2; }
TAB=$(printf '\t')
FAILS=0
printf '%-44s %-4s %-28s %-10s %-18s %s\n' pair bug class verdict diagnosis status
while [ $# -ge 2 ]; do
  S=$1 P=$2
  shift 2
  name=$(basename "$P" .parallel.plan | cut -c1-44)
  applied=0
  # Runs in this shell (no pipe) so FAILS and applied survive the loop.
  while IFS="$TAB" read -r num cls bname diag accept rest; do
    if [ -n "$BUGS" ]; then case " $BUGS " in *" $num "*) ;; *) continue ;; esac; fi
    M="$WORK/m$num.plan"
    if ! "$VERDICT" mutate -q --bug "$num" "$P" "$M" >"$WORK/mutate.log" 2>&1; then
      if grep -q "does not apply" "$WORK/mutate.log"; then
        printf '%-44s %-4s %-28s %-10s %-18s %s\n' "$name" "$num" "$cls/$bname" - - \
          "n/a: $(sed 's/.*does not apply: //' "$WORK/mutate.log" | head -1 | cut -c1-70)"
      else
        printf '%-44s %-4s %-28s %-10s %-18s %s\n' "$name" "$num" "$cls/$bname" - - \
          "MUTATE FAILED: $(head -1 "$WORK/mutate.log" | cut -c1-70)"
        FAILS=$((FAILS + 1))
      fi
      continue
    fi
    applied=$((applied + 1))
    timeout -k 5 "$TO" "$VERDICT" -q --json "$WORK/r.json" --sm "$S" --pm "$M" >/dev/null 2>&1
    vrc=$?
    got=$(python3 -c 'import json,sys
r = json.load(open(sys.argv[1])); f = r.get("failures") or [{}]
print(f[0].get("diagnosis", "?"))' "$WORK/r.json" 2>/dev/null || echo "?")
    status=ok
    if [ $vrc != 1 ]; then
      status="MISSED (verdict exit $vrc)"
    else
      case "|$accept|" in *"|$got|"*) ;; *) status="WRONG DIAGNOSIS (accepts $accept)" ;; esac
    fi
    if [ "$EXEC" = 1 ] && [ "$status" = ok ]; then
      timeout -k 5 "$TO" "$VERDICT" exec -q --sm "$S" --pm "$M" >"$WORK/exec.log" 2>&1
      erc=$?
      [ $erc = 1 ] || status="EXEC MISSED (exec exit $erc: $(head -c 80 "$WORK/exec.log"))"
    fi
    [ "$status" = ok ] || FAILS=$((FAILS + 1))
    printf '%-44s %-4s %-28s %-10s %-18s %s\n' "$name" "$num" "$cls/$bname" "exit $vrc" "$got" "$status"
  done <<EOF
$LIST
EOF
  if [ $applied = 0 ]; then
    echo "$name: no bug class applies" >&2
    FAILS=$((FAILS + 1))
  fi
done
[ $FAILS = 0 ] || { echo "corpus_mutations: $FAILS failure(s)" >&2; exit 1; }
exit 0
