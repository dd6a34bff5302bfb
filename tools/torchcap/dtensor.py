"""tools/torchcap/dtensor.py - DTensor (torch.distributed.tensor) under the capture.

How the capture sees DTensor programs.  A TorchDispatchMode runs before tensor subclasses: an
operator on DTensor arguments reaches the capture's mode first, with DTensor-typed arguments.
The mode then returns NotImplemented (is_dtensor_call), so the dispatcher hands the operator to
DTensor.__torch_dispatch__ with the mode still active: DTensor's sharding propagation decides
what each rank runs, and every local aten operator on the rank's local tensor, and every
functional collective of a redistribute (_c10d_functional all_gather_into_tensor /
reduce_scatter_tensor / all_reduce + wait_tensor, their chunks and concatenations), reaches
the mode as a plain-tensor operator and is recorded as what the rank really executes.  The
DTensor wrappers themselves hold no value of their own: a DTensor's value is its local tensor's.

Lineage at the boundary: a parameter that is a DTensor is declared as its local tensor, with the
placements DTensor states (param.placements over param.device_mesh), mapped onto the capture's
mesh dims by name (declared_placements).
"""
from .api import CaptureError, Partial, Replicate, Shard


def _dtensor_cls():
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:   # a torch without DTensor
        return None
    return DTensor


def _wrappers():
    out = []
    cls = _dtensor_cls()
    if cls is not None:
        out.append(cls)
    try:   # what functional collectives return: a wrapper that waits (wait_tensor) when used
        from torch.distributed._functional_collectives import AsyncCollectiveTensor
        out.append(AsyncCollectiveTensor)
    except ImportError:
        pass
    return tuple(out)


def is_dtensor_call(types):
    """An operator on DTensor (or AsyncCollectiveTensor) arguments: the subclass's own dispatch
    unwraps it and runs the local operators, which the mode then records."""
    w = _wrappers()
    return bool(w) and any(isinstance(t, type) and issubclass(t, w) for t in types)


def is_fake_call(types):
    from torch._subclasses.fake_tensor import FakeTensor
    return any(isinstance(t, type) and issubclass(t, FakeTensor) for t in types)


def is_dtensor(t):
    cls = _dtensor_cls()
    return cls is not None and isinstance(t, cls)


def _placement(p, name):
    from torch.distributed.tensor import placement_types as pt
    if isinstance(p, pt.Shard):
        if getattr(p, "_offset", None) is not None or type(p).__name__ != "Shard":
            raise CaptureError("DTensor parameter %r: placement %r (strided / uneven sharding) is not "
                               "supported; use Shard(d), Replicate() or Partial()" % (name, p))
        return Shard(p.dim)
    if isinstance(p, pt.Replicate):
        return Replicate()
    if isinstance(p, pt.Partial):
        if p.reduce_op != "sum":
            raise CaptureError("DTensor parameter %r: Partial(%r) is not supported (sum only)"
                               % (name, p.reduce_op))
        return Partial()
    raise CaptureError("DTensor parameter %r: placement %r is not supported" % (name, p))


def local_box(t, name):
    """The first element, in the global tensor, of the box that DTensor t's local tensor holds,
    when its placements shard over several mesh dims (FSDP2 over TP, torchtitan's 2-D layout:
    _StridedShard(0) on dp, Shard(0) on tp, the dp shard taken inside the tp shard): mesh-dim
    placements of the capture cannot state that order, so the rank's box is declared as what it
    is (the plan then stores every rank, as for FSDP1).  DTensor computes the box
    (compute_local_shape_and_global_offset), and the local values are checked to be exactly that
    box of the global tensor.  None when the placements are one Shard, Replicate or Partial per
    mesh dim that declared_placements states."""
    from torch.distributed.tensor import placement_types as pt
    import torch
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
    sharded = [p for p in t.placements if isinstance(p, pt.Shard)]
    if len(sharded) < 2 and all(type(p).__name__ == "Shard" and getattr(p, "_offset", None) is None
                                for p in sharded):
        return None
    shape, off = compute_local_shape_and_global_offset(t.shape, t.device_mesh, t.placements)
    local = t._local_tensor
    if list(shape) != list(local.shape):
        raise CaptureError("DTensor parameter %r: placements %s leave this rank a local tensor of shape %s, "
                           "not the box %s of DTensor's layout (uneven sharding); make the sharded dims "
                           "multiples of the mesh sizes" % (name, t.placements, list(local.shape), list(shape)))
    full = t.full_tensor()
    box = full[tuple(slice(o, o + n) for o, n in zip(off, shape))]
    if not torch.equal(box, local):
        raise CaptureError("DTensor parameter %r: placements %s give this rank a local tensor that is not one "
                           "box of the parameter (a strided layout); not supported" % (name, t.placements))
    return [int(o) for o in off]


def declared_placements(cap, t, name):
    """The capture's placements of DTensor t: {mesh dim name: Shard/Replicate/Partial}."""
    mesh = t.device_mesh
    names = mesh.mesh_dim_names
    mine = [k for k, _ in cap.mesh_dims]
    if names is None:
        if mesh.ndim != 1 or len(mine) != 1:
            raise CaptureError("DTensor parameter %r: its device mesh has no mesh_dim_names; name its "
                               "dims as in cap.mesh (init_device_mesh(..., mesh_dim_names=(\"dp\", \"tp\")))"
                               % name)
        names = tuple(mine)
    sizes = dict(cap.mesh_dims)
    out = {}
    import torch.distributed as dist
    for i, (k, p) in enumerate(zip(names, t.placements)):
        if k not in sizes or sizes[k] != mesh.size(i):
            raise CaptureError("DTensor parameter %r: mesh dim %r of size %d is not a dim of cap.mesh (%s)"
                               % (name, k, mesh.size(i), cap.mesh_dims))
        if mesh.get_local_rank(i) != cap.coords().get(k):
            raise CaptureError("DTensor parameter %r: this rank (%d) is at %s=%d on the device mesh but "
                               "at %s=%d on cap.mesh; lay out both the same (cap.mesh lists the fastest "
                               "dim first, init_device_mesh the slowest)"
                               % (name, dist.get_rank(), k, mesh.get_local_rank(i), k, cap.coords().get(k)))
        pl = _placement(p, name)
        if not isinstance(pl, Replicate):
            if k in out:
                raise CaptureError("DTensor parameter %r: mesh dim %r twice" % (name, k))
            out[k] = pl
    nested = [p for p in t.placements if not isinstance(_placement(p, name), Replicate)]
    if len(nested) > 1:
        raise CaptureError("DTensor parameter %r: placements %s shard over several mesh dims; "
                           "not supported" % (name, t.placements))
    return out


def local_of(t):
    return t._local_tensor


def like(p, local):
    """A DTensor of p's mesh and placements whose local tensor is `local`."""
    from torch.distributed.tensor import DTensor
    return DTensor.from_local(local, p.device_mesh, p.placements, run_check=False,
                              shape=p.shape, stride=p.stride())


def user_line(frames):
    """"file.py:LINE" of the innermost traceback frame outside torch and this tool, or "?"."""
    import os
    import torch
    tdir, here = os.path.dirname(torch.__file__), os.path.dirname(os.path.abspath(__file__))
    user = [f for f in frames if not f.filename.startswith(tdir) and not f.filename.startswith(here)]
    return "%s:%d" % (os.path.basename(user[-1].filename), user[-1].lineno) if user else "?"


def runtime_refusal(exc):
    """The message of a DTensor runtime error (a sharding propagation that fails: a layer given a
    parallel style its shapes do not fit), naming the user's line, or None for other errors."""
    import os
    import traceback
    import torch
    tdir = os.path.join(os.path.dirname(torch.__file__), "distributed", "tensor")
    frames = traceback.extract_tb(exc.__traceback__)
    if not any(f.filename.startswith(tdir) for f in frames):
        return None
    where = user_line(frames)
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return ("%s: DTensor refused the operator (%s); the program fails under DTensor itself: check the "
            "parallel styles of parallelize_module (ColwiseParallel / RowwiseParallel / input and output "
            "layouts) for the layer this line runs" % (where, first))


# ---- where the program applied a parallel style -------------------------------------------
# A parallel style's hooks (ColwiseParallel's from_local of its input, PrepareModuleOutput's
# redistribute) run inside the module's call: the call stack shows the model line that called
# the module, not the program line that chose the layouts.  style_sites() wraps each style
# class's _apply (what parallelize_module calls) to remember, per style object and per module,
# the user's stack there and the style as DTensor prints it; style_site(frame) finds the style
# a hook frame belongs to and names that line.  Reports only: the plan's values and lineage do
# not depend on it.

_SITES = {}   # (id(style), id(module)) or id(style) -> "path:LINE in fn: applies STYLE"


def _style_module():
    try:
        from torch.distributed.tensor.parallel import style
    except ImportError:
        return None
    return style


def install_style_sites():
    """Wraps _apply of every ParallelStyle class of torch.distributed.tensor.parallel.style
    (once per process)."""
    style = _style_module()
    if style is None or getattr(style, "_verdict_sites", False):
        return
    style._verdict_sites = True
    base = style.ParallelStyle
    for cls in [c for c in vars(style).values() if isinstance(c, type) and issubclass(c, base)]:
        orig = cls.__dict__.get("_apply")
        if orig is None:
            continue

        def wrapped(self, module, device_mesh, _orig=orig):
            from .capture import user_stack
            where = user_stack(1)
            if where:
                text = "%s: applies %r" % (where[0], self)
                _SITES[(id(self), id(module))] = text
                _SITES[id(self)] = text
            return _orig(self, module, device_mesh)
        cls._apply = wrapped


def style_site(frame):
    """The site line of the parallel style whose hook code `frame` runs, or None."""
    style = _style_module()
    if style is None or not _SITES or frame.f_code.co_filename != style.__file__:
        return None
    loc = frame.f_locals
    me = loc.get("self")
    if isinstance(me, style.ParallelStyle):
        return _SITES.get(id(me))
    mod = loc.get("mod")
    cls_name = frame.f_code.co_qualname.split(".")[0]
    if mod is not None:
        for key, text in _SITES.items():
            if isinstance(key, tuple) and key[1] == id(mod) and (": applies %s(" % cls_name) in text:
                return text
    return None
