# The tiny Llama of examples/torch captured by tools/torch2plan: the correct hand-written
# TP2 x PP2 x DP2 (2 microbatches, Adam) and TP2 x PP2 x DP2 + SP (bucketed reducer, SGD)
# programs are EQUIVALENT to the single-device program (boundary-only plans: every other
# lineage is inferred) and agree under verdict's numeric oracle; each hand-written bug
# (llama_parallel.py, --set bug=NAME) disagrees under the oracle.  `make torch-demo`
# (examples/torch/demo.sh) runs every configuration.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/torch_lib.sh"
set -e
cap() {
  capture_pair llama_single.py llama_parallel.py 8 --set tp=2 --set pp=2 --set dp=2 --set nm=2 "$@"
  expect_in "4 stored ranks x 2 replicas" "$TMP/out"
}
# (the SP + bucketed-reducer configuration is also EQUIVALENT: make e2e-full, make torch-demo)
cap --set opt=adam
pair_equivalent
if full_rows; then cap --set sp=1 --set bucket=1; pair_equivalent; fi
# line LABEL: the line of llama_parallel.py holding the code the diagnosis must name
line() { grep -n "$1" "$EX/llama_parallel.py" | head -1 | cut -d: -f1; }
# the residual add reads the row-parallel linear's partial sum (the linear whose
# all_reduce is missing is named as its producer)
cap --set bug=no_allreduce
pair_not_equivalent \
  "inference stopped first at .* add 'llama_parallel.py:$(line 'h = h + attention').*part 0 of 2.*partial sum.*comes from rank 0 linear 'llama_parallel.py:$(line 'return leave_tp(F.linear(o')" \
  "^== finding 1 of 1: MISSING_REDUCTION at add 'llama_parallel.py:$(line 'h = h + attention')"
cap --set bug=dp_noavg
expect_exit 1 "$VERDICT" exec --sm "$TMP/s.plan" --pm "$TMP/p.plan"
expect_in "DISAGREE" "$TMP/out"
# The scaling bugs: each replica's loss divided by the wrong count.  The
# failing stage is the logged loss's (SCALE, the factor named), and the
# finding names the division that introduces the factor (recorded as the product by
# its reciprocal: 'mul'), not the all_reduce
# where the copies first disagree; the stages past it are not solved.
scale_bug() {
  expect_exit 1 "$VERDICT" -q --sm "$TMP/s.plan" --pm "$TMP/p.plan"
  expect_in "^NOT EQUIVALENT" "$TMP/out"
  expect_in "^== finding 1 of 1: SCALE at mul 'llama_parallel.py:$(line '/ loss_divisor()')" "$TMP/out"
  expect_in "diagnosis SCALE (factor $1)" "$TMP/out"
  expect_in "not solved: [0-9]* stages* larger than a failing one" "$TMP/out"
}
scale_bug 2
for bug in grad_scale pp_recv no_sp_gather; do
  cap --set sp=1 --set bug=$bug
  expect_exit 1 "$VERDICT" exec --sm "$TMP/s.plan" --pm "$TMP/p.plan"
  expect_in "DISAGREE" "$TMP/out"
  [ $bug = grad_scale ] && scale_bug 1/4
  # pp_recv and no_sp_gather fail only past the stuck operator, in stages
  # that end at the logged loss or an updated weight (model-sized): the run
  # stops at the first grounded failure, the smallest of them, and the
  # others are not solved (docs/verifier.md 1b).  It took minutes when all
  # 37 were solved and reported; 120 s is far above the seconds it takes.
  if [ $bug = pp_recv ]; then
    # rank 2 (tp 0, pp 1) receives from rank 1 (tp 1) instead of rank 0: the
    # finding names the all_gather that reads the crossed value, the hint
    # names the recv and the sender.
    expect_exit 1 timeout 120 "$VERDICT" -q --sm "$TMP/s.plan" --pm "$TMP/p.plan"
    expect_in "^NOT EQUIVALENT" "$TMP/out"
    expect_in "inference stopped first at rank 2 mb 0 all_gather .*slices that do not combine.*rank 2 recv 'llama_parallel.py:$(line 'dist.recv(x, src=peer')[^']*' (node [0-9]*) received from rank 1" "$TMP/out"
    # (GatherFromSP's all_gather: the line after its bug switch)
    expect_in "^== finding 1 of 1: WRONG_VALUE at all_gather 'llama_parallel.py:$(($(line 'if G.bug != \"no_sp_gather\"') + 1))" "$TMP/out"
    expect_in "not solved: [0-9]* stages* larger than a failing one" "$TMP/out"
  fi
  if [ $bug = no_sp_gather ]; then
    # the cat of the gather's (never filled) buffers
    expect_exit 1 timeout 120 "$VERDICT" -q --sm "$TMP/s.plan" --pm "$TMP/p.plan"
    expect_in "^NOT EQUIVALENT" "$TMP/out"
    expect_in "inference stopped first at .* concat 'llama_parallel.py:$(line 'return torch.cat(parts, dim=1)').*known zero" "$TMP/out"
    expect_in "^== finding 1 of 1: WRONG_VALUE at concat 'llama_parallel.py:$(line 'return torch.cat(parts, dim=1)')" "$TMP/out"
  fi
done
# Tied embedding and head weights across the two pipeline stages (Megatron's
# embedding group): EQUIVALENT; without the group's all_reduce (BUGS.md #19)
# the stages' copies drift apart, first at the optimizer's update.
if full_rows; then cap --set tie=1; pair_equivalent; fi
# the hint: the update reads one addend of the single-device gradient sum
# (not a scaling bug, though the learning rate scales it)
cap --set tie=1 --set bug=tie_noreduce
pair_not_equivalent "^== finding 1 of 1: [A-Z_]* at [a-z_]* 'llama_parallel.py:$(line 'opt.step()')" \
  "flagged: 'tok.weight' .*rank 0.*'tok.weight' .*rank 2" \
  "inference stopped first at .* add 'llama_parallel.py:$(line 'opt.step()').*one addend of the sum.*missing reduction"
echo ok
