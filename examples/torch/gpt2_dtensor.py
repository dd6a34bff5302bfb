"""examples/torch/gpt2_dtensor.py - the GPT-2 of gpt2.py (model code unchanged) tensor-parallel with
DTensor, as one writes it with torch.distributed.tensor.parallel: init_device_mesh, then
parallelize_module with ColwiseParallel for q/k/v and the MLP's fc, RowwiseParallel for the
attention's out_proj and the MLP's proj.  The parallel program of gpt2_single.py (tools/torch2plan
--nproc TP*DP, --set tp=TP [dp=DP]).  --set sp=1 adds sequence parallelism: the residual stream
between the blocks' layers is sharded along the sequence (dim 1) and the LayerNorms run
SequenceParallel().  With sp=1 the residual stream is the ranks' local tensors, as the parallel
styles' defaults give it (RowwiseParallel(output_layouts=Shard(1)) returns its local output,
torchtitan's plan): every layer that takes it states its layout (SequenceParallel: the sequence
dim; the last block's PrepareModuleOutput: Shard(1)) and DTensor trusts that statement.
--set sp=dtensor keeps the residual stream DTensors instead (use_local_output=False): DTensor
then knows every layout itself and redistributes where a style asks for another.
The embedding and the tied output head stay replicated (a tied weight cannot be split by
parallelize_module without untying it).  With dp>1 the mesh is 2-D (dp, tp): each dp replica
takes its share of the batch, and the gradients are averaged over dp by hand (--set fsdp=1:
FSDP2's fully_shard over the dp mesh dim on top of TP instead, torchtitan's 2-D layout; a
parameter is then sharded over both mesh dims, its placements _StridedShard(0) on dp and
Shard(0) on tp, declared as the box each rank holds: tools/torchcap/dtensor.py local_box).  --set opt=sgdm|adam|adamw
picks the optimizer (its state is DTensors, as the parameters); --set clip=X clips with
torch.nn.utils.clip_grad_norm_ after the dp average, the parameters parallelize_module leaves
plain made Replicate() DTensors first (replicate_rest: torch refuses a mixed list).
Bugs (--set bug=NAME): row_as_col gives the MLP's proj ColwiseParallel where RowwiseParallel
belongs; no_reduce gives out_proj RowwiseParallel(output_layouts=Partial()) with the local
output used as is (the missing all-reduce of a row-parallel layer); placement (with sp=1) states
the last block's local output as Shard(0) where Shard(1) is right: DTensor believes the
sequence-sharded local tensors [B, S/tp, H] are batch shards, gathers them along the batch, and
the model runs on tp*B sequences of S/tp tokens (the shapes still fit: the head and the loss see
B*S tokens), attending within each rank's chunk and scoring each token against another's target.
"""
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import Partial, Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, PrepareModuleOutput,
                                               RowwiseParallel, SequenceParallel, parallelize_module)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2  # noqa: E402
from torchcap import Shard as CapShard  # noqa: E402


def block_plan(c):
    bug = c["bug"]
    sp = c.get("sp", "0") not in ("", "0")
    seq = Shard(1) if sp else Replicate()
    col = ColwiseParallel(input_layouts=seq)
    row = RowwiseParallel(output_layouts=seq, use_local_output=c.get("sp") != "dtensor")
    plan = {
        "attn.q_proj": col,
        "attn.k_proj": col,
        "attn.v_proj": col,
        "attn.out_proj": row,
        "mlp.fc": col,
        "mlp.proj": ColwiseParallel() if bug == "row_as_col" else row,
    }
    if bug == "no_reduce":   # BUG: the row-parallel layer's partial sums are never reduced
        plan["attn.out_proj"] = RowwiseParallel(output_layouts=Partial(), use_local_output=True)
    if sp:
        plan["ln_1"] = SequenceParallel()
        plan["ln_2"] = SequenceParallel()
    return plan


def replicate_rest(model, mesh):
    """Every parameter that parallelize_module left a plain tensor (the embeddings, the tied head,
    the LayerNorms without SequenceParallel) becomes a Replicate() DTensor on mesh, its module
    taking and giving local tensors: torch.nn.utils.clip_grad_norm_ needs every gradient a
    DTensor (a mixed list is refused by DTensor's _foreach_norm and torch.stack).  A tied
    parameter stays tied (one DTensor parameter for both modules)."""
    from torch.distributed.tensor import DTensor, distribute_tensor
    made = {}

    def to_dt(args):
        return tuple(DTensor.from_local(a, mesh, [Replicate()], run_check=False)
                     if isinstance(a, torch.Tensor) and not isinstance(a, DTensor) else a for a in args)

    for m in model.modules():
        plain = [(n, p) for n, p in m.named_parameters(recurse=False) if not isinstance(p.data, DTensor)]
        if not plain:
            continue
        for n, p in plain:
            if id(p) not in made:
                made[id(p)] = torch.nn.Parameter(distribute_tensor(p.data, mesh, [Replicate()]),
                                                 requires_grad=p.requires_grad)
            setattr(m, n, made[id(p)])
        m.register_forward_pre_hook(lambda _m, args: to_dt(args))
        m.register_forward_hook(lambda _m, _args, out: out.to_local() if isinstance(out, DTensor) else out)


def step(cap):
    c = gpt2.config(cap.args)
    tp = int(c["tp"]) if int(c["tp"]) > 1 else cap.world
    dp = cap.world // tp
    sp = c.get("sp", "0") not in ("", "0")
    local = c.get("sp") != "dtensor"   # sp=1: the residual stream is local tensors
    if dp > 1:
        cap.mesh(tp=tp, dp=dp)
        mesh = init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))
        tp_mesh = mesh["tp"]
    else:
        cap.mesh(tp=tp)
        tp_mesh = mesh = init_device_mesh("cpu", (tp,), mesh_dim_names=("tp",))
    model = gpt2.build(c)
    for i, block in enumerate(model.h):
        parallelize_module(block, tp_mesh, block_plan(c))
        # the attention's heads on this rank (the model derives them from q_proj.out_features)
        block.attn.q_proj.out_features //= tp
        if sp:
            if i == 0:   # the replicated embedding output enters the blocks sequence-sharded
                parallelize_module(block, tp_mesh, PrepareModuleInput(
                    input_layouts=Replicate(), desired_input_layouts=Shard(1), use_local_output=local))
            if i == len(model.h) - 1:   # and leaves them replicated, for ln_f and the tied head
                out_layout = Shard(0) if c["bug"] == "placement" else Shard(1)   # BUG: the batch dim
                parallelize_module(block, tp_mesh, PrepareModuleOutput(
                    output_layouts=out_layout, desired_output_layouts=Replicate()))
    fsdp = dp > 1 and c.get("fsdp") == "1"
    if c["clip"] and not fsdp:   # clip_grad_norm_ needs DTensor gradients only (FSDP2 makes them so)
        replicate_rest(model, tp_mesh)
    if fsdp:   # FSDP2 over dp on top of TP: torchtitan's 2-D layout
        for block in model.h:
            fully_shard(block, mesh=mesh["dp"])
        fully_shard(model, mesh=mesh["dp"])
    idx, targets = gpt2.batch()
    dp_rank = mesh.get_local_rank("dp") if dp > 1 else 0
    mine = [t.chunk(dp)[dp_rank].clone() for t in (idx, targets)]
    cap.params(model)   # DTensor parameters: placements from DTensor; the rest replicated
    cap.input(mine[0], "idx", **({"dp": CapShard(0)} if dp > 1 else {}))
    cap.input(mine[1], "targets", **({"dp": CapShard(0)} if dp > 1 else {}))
    opt = gpt2.make_optimizer(c, model.parameters())
    cap.optimizer(opt)
    with cap.step():
        loss = model(*mine)
        loss.backward()
        if dp > 1 and not fsdp:   # average the gradients over the data-parallel replicas
            dp_group = mesh.get_group("dp")
            for p in model.parameters():
                g = p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad
                dist.all_reduce(g, op=dist.ReduceOp.AVG, group=dp_group)
        if c["clip"]:   # after the dp average: the norm of the averaged gradients
            torch.nn.utils.clip_grad_norm_(model.parameters(), c["clip"])
        opt.step()
        logged = loss.detach().clone()
        if dp > 1:
            dist.all_reduce(logged, op=dist.ReduceOp.AVG, group=mesh.get_group("dp"))
    cap.loss(logged, "loss")
