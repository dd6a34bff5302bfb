"""tools/torchcap/aten_map.py - the table from aten operators to verdict registry operators.

Each entry of TABLE maps an aten overload packet name ("mm", "_softmax", ...) to a handler that
reads the operator's tensor arguments (their SSA values, through the recorder), emits one or more
registry operators (ops/ops.def, docs/operators.md) and returns the values of the outputs.
Operators without a registry row are decomposed into rows that exist (log_softmax into exp, sum,
log and sub; nll_loss into pick, sum and scale; addcmul into mul, scale and add; permute into
transposes; an unaligned slice into equal chunks and a concat).  In-place variants ("add_") run
the out-of-place handler and write the result into the target tensor.  An operator missing from
the table is a CaptureError naming it and the user's line: nothing is dropped.

Why each decomposition is faithful: every one is an identity on real numbers (the verifier's
domain); in float64 they agree with torch's fused kernels to rounding, which the faithfulness
test (tests/e2e/*torch*) measures on a real step.
"""
import math
import numbers
import os
import sys

import torch

from .api import CaptureError
from . import buckets, collectives, memory, vocab

_DEBUG = bool(os.environ.get("TORCH2PLAN_DEBUG"))
_DT = {torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16",
       torch.int64: "i64", torch.int32: "i32", torch.bool: "bool"}


def _shape(t):
    return [int(s) for s in t.shape]


def _ndim_norm(d, n):
    return d + n if d < 0 else d


class Emit:
    """One aten call being recorded: reads inputs, emits registry nodes."""

    def __init__(self, rec, name, src):
        self.rec = rec
        self.name = name
        self.src = src

    def x(self, t):
        if isinstance(t, numbers.Number):
            raise CaptureError("%s: aten.%s: a scalar where a tensor was expected" % (self.src, self.name))
        return self.rec.read(t, self.src, "aten." + self.name)

    def op(self, op, ins, shape, attrs=None, dtype="f64"):
        pid = self.rec.new_value(shape, dtype)
        self.rec.emit(op, ins, [pid], attrs, aten="aten." + self.name)
        return pid

    def fail(self, why):
        raise CaptureError("%s: aten.%s: %s" % (self.src, self.name, why))


# ---- helpers -----------------------------------------------------------------------------------

def _dt(t):
    return _DT.get(t.dtype, "f32")


def _slice(E, pid, shape, dim, start, end, dt):
    """Elements [start, end) of dim as registry chunks (and a concat when unaligned)."""
    n = shape[dim]
    start = max(0, min(n, start))
    end = max(start, min(n, end))
    if start == 0 and end == n:
        return pid
    ln = end - start
    if ln == 0:
        E.fail("an empty slice")
    out_shape = list(shape)
    out_shape[dim] = ln
    if n % ln == 0 and start % ln == 0:
        return E.op("chunk", [pid], out_shape, {"dim": dim, "index": start // ln, "chunks": n // ln}, dt)
    g = math.gcd(math.gcd(start, end), n)
    pieces = []
    piece_shape = list(shape)
    piece_shape[dim] = g
    for i in range(start // g, end // g):
        pieces.append(E.op("chunk", [pid], piece_shape, {"dim": dim, "index": i, "chunks": n // g}, dt))
    return E.op("concat", pieces, out_shape, {"dim": dim}, dt)


def _const_like(E, t, value, shape, dt):
    """A tensor of `value` with t's shape: 0 * t + value (exact on reals)."""
    z = E.op("scale", [E.x(t)], shape, {"factor": 0.0}, dt)
    if value == 0:
        return z
    return E.op("add", [z], shape, {"scalar": float(value)}, dt)


def _binary(opname):
    def h(E, args, kw, out):
        a, b = args[0], args[1]
        alpha = kw.get("alpha", args[2] if len(args) > 2 else 1)
        dt = _dt(out)
        shape = _shape(out)
        if isinstance(a, numbers.Number):
            E.fail("a scalar first operand")
        if kw.get("rounding_mode") is not None:
            E.fail("division with rounding_mode=%r" % kw["rounding_mode"])
        if isinstance(b, numbers.Number):
            s = float(b) * float(alpha)
            if opname == "div" and s != 0.0 and math.frexp(abs(s))[0] == 0.5:
                # x / c is x * (1/c) when c is a power of two (1/c is then exact in the plan's
                # float attribute; another c's rounded reciprocal is not its inverse over the
                # rationals, a false difference): the product by a constant, which the normal
                # form and lineage inference treat as a factor (a loss divided by an
                # accumulation count of 2, DivBackward's grad / 2)
                return E.op("mul", [E.x(a)], shape, {"scalar": 1.0 / s}, dt)
            return E.op(opname, [E.x(a)], shape, {"scalar": s}, dt)
        pb = E.x(b)
        if alpha != 1:
            if opname not in ("add", "sub"):
                E.fail("alpha with %s" % opname)
            pb = E.op("scale", [pb], _shape(b), {"factor": float(alpha)}, _dt(b))
        return E.op(opname, [E.x(a), pb], shape, {}, dt)
    return h


def _unary(opname):
    def h(E, args, kw, out):
        return E.op(opname, [E.x(args[0])], _shape(out), {}, _dt(out))
    return h


def _dims_arg(d, nd):
    if d is None:
        return list(range(nd))
    if isinstance(d, int):
        d = [d]
    d = [_ndim_norm(int(i), nd) for i in d]
    return d if d else list(range(nd))


def _reduce_args(E, args, kw):
    """(x, dims, keepdim) of a reduction called as (x, dim=None, keepdim=False); a dtype
    argument is refused."""
    x = args[0]
    dims = _dims_arg(args[1] if len(args) > 1 else kw.get("dim"), x.dim())
    keep = bool(args[2] if len(args) > 2 else kw.get("keepdim", False))
    if kw.get("dtype") not in (None, x.dtype):
        E.fail("a dtype argument")
    return x, dims, keep


def _reduce(opname):
    def h(E, args, kw, out):
        x, dims, keep = _reduce_args(E, args, kw)
        return E.op(opname, [E.x(x)], _shape(out), {"dims": dims, "keepdim": int(keep)}, _dt(out))
    return h


def _max(E, args, kw, outs):
    """torch.max(x, dim) (max.dim: values and indices), torch.max(x) (max.default) and
    torch.max(x, y) (max.other, the elementwise maximum: refused).  The values are the registry
    max over dim; the indices become a tensor that any later read refuses (vocab.py: argmax),
    so a program that uses them is told so at its line."""
    x = args[0]
    other = args[1] if len(args) > 1 else kw.get("other")
    if isinstance(other, torch.Tensor):
        E.fail("the elementwise maximum of two tensors (torch.max(x, y)) has no registry operator")
    nd = x.dim()
    dims = _dims_arg(other if len(args) > 1 else kw.get("dim"), nd)
    keep = bool(args[2] if len(args) > 2 else kw.get("keepdim", False))
    pid = E.op("max", [E.x(x)], _shape(outs[0]), {"dims": dims, "keepdim": int(keep)}, _dt(outs[0]))
    if len(outs) > 1 and outs[1] is not None:
        vocab.bind_argmax(E, outs[1])
    return [pid] + [None] * (len(outs) - 1)


def _mean(E, args, kw, out):
    """mean = sum, then scale by 1/count: the sum form propagates slices and partial sums
    (a sliced reduced dim makes a partial sum, which the mean form cannot express)."""
    x, dims, keep = _reduce_args(E, args, kw)
    count = 1
    for d in dims:
        count *= int(x.shape[d])
    s = E.op("sum", [E.x(x)], _shape(out), {"dims": dims, "keepdim": int(keep)}, _dt(out))
    return E.op("scale", [s], _shape(out), {"factor": 1.0 / count}, _dt(out))


def _var_args(x, args, kw):
    """(dims, correction, keepdim) of aten var / std in each overload: var.correction
    (x, dim, *, correction, keepdim), var.dim (x, dim, unbiased, keepdim), var (x, unbiased)."""
    rest = list(args[1:])
    dim, unbiased = kw.get("dim"), kw.get("unbiased")
    if rest and isinstance(rest[0], bool):
        unbiased = rest.pop(0)
    elif rest:
        dim = rest.pop(0)
    if rest and isinstance(rest[0], bool) and len(rest) > 1:
        unbiased = rest.pop(0)
    keep = bool(rest[0] if rest else kw.get("keepdim", False))
    corr = kw.get("correction")
    if corr is None:
        corr = 1 if unbiased is None or unbiased else 0
    return _dims_arg(dim, x.dim()), float(corr), keep


def _variance(E, x, dims, corr, keep, shape, dt):
    """var by its definition: sum((x - mean(x))^2) / (count - correction), the mean kept over
    the reduced dims so that it broadcasts (sums, which propagate slices and partial sums)."""
    count = 1
    for d in dims:
        count *= int(x.shape[d])
    if count - corr <= 0:
        E.fail("a variance over %d elements with correction %g" % (count, corr))
    kshape = [1 if i in dims else int(n) for i, n in enumerate(x.shape)]
    px = E.x(x)
    s = E.op("sum", [px], kshape, {"dims": dims, "keepdim": 1}, dt)
    m = E.op("scale", [s], kshape, {"factor": 1.0 / count}, dt)
    d = E.op("sub", [px, m], _shape(x), {}, dt)
    sq = E.op("mul", [d, d], _shape(x), {}, dt)
    ss = E.op("sum", [sq], shape, {"dims": dims, "keepdim": int(keep)}, dt)
    return E.op("scale", [ss], shape, {"factor": 1.0 / (count - corr)}, dt)


def _var(E, args, kw, out):
    dims, corr, keep = _var_args(args[0], args, kw)
    return _variance(E, args[0], dims, corr, keep, _shape(out), _dt(out))


def _std(E, args, kw, out):
    dims, corr, keep = _var_args(args[0], args, kw)
    v = _variance(E, args[0], dims, corr, keep, _shape(out), _dt(out))
    return E.op("sqrt", [v], _shape(out), {}, _dt(out))


def _var_mean(root):
    """torch.var_mean / std_mean: (var or std, mean), both by their definitions."""
    def h(E, args, kw, outs):
        x = args[0]
        dims, corr, keep = _var_args(x, args, kw)
        v = _variance(E, x, dims, corr, keep, _shape(outs[0]), _dt(outs[0]))
        if root:
            v = E.op("sqrt", [v], _shape(outs[0]), {}, _dt(outs[0]))
        count = 1
        for d in dims:
            count *= int(x.shape[d])
        s = E.op("sum", [E.x(x)], _shape(outs[1]), {"dims": dims, "keepdim": int(keep)}, _dt(outs[1]))
        return [v, E.op("scale", [s], _shape(outs[1]), {"factor": 1.0 / count}, _dt(outs[1]))]
    return h


def _unless_same_shape(op):
    """The converter of a data-movement operator (view, expand) that is the identity when the
    output has its input's shape."""
    def convert(E, args, kw, out):
        x = args[0]
        if _shape(x) == _shape(out):
            return E.x(x)
        return E.op(op, [E.x(x)], _shape(out), {}, _dt(out))
    return convert


_view = _unless_same_shape("view")
_expand = _unless_same_shape("expand")


def _same(E, args, kw, out):
    return E.x(args[0])


def _to_copy(E, args, kw, out):
    x = args[0]
    if x.dtype == out.dtype:
        return E.x(x)
    # a plain cast, not _cast: recorded as the reshape of a cast, a cast of a linear's output
    # (a view of its mm) left tensor-parallel bfloat16 kernels without lineage (e2e 43 lowprec)
    return E.op("cast", [E.x(x)], _shape(out), {}, _dt(out))


def _cast(E, pid, shape, dt):
    """A cast of pid to dt.  A cast of a row-major reshape (Recorder.view_root) is recorded as the
    reshape of the cast of its source, which it is element for element, so that a buffer the cast
    is written into holds the source's values (Recorder.stored_value): FSDP2's MixedPrecisionPolicy
    casts each flattened parameter shard into its all-gather buffer, and the gathered buffer must
    read as the parameter's shards, not as flat ranges that no lineage describes.  Used for such
    copies only (_copy_into): elsewhere a plain cast is what lineage inference follows best."""
    root = E.rec.view_root.get(pid)
    if root is None:
        return E.op("cast", [pid], shape, {}, dt)
    c = E.op("cast", [root], E.rec.values[root]["shape"], {}, dt)
    return E.op("view", [c], shape, {}, dt)


def _transpose(E, args, kw, out):
    x = args[0]
    nd = x.dim()
    d0, d1 = _ndim_norm(int(args[1]), nd), _ndim_norm(int(args[2]), nd)
    if d0 == d1:
        return E.x(x)
    return E.op("transpose", [E.x(x)], _shape(out), {"dim0": d0, "dim1": d1}, _dt(out))


def _t(E, args, kw, out):
    x = args[0]
    if x.dim() < 2:
        return E.x(x)
    return E.op("transpose", [E.x(x)], _shape(out), {"dim0": 0, "dim1": 1}, _dt(out))


def _permute(E, args, kw, out):
    x = args[0]
    nd = x.dim()
    perm = [_ndim_norm(int(d), nd) for d in args[1]]
    cur = list(range(nd))
    shape = _shape(x)
    pid = E.x(x)
    dt = _dt(out)
    # selection sort by transpositions: position i receives source dim perm[i]
    for i in range(nd):
        j = cur.index(perm[i])
        if j != i:
            cur[i], cur[j] = cur[j], cur[i]
            shape[i], shape[j] = shape[j], shape[i]
            pid = E.op("transpose", [pid], list(shape), {"dim0": i, "dim1": j}, dt)
    return pid


def _slice_op(E, args, kw, out):
    x = args[0]
    nd = x.dim()
    dim = _ndim_norm(int(args[1]) if len(args) > 1 else 0, nd)
    n = x.shape[dim]
    start = args[2] if len(args) > 2 and args[2] is not None else 0
    end = args[3] if len(args) > 3 and args[3] is not None else n
    step = args[4] if len(args) > 4 else 1
    if step != 1:
        E.fail("a strided slice (step %d)" % step)
    if start < 0:
        start += n
    if end < 0:
        end += n
    return _slice(E, E.x(x), _shape(x), dim, int(start), int(min(end, n)), _dt(out))


def _narrow(E, args, kw, out):
    x, dim, start, length = args[0], _ndim_norm(int(args[1]), args[0].dim()), int(args[2]), int(args[3])
    if start < 0:
        start += x.shape[dim]
    return _slice(E, E.x(x), _shape(x), dim, start, start + length, _dt(out))


def _chunk_cat(E, args, kw, out):
    """torch._chunk_cat(tensors, dim, num_chunks): row j of the [num_chunks, total] result is chunk
    j of every tensor, flattened, one after the other (FSDP2 lays the unsharded gradients out so
    for the reduce-scatter: row j goes to rank j).  As registry operators: each tensor viewed as
    [num_chunks, numel / num_chunks] (chunk j along dim 0 is that row of its flattening), then
    concatenated along dim 1."""
    ts, dim, nc = args[0], int(args[1]), int(args[2])
    if dim != 0:
        E.fail("chunks along dim %d (FSDP2 chunks along dim 0)" % dim)
    rows = []
    for t in ts:
        if t.dim() == 0 or t.shape[0] % nc:
            E.fail("a tensor of shape %s whose dim 0 does not split into %d equal chunks (FSDP2 "
                   "pads it; make dim 0 of every parameter a multiple of the data-parallel size)"
                   % (_shape(t), nc))
        rows.append(E.op("view", [E.x(t)], [nc, t.numel() // nc], {}, _dt(out)))
    shape = [nc, sum(t.numel() // nc for t in ts)]
    cat = rows[0] if len(rows) == 1 else E.op("concat", rows, shape, {"dim": 1}, _dt(out))
    return cat if _shape(out) == shape else E.op("view", [cat], _shape(out), {}, _dt(out))


def _split(E, args, kw, outs):
    x = args[0]
    nd = x.dim()
    dim = _ndim_norm(int(args[2]) if len(args) > 2 else int(kw.get("dim", 0)), nd)
    pid = E.x(x)
    res = []
    start = 0
    for o in outs:
        ln = o.shape[dim]
        res.append(_slice(E, pid, _shape(x), dim, start, start + ln, _dt(o)))
        start += ln
    return res


def _unbind(E, args, kw, outs):
    """torch.unbind(x, dim) (q, k, v = qkv.unbind(2)): output i is the slice i along dim with
    the dim dropped (select, one per output)."""
    x = args[0]
    dim = _ndim_norm(int(args[1]) if len(args) > 1 else int(kw.get("dim", 0)), x.dim())
    pid = E.x(x)
    res = []
    for i, o in enumerate(outs):
        c = _slice(E, pid, _shape(x), dim, i, i + 1, _dt(o))
        res.append(E.op("view", [c], _shape(o), {}, _dt(o)))
    return res


def _stack(E, args, kw, out):
    """torch.stack(ts, dim) (unbind's backward): each input viewed with a new dim of 1 at dim,
    then concatenated along it."""
    ts = list(args[0])
    dim = _ndim_norm(int(args[1]) if len(args) > 1 else int(kw.get("dim", 0)), out.dim())
    parts = []
    for t in ts:
        shape = _shape(t)
        shape.insert(dim, 1)
        parts.append(E.op("view", [E.x(t)], shape, {}, _dt(out)))
    if len(parts) == 1:
        return E.op("view", [parts[0]], _shape(out), {}, _dt(out))
    return E.op("concat", parts, _shape(out), {"dim": dim}, _dt(out))


def _select(E, args, kw, out):
    x = args[0]
    nd = x.dim()
    dim = _ndim_norm(int(args[1]), nd)
    idx = int(args[2])
    n = x.shape[dim]
    if idx < 0:
        idx += n
    kept = _shape(x)
    kept[dim] = 1
    c = _slice(E, E.x(x), _shape(x), dim, idx, idx + 1, _dt(out))
    return E.op("view", [c], _shape(out), {}, _dt(out)) if kept != _shape(out) else c


def _select_backward(E, args, kw, out):
    g, sizes, dim, idx = args[0], [int(s) for s in args[1]], int(args[2]), int(args[3])
    dim = _ndim_norm(dim, len(sizes))
    if idx < 0:
        idx += sizes[dim]
    kept = list(sizes)
    kept[dim] = 1
    v = E.op("view", [E.x(g)], kept, {}, _dt(out))
    return E.op("chunk_backward", [v], sizes, {"dim": dim, "index": idx, "chunks": sizes[dim]}, _dt(out))


def _slice_backward(E, args, kw, out):
    g, sizes, dim, start, end, step = args[0], [int(s) for s in args[1]], int(args[2]), args[3], args[4], args[5]
    dim = _ndim_norm(dim, len(sizes))
    n = sizes[dim]
    start = start + n if start < 0 else start
    end = min(n, end + n if end < 0 else end)
    ln = end - start
    if step != 1 or ln <= 0 or n % ln or start % ln:
        E.fail("the backward of an unaligned slice [%d:%d] of %d" % (start, end, n))
    return E.op("chunk_backward", [E.x(g)], sizes, {"dim": dim, "index": start // ln, "chunks": n // ln}, _dt(out))


def _cat(E, args, kw, out):
    ts = [t for t in args[0] if t.numel() > 0]
    nd = out.dim()
    dim = _ndim_norm(int(args[1]) if len(args) > 1 else int(kw.get("dim", 0)), nd)
    if len(ts) == 1:
        return E.x(ts[0])
    return E.op("concat", [E.x(t) for t in ts], _shape(out), {"dim": dim}, _dt(out))


def _as_strided(E, args, kw, out):
    """A view given by sizes and strides (DDP hands gradients back as such views of the reduced
    bucket): its value is what the storage holds there (memory.py)."""
    if not out.is_contiguous():
        E.fail("a non-contiguous as_strided view (strides %s) is not supported" % (list(out.stride()),))
    pieces = E.rec.memory.pieces(out)
    if not pieces:
        E.fail("an as_strided view of memory the step did not write")
    return memory.rebuild(E.rec, out, pieces, _dt(out), E.src)


def _mm(E, args, kw, out):
    return E.op("matmul", [E.x(args[0]), E.x(args[1])], _shape(out), {}, _dt(out))


def _addmm(E, args, kw, out):
    if kw.get("beta", 1) != 1 or kw.get("alpha", 1) != 1:
        E.fail("beta/alpha other than 1")
    m = E.op("matmul", [E.x(args[1]), E.x(args[2])], _shape(out), {}, _dt(out))
    return E.op("add", [m, E.x(args[0])], _shape(out), {}, _dt(out))


def _pow(E, args, kw, out):
    e = args[1]
    if not isinstance(e, numbers.Number):
        E.fail("a tensor exponent")
    if e == 1:
        return E.x(args[0])
    return E.op("pow", [E.x(args[0])], _shape(out), {"exponent": float(e)}, _dt(out))


def _rsub(E, args, kw, out):
    a, b = args[0], args[1]
    alpha = kw.get("alpha", 1)
    t = E.op("scale", [E.x(a)], _shape(a), {"factor": -float(alpha)}, _dt(a))
    if isinstance(b, numbers.Number):
        return E.op("add", [t], _shape(out), {"scalar": float(b)}, _dt(out))
    return E.op("add", [t, E.x(b)], _shape(out), {}, _dt(out))


def _addc(opname):
    def h(E, args, kw, out):
        value = kw.get("value", args[3] if len(args) > 3 else 1)
        m = E.op(opname, [E.x(args[1]), E.x(args[2])], _shape(out), {}, _dt(out))
        if value != 1:
            m = E.op("scale", [m], _shape(out), {"factor": float(value)}, _dt(out))
        return E.op("add", [E.x(args[0]), m], _shape(out), {}, _dt(out))
    return h


def _lerp(E, args, kw, out):
    """lerp(a, b, w) = a + w * (b - a) with a scalar weight (torch 2's Adam: exp_avg.lerp_)."""
    w = kw.get("weight", args[2] if len(args) > 2 else None)
    if not isinstance(w, numbers.Number):
        E.fail("lerp with a tensor weight")
    shape, dt = _shape(out), _dt(out)
    d = E.op("sub", [E.x(args[1]), E.x(args[0])], shape, {}, dt)
    return E.op("add", [E.x(args[0]), E.op("scale", [d], shape, {"factor": float(w)}, dt)], shape, {}, dt)


def _const_values(E, t):
    """The values of a constant tensor made inside the step from no data (torch.arange
    positions, a mask from torch.ones(...).tril()), known at capture; None for data."""
    c = E.rec.cell_of(t)
    return t if isinstance(t, torch.Tensor) and c is not None and c.kind == "const" else None


def _row_range(E, ids, n_rows):
    """(start, count) when a constant index tensor picks the rows start, start + 1, ... in
    row-major order (positions: torch.arange, shifted or not); else the capture refuses."""
    v = [int(x) for x in ids.reshape(-1).tolist()]
    start = v[0] if v else 0
    if not v or v != list(range(start, start + len(v))) or start < 0 or start + len(v) > n_rows:
        E.fail("a constant index tensor that is not consecutive rows (torch.arange) is not supported")
    return start, len(v)


def _embedding(E, args, kw, out):
    w, ids = args[0], args[1]
    pad = args[2] if len(args) > 2 else -1
    if pad not in (-1, None) or (len(args) > 3 and args[3]) or (len(args) > 4 and args[4]):
        E.fail("padding_idx, scale_grad_by_freq and sparse are not supported")
    if _const_values(E, ids) is not None:
        # learned positions: the rows [start, start + n) of the table, whatever the ids' shape
        start, n = _row_range(E, ids, w.shape[0])
        rows = _slice(E, E.x(w), _shape(w), 0, start, start + n, _dt(out))
        return E.op("view", [rows], _shape(out), {}, _dt(out))
    return E.op("embedding", [E.x(ids), E.x(w)], _shape(out), {}, _dt(out))


def _embedding_bwd(E, args, kw, out):
    g, ids, n_rows = args[0], args[1], int(args[2])
    if (len(args) > 3 and args[3] not in (-1, None)) or (len(args) > 4 and args[4]):
        E.fail("padding_idx and scale_grad_by_freq are not supported")
    if _const_values(E, ids) is not None:
        start, n = _row_range(E, ids, n_rows)
        h = _shape(out)[1]
        gv = E.op("view", [E.x(g)], [n, h], {}, _dt(out))
        return _place_rows(E, gv, n_rows, h, start, n, _dt(out))
    return E.op("embedding_backward", [E.x(ids), E.x(g)], _shape(out), {}, _dt(out))


def _zero_base(E, base):
    """True when the tensor a scatter adds into is a constant zero (new_zeros, zeros_like)."""
    v = _const_values(E, base)
    return v is not None and not bool(v.any())


def _plus_base(E, base, pid, dt):
    """base + pid, or pid alone when base is a constant zero."""
    return pid if _zero_base(E, base) else E.op("add", [E.x(base), pid], _shape(base), {}, dt)


def _one_per_row(E, what, x, dim, index):
    """The rows and classes of a gather / scatter_add with one index per row along the last
    dim (x.gather(-1, labels[..., None]), a hand-written cross-entropy's target logit)."""
    d = dim % x.dim()
    if d != x.dim() - 1 or index.dim() != x.dim() or index.shape[d] != 1 or list(index.shape[:d]) != list(x.shape[:d]):
        E.fail("%s: only one index per row along the last dimension is supported "
               "(x.gather(-1, idx.unsqueeze(-1)), as a cross-entropy picks its target logit)" % what)
    return index.numel(), x.shape[-1]


def _gather(E, args, kw, out):
    x, dim, index = args[0], int(args[1]), args[2]
    if kw.get("sparse_grad") or (len(args) > 3 and args[3]):
        E.fail("gather with sparse_grad is not supported")
    n, v = _one_per_row(E, "gather", x, dim, index)
    dt = _dt(out)
    rows = E.op("view", [E.x(x)], [n, v], {}, dt)
    ix = E.op("view", [E.x(index)], [n], {}, _dt(index))
    # checked: gather raises on an index outside [0, v), as nll_loss does
    p = E.op("pick", [rows, ix], [n], {"checked": 1}, dt)
    return E.op("view", [p], _shape(out), {}, dt)


def _scatter_add(E, args, kw, out):
    base, dim, index, src = args[0], int(args[1]), args[2], args[3]
    n, v = _one_per_row(E, "scatter_add", base, dim, index)
    dt = _dt(base)
    g = E.op("view", [E.x(src)], [n], {}, dt)
    ix = E.op("view", [E.x(index)], [n], {}, _dt(index))
    pb = E.op("pick_backward", [ix, g], [n, v], {"checked": 1}, dt)
    return _plus_base(E, base, E.op("view", [pb], _shape(base), {}, dt), dt)


def _rows_2d(E, what, x, dim):
    if int(dim) % x.dim() != 0:
        E.fail("%s along dim %d: only rows (dim 0, a lookup) are supported" % (what, int(dim)))
    return x.shape[0], int(x.numel() // max(x.shape[0], 1))


def _index_select(E, args, kw, out):
    x, dim, index = args[0], args[1], args[2]
    rows, h = _rows_2d(E, "index_select", x, dim)
    dt = _dt(out)
    if _const_values(E, index) is not None:
        start, n = _row_range(E, index, rows)
        return E.op("view", [_slice(E, E.x(x), _shape(x), 0, start, start + n, dt)], _shape(out), {}, dt)
    w = E.op("view", [E.x(x)], [rows, h], {}, dt)
    return E.op("view", [E.op("embedding", [E.x(index), w], [index.numel(), h], {}, dt)], _shape(out), {}, dt)


def _index_add(E, args, kw, out):
    base, dim, index, src = args[0], args[1], args[2], args[3]
    if kw.get("alpha", args[4] if len(args) > 4 else 1) != 1:
        E.fail("index_add with alpha != 1 is not supported")
    rows, h = _rows_2d(E, "index_add", base, dim)
    dt = _dt(base)
    g = E.op("view", [E.x(src)], [index.numel(), h], {}, dt)
    if _const_values(E, index) is not None:
        start, n = _row_range(E, index, rows)
        placed = _place_rows(E, g, rows, h, start, n, dt)
    else:
        placed = E.op("embedding_backward", [E.x(index), g], [rows, h], {}, dt)
    return _plus_base(E, base, E.op("view", [placed], _shape(base), {}, dt), dt)


def _place_rows(E, gv, n_rows, h, start, n, dt):
    """The [n_rows, h] gradient whose rows [start, start + n) are gv and the others zero: one
    chunk_backward when the range is a chunk, else one per gcd-sized piece, summed."""
    if start == 0 and n == n_rows:
        return gv
    if n_rows % n == 0 and start % n == 0:
        return E.op("chunk_backward", [gv], [n_rows, h], {"dim": 0, "index": start // n, "chunks": n_rows // n}, dt)
    q = math.gcd(math.gcd(start, n), n_rows)
    acc = None
    for i in range(n // q):
        piece = E.op("chunk", [gv], [q, h], {"dim": 0, "index": i, "chunks": n // q}, dt)
        full = E.op("chunk_backward", [piece], [n_rows, h],
                    {"dim": 0, "index": start // q + i, "chunks": n_rows // q}, dt)
        acc = full if acc is None else E.op("add", [acc, full], [n_rows, h], {}, dt)
    return acc


def _causal_attrs(E, mask, shape):
    """The causal_mask attributes of a constant boolean mask (True = filled) broadcast over a
    [.., q, k] tensor: filled exactly where j - i > d for one offset d (a causal mask, shifted
    for a chunk of queries or keys), the same for every leading index.  None: nothing filled."""
    if len(shape) < 2:
        E.fail("a mask over a tensor of fewer than 2 dims")
    m = mask.to(torch.bool).expand(shape).reshape(-1, shape[-2], shape[-1])
    if not bool((m == m[0]).all()):
        E.fail("a constant mask that differs along the leading dims is not supported")
    m = m[0]
    if not bool(m.any()):
        return None
    nq, nk = shape[-2], shape[-1]
    i = torch.arange(nq).view(-1, 1)
    j = torch.arange(nk).view(1, -1)
    for d in range(-nq, nk):
        if bool((m == (j - i > d)).all()):
            return {"q_offset": d, "k_offset": 0} if d >= 0 else {"q_offset": 0, "k_offset": -d}
    E.fail("a constant mask that is not causal (filled where key > query + offset) is not supported")


def _fill_value(E, v):
    v = float(v)
    if v != v:
        E.fail("a fill value of NaN")
    if v in (float("inf"), float("-inf")):
        return math.copysign(1e4, v)  # exp() of -1e4 is 0 in double (docs/operators.md causal_mask)
    return v


def _masked(E, x, mask, value, out, filled_where=True):
    """x where the constant mask is not filled_where, value where it is, for a causal mask:
    causal_mask (the backward's masked_fill of the gradient with 0: causal_mask_backward)."""
    if _const_values(E, mask) is None:
        E.fail("a mask computed from data (only constant masks, e.g. a causal one, are supported)")
    m = mask.to(torch.bool)
    a = _causal_attrs(E, m if filled_where else ~m, _shape(out))
    if a is None:
        return E.x(x)
    v = _fill_value(E, value)
    if v == 0.0 and E.rec.phase != "fwd":
        return E.op("causal_mask_backward", [E.x(x)], _shape(out), a, _dt(out))
    a["fill"] = v
    return E.op("causal_mask", [E.x(x)], _shape(out), a, _dt(out))


def _masked_fill(E, args, kw, out):
    x, mask, value = args[0], args[1], args[2]
    if isinstance(value, torch.Tensor):
        if _const_values(E, value) is None or value.numel() != 1:
            E.fail("a fill value computed from data")
        value = value.item()
    if _shape(x) != _shape(out):
        E.fail("a mask that broadcasts the filled tensor")
    return _masked(E, x, mask, value, out)


def _where(E, args, kw, out):
    """torch.where(cond, a, b) with a constant condition and one side a constant scalar."""
    cond, a, b = args[0], args[1], args[2]

    def scalar(t):
        if isinstance(t, numbers.Number):
            return float(t)
        if _const_values(E, t) is not None and t.numel() == 1:
            return float(t.item())
        return None
    sa, sb = scalar(a), scalar(b)
    if sb is not None and sa is None and _shape(a) == _shape(out):
        return _masked(E, a, cond, sb, out, filled_where=False)
    if sa is not None and sb is None and _shape(b) == _shape(out):
        return _masked(E, b, cond, sa, out)
    E.fail("where() needs a constant condition, one data operand of the output's shape and a "
           "constant scalar")


class _Attn:
    """F.scaled_dot_product_attention's CPU kernel as registry operators: s = scale * q k^T, the
    causal mask (is_causal), p = softmax(s), y = p v.  The backward recomputes p from q and k,
    as the fused kernel does, and applies the chain rule through the same operators."""

    def __init__(self, E, q, k, v, dropout_p, is_causal, attn_mask, scale):
        if dropout_p:
            E.fail("attention dropout (dropout_p=%g) is not supported" % dropout_p)
        if attn_mask is not None:
            E.fail("an explicit attn_mask is not supported (is_causal=True is)")
        if q.dim() < 2 or q.shape[:-2] != k.shape[:-2] or k.shape != v.shape[:-1] + k.shape[-1:]:
            E.fail("query %s, key %s, value %s of different heads (grouped-query attention: "
                   "expand k and v)" % (list(q.shape), list(k.shape), list(v.shape)))
        self.E, self.dt = E, _dt(q)
        self.q, self.k, self.v = E.x(q), E.x(k), E.x(v)
        self.qs, self.ks, self.vs = _shape(q), _shape(k), _shape(v)
        self.scale = float(scale) if scale is not None else 1.0 / math.sqrt(q.shape[-1])
        nk = k.shape[-2]
        self.ss = self.qs[:-1] + [nk]
        # torch's is_causal is the top-left aligned mask: key j is seen by query i when j <= i
        self.mask = {"q_offset": 0, "k_offset": 0} if is_causal and nk > 1 else None

    def t(self, pid, shape):
        nd = len(shape)
        return self.E.op("transpose", [pid], shape[:-2] + [shape[-1], shape[-2]],
                         {"dim0": nd - 2, "dim1": nd - 1}, self.dt)

    def probs(self):
        E, dt = self.E, self.dt
        sc = E.op("matmul", [self.q, self.t(self.k, self.ks)], self.ss, {}, dt)
        sc = E.op("scale", [sc], self.ss, {"factor": self.scale}, dt)
        if self.mask:
            sc = E.op("causal_mask", [sc], self.ss, dict(self.mask, fill=-1e4), dt)
        return E.op("softmax", [sc], self.ss, {"dim": len(self.ss) - 1}, dt)

    def forward(self):
        p = self.probs()
        return self.E.op("matmul", [p, self.v], self.qs[:-1] + self.vs[-1:], {}, self.dt)

    def backward(self, g):
        E, dt = self.E, self.dt
        p = self.probs()
        dv = E.op("matmul", [self.t(p, self.ss), g], self.vs, {}, dt)
        dp = E.op("matmul", [g, self.t(self.v, self.vs)], self.ss, {}, dt)
        ds = E.op("softmax_backward", [p, dp], self.ss, {"dim": len(self.ss) - 1}, dt)
        if self.mask:
            ds = E.op("causal_mask_backward", [ds], self.ss, dict(self.mask), dt)
        ds = E.op("scale", [ds], self.ss, {"factor": self.scale}, dt)
        dq = E.op("matmul", [ds, self.k], self.qs, {}, dt)
        dk = E.op("matmul", [self.t(ds, self.ss), self.q], self.ks, {}, dt)
        return dq, dk, dv


def _sdpa(E, args, kw, outs):
    q, k, v = args[:3]
    dropout_p = args[3] if len(args) > 3 else kw.get("dropout_p", 0.0)
    causal = args[4] if len(args) > 4 else kw.get("is_causal", False)
    a = _Attn(E, q, k, v, dropout_p, causal, kw.get("attn_mask"), kw.get("scale"))
    for t in outs[1:]:
        if t is not None:
            E.rec.bind(t, None, "aux").src = E.src
    return [a.forward()] + [None] * (len(outs) - 1)


def _sdpa_bwd(E, args, kw, outs):
    g, q, k, v = args[:4]
    dropout_p = args[6] if len(args) > 6 else kw.get("dropout_p", 0.0)
    causal = args[7] if len(args) > 7 else kw.get("is_causal", False)
    a = _Attn(E, q, k, v, dropout_p, causal, kw.get("attn_mask"), kw.get("scale"))
    return list(a.backward(E.x(g)))


def _layer_norm(E, args, kw, outs):
    x, shape, w, b = args[0], list(args[1]), args[2], args[3]
    eps = float(args[4])
    if len(shape) != 1:
        E.fail("a layer norm over %d trailing dims (only the last one is supported)" % len(shape))
    if w is None or b is None:
        E.fail("a layer norm without a weight or a bias (elementwise_affine=False, bias=False)")
    y = E.op("layer_norm", [E.x(x), E.x(w), E.x(b)], _shape(outs[0]), {"eps": eps}, _dt(outs[0]))
    # mean and rstd are only read by the backward, which recomputes them from x
    for t in outs[1:]:
        E.rec.bind(t, None, "aux").src = E.src
    E.rec.ln_eps[outs[1].data_ptr()] = eps  # (autograd hands the backward a shallow copy of mean)
    return [y, None, None]


def _layer_norm_bwd(E, args, kw, outs):
    g, x, shape, w, b = args[0], args[1], list(args[2]), args[5], args[6]
    if len(shape) != 1 or w is None or b is None:
        E.fail("a layer norm over more than the last dim, or without a weight or a bias")
    eps = _ln_eps(E, args[3])
    shapes = [_shape(x), _shape(w), _shape(b)]
    pids = [E.rec.new_value(sh, _dt(x)) for sh in shapes]
    E.rec.emit("layer_norm_backward", [E.x(x), E.x(w), E.x(g)], pids, {"eps": eps}, aten="aten." + E.name)
    return [p if o is not None else None for p, o in zip(pids, outs)]


def _ln_eps(E, mean):
    """The eps of the forward layer norm whose saved mean the backward reads."""
    eps = E.rec.ln_eps.get(mean.data_ptr())
    if eps is None:
        E.fail("the saved statistics of a layer norm this capture did not record")
    return eps


def _softmax(E, args, kw, out):
    dim = _ndim_norm(int(args[1]), args[0].dim())
    return E.op("softmax", [E.x(args[0])], _shape(out), {"dim": dim}, _dt(out))


def _softmax_bwd(E, args, kw, out):
    g, y, dim = args[0], args[1], _ndim_norm(int(args[2]), args[1].dim())
    return E.op("softmax_backward", [E.x(y), E.x(g)], _shape(out), {"dim": dim}, _dt(out))


def _log_softmax(E, args, kw, out):
    x = args[0]
    dim = _ndim_norm(int(args[1]), x.dim())
    dt = _dt(out)
    sh = _shape(x)
    red = list(sh)
    red[dim] = 1
    e = E.op("exp", [E.x(x)], sh, {}, dt)
    s = E.op("sum", [e], red, {"dims": [dim], "keepdim": 1}, dt)
    lg = E.op("log", [s], red, {}, dt)
    return E.op("sub", [E.x(x), lg], sh, {}, dt)


def _log_softmax_bwd(E, args, kw, out):
    g, y = args[0], args[1]
    dim = _ndim_norm(int(args[2]), y.dim())
    dt = _dt(out)
    sh = _shape(y)
    red = list(sh)
    red[dim] = 1
    s = E.op("sum", [E.x(g)], red, {"dims": [dim], "keepdim": 1}, dt)
    e = E.op("exp", [E.x(y)], sh, {}, dt)
    m = E.op("mul", [e, s], sh, {}, dt)
    return E.op("sub", [E.x(g), m], sh, {}, dt)


def _nll_check(E, x, target, weight, ignore_index):
    if weight is not None:
        E.fail("class weights are not supported")
    if x.dim() != 2:
        E.fail("input of %d dims (flatten the logits to [tokens, vocab])" % x.dim())
    if bool((target == ignore_index).any()):
        E.fail("a target equal to ignore_index (%d) is not supported" % ignore_index)


def _nll_fwd(E, args, kw, outs):
    x, target, weight, reduction, ignore_index = args[:5]
    _nll_check(E, x, target, weight, ignore_index)
    n = x.shape[0]
    dt = _dt(outs[0])
    p = E.op("pick", [E.x(x), E.x(target)], [n], {"checked": 1}, dt)
    if reduction == 0:
        loss = E.op("neg", [p], [n], {}, dt)
    else:
        s = E.op("sum", [p], [], {"dims": [0], "keepdim": 0}, dt)
        loss = E.op("scale", [s], [], {"factor": -1.0 / n if reduction == 1 else -1.0}, dt)
    # total_weight is the token count, a constant of the shapes: it must only reach the backward
    E.rec.bind(outs[1], None, "const").src = E.src
    return [loss, None]


def _nll_bwd(E, args, kw, out):
    g, x, target, weight, reduction, ignore_index = args[:6]
    _nll_check(E, x, target, weight, ignore_index)
    n = x.shape[0]
    dt = _dt(out)
    pg = E.x(g)
    if reduction != 0:
        pg = E.op("expand", [pg], [n], {}, dt)
    f = E.op("scale", [pg], [n], {"factor": -1.0 / n if reduction == 1 else -1.0}, dt)
    return E.op("pick_backward", [E.x(target), f], _shape(out), {"checked": 1}, dt)


def _silu_bwd(E, args, kw, out):
    return E.op("silu_backward", [E.x(args[1]), E.x(args[0])], _shape(out), {}, _dt(out))


def _gelu_attrs(E, approximate):
    if approximate not in ("none", "tanh"):
        E.fail("gelu approximate=%r" % (approximate,))
    return {"tanh": 1} if approximate == "tanh" else {}


def _gelu(E, args, kw, out):
    a = _gelu_attrs(E, kw.get("approximate", args[1] if len(args) > 1 else "none"))
    return E.op("gelu", [E.x(args[0])], _shape(out), a, _dt(out))


def _gelu_bwd(E, args, kw, out):
    a = _gelu_attrs(E, kw.get("approximate", args[2] if len(args) > 2 else "none"))
    return E.op("gelu_backward", [E.x(args[1]), E.x(args[0])], _shape(out), a, _dt(out))


def _threshold_bwd(E, args, kw, out):
    # autograd's ReLU backward: threshold_backward(grad, result, 0)
    if float(args[2]) != 0.0:
        E.fail("threshold_backward with threshold %r (nn.Threshold); only ReLU's 0 is mapped"
               % (args[2],))
    return E.op("relu_backward", [E.x(args[1]), E.x(args[0])], _shape(out), {}, _dt(out))


def _one_minus(E, t, sh, dt):
    return E.op("add", [E.op("neg", [t], sh, {}, dt)], sh, {"scalar": 1.0}, dt)


def _tanh_bwd(E, args, kw, out):
    # tanh_backward(grad, y) = grad * (1 - y*y), y the saved output: exact algebra
    sh, dt = _shape(out), _dt(out)
    y = E.x(args[1])
    return E.op("mul", [E.x(args[0]), _one_minus(E, E.op("mul", [y, y], sh, {}, dt), sh, dt)],
                sh, {}, dt)


def _sigmoid_bwd(E, args, kw, out):
    # sigmoid_backward(grad, y) = grad * y * (1 - y), y the saved output
    sh, dt = _shape(out), _dt(out)
    y = E.x(args[1])
    gy = E.op("mul", [E.x(args[0]), y], sh, {}, dt)
    return E.op("mul", [gy, _one_minus(E, y, sh, dt)], sh, {}, dt)


def _like(value):
    def h(E, args, kw, out):
        v = value if value is not None else float(args[1])
        return _const_like(E, args[0], v, _shape(out), _dt(out))
    return h


def _unsupported(why):
    def h(E, args, kw, out):
        E.fail(why)
    return h


# Packet name -> handler.  Handlers of multi-output operators take and return lists.
TABLE = {
    # aliases and copies
    "clone": _same, "lift_fresh_copy": _same, "contiguous": _same,
    "_to_copy": _to_copy,
    "to": _to_copy,   # aten.to.dtype (DTensor's loss_parallel): a cast, or the tensor itself
    # views and layout
    "view": _view, "_unsafe_view": _view, "_reshape_alias": _view, "reshape": _view,
    "unsqueeze": _view, "squeeze": _view, "flatten": _view, "view_as": _view, "reshape_as": _view,
    "expand": _expand, "t": _t, "transpose": _transpose, "permute": _permute,
    "slice": _slice_op, "narrow": _narrow, "select": _select, "cat": _cat, "stack": _stack, "as_strided": _as_strided,
    "slice_backward": _slice_backward, "select_backward": _select_backward,
    # arithmetic
    "add": _binary("add"), "sub": _binary("sub"), "mul": _binary("mul"), "div": _binary("div"),
    "rsub": _rsub, "neg": _unary("neg"), "pow": _pow,
    "rsqrt": _unary("rsqrt"), "sqrt": _unary("sqrt"), "exp": _unary("exp"), "log": _unary("log"),
    "sigmoid": _unary("sigmoid"), "tanh": _unary("tanh"), "silu": _unary("silu"),
    "relu": _unary("relu"), "threshold_backward": _threshold_bwd,
    "tanh_backward": _tanh_bwd, "sigmoid_backward": _sigmoid_bwd,
    "gelu": _gelu, "gelu_backward": _gelu_bwd, "silu_backward": _silu_bwd,
    "sum": _reduce("sum"), "mean": _mean, "amax": _reduce("max"), "var": _var, "std": _std,
    "addcmul": _addc("mul"), "addcdiv": _addc("div"), "lerp": _lerp,
    "ones_like": _like(1.0), "zeros_like": _like(0.0), "full_like": _like(None),
    # linear algebra and layers
    "mm": _mm, "bmm": _mm, "addmm": _addmm,
    "embedding": _embedding, "embedding_dense_backward": _embedding_bwd,
    "gather": _gather, "scatter_add": _scatter_add, "index_select": _index_select, "index_add": _index_add,
    "_softmax": _softmax, "_softmax_backward_data": _softmax_bwd,
    "_log_softmax": _log_softmax, "_log_softmax_backward_data": _log_softmax_bwd,
    # constant masks (causal attention)
    "masked_fill": _masked_fill, "where": _where,
    # FSDP2's layout of the gradients for the reduce-scatter (fsdp.py)
    "_chunk_cat": _chunk_cat,
}
MULTI = {"unbind": _unbind, "split": _split, "split_with_sizes": _split, "unsafe_split": _split,
         "split_with_sizes_copy": _split,
         "nll_loss_forward": _nll_fwd, "max": _max, "var_mean": _var_mean(False), "std_mean": _var_mean(True), "native_layer_norm": _layer_norm,
         "native_layer_norm_backward": _layer_norm_bwd,
         "_scaled_dot_product_flash_attention_for_cpu": _sdpa,
         "_scaled_dot_product_flash_attention_for_cpu_backward": _sdpa_bwd}
TABLE["nll_loss_backward"] = _nll_bwd

ALIASES = {"detach", "alias", "lift_fresh"}
# views of an uninitialised buffer are uninitialised too: FSDP2 narrows its all-gather buffer
# into per-parameter destinations before _foreach_copy_ writes the shards into them (an alias
# shares its source's cell instead: ALIASES)
VIEWS_OF_EMPTY = {"narrow", "slice", "view", "_unsafe_view", "split", "split_with_sizes", "chunk",
                  "select", "unflatten", "as_strided"}
CREATION_EMPTY = {"empty", "empty_strided", "new_empty", "new_empty_strided", "empty_like"}
# creations that read only the dtype and device of their tensor operand (the zeros gather's
# backward scatters into): constants, as if made from no tensor
CREATION_FROM = {"new_zeros", "new_ones", "new_full", "new_empty", "new_empty_strided"}


def _flat_tensors(x, acc):
    if isinstance(x, torch.Tensor):
        acc.append(x)
    elif isinstance(x, (list, tuple)):
        for y in x:
            _flat_tensors(y, acc)
    return acc


# Operators that read or write a framework's integer bookkeeping without computing from it.
BOOKKEEPING_OPS = {"select", "fill_", "copy_", "zero_", "clone", "_to_copy", "detach"}


def _bookkeeping(rec, t, cell, where):
    """The cell of t, made host state when t is a non-floating tensor that the step neither
    declared nor produced (or made empty), read by a bookkeeping operator: a framework's own
    state (DDP's reducer marks the parameters a rank used in an integer map, with
    find_unused_parameters or static_graph, and all-reduces it to find those no rank used), no
    value of the model.  Host state never becomes data: an operator that computes data from it
    is refused, naming it."""
    if (cell is not None and cell.kind != "empty") or t.is_floating_point() or t.is_complex():
        return cell
    # an integer tensor made with torch.empty inside the step and filled where the capture does
    # not see it (DDP's C++ reducer writes the bucket indices it broadcasts when it rebuilds its
    # buckets after a synchronizing backward) is bookkeeping too
    c = rec.bind(t, None, "host")
    c.src = ("an integer tensor neither declared nor produced inside the step, first read at %s: "
             "declare an input with cap.input" % where())
    return c


# Framework code whose operators the capture does not map, by the file that runs them (a suffix
# of its path): the construct a refusal names, and what to write instead.
CONSTRUCTS = (
    ("torch/distributed/tensor/parallel/loss.py", "DTensor's loss_parallel()",
     "compute the loss on replicated logits: ColwiseParallel(output_layouts=Replicate()) on the head, "
     "or Megatron-Core's vocab_parallel_cross_entropy, which torch2plan captures"),
)


def _no_mapping(src, full):
    """The CaptureError for an aten operator without a handler: it names the framework construct
    that runs it when one of CONSTRUCTS is on the call stack (a user knows loss_parallel, not
    aten.ne.Scalar), and the operator."""
    f = sys._getframe(1)
    while f is not None:
        path = f.f_code.co_filename.replace(os.sep, "/")
        for suffix, construct, instead in CONSTRUCTS:
            if path.endswith(suffix):
                return CaptureError("%s: %s is not supported (it runs %s, which has no mapping to a verdict "
                                    "operator); %s" % (src, construct, full, instead))
        f = f.f_back
    return CaptureError("%s: %s has no mapping to a verdict operator (tools/torchcap/aten_map.py)" % (src, full))


def record(rec, func, args, kwargs, out):
    """Records one executed aten call (the dispatch mode's hook)."""
    full = str(func)                      # "aten.mm.default"
    parts = full.split(".")
    ns, name = parts[0], parts[1] if len(parts) > 1 else full
    if ns == "profiler":
        return
    if ns == "c10d":
        return collectives.record_c10d(rec, func, args, kwargs, out)
    if ns == "_c10d_functional":
        return collectives.record_functional(rec, func, args, kwargs, out)
    if rec.pending_snapshots:
        rec.flush_snapshots()
    if _DEBUG:
        sys.stderr.write("[rank %d %s] %s %s\n" % (rec.rank, rec.phase, full, rec.src_here()[0]))
    tensors = _flat_tensors(args, []) + _flat_tensors(list(kwargs.values()), [])
    outs = _flat_tensors(out, [])
    src = None

    def where():
        return rec.src_here()[0]

    cells = [rec.cell_of(t) for t in tensors]
    if name in BOOKKEEPING_OPS:
        cells = [_bookkeeping(rec, t, c, where) for t, c in zip(tensors, cells)]
    # host bookkeeping (optimizer step counters) never becomes data
    if tensors and all(c is not None and c.kind == "host" for c in cells):
        for o in outs:
            if rec.cell_of(o) is None or rec.cell_of(o).kind == "host":
                rec.bind(o, None, "host")
        return
    # a value computed from constants only (torch.arange positions, a mask from
    # torch.ones(...).tril() and its slices and negation) is a constant too: the handlers
    # that accept one read its values (the causal mask, consecutive rows)
    if tensors and all(c is not None and c.kind == "const" for c in cells) and name not in ("copy_", "fill_", "zero_"):
        for o in outs:
            rec.bind(o, None, "const").src = where()
        return
    if any(c is not None and c.kind == "host" for c in cells):
        what = [c.src for c in cells if c is not None and c.kind == "host" and c.src]
        raise CaptureError("%s: aten.%s mixes host state (%s) with data" % (
            where(), name, what[0] if what else "optimizer step counters"))
    if not tensors or name in CREATION_FROM:
        kind = "empty" if name in CREATION_EMPTY else "const"
        for o in outs:
            _fresh(rec, o, kind, where())
        return
    if name == "_local_scalar_dense":
        raise CaptureError("%s: .item() / Python control flow on a data value (aten._local_scalar_dense) "
                           "cannot be captured" % where())
    if kwargs.get("out") is not None:   # before the next test: a list out= kernel returns nothing
        return _record_out(rec, name, full, args, kwargs, where())
    if not outs and not name.endswith("_"):
        return  # metadata queries (is_same_size, ...): no value is produced
    if name in CREATION_EMPTY:
        for o in outs:
            _fresh(rec, o, "empty", where())
        return
    if name in VIEWS_OF_EMPTY and cells and cells[0] is not None and cells[0].kind == "empty":
        for o in outs:
            rec.bind(o, None, "empty").src = cells[0].src
        return
    if name in VIEWS_OF_EMPTY and cells and (cells[0] is None or cells[0].rebuilt) and \
            _lazy_view(rec, args[0], outs):
        return
    src = where()
    E = Emit(rec, name, src)
    if vocab.handles(rec, name, args, cells):
        # integer tensors and masks computed from the ids: Megatron's masked lookup (vocab.py)
        vinplace = name.endswith("_") and not name.startswith("_")
        vocab.record(E, name[:-1] if vinplace and name != "index_put_" and name != "masked_fill_" else name,
                     args, kwargs, args[0] if vinplace else out, vinplace)
        _note_fwd(rec, outs, src)
        return
    if buckets.per_piece(rec, E, name, args, kwargs, out):
        return   # an element-wise operator on a flat buffer of several values (a DDP bucket)
    ew = name[:-1] if name.endswith("_") and not name.startswith("_") else name
    if buckets.per_piece_tensors(rec, E, name, args, kwargs, out, TABLE.get(ew)):
        return   # ... of several operands laid out alike (FSDP1's parameters, gradients, state)
    if name in ALIASES:
        # an alias holds whatever its source holds (data, empty, constant); reads check it later
        if rec.cell_of(args[0]) is not None:
            rec.share(args[0], out)
        return
    if name == "copy_":
        _copy_into(rec, E, args[0], args[1], src)
        return
    if name == "_foreach_copy_":   # FSDP2 copies the parameter shards into the all-gather buffer
        for dst, s in zip(args[0], args[1]):
            _copy_into(rec, E, dst, s, src)
        return
    if name == "zero_":
        rec.write(args[0], _const_like(E, args[0], 0.0, _shape(args[0]), _dt(args[0])), src)
        return
    if name == "fill_":
        if not isinstance(args[1], numbers.Number):
            E.fail("fill_ with a tensor value")
        rec.write(args[0], _const_like(E, args[0], float(args[1]), _shape(args[0]), _dt(args[0])), src)
        return
    inplace = name.endswith("_") and not name.startswith("_") and name[:-1] in TABLE
    base = name[:-1] if inplace else name
    if base in MULTI:
        raw = list(out) if isinstance(out, (list, tuple)) else [out]
        pids = MULTI[base](E, args, kwargs, raw)
        for o, p in zip(raw, pids):
            if p is not None and o is not None:
                rec.bind(o, p, alias=memory.is_view_of(o, tensors))
        _note_fwd(rec, outs, src)
        return
    if base == "cat" and not inplace and _cat_layout(rec, E, args, kwargs, out):
        return
    h = TABLE.get(base)
    if h is None:
        raise _no_mapping(src, full)
    if inplace:
        pid = h(E, args, kwargs, args[0])
        rec.write(args[0], pid, src)
        _note_fwd(rec, [args[0]], src)
        return
    if len(outs) != 1:
        E.fail("%d outputs" % len(outs))
    pid = h(E, args, kwargs, outs[0])
    c = rec.cell_of(outs[0])
    if c is not None and c.pid == pid and c.kind == "data":
        return
    rec.bind(outs[0], pid, alias=memory.is_view_of(outs[0], tensors))
    _note_fwd(rec, outs, src)


def _lazy_view(rec, x, outs):
    """A view of a tensor that holds no value of its own, or only the concatenation a read rebuilt
    (Cell.rebuilt), but whose storage the step wrote piece by piece (FSDP1's flat parameter,
    gathered; its gradient, laid out by _cat_layout; the whole flat parameter FSDP1's
    post-backward hook reads under no_sync): nothing is recorded, and a read of the view is
    rebuilt from the pieces it covers (memory.py), when it is read, as torch reads a view, so
    that a view of one parameter is that parameter's piece, not a slice of a concatenation of
    every parameter (which lineage inference cannot split).  True when so."""
    key = memory.storage_key(x)
    return (key is not None and key in rec.memory.storages and bool(outs)
            and all(memory.storage_key(o) == key for o in outs))


def _cat_layout(rec, E, args, kw, out):
    """torch.cat of 1-D tensors along dim 0 (autograd's backward of FSDP1's split of its flat
    parameter: the flat gradient) is a layout: the output's storage holds each input's value at
    its offset (the reshape's source, as a contiguous copy does), not one new value, so that
    per-piece operators and collectives see the gradients.  Reads of the whole are rebuilt from
    the pieces (a concat).  True when done."""
    ts = [t for t in args[0] if isinstance(t, torch.Tensor) and t.numel() > 0]
    dim = int(args[1]) if len(args) > 1 else int(kw.get("dim", 0))
    if len(ts) < 2 or dim not in (0, -1) or not isinstance(out, torch.Tensor) or out.dim() != 1 or \
            not out.is_contiguous() or any(t.dim() != 1 or t.dtype != out.dtype for t in ts):
        return False
    at = out.storage_offset()
    for t in ts:
        pid = E.x(t)
        rec.memory.store_span(out, at, at + t.numel(), rec.stored_value(t, pid), t.numel())
        at += t.numel()
    rec.bind(out, None, "empty").src = E.src
    return True


def _fresh(rec, t, kind, src):
    """A tensor in new memory holds nothing recorded yet: what a freed tensor at the same address
    held is forgotten (FSDP2 frees and reallocates its buffers every step), so that no read of
    the new tensor finds the old values."""
    rec.memory.forget(t)
    rec.bind(t, None, kind).src = src


def _copy_into(rec, E, dst, s, src):
    """dst.copy_(s): dst holds s's value (broadcast and cast to dst as torch does)."""
    sc = rec.cell_of(s)
    if sc is not None and sc.kind == "const":
        # a constant copied (DDP's broadcast of a mask buffer unflattens it): dst holds it
        rec.memory.forget(dst)
        c = rec.bind(dst, None, "const")
        c.src, c.version = src, rec.memory.version(dst)
        return
    if _copy_pieces(rec, dst, s, src):
        return
    p = E.x(s)
    if _shape(s) != _shape(dst):
        p = E.op("expand", [p], _shape(dst), {}, _dt(dst))
    elif s.dtype != dst.dtype:
        # a flattened value copied into a flat buffer across dtypes (FSDP2's MixedPrecisionPolicy
        # fills its all-gather buffer so): the buffer holds the cast source (_cast)
        flat = dst.dim() == 1 and rec.view_root.get(p) is not None
        p = _cast(E, p, _shape(dst), _dt(dst)) if flat else E.op("cast", [p], _shape(dst), {}, _dt(dst))
    rec.write(dst, p, src)
    _note_fwd(rec, [dst], src)


def _copy_pieces(rec, dst, s, src):
    """dst.copy_(s) of a buffer that holds several values and no value of its own (autograd copies
    FSDP1's flat gradient, laid out by _cat_layout, into the parameter's .grad): dst's storage
    gets s's pieces at the same offsets, as a layout, so per-piece operators still see each
    value.  True when done."""
    if not (s.is_contiguous() and dst.is_contiguous() and _shape(s) == _shape(dst) and s.dtype == dst.dtype):
        return False
    pieces = buckets.unheld_pieces(rec, s)
    if not pieces or len(pieces) < 2:
        return False
    shift = dst.storage_offset() - s.storage_offset()
    for sg, a, b in pieces:
        rec.memory.store_span(dst, a + shift, b + shift, sg.pid, sg.numel, sg.base + a - sg.lo)
    if rec.cell_of(dst) is None or rec.cell_of(dst).kind != "empty":
        rec.bind(dst, None, "empty").src = src
    return True


def _record_out(rec, name, full, args, kwargs, src):
    """An `out=` kernel (DDP's reducer divides gradients into bucket views with mul.out): the
    operator's value, written into the out tensor (through whatever view of a storage it is);
    a multi-output one (FSDP2's split_with_sizes_copy into the unsharded parameters) writes
    each result into its out tensor."""
    kw = dict(kwargs)
    dst = kw.pop("out")
    if name in LAYOUT_OUT and LAYOUT_OUT[name](rec, Emit(rec, name, src), args, kw, dst):
        return
    if name in MULTI and isinstance(dst, (list, tuple)):
        E = Emit(rec, name, src)
        for d, pid in zip(dst, MULTI[name](E, args, kw, list(dst))):
            rec.write(d, pid, src)
        _note_fwd(rec, list(dst), src)
        return
    h = TABLE.get(name)
    if h is None or not isinstance(dst, torch.Tensor):
        raise _no_mapping(src, full)
    E = Emit(rec, name, src)
    pid = h(E, args, kw, dst)
    rec.write(dst, pid, src)
    _note_fwd(rec, [dst], src)


# ---- out= kernels that lay values out in memory: recorded as what each element holds ------------
# FSDP2 copies its all-gather buffer out into the unsharded parameters and lays the gradients out
# for the reduce-scatter with these.  Recorded as values (views, slices, a concat) they would
# mix every parameter of a unit into one value; as storage segments (memory.py), each element
# keeps the value it came from, and the per-piece collectives (collectives.py) see the values.
# Each returns False, for the value path, when a layout is not the plain one assumed.

def _split_copy_layout(rec, E, args, kw, outs):
    """split_with_sizes_copy(x, sizes, dim, out=outs): out i gets, row by row, the elements of
    slice i of x along dim."""
    x = args[0]
    dim = _ndim_norm(int(args[2]) if len(args) > 2 else int(kw.get("dim", 0)), x.dim())
    if not isinstance(outs, (list, tuple)) or not x.is_contiguous() or any(not o.is_contiguous() for o in outs):
        return False
    inner = math.prod(_shape(x)[dim + 1:])
    outer = math.prod(_shape(x)[:dim])
    row = int(x.shape[dim]) * inner
    copies, start = [], 0
    for o in outs:
        n = int(o.shape[dim]) * inner
        for r in range(outer):
            lo = x.storage_offset() + r * row + start
            pieces = rec.memory.range_pieces(x, lo, lo + n)
            if pieces is None or x.dtype != o.dtype:
                return False
            copies.append((o, o.storage_offset() + r * n, pieces))
        start += n
    for o, at, pieces in copies:
        for sg, a, b in pieces:
            rec.memory.store_span(o, at, at + b - a, sg.pid, sg.numel, sg.base + a - sg.lo)
            at += b - a
    _note_fwd(rec, list(outs), E.src)
    return True


def _chunk_cat_layout(rec, E, args, kw, dst):
    """_chunk_cat(tensors, 0, nc, out=dst): row j of dst holds chunk j of every tensor, flattened,
    one after the other: elements [j m, (j + 1) m) of each tensor's row-major order."""
    ts, dim, nc = args[0], int(args[1]), int(args[2])
    if dim != 0 or not isinstance(dst, torch.Tensor) or not dst.is_contiguous():
        return False
    if any(t.dim() == 0 or t.shape[0] % nc or t.dtype != dst.dtype for t in ts):
        return False
    total = sum(t.numel() // nc for t in ts)
    if dst.numel() != nc * total:
        return False
    lo, off = dst.storage_offset(), 0
    for t in ts:
        pid, m = E.x(t), t.numel() // nc   # t's own shape: its chunks are along its dim 0
        for j in range(nc):
            at = lo + j * total + off
            rec.memory.store_span(dst, at, at + m, pid, t.numel(), j * m)
        off += m
    _note_fwd(rec, [dst], E.src)
    return True


LAYOUT_OUT = {"split_with_sizes_copy": _split_copy_layout, "_chunk_cat": _chunk_cat_layout}


def _note_fwd(rec, ts, src):
    # outside a backward call: the forward of the first microbatch, and of the next ones under
    # gradient accumulation (the phase is "bwd" after the first backward); only outputs that
    # autograd gives a grad_fn name a backward node (_hook_graph)
    if rec.phase == "fwd" or rec.bwd_caller is None:
        for t in ts:
            rec.fwd_src.append((t, src))
