# CLI surface: help, version, usage errors with exit code 2.
. "$(dirname "$0")/lib.sh"
set -e
expect_exit 0 "$VERDICT" --help
expect_in "exit codes" "$TMP/out"
expect_in "--sm" "$TMP/out"
expect_exit 0 "$VERDICT" --version
expect_in "plan format v1" "$TMP/out"
expect_exit 2 "$VERDICT"
expect_exit 2 "$VERDICT" frobnicate
expect_in "unknown command 'frobnicate'" "$TMP/err"
expect_exit 2 "$VERDICT" --sm only.plan
expect_in "required" "$TMP/err"
expect_exit 2 "$VERDICT" --sm a --pm b --bogus
expect_in "unknown option '--bogus'" "$TMP/err"
expect_exit 2 "$VERDICT" --sm "$TMP/missing.plan" --pm "$TMP/missing2.plan"
expect_in "missing.plan" "$TMP/err"
expect_exit 0 "$VERDICT" plan --help
expect_exit 2 "$VERDICT" plan validate
expect_in "missing FILE" "$TMP/err"
expect_exit 2 "$VERDICT" plan frob x
expect_exit 2 "$VERDICT" plan validate "$TMP/missing.plan"
expect_in "missing.plan" "$TMP/err"
printf 'not msgpack at all' > "$TMP/garbage.plan"
expect_exit 2 "$VERDICT" plan validate "$TMP/garbage.plan"
expect_in "garbage.plan" "$TMP/err"
# the limits table (common/limits.h): every default with its reason; the
# verify help quotes the same default
expect_exit 0 "$VERDICT" limits
expect_in "STAGE_TIMEOUT_MS *30000  --stage-timeout" "$TMP/out"
expect_in "STAGE_BUDGET *5000000  --stage-budget" "$TMP/out"
expect_exit 0 "$VERDICT" --sm a --pm b --help
expect_in "(default 30; 'none' = no limit; 0 is refused)" "$TMP/out"
expect_in "Z3 resource units (default 5;" "$TMP/out"
expect_exit 2 "$VERDICT" --sm a --pm b --seed 0
expect_in "positive" "$TMP/err"
echo ok
