"""tools/torchcap/fsdp.py - FSDP2's own operators, seen through the aten calls they make.

FSDP2 (`fully_shard`) registers three operators of its own in the `fsdp` namespace
(torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py): `all_gather_copy_in` copies the
rank's parameter shards into its slice of the flat all-gather buffer, `split_with_sizes_copy`
copies the gathered buffer out into the unsharded parameters, and `chunk_cat` lays the
unsharded gradients out for the reduce-scatter (chunk j of every gradient, for rank j).  Each
is a Python function over aten operators (narrow, split, `_foreach_copy_`,
`split_with_sizes_copy.out`, `_chunk_cat.out`); the dispatch mode runs that function again with
itself active (`kernel`), so the capture records the aten operators, whose handlers (aten_map.py)
and the storage model (memory.py) give each element its value.  Nothing of FSDP's layout is
assumed: an FSDP version whose operators are not in KERNELS is refused by name.

The first FSDP (`FullyShardedDataParallel`) is refused (`refuse_flat_parameters`): its
FlatParameter concatenates a unit's flattened parameters and shards that along its only dim, so
a rank holds element ranges of the parameters that are no slices of them (a lineage is a box).
"""
import importlib

_MODULE = "torch.distributed.fsdp._fully_shard._fsdp_collectives"
# operator -> the module's function that is its CPU kernel
KERNELS = {"all_gather_copy_in": "all_gather_copy_in_cuda",   # one function serves every device
           "split_with_sizes_copy": "split_with_sizes_copy",
           "chunk_cat": "chunk_cat"}


def is_fsdp(func):
    return str(func).startswith("fsdp.")


def kernel(func):
    """The Python function that computes FSDP operator func, or None when this torch has none."""
    name = str(func).split(".")[1]
    fn = KERNELS.get(name)
    if fn is None:
        return None
    try:
        return getattr(importlib.import_module(_MODULE), fn, None)
    except ImportError:
        return None


def refuse_flat_parameters(module):
    """CaptureError when module is or holds the first FSDP's FullyShardedDataParallel."""
    from .api import CaptureError
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel
    except ImportError:  # pragma: no cover - torch built without distributed
        return
    if any(isinstance(m, FullyShardedDataParallel) for m in module.modules()):
        raise CaptureError("cap.params: FullyShardedDataParallel (the first FSDP) is not supported: its "
                           "FlatParameter shards the concatenation of a unit's flattened parameters, so a "
                           "rank holds element ranges that are no slices of the parameters; use FSDP2's "
                           "fully_shard (examples/torch/gpt2_fsdp.py), whose shards are dim-0 slices")
