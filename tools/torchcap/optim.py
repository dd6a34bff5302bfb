"""tools/torchcap/optim.py - optimizers and gradient clipping, as the capture sees them.

`declare(cap, opt, step)` is what `cap.optimizer(opt)` does: it checks that the optimizer is one
the capture records faithfully, switches `foreach` off (the per-tensor path runs aten operators
the dispatch mode sees one by one), creates the optimizer's state before the step with nonzero
values (torch creates it lazily; the captured step is then a steady-state step) and declares it.

- torch.optim.SGD: momentum (the `momentum_buffer` of each parameter, named `<param>.momentum`),
  dampening, nesterov, weight decay, maximize: every update is an aten operator (mul_, add_,
  add with alpha) recorded like any other.  Without momentum there is no state.
- torch.optim.Adam and AdamW (a subclass in PyTorch 2): `exp_avg` and `exp_avg_sq`; the step
  counter is host state (its value only feeds Python floats).  No amsgrad, capturable.
- torch.distributed.optim.ZeroRedundancyOptimizer: its local optimizer (one of the above, over
  this rank's partition of the parameters) is declared as above, so the sharded state exists on
  its owner only; its step runs the local optimizer and broadcasts every partition from its
  owner (c10d.broadcast_, collectives.py), which writes the owner's updated values into the
  other ranks' parameters.  The ranks run different programs (each updates its own partition),
  so the plan stores every rank: the mesh's dp dim is kept as a plain data-parallel dim
  (`zero`), not folded into replicas.

The state's initial values are functions of the parameter's own elements (not of a
generator's sequence), so that a rank holding a slice of a parameter holds the same slice of the
state as the single-device program.

`clip_wrappers(rec)`: torch.nn.utils.clip_grad_norm_ is recorded as what it computes, in the
registry's clipping operators: `sumsq` of every gradient, their sum (adds), `clip_coef`
(min(1, max_norm / (sqrt(total) + 1e-6)), torch's formula) and a `mul` of every gradient by the
coefficient; the returned total norm is `sqrt(total)`.  torch's own function runs for the real
values with the recorder quiet.  Only the 2-norm is supported (others are refused, exit 2).  A
clamp written by hand has no registry operator and is refused by aten_map.py as any unmapped
operator.
"""
import torch

from .api import CaptureError


def _dims(t):
    return [int(s) for s in t.shape]


def _dtype(t):
    from .capture import DTYPES
    return DTYPES.get(t.dtype, "f32")


def _zero_class():
    try:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        return ZeroRedundancyOptimizer
    except Exception:  # pragma: no cover - torch built without distributed
        return None


def declare(cap, opt, step=1):
    """cap.optimizer(opt): see the module comment."""
    zero = _zero_class()
    if zero is not None and isinstance(opt, zero):
        if getattr(opt, "_overlap_with_ddp", False):
            raise CaptureError("cap.optimizer: ZeroRedundancyOptimizer(overlap_with_ddp=True) steps inside "
                               "a DDP comm hook; not supported (use the default overlap_with_ddp=False)")
        if opt.parameters_as_bucket_view:
            raise CaptureError("cap.optimizer: ZeroRedundancyOptimizer(parameters_as_bucket_view=True) "
                               "is not supported (the default False broadcasts each parameter)")
        cap.all_ranks = True
        _declare_local(cap, opt.optim, step, "ZeroRedundancyOptimizer's local optimizer")
        _wrap_step(cap.rec, opt)
        return
    _declare_local(cap, opt, step, "cap.optimizer")
    _wrap_step(cap.rec, opt)


def _declare_local(cap, opt, step, what):
    by_id = {id(d.tensor): d for d in cap.decls if d.kind == "param"}
    if isinstance(opt, torch.optim.SGD):
        for g in opt.param_groups:
            g["foreach"] = False
            if g.get("momentum", 0):
                _state(cap, opt, g, by_id, {"momentum_buffer": ".momentum"}, None, what)
        return
    if isinstance(opt, torch.optim.Adam):
        for g in opt.param_groups:
            g["foreach"] = False
            g["fused"] = None
            if g.get("amsgrad") or g.get("capturable"):
                raise CaptureError("%s: Adam with amsgrad/capturable is not supported" % what)
            _state(cap, opt, g, by_id, {"exp_avg": ".exp_avg", "exp_avg_sq": ".exp_avg_sq"}, step, what)
        return
    raise CaptureError("%s: only torch.optim.SGD, Adam and AdamW (and ZeroRedundancyOptimizer over "
                       "them) are supported, got %s" % (what, type(opt).__name__))


def _init_value(key, w):
    if key == "exp_avg_sq":
        return 0.01 + 0.05 * (1.0 + torch.cos(1000.0 * w + 2.0))
    if key == "exp_avg":
        return 0.05 * torch.sin(1000.0 * w + 1.0)
    return 0.05 * torch.sin(1000.0 * w + 3.0)   # SGD's momentum buffer


def _state(cap, opt, group, by_id, keys, step, what):
    from . import dtensor
    for p in group["params"]:
        dt = dtensor.is_dtensor(p)
        local = dtensor.local_of(p) if dt else p
        d = by_id.get(id(local))
        if d is None and id(p) in cap.ranges:
            _range_state(cap, opt, p, keys, step)
            continue
        if d is None and p.numel() == 0:
            continue    # FSDP1: a parameter with no element in this rank's shard is not stepped
        if d is None:
            raise CaptureError("%s: a parameter of the optimizer is not declared (cap.param)" % what)
        st = _new_state(cap, opt, p, step)
        for key, suffix in keys.items():
            with torch.no_grad():
                t = _init_value(key, local.detach().double()).to(p.dtype)
            # over a DTensor parameter (FSDP2, DTensor TP) the state is a DTensor of the same
            # placements, as torch creates it; its local tensor is declared like the parameter's
            st[key] = dtensor.like(p, t) if dt else t
            if dt:
                t = dtensor.local_of(st[key])
            pid = cap.rec.new_value(_dims(t), _dtype(t))
            cap.rec.bind(t, pid)
            cap._replay_init(t, d.name + suffix)
            cap.decls.append(type(d)("optstate", d.name + suffix, t, pid, d.placements, -1, d.src, d.at))


def _new_state(cap, opt, p, step):
    """p's state dict, with its step counter (host state) when the optimizer counts steps."""
    st = opt.state[p]
    if step is not None:
        st["step"] = torch.tensor(float(step))
        cap.host_tensors.append(st["step"])
    return st


def _range_state(cap, opt, p, keys, step):
    """The state of a parameter that holds a flat range of a single tensor (FSDP1's original
    parameters, 1-D views of the rank's shard): 1-D like it, declared box by box as the
    parameter was (cap.declare_range)."""
    name, shape, start = cap.ranges[id(p)]
    st = _new_state(cap, opt, p, step)
    for key, suffix in keys.items():
        with torch.no_grad():
            t = _init_value(key, p.detach().double()).to(p.dtype)
        st[key] = t
        cap.declare_range("optstate", t, name + suffix, shape, start, start + t.numel(), 0)


def _wrap_step(rec, opt):
    inner = opt.step

    def step(*a, **k):
        old = rec.phase
        rec.phase = "opt"
        try:
            return inner(*a, **k)
        finally:
            rec.phase = old
    opt.step = step


# ---- gradient clipping -------------------------------------------------------------------------

def _sum_over_shards(rec, g, sq, dt):
    """The sum of squares of DTensor gradient g from that of its local shard: all-reduced over
    every mesh dim g is sharded on (FSDP2's dp, a tensor-parallel dim), as the norm of a sharded
    DTensor is; a replicated dim holds the whole already."""
    from . import collectives, dtensor
    if not dtensor.is_dtensor(g):
        return sq
    for i, pl in enumerate(g.placements):
        if pl.is_partial():
            raise CaptureError("%s: clip_grad_norm_ of a gradient with a Partial placement (reduce it "
                               "first)" % rec.src_here()[0])
        if pl.is_shard():
            call = collectives.Call(rec, "clip_grad_norm_", g.device_mesh.get_group(i))
            sq = call.reduced(sq, [], dt, "sum")
    return sq


def clip_wrappers(rec):
    """Replaces torch.nn.utils.clip_grad_norm_ for the step: [(module, name, original)]."""
    import torch.nn.utils as nnu
    import torch.nn.utils.clip_grad as cg
    real = cg.clip_grad_norm_

    def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
        if isinstance(parameters, torch.Tensor):
            parameters = [parameters]
        params = list(parameters)
        where = rec.src_here()[0]
        if float(norm_type) != 2.0:
            raise CaptureError("%s: clip_grad_norm_ with norm_type=%s is not supported (the 2-norm is)"
                               % (where, norm_type))
        grads = [p.grad for p in params if p.grad is not None]
        if not grads:
            raise CaptureError("%s: clip_grad_norm_ of parameters without gradients" % where)
        from . import dtensor
        dgrads = grads
        grads = [dtensor.local_of(g) if dtensor.is_dtensor(g) else g for g in dgrads]
        pids = [rec.read(g, where, "clip_grad_norm_") for g in grads]
        dt = _dtype(grads[0])
        total = None
        for g, pid in zip(dgrads, pids):
            sq = rec.new_value([], dt)
            rec.emit("sumsq", [pid], [sq], aten="clip_grad_norm_", src=where)
            sq = _sum_over_shards(rec, g, sq, dt)
            if total is None:
                total = sq
            else:
                s = rec.new_value([], dt)
                rec.emit("add", [total, sq], [s], aten="clip_grad_norm_", src=where)
                total = s
        coef = rec.new_value([], dt)
        rec.emit("clip_coef", [total], [coef], {"max_norm": float(max_norm)}, aten="clip_grad_norm_", src=where)
        rec.quiet = True
        try:
            norm = real(params, max_norm, norm_type, error_if_nonfinite, foreach)
        finally:
            rec.quiet = False
        for g, pid in zip(grads, pids):
            out = rec.new_value(_dims(g), _dtype(g))
            rec.emit("mul", [pid, coef], [out], aten="clip_grad_norm_", src=where)
            rec.write(g, out, where)
        root = rec.new_value([], dt)
        rec.emit("sqrt", [total], [root], aten="clip_grad_norm_", src=where)
        rec.bind(dtensor.local_of(norm) if dtensor.is_dtensor(norm) else norm, root)
        return norm
    patches = []
    for mod in (nnu, cg):
        if getattr(mod, "clip_grad_norm_", None) is real:
            patches.append((mod, "clip_grad_norm_", real))
            setattr(mod, "clip_grad_norm_", clip_grad_norm_)
    return patches

