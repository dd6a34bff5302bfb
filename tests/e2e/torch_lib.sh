# Helpers sourced by the PyTorch end-to-end scripts (4x_torch_*.sh), after lib.sh: where
# tools/torch2plan and examples/torch are, the capture of a single-device / parallel pair, and
# the checks every captured pair goes through (the verifier's verdict, then the numeric
# executor's).  Not a test itself (the Makefile runs tests/e2e/[0-9]*.sh only).
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
T2P="/usr/bin/python3 $ROOT/tools/torch2plan"
EX=$ROOT/examples/torch

# full_rows: true under `make e2e-full` (VERDICT_E2E_FULL=1).  Variant rows that repeat a
# mechanism another row already covers (and `make torch-demo` runs) are kept for it, to hold
# `make test` under 15 minutes on two cores.
full_rows() { [ -n "${VERDICT_E2E_FULL:-}" ]; }

# capture_pair SINGLE PARALLEL NPROC ARGS...: tools/torch2plan captures examples/torch/SINGLE
# and PARALLEL (over NPROC processes, ARGS passed on) into $TMP/s.plan and $TMP/p.plan, and
# must exit ${WANT:-0}.
capture_pair() {
  _single=$1 _parallel=$2 _nproc=$3
  shift 3
  expect_exit "${WANT:-0}" $T2P --single "$EX/$_single" --parallel "$EX/$_parallel" --nproc "$_nproc" \
    --out-single "$TMP/s.plan" --out-parallel "$TMP/p.plan" "$@"
}

# replay_faithful SINGLE SEED ARGS...: the single-device capture of examples/torch/SINGLE
# (ARGS passed on) is faithful: torch's own step, run on the values the executor gave the plan
# (seed SEED, dumped to $TMP/v), agrees with the executor's.
replay_faithful() {
  _single=$1 _seed=$2
  shift 2
  expect_exit 0 $T2P --single "$EX/$_single" --out-single "$TMP/s1.plan" "$@"
  expect_exit 0 "$VERDICT" exec --sm "$TMP/s1.plan" --dump "$TMP/v" --seed "$_seed"
  expect_exit 0 $T2P --single "$EX/$_single" --replay "$TMP/v" "$@" --tol 1e-12
  expect_in "replay AGREE" "$TMP/out"
}

# pair_equivalent [PATTERN...]: $TMP/s.plan and $TMP/p.plan are EQUIVALENT (the quiet report
# holds every PATTERN too) and the executor agrees.
pair_equivalent() {
  expect_exit 0 "$VERDICT" -q --sm "$TMP/s.plan" --pm "$TMP/p.plan"
  expect_in "^EQUIVALENT" "$TMP/out"
  for _pattern in "$@"; do expect_in "$_pattern" "$TMP/out"; done
  expect_exit 0 "$VERDICT" exec --sm "$TMP/s.plan" --pm "$TMP/p.plan"
  expect_in "AGREE" "$TMP/out"
}

# dp_configs_equivalent SINGLE PARALLEL CONF...: each CONF is "NPROC [ARGS...]"; the pair
# captured over NPROC processes with --set dp=NPROC and ARGS is EQUIVALENT and the executor
# agrees (pair_equivalent).
dp_configs_equivalent() {
  _single=$1 _parallel=$2
  shift 2
  for _conf in "$@"; do
    # shellcheck disable=SC2086  # CONF is split into NPROC and ARGS on purpose
    set -- $_conf
    _n=$1
    shift
    capture_pair "$_single" "$_parallel" "$_n" --set dp="$_n" "$@"
    pair_equivalent
  done
}

# pair_not_equivalent [--full] [PATTERN...]: the pair is NOT EQUIVALENT (exit 1; the report,
# quiet unless --full, holds every PATTERN too) and the executor disagrees (exit 1).
pair_not_equivalent() {
  _quiet=-q
  if [ "${1-}" = --full ]; then _quiet= && shift; fi
  expect_exit 1 "$VERDICT" $_quiet --sm "$TMP/s.plan" --pm "$TMP/p.plan"
  expect_in "^NOT EQUIVALENT" "$TMP/out"
  for _pattern in "$@"; do expect_in "$_pattern" "$TMP/out"; done
  expect_exit 1 "$VERDICT" exec --sm "$TMP/s.plan" --pm "$TMP/p.plan"
  expect_in "DISAGREE" "$TMP/out"
}
