# Issue 16, "friction": what a new user runs into first gets an error that
# says what to do.  One block per item.
. "$(dirname "$0")/lib.sh"
set -e
G="--layers 2 --heads 4 --seq 8 --batch 4 --dp 2 --tp 2 --pp 2 --nm 2"
expect_exit 0 "$VERDICT" gen --model llama3 --hidden 32 $G --single "$TMP/s.plan" --parallel "$TMP/p.plan"
expect_exit 0 "$VERDICT" gen --model llama3 --hidden 64 $G --single "$TMP/s64.plan" --parallel "$TMP/p64.plan"
expect_exit 0 "$VERDICT" gen --model mlp --layers 2 --hidden 32 --batch 4 --tp 2 \
  --single "$TMP/ms.plan" --parallel "$TMP/mp.plan"

# Plans that do not belong together: one line, exit 2, saying what differs.
# Another model (annotations name tensors of another rank)...
expect_exit 2 "$VERDICT" --sm "$TMP/ms.plan" --pm "$TMP/p.plan"
expect_in "dim(s)" "$TMP/err"
[ "$(wc -l <"$TMP/err")" = 1 ] || fail "mismatched pair: expected one line"
[ ! -s "$TMP/out" ] || fail "mismatched pair: nothing on stdout expected"
# ...the same model at another hidden size (slices leave the tensors).
expect_exit 2 "$VERDICT" --sm "$TMP/s.plan" --pm "$TMP/p64.plan"
expect_in "do not belong together" "$TMP/err"
expect_in "slice outside" "$TMP/err"
# The matching pairs still verify.
expect_exit 0 "$VERDICT" --sm "$TMP/s64.plan" --pm "$TMP/p64.plan" -q

# Swapped --sm / --pm.
expect_exit 2 "$VERDICT" --sm "$TMP/p.plan" --pm "$TMP/s.plan"
expect_in "swapped" "$TMP/err"

# A pickle (an nnScaler plan) is converted in the run (tests/e2e/50_gate.sh);
# a pickle paired with a plan says to give both the same way.
printf '\200\004\225\000' >"$TMP/plan.pkl"
expect_exit 2 "$VERDICT" --sm "$TMP/plan.pkl" --pm "$TMP/p.plan"
expect_in "give both as pickles" "$TMP/err"
expect_exit 2 "$VERDICT" plan validate "$TMP/plan.pkl"
expect_in "Python pickle" "$TMP/err"

# Positional plans explain --sm/--pm; a stray argument too.
expect_exit 2 "$VERDICT" "$TMP/s.plan" "$TMP/p.plan"
expect_in "verdict --sm SINGLE.plan --pm PARALLEL.plan" "$TMP/err"
expect_exit 2 "$VERDICT" --sm "$TMP/s.plan" --pm "$TMP/p.plan" extra
expect_in "--sm SINGLE.plan --pm PARALLEL.plan" "$TMP/err"

# Unknown options and commands suggest the closest one.
expect_exit 2 "$VERDICT" --sm "$TMP/s.plan" --pm "$TMP/p.plan" --thread 2
expect_in "did you mean '--threads'" "$TMP/err"
expect_exit 2 "$VERDICT" --sm "$TMP/s.plan" --pm "$TMP/p.plan" --max-failure 2
expect_in "did you mean '--max-failures'" "$TMP/err"
expect_exit 2 "$VERDICT" exec --sm "$TMP/s.plan" --pm "$TMP/p.plan" --sed 3
expect_in "did you mean '--seed'" "$TMP/err"
expect_exit 2 "$VERDICT" mutate --bgu 1 "$TMP/p.plan" "$TMP/x.plan"
expect_in "did you mean '--bug'" "$TMP/err"
expect_exit 2 "$VERDICT" gen --model llama3 --tpp 2 --single "$TMP/a" --parallel "$TMP/b"
expect_in "did you mean '--tp'" "$TMP/err"
expect_exit 2 "$VERDICT" plan stats --jsn "$TMP/p.plan"
expect_in "did you mean '--json'" "$TMP/err"
expect_exit 2 "$VERDICT" mutat
expect_in "did you mean 'mutate'" "$TMP/err"
# The suggestions come from each command's option table (verifier/cli.h):
# every option counts, bracketed ones too ([--tsv], [--seed N]), and words
# its help text only mentions (another command's options) never do.
expect_exit 2 "$VERDICT" plan valdate "$TMP/p.plan"
expect_in "unknown subcommand 'valdate'; did you mean 'validate'? (validate, dump, stats, strip)" "$TMP/err"
expect_exit 2 "$VERDICT" limits --hepl
expect_in "unexpected argument '--hepl'; did you mean '--help'?" "$TMP/err"
expect_exit 2 "$VERDICT" mutate --list --tvs
expect_in "did you mean '--tsv'" "$TMP/err"
expect_exit 2 "$VERDICT" noise --sm "$TMP/s.plan" --sede 3
expect_in "did you mean '--seed'" "$TMP/err"
expect_exit 2 "$VERDICT" recheck "$TMP" --certificat "$TMP"
expect_in "unknown option '--certificat' (see verdict recheck --help)" "$TMP/err"
expect_exit 2 "$VERDICT" compare --dump-singl "$TMP/a"
expect_in "unknown option '--dump-singl' (see verdict compare --help)" "$TMP/err"
expect_exit 2 "$VERDICT" gate "$TMP/m.toml" --smm "$TMP/s.plan"
expect_in "unknown option '--smm' (see verdict gate --help)" "$TMP/err"
expect_exit 2 "$VERDICT" --sm "$TMP/s.plan" --pm "$TMP/p.plan" --frobnicate
expect_in "unknown option '--frobnicate' (see" "$TMP/err"
expect_exit 2 "$VERDICT" exec --sm "$TMP/s.plan" --tol
expect_in "missing value for option '--tol'" "$TMP/err"

# gen does not blame an option the user never gave.
expect_exit 2 "$VERDICT" gen --model llama3 --tp 8 --single "$TMP/a" --parallel "$TMP/b"
expect_in "not given: it defaults to --heads" "$TMP/err"

# Every subcommand takes --help (exit 0, usage on stdout).
for c in "" "plan" "plan validate" "plan dump" "plan stats" "plan strip" "gen" "exec" "mutate" "limits"; do
  # shellcheck disable=SC2086
  expect_exit 0 "$VERDICT" $c --help
  expect_in "usage" "$TMP/out"
done

# --max-failures caps every list, structural problems included: the
# structural entries of one cause are one finding (its representative
# printed), and findings beyond the cap are only counted.
expect_exit 0 "$VERDICT" mutate --bug 2 --layer 0 "$TMP/p.plan" "$TMP/b2.plan"
expect_exit 1 "$VERDICT" --sm "$TMP/s.plan" --pm "$TMP/b2.plan"
[ "$(grep -c '^-- ' "$TMP/out")" = 1 ] || fail "bug 2: expected one representative entry"
expect_in "4 structural entries" "$TMP/out"
expect_exit 0 "$VERDICT" mutate --bug 7 --layer 0 --rank 1 "$TMP/p.plan" "$TMP/b7.plan"
expect_exit 0 "$VERDICT" mutate --bug 12 --layer 1 --rank 3 "$TMP/b7.plan" "$TMP/b712.plan"
expect_exit 1 "$VERDICT" --sm "$TMP/s.plan" --pm "$TMP/b712.plan"
[ "$(grep -c '^== finding' "$TMP/out")" = 2 ] || fail "two bugs: expected two findings"
expect_exit 1 "$VERDICT" --sm "$TMP/s.plan" --pm "$TMP/b712.plan" --max-failures 1
[ "$(grep -c '^-- ' "$TMP/out")" = 1 ] || fail "--max-failures 1 printed more than one entry"
expect_in "2 findings in all; --max-failures 1" "$TMP/out"
echo ok
