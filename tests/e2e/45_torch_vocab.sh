# Megatron's vocab-parallel embedding (examples/torch/megatron_vocab.py: mask ids outside the
# rank's rows with lt/ge/bitwise_or, shift, index_put_ 0, lookup, zero the masked rows,
# all_reduce; its backward zeroes the masked gradient rows) against nn.Embedding on one device
# (vocab_single.py / vocab_tp.py, tools/torchcap/vocab.py):
#  - TP2 and TP2 x DP2 (and TP2 with masked_fill instead of index_put_) are EQUIVALENT and the executor agrees;
#  - bug=vocab_shard (rank 1 looks up with rank 0's range) is NOT EQUIVALENT, the failing stage
#    holds the masked lookup's line, and the executor disagrees;
#  - the vocab-parallel cross-entropy (ce=vocab) is refused at capture (exit 2) naming its
#    torch.max line: max.dim has no registry operator yet.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/torch_lib.sh"
set -e
# the lines of the index_put_ lookup and of the cross-entropy's torch.max
LOOKUP=$(grep -n "out = torch.nn.functional.embedding(masked_input" "$EX/megatron_vocab.py" | tail -1 | cut -d: -f1)
MAXL=$(grep -n "torch.max(logits" "$EX/megatron_vocab.py" | cut -d: -f1)
cap() { capture_pair vocab_single.py vocab_tp.py "$@"; }
for conf in "2 --set tp=2" "4 --set tp=2 --set dp=2" "2 --set tp=2 --set fill=masked_fill"; do
  cap $conf
  pair_equivalent
done
cap 4 --set tp=2 --set dp=2 --set bug=vocab_shard
pair_not_equivalent --full "WRONG_VALUE" "rank 1 mb 0 embedding 'megatron_vocab.py:$LOOKUP'"
# refused at capture, with the line: the lookup's masked rows not zeroed before the all_reduce
mkdir "$TMP/ex" && cp "$EX"/*.py "$TMP/ex/"
sed -i 's/^        out\[input_mask, :\] = 0.0/        pass/' "$TMP/ex/megatron_vocab.py"
expect_exit 2 $T2P --single "$TMP/ex/vocab_single.py" --parallel "$TMP/ex/vocab_tp.py" --nproc 2 --set tp=2 \
  --out-single "$TMP/s.plan" --out-parallel "$TMP/p.plan"
expect_in "megatron_vocab.py:[0-9]*: c10d.allreduce_ reads a masked lookup whose masked rows are not zeroed" "$TMP/err"
WANT=2 cap 2 --set tp=2 --set ce=vocab
expect_in "megatron_vocab.py:$MAXL: aten.max.dim has no mapping" "$TMP/err"
echo ok
