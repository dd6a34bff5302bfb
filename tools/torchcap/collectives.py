"""tools/torchcap/collectives.py - torch.distributed traffic, recorded where torch dispatches it.

In PyTorch 2 every collective and point-to-point call reaches the dispatcher as an operator of
the `c10d` namespace (dist.all_reduce -> c10d.allreduce_, DDP's C++ reducer too) or, for the
functional collectives DTensor and FSDP2 emit, of `_c10d_functional` (all_reduce,
all_gather_into_tensor, reduce_scatter_tensor, wait_tensor).  The capture's dispatch mode hands
each such call here; TABLE maps the operator to a handler that records registry collectives
(ops/ops.def: all_reduce, all_gather, reduce_scatter, broadcast, send, recv) with the group's
global ranks and the call's order within the group, and writes the result into the tensors the
call fills (through the storage model, so buckets and flat buffers are right).

The reduction of a c10d call is an opaque object in Python.  It is learnt from the Python entry
point that made the call (dist.all_reduce's `op`, recorded by `hint_wrappers`) and otherwise, for
calls made from C++ (DDP's reducer), by asking the group: the inputs are all-gathered outside the
capture and the result compared with their sum, mean and maximum; a result none of them explains,
or that two of them explain, is refused.

Collectives run to completion before they are recorded (a collective needs every member anyway,
so waiting early changes no value); sends and receives are not waited for (pipeline schedules post
both before waiting), and a receive's value is copied for --dump-* once its work completes.
"""
import math

import torch
import torch.distributed as dist

from .api import CaptureError

_RED = {dist.ReduceOp.SUM: "sum", dist.ReduceOp.MAX: "max", dist.ReduceOp.AVG: "avg"}
_FN_RED = {"sum": "sum", "max": "max", "avg": "avg"}


def _ranks_of_pg(pg):
    return tuple(dist.get_process_group_ranks(pg))


def _pg(obj):
    if isinstance(obj, torch.ScriptObject):
        return dist.ProcessGroup.unbox(obj)
    return obj


def _pg_by_name(name):
    from torch.distributed.distributed_c10d import _resolve_process_group
    return _resolve_process_group(name)


def _dt(rec, t):
    from .capture import DTYPES
    return DTYPES.get(t.dtype, "f32")


def _dims(t):
    return [int(s) for s in t.shape]


class Call:
    """One dispatched collective: the recorder, the user's line, the group."""

    def __init__(self, rec, name, pg):
        self.rec = rec
        self.name = name
        self.pg = pg
        self.ranks = _ranks_of_pg(pg)
        self.where = rec.src_here()[0]
        self.stack = rec.stack_here()   # the call stack of this call, not of the line's last operator

    def fail(self, why):
        raise CaptureError("%s: %s: %s" % (self.where, self.name, why))

    def info(self, kind):
        seq = self.rec.coll_seq.get(self.ranks, 0)
        self.rec.coll_seq[self.ranks] = seq + 1
        return {"kind": kind, "group": list(self.ranks), "seq": seq}

    def emit(self, op, ins, shape, dt, attrs=None, kind=None):
        out = self.rec.new_value(shape, dt)
        self.rec.emit(op, ins, [out], attrs or {}, aten=self.name, phase="comm",
                      coll=self.info(kind or op), src=self.where, stack=self.stack)
        return out

    def local(self, op, ins, shape, dt, attrs=None):
        """A local identity step (view, chunk) around a collective."""
        out = self.rec.new_value(shape, dt)
        self.rec.emit(op, ins, [out], attrs or {}, aten=self.name, src=self.where, stack=self.stack)
        return out

    def reduced(self, pin, shape, dt, red):
        """all_reduce of pin with reduction red ("sum", "max", "avg": a sum scaled by 1/n)."""
        attrs = {"reduce": "max"} if red == "max" else {}
        out = self.emit("all_reduce", [pin], shape, dt, attrs)
        if red == "avg":
            out = self.local("scale", [out], shape, dt, {"factor": 1.0 / len(self.ranks)})
        return out


def _wait(work):
    if isinstance(work, torch.ScriptObject):
        work = dist.distributed_c10d.Work.unbox(work)
    if work is not None:
        work.wait()


def _reduction(call, inputs, results):
    """The reduction a c10d call applied: its Python entry point's `op`, else learnt from the
    group's inputs (see the module comment)."""
    hint = call.rec.redop_hint
    if hint is not None:
        call.rec.redop_hint = None
        red = _RED.get(hint)
        if red is None:
            call.fail("reduction %s is not supported (SUM, AVG, MAX)" % hint)
        return red
    outs = []
    for x, r in zip(inputs, results):
        gathered = [torch.empty_like(x) for _ in call.ranks]
        dist.all_gather(gathered, x, group=call.pg)
        st = torch.stack([g.double() for g in gathered])
        outs.append((st, r.double()))
    fits = []
    for red, f in (("sum", lambda s: s.sum(0)), ("avg", lambda s: s.mean(0)), ("max", lambda s: s.amax(0))):
        if all(torch.allclose(f(st).reshape(r.shape), r, rtol=1e-5, atol=1e-12) for st, r in outs):
            fits.append(red)
    if len(fits) != 1:
        call.fail("could not tell the reduction of a call made from C++ (%s fit the values)"
                  % (" and ".join(fits) or "none of sum, avg, max"))
    return fits[0]


# ---- handlers: (call, args) -> None; they read inputs, record, and write outputs -----------------

def _allreduce(call, args):
    tensors = list(args[0])
    before = call.rec.allreduce_inputs or [t.detach().clone() for t in tensors]
    call.rec.allreduce_inputs = None
    _wait(call.rec.last_work)
    red = _reduction(call, before, tensors)
    for t, b in zip(tensors, before):
        if _allreduce_pieces(call, t, red):
            continue
        pin = call.rec.read(t, call.where, call.name)
        call.rec.write(t, call.reduced(pin, _dims(t), _dt(call.rec, t), red), call.where)


def _allreduce_pieces(call, t, red):
    """An all_reduce of a flat buffer of several whole values (a DDP bucket in a comm hook that
    reduces before it scales) is recorded as one all_reduce per value, in the buffer's order: the
    same sums element by element when every rank's buffer has the same pieces, which the
    assembler checks (every member of a collective has the same shape).  True when done."""
    from . import buckets
    pieces = buckets._whole_pieces(call.rec, t)
    if pieces is None or red not in ("sum", "avg"):
        return False
    dt = _dt(call.rec, t)
    done = {}
    for s, a, b in pieces:
        if s.pid not in done:
            done[s.pid] = call.reduced(s.pid, call.rec.values[s.pid]["shape"], dt, red)
        call.rec.memory.store_span(t, a, b, done[s.pid], s.numel, s.base + a - s.lo)
    return True


def _allgather_pieces(call, out, x):
    """An all-gather of a flat buffer of several whole values (FSDP2 gathers every parameter shard
    of a unit in one buffer) is recorded as one all-gather per value, in the buffer's order, and
    rank r's block of the output holds rank r's values at the offsets they have in the input.
    The same elements as the one all-gather when every rank's buffer has the same pieces (the
    assembler checks that the members of each collective have the same shape).  True when done."""
    from . import buckets
    n = len(call.ranks)
    if not (out.is_contiguous() and out.numel() == n * x.numel()):
        return False
    pieces = buckets._whole_pieces(call.rec, x)
    if pieces is None or any(s.base != 0 or b - a != s.numel for s, a, b in pieces):
        return False
    x_lo, o_lo, N = x.storage_offset(), out.storage_offset(), x.numel()
    for s, a, b in pieces:
        shape = call.rec.values[s.pid]["shape"]
        pin = s.pid if shape else call.local("view", [s.pid], [1], _dt(call.rec, x))
        g = call.emit("all_gather", [pin], [(shape or [1])[0] * n] + shape[1:], _dt(call.rec, x),
                      {"dim": 0})
        for r in range(n):
            at = o_lo + r * N + a - x_lo
            call.rec.memory.store_span(out, at, at + s.numel, g, n * s.numel, r * s.numel)
    return True


def _reduce_scatter_pieces(call, out, x, red):
    """A reduce-scatter of a flat buffer whose block j holds chunk j of each of several values,
    at the same offset in every block (FSDP2's `chunk_cat` of a unit's gradients), is recorded
    as one reduce-scatter per value, and the output holds each result at its offset in the
    block.  Element for element the same sums.  True when done."""
    from . import buckets
    n = len(call.ranks)
    M = out.numel()
    if not (out.is_contiguous() and x.numel() == n * M) or red not in ("sum", "avg"):
        return False
    pieces = buckets._whole_pieces(call.rec, x)
    if pieces is None:
        return False
    x_lo = x.storage_offset()
    blocks = [[] for _ in range(n)]
    for s, a, b in pieces:
        while a < b:       # a piece across a block boundary is cut there
            j = (a - x_lo) // M
            e = min(b, x_lo + (j + 1) * M)
            blocks[j].append((a - x_lo - j * M, e - a, s.pid, s.base + a - s.lo, s.numel))
            a = e
    first = blocks[0]
    for off, ln, pid, base, numel in first:
        if base != 0 or ln * n != numel:
            return False
    for j, blk in enumerate(blocks):
        if [(o, ln, p, bs - j * ln) for o, ln, p, bs, _ in blk] != [(o, ln, p, 0) for o, ln, p, _, _ in first]:
            return False
    dt = _dt(call.rec, x)
    o_lo = out.storage_offset()
    for off, ln, pid, _, numel in first:
        shape = call.rec.values[pid]["shape"]
        if not shape or shape[0] % n:
            pid, shape = call.local("view", [pid], [numel], dt), [numel]
        rshape = [shape[0] // n] + shape[1:]
        p = call.emit("reduce_scatter", [pid], rshape, dt, {"dim": 0})
        if red == "avg":
            p = call.local("scale", [p], rshape, dt, {"factor": 1.0 / n})
        call.rec.memory.store_span(out, o_lo + off, o_lo + off + ln, p, ln)
    return True


def _gather_into(call, x, pin, n):
    """all_gather of x along dim 0 (a 0-d tensor as [1])."""
    shape = _dims(x) or [1]
    dt = _dt(call.rec, x)
    if not _dims(x):
        pin = call.local("view", [pin], shape, dt)
    return call.emit("all_gather", [pin], [shape[0] * n] + shape[1:], dt, {"dim": 0}), shape, dt


def _allgather(call, args):
    outputs, inputs = args[0], args[1]
    _wait(call.rec.last_work)
    for outs, x in zip(outputs, inputs):
        if _allgather_shards(call, outs, x):
            continue
        pin = call.rec.read(x, call.where, call.name)
        g, shape, dt = _gather_into(call, x, pin, len(outs))
        for i, t in enumerate(outs):
            p = call.local("chunk", [g], shape, dt, {"dim": 0, "index": i, "chunks": len(outs)})
            if _dims(t) != shape:
                p = call.local("view", [p], _dims(t), dt)
            call.rec.write(t, p, call.where)


def _allgather_shards(call, outs, x):
    """An all-gather (list form) of a flat buffer that holds several values, laid out differently
    on each rank (FSDP1's flat-parameter shards: each rank holds element ranges of other
    parameters, as boxes, cap.declare_range), is recorded as one broadcast per piece of each
    member's buffer, from that member: out j then holds, piece by piece, what member j's buffer
    holds.  The same elements as the all-gather.  The members' layouts (offset, length, shape of
    each piece) are exchanged outside the capture, so that every rank records the same
    broadcasts in the same order.  True when done."""
    from .api import CaptureError
    rec = call.rec
    n = len(call.ranks)
    if len(outs) != n or x.dim() != 1 or not x.is_contiguous() or \
            any(o.numel() != x.numel() or not o.is_contiguous() or o.dtype != x.dtype for o in outs):
        return False
    try:
        pieces = rec.memory.pieces(x)
    except CaptureError:
        pieces = None
    from . import memory
    dt = _dt(rec, x)
    x_lo = x.storage_offset()
    mine, layout = [], None
    if pieces:
        layout = []
        for s, a, b in pieces:
            pid = memory.piece_value(rec, s, a, b, dt, call.where)
            mine.append(pid)
            layout.append((a - x_lo, b - a, rec.values[pid]["shape"]))
    layouts = [None] * n
    dist.all_gather_object(layouts, layout, group=call.pg)
    if any(lay is None for lay in layouts) or \
            all(len(lay) == 1 and lay[0][2] == layouts[0][0][2] for lay in layouts):
        return False     # one value of one shape on every member: the plain all-gather
    me = call.ranks.index(dist.get_rank())
    for j, pieces_j in enumerate(layouts):
        for k, (off, ln, shape) in enumerate(pieces_j):
            g = call.emit("broadcast", [mine[k]] if j == me else [], shape, dt, {"root": j})
            at = outs[j].storage_offset() + off
            rec.memory.store_span(outs[j], at, at + ln, g, ln)
    return True


def _reduce_scatter_boxes(call, out, x, red):
    """A reduce-scatter of a flat buffer of several whole values, laid out alike on every rank,
    whose blocks cut the values anywhere (FSDP1's flat gradient: a unit's gradients, flattened,
    one after the other) is recorded box by box: the elements of each value that block j holds,
    as boxes (fsdp.boxes), are all-reduced, and member j keeps them at their offsets in its
    output.  Element for element the same sums (the other members' copies are not read); each
    rank's output holds boxes of the gradients, which lineage inference follows.  Every member
    records the same all-reduces (the assembler checks their shapes).  True when done."""
    from . import buckets, fsdp, memory
    rec = call.rec
    n = len(call.ranks)
    M = out.numel()
    if not (out.is_contiguous() and x.is_contiguous() and x.numel() == n * M) or red not in ("sum", "avg"):
        return False
    pieces = buckets._whole_pieces(rec, x)
    if pieces is None:
        return False
    dt = _dt(rec, x)
    me = call.ranks.index(dist.get_rank())
    x_lo, o_lo = x.storage_offset(), out.storage_offset()
    for s, a, b in pieces:
        shape = rec.values[s.pid]["shape"]
        while a < b:
            j = (a - x_lo) // M
            e = min(b, x_lo + (j + 1) * M)
            first = s.base + a - s.lo
            at = o_lo + a - x_lo - j * M
            for lo, ext in fsdp.boxes(shape, first, first + e - a):
                r = call.reduced(memory.box(rec, s.pid, lo, ext, dt, call.where), list(ext), dt, red)
                k = math.prod(ext)
                if j == me:
                    rec.memory.store_span(out, at, at + k, r, k)
                at += k
            a = e
    return True


def _write_shaped(call, t, p, shape, dt):
    if _dims(t) != shape:
        p = call.local("view", [p], _dims(t), dt)
    call.rec.write(t, p, call.where)


def _allgather_base(call, args):
    out, x = args[0], args[1]
    _wait(call.rec.last_work)
    if _allgather_pieces(call, out, x):
        return
    pin = call.rec.read(x, call.where, call.name)
    g, shape, dt = _gather_into(call, x, pin, len(call.ranks))
    _write_shaped(call, out, g, [shape[0] * len(call.ranks)] + shape[1:], dt)


def _reduce_scatter_base(call, args):
    out, x = args[0], args[1]
    before = x.detach().clone()
    _wait(call.rec.last_work)
    red = _reduction_rs(call, before, out)
    if _reduce_scatter_pieces(call, out, x, red) or _reduce_scatter_boxes(call, out, x, red):
        return
    _reduce_scatter_one(call, out, x, red)


def _reduce_scatter_one(call, out, x, red):
    n = len(call.ranks)
    dt = _dt(call.rec, x)
    pin = call.rec.read(x, call.where, call.name)
    shape = _dims(x)
    if not shape or shape[0] % n:
        call.fail("reduce-scatter of a tensor whose first dim (%s) is not a multiple of the group "
                  "size %d" % (shape[:1], n))
    p = call.emit("reduce_scatter", [pin], [shape[0] // n] + shape[1:], dt, {"dim": 0})
    if red == "avg":
        p = call.local("scale", [p], [shape[0] // n] + shape[1:], dt, {"factor": 1.0 / n})
    elif red != "sum":
        call.fail("reduce-scatter with reduction %s is not supported (SUM, AVG)" % red)
    _write_shaped(call, out, p, [shape[0] // n] + shape[1:], dt)


def _reduction_rs(call, x, out):
    """A reduce-scatter's reduction, learnt as for all_reduce on this rank's chunk."""
    if call.rec.redop_hint is not None:
        return _reduction(call, [], [])
    n = len(call.ranks)
    me = call.ranks.index(dist.get_rank())
    mine = x.reshape(n, -1)[me].reshape(out.shape)
    return _reduction(call, [mine], [out])


def _reduce_scatter(call, args):
    outputs, inputs = args[0], args[1]
    _wait(call.rec.last_work)
    red = _reduction(call, [], []) if call.rec.redop_hint is not None else None
    for out, parts in zip(outputs, inputs):
        if red is None:
            me = call.ranks.index(dist.get_rank())
            red = _reduction(call, [parts[me].detach().clone()], [out])
        dt = _dt(call.rec, out)
        pins = [call.rec.read(p, call.where, call.name) for p in parts]
        cat = call.local("concat", pins, [sum(_dims(p)[0] for p in parts)] + _dims(parts[0])[1:], dt, {"dim": 0})
        n = len(call.ranks)
        shape = [_dims(parts[0])[0] * n] + _dims(parts[0])[1:]
        p = call.emit("reduce_scatter", [cat], [shape[0] // n] + shape[1:], dt, {"dim": 0})
        if red == "avg":
            p = call.local("scale", [p], _dims(out), dt, {"factor": 1.0 / n})
        call.rec.write(out, p, call.where)


def _broadcast(call, args):
    tensors, root = list(args[0]), int(args[2])
    root_pos = root          # c10d's root is the rank within the group
    me = call.ranks.index(dist.get_rank())
    _wait(call.rec.last_work)
    for t in tensors:
        c = call.rec.cell_of(t)
        if c is not None and c.kind == "const":
            # a constant (DDP broadcasts a boolean mask buffer at construction) holds the
            # root's value afterwards: still a constant, read by value where it is used
            c.src = call.where
            continue
        dt = _dt(call.rec, t)
        ins = [call.rec.read(t, call.where, call.name)] if me == root_pos else []
        p = call.emit("broadcast", ins, _dims(t), dt, {"root": root_pos})
        call.rec.write(t, p, call.where)


def _p2p_key(call, peer_in_group, sending):
    peer = call.ranks[peer_in_group]
    me = call.rec.rank
    key = (me, peer) if sending else (peer, me)
    seq = call.rec.p2p_seq.get(key, 0)
    call.rec.p2p_seq[key] = seq + 1
    return {"kind": "p2p", "group": list(key), "seq": seq}


def _send(call, args):
    for t in args[0]:
        pin = call.rec.read(t, call.where, call.name)
        call.rec.emit("send", [pin], [], aten=call.name, phase="comm",
                      coll=_p2p_key(call, int(args[2]), True), src=call.where, stack=call.stack)


def _recv(call, args):
    for t in args[0]:
        pout = call.rec.new_value(_dims(t), _dt(call.rec, t))
        call.rec.emit("recv", [], [pout], aten=call.name, phase="comm",
                      coll=_p2p_key(call, int(args[2]), False), src=call.where, stack=call.stack)
        call.rec.write(t, pout, call.where)
        call.rec.pending_snapshots.append((call.rec.last_work, t, pout))


def _barrier(call, args):
    return None


# c10d operator -> (handler, index of the process group argument)
C10D = {
    "allreduce_": (_allreduce, 1),
    "allgather_": (_allgather, 2),
    "_allgather_base_": (_allgather_base, 2),
    "_reduce_scatter_base_": (_reduce_scatter_base, 2),
    "reduce_scatter_": (_reduce_scatter, 2),
    "broadcast_": (_broadcast, 1),
    "send": (_send, 1),
    "recv_": (_recv, 1),
    "barrier": (_barrier, 1),
    "monitored_barrier_": (_barrier, 1),
}


def _host_only(rec, args):
    """True when every tensor a c10d call takes is host state (aten_map._bookkeeping)."""
    ts = []
    stack = list(args)
    while stack:
        a = stack.pop()
        if isinstance(a, torch.Tensor):
            ts.append(a)
        elif isinstance(a, (list, tuple)):
            stack.extend(a)
    cells = [rec.cell_of(t) for t in ts]
    return bool(ts) and all(c is not None and c.kind == "host" for c in cells)


def record_c10d(rec, func, args, kwargs, out):
    name = str(func).split(".")[1]
    entry = C10D.get(name)
    if entry is None:
        raise CaptureError("%s: torch.distributed's %s is not supported by torch2plan (supported: "
                           "all_reduce, all_gather, all_gather_into_tensor, reduce_scatter, "
                           "reduce_scatter_tensor, broadcast, send, recv, barrier)"
                           % (rec.src_here()[0], str(func)))
    handler, pg_at = entry
    if _host_only(rec, args):
        return   # a framework's bookkeeping (DDP's map of used parameters): no value of the model
    rec.last_work = out[-1] if isinstance(out, (list, tuple)) else out
    call = Call(rec, "c10d." + name, _pg(args[pg_at]))
    try:
        handler(call, args)
    finally:
        rec.last_work = None
        rec.redop_hint = None


# ---- functional collectives (DTensor, FSDP2): a new output tensor, waited for later ------------

def _fn_all_reduce(call, args, out):
    red = _FN_RED.get(str(args[1]).lower())
    if red is None:
        call.fail("reduction %r is not supported (sum, avg, max)" % args[1])
    x = args[0]
    pin = call.rec.read(x, call.where, call.name)
    return call.reduced(pin, _dims(x), _dt(call.rec, x), red)


def _fn_all_gather(call, args, out):
    x = args[0]
    pin = call.rec.read(x, call.where, call.name)
    g, shape, dt = _gather_into(call, x, pin, len(call.ranks))
    full = [shape[0] * len(call.ranks)] + shape[1:]
    return g if _dims(out) == full else call.local("view", [g], _dims(out), dt)


def _fn_reduce_scatter(call, args, out):
    red = _FN_RED.get(str(args[1]).lower())
    if red not in ("sum", "avg"):
        call.fail("reduction %r is not supported (sum, avg)" % args[1])
    x = args[0]
    n = len(call.ranks)
    dt = _dt(call.rec, x)
    shape = _dims(x)
    if not shape or shape[0] % n:
        call.fail("reduce-scatter of a tensor whose first dim (%s) is not a multiple of the group "
                  "size %d" % (shape[:1], n))
    pin = call.rec.read(x, call.where, call.name)
    p = call.emit("reduce_scatter", [pin], [shape[0] // n] + shape[1:], dt, {"dim": 0})
    if red == "avg":
        p = call.local("scale", [p], _dims(out), dt, {"factor": 1.0 / n})
    return p


def _fn_broadcast(call, args, out):
    x, root = args[0], int(args[1])
    me = call.ranks.index(dist.get_rank())
    ins = [call.rec.read(x, call.where, call.name)] if call.ranks.index(root) == me else []
    return call.emit("broadcast", ins, _dims(x), _dt(call.rec, x), {"root": call.ranks.index(root)})


# functional operator -> (handler, index of the group-name argument)
FUNCTIONAL = {
    "all_reduce": (_fn_all_reduce, 2),
    "all_gather_into_tensor": (_fn_all_gather, 2),
    "reduce_scatter_tensor": (_fn_reduce_scatter, 3),
    "broadcast": (_fn_broadcast, 2),
}


def record_functional(rec, func, args, kwargs, out):
    name = str(func).split(".")[1]
    if name == "wait_tensor":
        # the value was recorded when the collective was issued; it is real from now on
        c = rec.cell_of(args[0])
        if c is not None and c.pid is not None:
            rec.share(args[0], out)
            rec.snapshot(out, c.pid)
        return
    base = name[:-1] if name.endswith("_") else name
    entry = FUNCTIONAL.get(base)
    if entry is None:
        raise CaptureError("%s: the functional collective %s is not supported by torch2plan "
                           "(supported: all_reduce, all_gather_into_tensor, reduce_scatter_tensor, "
                           "broadcast, wait_tensor)" % (rec.src_here()[0], str(func)))
    handler, name_at = entry
    call = Call(rec, "_c10d_functional." + name, _pg_by_name(args[name_at]))
    pid = handler(call, args, out if base == name else args[0])
    if base == name:
        rec.bind(out, pid)
    else:
        rec.write(args[0], pid, call.where)


def hint_wrappers(rec):
    """Wraps the torch.distributed entry points that take a reduction, so that the c10d call they
    make is recorded with it: [(module, name, original)] to restore after the step."""
    import torch.distributed.distributed_c10d as c10d
    patches = []

    def wrap(fn, op_pos):
        def w(*a, **k):
            op = k.get("op", a[op_pos] if len(a) > op_pos else dist.ReduceOp.SUM)
            rec.redop_hint = op
            try:
                return fn(*a, **k)
            finally:
                rec.redop_hint = None
        return w
    for name, op_pos in (("all_reduce", 1), ("reduce_scatter", 2), ("reduce_scatter_tensor", 2),
                         ("_reduce_scatter_base", 2), ("all_reduce_coalesced", 1)):
        for mod in (dist, c10d):
            if hasattr(mod, name):
                orig = getattr(mod, name)
                patches.append((mod, name, orig))
        fn = getattr(c10d, name, None) or getattr(dist, name)
        w = wrap(fn, op_pos)
        for mod in (dist, c10d):
            if hasattr(mod, name):
                setattr(mod, name, w)
    return patches + [_quiet_wait(rec)]


def _quiet_wait(rec):
    """Work.wait runs the backend's completion kernels (gloo's reduce-scatter splits and copies its
    buffers there, on the caller's thread): they are part of the collective, already recorded
    as one operator, so they run unrecorded.  Returns the patch to undo."""
    Work = dist.distributed_c10d.Work
    orig = Work.wait

    def wait(self, *a, **k):
        was, rec.quiet = rec.quiet, True
        try:
            return orig(self, *a, **k)
        finally:
            rec.quiet = was
    Work.wait = wait
    return (Work, "wait", orig)
