"""tests/torch/rms_tp.py - rms_single.py with DTensor tensor parallelism: ColwiseParallel on each
MLP's up projection, RowwiseParallel on its down projection, the head ColwiseParallel with
replicated logits; the norms and the embedding stay plain tensors (so clipping, which DTensor
refuses over mixed parameters, is off: --set clip=0 for both programs).  --set lp=1 computes the
loss under DTensor's loss_parallel() on vocab-sharded logits, which torch2plan refuses by name."""
import contextlib

from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, loss_parallel, parallelize_module

from rms_single import build, data, train


def step(cap):
    cap.mesh(tp=cap.world)
    mesh = init_device_mesh("cpu", (cap.world,), mesh_dim_names=("tp",))
    m = build()
    ids, tgt = data()
    lp = cap.args.get("lp") == "1"
    plan = {"head": ColwiseParallel(output_layouts=Shard(-1), use_local_output=False) if lp
            else ColwiseParallel(output_layouts=Replicate())}
    for i in range(len(m.blocks)):
        plan["blocks.%d.up" % i] = ColwiseParallel()
        plan["blocks.%d.down" % i] = RowwiseParallel()
    parallelize_module(m, mesh, plan)
    cap.params(m)
    cap.input(ids, "ids")
    cap.input(tgt, "tgt")
    cap.loss(train(cap, m, ids, tgt, loss_ctx=loss_parallel if lp else contextlib.nullcontext), "loss")
