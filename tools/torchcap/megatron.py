"""tools/torchcap/megatron.py - what Megatron-Core's tensor-parallel layers say about their
parameters, as boundary placements (cap.params).

megatron.core.tensor_parallel marks every parameter it splits over the tensor-parallel group with
`tensor_model_parallel = True`, the split dimension `partition_dim` and `partition_stride`
(ColumnParallelLinear: rows, dim 0; RowParallelLinear: columns, dim 1; VocabParallelEmbedding:
rows); a parameter without the mark (a row-parallel bias, a norm) is replicated.  So the user
declares nothing for them: cap.params(model) reads the marks.  Plain attributes, read without
importing megatron.
"""
from .api import CaptureError, Shard


def placements(param, name, mesh):
    """The tp placement Megatron-Core states for `param` ({} when it states none).  mesh: the
    capture's mesh dims [(name, size)]."""
    if not getattr(param, "tensor_model_parallel", False):
        return {}
    if "tp" not in dict(mesh):
        raise CaptureError("cap.params: %s is split by Megatron-Core's tensor parallelism "
                           "(tensor_model_parallel) but cap.mesh() has no tp dim" % name)
    stride = getattr(param, "partition_stride", 1)
    if stride != 1:
        raise CaptureError("cap.params: %s: Megatron-Core partition_stride %s (an interleaved split, "
                           "e.g. a fused QKV weight) is not supported; declare it with cap.param" % (name, stride))
    return {"tp": Shard(int(param.partition_dim))}
