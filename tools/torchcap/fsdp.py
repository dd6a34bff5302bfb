"""tools/torchcap/fsdp.py - FSDP2's own operators, seen through the aten calls they make, and
the first FSDP's flat parameters, declared as boxes of the parameters.

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

The first FSDP (`FullyShardedDataParallel`, flat parameters) is declared by
`declare_flat_parameters`: a unit's FlatParameter is the concatenation of its parameters,
flattened, and a rank's shard is one element range of it, so the rank holds an element range
of each parameter it touches.  A contiguous range of a row-major tensor is a union of a few
boxes (a partial first row, whole rows, a partial last row, recursively per dim: `boxes`); each
box is declared as what it is, a slice of the named parameter, as a view of the shard, so the
storage model (memory.py) knows which value each element of the shard holds.  The all-gather of
the shards and the reduce-scatter of the flat gradient are then recorded per piece
(collectives.py), and the views FSDP takes of the gathered buffer are rebuilt from those pieces.
FSDP1's own clip_grad_norm_ is recorded box by box (`clip_wrappers`).  Supported: FULL_SHARD,
SHARD_GRAD_OP and NO_SHARD with use_orig_params=True; everything else is refused by name
(`_refuse_unit`).  docs/torch.md "FSDP1".
"""
import importlib
import math

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


def boxes(shape, a, b):
    """Elements [a, b) of a row-major tensor of `shape` as boxes [(lo, ext)], in order: each box
    is contiguous in row-major order, and their concatenation is the range."""
    shape = [int(n) for n in shape]
    if a >= b:
        return []
    if not shape:
        return [((), ())]
    inner = math.prod(shape[1:])
    r0, c0 = divmod(a, inner)
    r1, c1 = divmod(b, inner)

    def in_row(r, u, v):
        return [((r,) + lo, (1,) + ext) for lo, ext in boxes(shape[1:], u, v)]
    if r0 == r1:
        return in_row(r0, c0, c1)
    out = []
    if c0:
        out += in_row(r0, c0, inner)
        r0 += 1
    if r1 > r0:
        out.append(((r0,) + (0,) * (len(shape) - 1), (r1 - r0,) + tuple(shape[1:])))
    if c1:
        out += in_row(r1, 0, c1)
    return out


def _fsdp1_class():
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel
        return FullyShardedDataParallel
    except ImportError:  # pragma: no cover - torch built without distributed
        return None


def _refuse_unit(unit, handle, where):
    """CaptureError naming an FSDP option this capture does not record faithfully."""
    from .api import CaptureError
    from torch.distributed.fsdp._flat_param import HandleShardingStrategy as H

    def no(what, instead):
        raise CaptureError("%s: FullyShardedDataParallel with %s is not supported; %s" % (where, what, instead))
    strategy = handle._sharding_strategy
    if strategy not in (H.FULL_SHARD, H.SHARD_GRAD_OP, H.NO_SHARD):
        no("sharding_strategy=%s" % strategy.name,
           "use FULL_SHARD, SHARD_GRAD_OP or NO_SHARD (or FSDP2's fully_shard on a 2-D mesh for hybrid "
           "sharding)")
    if not handle._use_orig_params:
        no("use_orig_params=False (the optimizer then steps on the flat parameter)",
           "pass use_orig_params=True")
    if handle._offload_params:
        no("CPU offload (cpu_offload=CPUOffload(offload_params=True))",
           "drop cpu_offload, or use FSDP2's fully_shard with CPUOffloadPolicy(pin_memory=False), which "
           "torch2plan captures")
    if handle._uses_param_mixed_precision or handle._uses_reduce_mixed_precision:
        # its low-precision flat shard is written through views of another element size, which
        # the storage model (memory.py) does not track
        no("mixed precision (MixedPrecision)", "drop mixed_precision, or use FSDP2's fully_shard with "
           "MixedPrecisionPolicy, which torch2plan captures")
    if getattr(unit, "_comm_hook", None) is not None:
        no("a communication hook (register_comm_hook)", "use the default reduce-scatter")
    if any(handle.flat_param._is_padding_mask):
        no("alignment padding between parameters (a parameter whose element count is odd in a "
           "float64 unit)", "make every parameter's element count even")
    if handle.flat_param._shard_numel_padded:
        no("a flat parameter padded at its end (a unit whose element count %d is not a multiple of the "
           "world size %d)" % (handle.flat_param._unpadded_unsharded_size.numel(), handle.world_size),
           "make every unit's parameter count a multiple of the data-parallel size")


def declare_flat_parameters(cap, module, prefix=""):
    """cap.params for a module that is or holds FullyShardedDataParallel units: declares, for each
    unit, the boxes of every parameter in this rank's shard (see the module comment); returns
    the ids of the parameters the units manage (the caller declares the others as usual), or
    None when module holds no such unit.  The ranks hold different boxes, so the plan stores
    every rank (`cap.all_ranks`, as for ZeRO)."""
    cls = _fsdp1_class()
    if cls is None or not any(isinstance(m, cls) for m in module.modules()):
        return None
    where = cap.rec.src_here()[0]
    names = {id(p): prefix + clean_name(n) for n, p in module.named_parameters()}
    managed = set()
    for unit in cls.fsdp_modules(module):
        handle = getattr(unit, "_handle", None)
        if handle is None:
            continue
        _refuse_unit(unit, handle, where)
        fp = handle.flat_param
        shard = fp.detach()
        managed.update(id(p) for p in fp._params)
        managed.update(id(p) for p in fp._shared_params or [])
        for p, shape, info in zip(fp._params, fp._shapes, fp._shard_param_infos):
            if not info.in_shard:
                continue
            cap.declare_range("param", shard, names[id(p)], shape, info.intra_param_start_idx,
                              info.intra_param_end_idx + 1, info.offset_in_shard, holder=p)
    cap.all_ranks = True
    return managed


def clean_name(name):
    """A parameter or buffer name without FSDP1's wrapper prefixes (`_fsdp_wrapped_module.`)."""
    from torch.distributed.fsdp._common_utils import clean_tensor_name
    return clean_tensor_name(name)


def _grad_pieces(rec, g, where):
    """[(lo, hi, pid)]: the values gradient g holds, by storage range (its boxes, for FSDP1's
    sharded gradients; its own value when it has one)."""
    from . import memory
    from .capture import DTYPES
    c = rec.cell_of(g)
    lo, hi = memory.span(g)
    if c is not None and c.kind == "data" and rec.memory.unchanged_since(g, c.version):
        return [(lo, hi, c.pid)]
    pieces = rec.memory.pieces(g)
    if not pieces:
        return [(lo, hi, rec.read(g, where, "clip_grad_norm_"))]
    dt = DTYPES.get(g.dtype, "f32")
    return [(a, b, memory.piece_value(rec, s, a, b, dt, where)) for s, a, b in pieces]


def clip_wrappers(rec):
    """Replaces FullyShardedDataParallel.clip_grad_norm_ for the step: [(class, name, original)].
    Recorded as what it computes over the rank's sharded gradients, value by value (each box):
    `sumsq` of each, their sum, an all_reduce over the unit's process group (the shards'
    squares), `clip_coef` and a `mul` of each by the coefficient; the returned norm is
    `sqrt(total)`.  FSDP's own function runs for the real values with the recorder quiet.  Only
    the 2-norm of sharded units with use_orig_params=True is supported."""
    cls = _fsdp1_class()
    if cls is None:
        return []
    real = cls.clip_grad_norm_

    def clip_grad_norm_(self, max_norm, norm_type=2.0):
        from . import collectives
        from .api import CaptureError
        from .capture import DTYPES
        where = rec.src_here()[0]
        if float(norm_type) != 2.0:
            raise CaptureError("%s: clip_grad_norm_ with norm_type=%s is not supported (the 2-norm is)"
                               % (where, norm_type))
        grads, seen = [], set()
        for h in self._all_handles:
            for p in h.flat_param._params or []:
                if id(p) not in seen and p.grad is not None:
                    seen.add(id(p))
                    grads.append(p.grad)
        values = [(g, _grad_pieces(rec, g, where)) for g in grads]
        dt = DTYPES.get(grads[0].dtype, "f32") if grads else "f64"
        total = None
        for g, ps in values:
            for _, _, pid in ps:
                sq = rec.new_value([], dt)
                rec.emit("sumsq", [pid], [sq], aten="clip_grad_norm_", src=where)
                if total is not None:
                    s = rec.new_value([], dt)
                    rec.emit("add", [total, sq], [s], aten="clip_grad_norm_", src=where)
                    sq = s
                total = sq
        if total is None:
            raise CaptureError("%s: clip_grad_norm_ of parameters without gradients" % where)
        total = collectives.Call(rec, "clip_grad_norm_", self.process_group).reduced(total, [], dt, "sum")
        coef = rec.new_value([], dt)
        rec.emit("clip_coef", [total], [coef], {"max_norm": float(max_norm)}, aten="clip_grad_norm_", src=where)
        rec.quiet = True
        try:
            norm = real(self, max_norm, norm_type)
        finally:
            rec.quiet = False
        for g, ps in values:
            for a, b, pid in ps:
                out = rec.new_value(rec.values[pid]["shape"], dt)
                rec.emit("mul", [pid, coef], [out], aten="clip_grad_norm_", src=where)
                rec.memory.store_span(g, a, b, out, b - a)
        root = rec.new_value([], dt)
        rec.emit("sqrt", [total], [root], aten="clip_grad_norm_", src=where)
        rec.bind(norm, root)
        return norm
    cls.clip_grad_norm_ = clip_grad_norm_
    return [(cls, "clip_grad_norm_", real)]
