"""tools/torchcap/buckets.py - element-wise operators on a flat buffer, recorded per piece.

DDP's comm hooks receive the gradient bucket (`GradBucket.buffer()`, a flat tensor whose pieces
are the copied gradients of several parameters) and operate on it as one tensor:
`allreduce_hook` divides it by the world size before the all_reduce, `fp16_compress_hook` casts
it to float16 (and back into the bucket after the all_reduce), a user's hook may scale it.  A
read of the whole buffer is rebuilt from its pieces (memory.py: views, a concat), so recorded
naively such an operator is one operator on the concatenation of every gradient of the bucket,
which the single-device program never computes: lineage inference finds no twin for it.

When an element-wise operator of one tensor operand (a cast `_to_copy`, `clone`, a scalar
`mul`/`div`/`add`/`sub`, in place or not) reads a contiguous buffer that the storage model
holds as several whole values (each all there once, in one piece or in several), it is recorded
once per value, and the output's storage gets the results at the same offsets.  This is
an identity on values (the operator acts on every element independently), and each result is
the gradient of one parameter, which the single-device program computes too.  Any other case
(a piece that is part of a value, an output of another layout) takes the normal path.

Element-wise operators of several tensor operands of one shape (`per_piece_tensors`: an
optimizer's update of FSDP1's original parameters, 1-D views of the rank's shard that hold
boxes of several parameters, with their gradients and state laid out alike) are recorded once
per piece when every operand holds whole values at the same offsets: each piece's operands are
viewed at the piece's shape and the operator's own handler records it there.
"""
import numbers

import torch

_SCALAR_OPS = {"mul", "div", "add", "sub"}
_COPY_OPS = {"clone", "contiguous", "_to_copy"}


def _whole_pieces(rec, t):
    """The pieces of contiguous t if it holds several values, each all there exactly once (a
    value may lie in several pieces: FSDP2 lays chunk j of every gradient out in rank j's block),
    else None."""
    if not t.is_contiguous() or t.numel() <= 1:
        return None
    pieces = unheld_pieces(rec, t)
    if not pieces or len(pieces) < 2:
        return None
    return pieces if covers_values(pieces) else None


def unheld_pieces(rec, t):
    """The storage pieces answering a read of t when t holds no value of its own (no cell, or
    one a later write overlapped), else None (t's own value: the normal path)."""
    c = rec.cell_of(t)
    if c is not None and c.kind == "data" and rec.memory.unchanged_since(t, c.version):
        return None
    try:
        return rec.memory.pieces(t)
    except Exception:
        return None


def covers_values(pieces):
    """Every value of the pieces is covered once, element for element."""
    spans = {}
    for s, a, b in pieces:
        if s.geom is not None:
            return False
        spans.setdefault(s.pid, []).append((s.base + a - s.lo, b - a, s.numel))
    for parts in spans.values():
        at = 0
        for base, n, numel in sorted(parts):
            if base != at:
                return False
            at += n
        if at != parts[0][2]:
            return False
    return True


def per_piece(rec, E, name, args, kwargs, out):
    """Records the call piece by piece when it is one of the operators above on a buffer of
    several whole values: True when done, False for the normal path."""
    inplace = name.endswith("_") and not name.startswith("_")
    base = name[:-1] if inplace else name
    if base in _SCALAR_OPS:
        if len(args) != 2 or not isinstance(args[1], numbers.Number) or kwargs:
            return False
        attrs = {"scalar": float(args[1])}
    elif base in _COPY_OPS and not inplace:
        if base == "_to_copy" and set(kwargs) - {"dtype", "layout", "device"}:
            return False
        attrs = None
    else:
        return False
    src_t = args[0]
    if not isinstance(src_t, torch.Tensor):
        return False
    dst = src_t if inplace else out
    if not isinstance(dst, torch.Tensor) or not dst.is_contiguous() or dst.numel() != src_t.numel():
        return False
    if inplace and not src_t.is_floating_point():
        return False
    pieces = _whole_pieces(rec, src_t)
    if pieces is None:
        return False
    from .capture import DTYPES
    dt = DTYPES.get(dst.dtype, "f32")
    lo_src, lo_dst = src_t.storage_offset(), dst.storage_offset()
    done = {}                  # value -> its result (a value in several pieces: once)
    results = []
    for s, a, b in pieces:
        pid = done.get(s.pid)
        if pid is None:
            shape = rec.values[s.pid]["shape"]
            if attrs is not None:
                pid = E.op(base, [s.pid], shape, attrs, dt)
            elif dst.dtype != src_t.dtype:
                pid = E.op("cast", [s.pid], shape, {}, dt)
            else:
                pid = s.pid
            done[s.pid] = pid
        results.append((a - lo_src + lo_dst, b - lo_src + lo_dst, pid, s.numel, s.base + a - s.lo))
    for a, b, pid, n, at in results:
        rec.memory.store_span(dst, a, b, pid, n, at)
    if not inplace:
        # no single value: reads of the output are rebuilt from its pieces ("empty" cell, kept
        # alive so that its storage is not reused)
        c = rec.cell_of(dst)
        if c is None:
            rec.bind(dst, None, "empty").src = E.src
    return True


_ELEMENTWISE = {"add", "sub", "mul", "div", "addcmul", "addcdiv", "lerp", "sqrt", "rsqrt", "neg", "clone"}


def _aligned_pieces(rec, ts):
    """[(start, end, shape)] relative to the tensors' first element when every tensor of ts holds
    whole values at the same relative offsets, pairwise of one shape, and holds no value of its
    own; else None."""
    layout = None
    for t in ts:
        pieces = unheld_pieces(rec, t)
        if not pieces:
            return None
        lo = t.storage_offset()
        mine = []
        for sg, a, b in pieces:
            if sg.geom is not None or sg.base != a - sg.lo or b - a != sg.numel:
                return None
            mine.append((a - lo, b - lo, tuple(rec.values[sg.pid]["shape"])))
        if layout is not None and mine != layout:
            return None
        layout = mine
    return layout


def per_piece_tensors(rec, E, name, args, kwargs, out, handler):
    """Records an element-wise operator of several same-shape tensor operands piece by piece (see
    the module comment): True when done, False for the normal path."""
    inplace = name.endswith("_") and not name.startswith("_")
    base = name[:-1] if inplace else name
    if base not in _ELEMENTWISE or handler is None or not args or not isinstance(args[0], torch.Tensor):
        return False
    x = args[0]
    dst = x if inplace else out
    if not isinstance(dst, torch.Tensor) or not dst.is_contiguous() or dst.shape != x.shape or \
            dst.dtype != x.dtype:
        return False
    ts = [a for a in args if isinstance(a, torch.Tensor)]
    if any(t.shape != x.shape or not t.is_contiguous() or t.dtype != x.dtype for t in ts) or \
            any(isinstance(v, torch.Tensor) for v in kwargs.values()):
        return False
    layout = _aligned_pieces(rec, ts)
    if layout is None:
        return False
    results = []
    for a, b, shape in layout:
        def piece(t):
            return t.reshape(-1)[a:b].view(list(shape)) if isinstance(t, torch.Tensor) else t
        results.append((a, b, handler(E, [piece(v) for v in args], kwargs, piece(dst))))
    lo = dst.storage_offset()
    for a, b, pid in results:
        rec.memory.store_span(dst, lo + a, lo + b, pid, b - a)
    c = rec.cell_of(dst)
    if not inplace and c is None:
        rec.bind(dst, None, "empty").src = E.src
    return True
