# Programs written the way outside users write them, in styles the other examples do not use
# (examples/torch/tinyllama*.py, mlm*.py; issues 25 and 26: "programs nobody here has seen"):
#  - a Llama-style decoder with nn.RMSNorm (and a hand-written one), rotary tables computed in
#    forward from torch.arange / torch.outer / cos / sin (constants read as data: plan inputs
#    matched by their values), SDPA is_causal (and an additive torch.triu(-inf) mask), SwiGLU,
#    AdamW with weight decay and clip_grad_norm_: under DDP and under DTensor's
#    parallelize_module (Colwise / Rowwise) it is EQUIVALENT and the executor agrees;
#  - the loss divided by the world size under DDP (which averages already) is NOT EQUIVALENT: a
#    SCALE (factor 1/2) at the division's line (the scaling that applied the factor, found from
#    the plan's nodes), DDP's all-reduce on the backward line named as the way the factor reaches
#    the optimizer, whose input is proven 1/2 x its single-device value (not a reduction "missing"
#    where the values happen to fit); AdamW's second moment, 1/4 x (it reads g * g), is the same
#    root cause: one finding;
#  - a row-parallel w2 whose output stays Partial (no all-reduce) is a MISSING_REDUCTION at the
#    residual add that reads it, the partial sum coming from w2's line;
#  - a transformer LM of nn.LayerNorm / nn.Linear / SDPA with an untied head and AdamW with two
#    parameter groups, sharded with FSDP2's fully_shard, is EQUIVALENT; with the root never
#    wrapped (its parameters' gradients never reduced) NOT EQUIVALENT, a MISSING_REDUCTION at the optimizer's update,
#    the inference line naming one copy's share of a mean read as the whole;
#  - a sequence classifier (hand-written LayerNorm, fused qkv, einsum attention, a head over the
#    cat of the mean-pooled and the last token's features) under DDP with 2 accumulated
#    microbatches, each rank's share a different microbatch of the single-device step's, is
#    EQUIVALENT from the inferred lineages alone (no candidate dropped, one round); with the head
#    left out of DDP's reducer (its gradients never averaged) NOT EQUIVALENT, a
#    MISSING_REDUCTION at the optimizer's update; (make e2e-full) with the reducer firing in the first
#    microbatch's backward and the last under no_sync() (bug=sync_first, BUGS.md 14) NOT
#    EQUIVALENT, a MISSING_REDUCTION.
# Nine captures (about 5 s of CPU each on this machine).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/torch_lib.sh"
set -e
line() { grep -n -- "$2" "$EX/$1" | head -1 | cut -d: -f1; }

capture_pair tinyllama.py tinyllama_ddp.py 2
expect_in "1 stored ranks x 2 replicas" "$TMP/out"
pair_equivalent "0 dropped after a failed proof, 1 round"
capture_pair tinyllama.py tinyllama_ddp.py 2 --set bug=double_avg --set clip=0
pair_not_equivalent --full "^   1\. .*SCALE at mul 'tinyllama_ddp.py:$(line tinyllama_ddp.py 'loss = loss / dist.get_world_size')'" \
  "the factor reaches the failing stages through rank 0 mb 0 all_reduce 'tinyllama_ddp.py:$(line tinyllama_ddp.py 'loss.backward()')'" \
  "diagnosis SCALE (factor 1/2)" "24 failing stages (48 per replica)" "which is 1/2 x its single-device value" \
  "findings: 1 (failures grouped by root cause"

# the hand-written RMSNorm and the additive triu mask, tensor-parallel
capture_pair tinyllama.py tinyllama_tp.py 2 --set clip=0 --set norm=hand --set attn=triu
expect_in "2 stored ranks x 1 replicas" "$TMP/out"
pair_equivalent
capture_pair tinyllama.py tinyllama_tp.py 2 --set clip=0 --set bug=partial_w2
pair_not_equivalent "MISSING_REDUCTION at add 'tinyllama.py:$(line tinyllama.py 'return h + self.feed_forward')'" \
  "comes from rank 0 linear 'tinyllama.py:$(line tinyllama.py 'return self.w2')'"

capture_pair mlm.py mlm_fsdp.py 2
pair_equivalent
capture_pair mlm.py mlm_fsdp.py 2 --set bug=no_root
pair_not_equivalent "^   1\. .*MISSING_REDUCTION at add 'mlm_fsdp.py:$(line mlm_fsdp.py 'opt.step()')'" \
  "one copy's share of a mean (part 0 of 2, times 2)"

capture_pair seqcls.py seqcls_ddp.py 2
pair_equivalent "0 dropped after a failed proof, 1 round"
capture_pair seqcls.py seqcls_ddp.py 2 --set bug=head_noavg
pair_not_equivalent "^   1\. .*MISSING_REDUCTION at add 'seqcls_ddp.py:$(line seqcls_ddp.py 'opt.step()')'"
# the reducer fires in the first microbatch's backward, the last one runs under no_sync():
# that microbatch's gradients are never reduced (DDP rebuilds its buckets in between; their
# integer indices are bookkeeping, aten_map.py _bookkeeping)
if full_rows; then
  capture_pair seqcls.py seqcls_ddp.py 2 --set bug=sync_first
  pair_not_equivalent "^   1\. .*MISSING_REDUCTION at "
fi
echo ok
