# Megatron's vocab-parallel embedding (examples/torch/megatron_vocab.py: mask ids outside the
# rank's rows with lt/ge/bitwise_or, shift, index_put_ 0, lookup, zero the masked rows,
# all_reduce; its backward zeroes the masked gradient rows) against nn.Embedding on one device
# (vocab_single.py / vocab_tp.py, tools/torchcap/vocab.py):
#  - TP2 and TP2 x DP2 are EQUIVALENT and the executor agrees;
#  - bug=vocab_shard (rank 1 looks up with rank 0's range) is NOT EQUIVALENT, the failing stage
#    holds the masked lookup's line, and the executor disagrees;
#  - the vocab-parallel cross-entropy (ce=vocab) is refused at capture (exit 2) naming its
#    torch.max line: max.dim has no registry operator yet.
. "$(dirname "$0")/lib.sh"
set -e
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
T2P="/usr/bin/python3 $ROOT/tools/torch2plan"
EX=$ROOT/examples/torch
cap() {
  n=$1; shift
  expect_exit "${WANT:-0}" $T2P --single "$EX/vocab_single.py" --parallel "$EX/vocab_tp.py" --nproc "$n" \
    --out-single "$TMP/s.plan" --out-parallel "$TMP/p.plan" "$@"
}
for conf in "2 --set tp=2" "4 --set tp=2 --set dp=2"; do
  cap $conf
  expect_exit 0 "$VERDICT" -q --sm "$TMP/s.plan" --pm "$TMP/p.plan"
  expect_in "^EQUIVALENT" "$TMP/out"
  expect_exit 0 "$VERDICT" exec --sm "$TMP/s.plan" --pm "$TMP/p.plan"
  expect_in "AGREE" "$TMP/out"
done
cap 4 --set tp=2 --set dp=2 --set bug=vocab_shard
expect_exit 1 "$VERDICT" --sm "$TMP/s.plan" --pm "$TMP/p.plan"
expect_in "^NOT EQUIVALENT" "$TMP/out"
expect_in "WRONG_VALUE" "$TMP/out"
expect_in "rank 1 mb 0 embedding 'megatron_vocab.py:45'" "$TMP/out"
expect_exit 1 "$VERDICT" exec --sm "$TMP/s.plan" --pm "$TMP/p.plan"
expect_in "DISAGREE" "$TMP/out"
WANT=2 cap 2 --set tp=2 --set ce=vocab
expect_in "megatron_vocab.py:53: aten.max.dim has no mapping" "$TMP/err"
echo ok
