"""tools/torchcap/vocab.py - integer tensors and masks computed from declared ids: Megatron's
masked vocab-parallel lookup (megatron/core/tensor_parallel/layers.py VocabParallelEmbedding).

    mask = (ids < start) | (ids >= end)          lt / ge / le / gt .Scalar, bitwise_or
    m = ids.clone() - start; m[mask] = 0          sub.Scalar on ints, index_put_ / masked_fill
    out = F.embedding(m, w); out[mask, :] = 0     embedding, index_put_ / masked_fill
    (backward) g[mask] = 0; embedding_dense_backward(g, m, rows)

and the target logit of Megatron's vocab-parallel cross-entropy (cross_entropy.py):

    p = x2d[arange(n), m.view(-1)]; p[mask] = 0   index.Tensor, index_put_ / masked_fill
    (backward) u = 1.0 - mask.view(-1).float()    _to_copy, rsub: the in-range indicator
               g2d[arange(n), m.view(-1)] -= u    index.Tensor, sub_, index_put_

The registry has no integer arithmetic; what these values are is kept symbolically at capture
(an Ix per tensor: the declared ids' value, a shift, the range [lo, hi) outside which the mask
is set) and only the whole idiom becomes registry operators: embedding(ids, w, start) (whose
rows outside [start, start + rows) are zero, exactly the masked, zeroed lookup) and its
backward embedding_backward(ids, g, start) (rows outside the range dropped: the zeroed
gradient rows); the gather of one column per row by the masked shifted targets, once its masked
rows are zeroed, is pick(x2d, targets, start) (0 outside [start, start + columns)), and the
write-back of that gather minus the in-range indicator is x2d - pick_backward(targets, 1, start)
(the masked rows' write to column 0 adds 0: checked).  Each step checks the values agree with that reading (same ids, the mask's
range equals the shard's rows, the offset is the range's start, the fill value is 0); anything
else that reads such a tensor is a CaptureError naming the construct and the user's line.
"""
import numbers

import torch

CMP = {"lt", "le", "gt", "ge"}
OR = {"bitwise_or", "logical_or"}
VIEWS = {"view", "_unsafe_view", "reshape", "unsqueeze", "expand", "_reshape_alias", "clone",
         "contiguous", "alias", "detach", "lift_fresh"}
# views that relabel elements in row-major order (positions follow the ids' row-major order)
RESHAPES = {"view", "_unsafe_view", "reshape", "_reshape_alias", "unsqueeze", "clone", "contiguous"}
_INT = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


class Ix:
    """kind: mask (set where id < lo or id >= hi; None = unbounded), shift (id - off; zero
    where the mask (lo, hi) is set when masked), emb (embedding(ids, w, start=lo) but the
    masked rows hold row 0: pid before they are zeroed), gmask (the gradient pid with the
    masked rows zeroed), picked (x2d[r, id_r - off]: pid = pick(x2d, ids, off), whose masked
    rows are 0 where the gather's hold x2d[r, 0]; src = x2d's pid, delta = (c0, c1): the
    gathered values plus c0 + c1 [masked]), ind (c0 + c1 [masked] as floats), argmax (the
    indices of a max).  root: the declared ids a row-major reshape of base was made from (the
    positions of base are root's, in row-major order)."""

    def __init__(self, kind, base, bshape, lo=None, hi=None, off=0, masked=False, pid=None,
                 root=None, src=None, delta=(0.0, 0.0)):
        self.kind, self.base, self.bshape = kind, base, bshape
        self.lo, self.hi, self.off, self.masked, self.pid = lo, hi, off, masked, pid
        self.root = base if root is None else root
        self.src, self.delta = src, delta

    def same_mask(self, m):
        return m.kind == "mask" and m.base == self.base and (m.lo, m.hi) == (self.lo, self.hi)

    def same_mask_rows(self, m):
        """m masks the same ids' positions (through row-major reshapes) with the same range."""
        return m.kind == "mask" and m.root == self.root and (m.lo, m.hi) == (self.lo, self.hi) \
            and _numel(m.bshape) == _numel(self.bshape)

    def what(self):
        rng = "[%s, %s)" % ("-inf" if self.lo is None else self.lo, "inf" if self.hi is None else self.hi)
        return {"mask": "a mask of ids outside %s" % rng,
                "shift": "ids - %d%s" % (self.off, " masked outside %s" % rng if self.masked else ""),
                "emb": "a masked lookup whose masked rows are not zeroed yet",
                "gmask": "a gradient with the rows of ids outside %s zeroed" % rng,
                "picked": "a gather of one logit per row by shifted ids whose masked rows are "
                          "not zeroed yet",
                "ind": "a float indicator of a mask of ids outside %s" % rng,
                "argmax": "the indices of a max (torch.max(x, dim).indices), which no registry "
                          "operator reads"}[self.kind]


def _numel(shape):
    n = 1
    for s in shape:
        n *= int(s)
    return n


def bind_argmax(E, t):
    """The indices output of torch.max(x, dim): recorded as a value any read of refuses."""
    _bind(E.rec, t, Ix("argmax", None, [int(s) for s in t.shape]), E.src)


def _ix(rec, t):
    c = rec.cell_of(t) if isinstance(t, torch.Tensor) else None
    return rec.ix.get(id(t)) if c is not None and c.kind == "ix" else None


def handles(rec, name, args, cells):
    if any(c is not None and c.kind == "ix" for c in cells):
        return True
    a = args[0] if args else None
    if not isinstance(a, torch.Tensor) or a.dtype not in _INT:
        return False
    c = rec.cell_of(a)
    return c is not None and c.kind == "data" and (name in CMP or name in ("sub", "add", "rsub"))


def _bind(rec, t, ix, src):
    rec.bind(t, None, "ix").src = src
    rec.ix[id(t)] = ix


def _int_scalar(E, v):
    if isinstance(v, torch.Tensor) and v.numel() == 1 and E.rec.cell_of(v) is not None \
            and E.rec.cell_of(v).kind == "const":
        v = v.item()
    if isinstance(v, bool) or not isinstance(v, numbers.Number) or int(v) != v:
        E.fail("an integer index compared or shifted by a non-integer or a data value")
    return int(v)


def _zero_fill(E, v):
    if isinstance(v, torch.Tensor):
        c = E.rec.cell_of(v)   # None: a Python scalar lifted to a tensor (m[mask] = 0)
        if (c is not None and c.kind != "const") or v.numel() != 1:
            E.fail("a masked fill with a value computed from data")
        v = v.item()
    if float(v) != 0.0:
        E.fail("a masked lookup filled with %g (only 0 is supported)" % float(v))


def _mask_of(E, m, ids_shape):
    """The Ix of a mask argument over the ids' positions (trailing broadcast dims of 1 allowed)."""
    ix = _ix(E.rec, m)
    if ix is None or ix.kind != "mask":
        E.fail("a mask computed from data that is not a range mask of the declared ids")
    sh = [int(s) for s in m.shape]
    while len(sh) > len(ids_shape) and sh[-1] == 1:
        sh.pop()
    if sh != list(ids_shape):
        E.fail("a mask of shape %s over ids of shape %s" % (list(m.shape), list(ids_shape)))
    return ix


def _fill(E, t, mask, value, out, inplace):
    """t[mask] = value (index_put_ with one boolean index) or t.masked_fill(mask, value)."""
    rec = E.rec
    _zero_fill(E, value)
    tx = _ix(rec, t)
    if tx is not None and tx.kind == "shift" and not tx.masked:
        m = _mask_of(E, mask, tx.bshape)
        if m.base != tx.base:
            E.fail("shifted ids masked with a mask of other ids")
        _bind(rec, out, Ix("shift", tx.base, tx.bshape, m.lo, m.hi, tx.off, True), E.src)
        return
    if tx is not None and tx.kind == "emb":
        m = _mask_of(E, mask, tx.bshape)
        if not tx.same_mask(m):
            E.fail("a masked lookup whose rows are zeroed with another mask (%s, the lookup "
                   "masked %s)" % (m.what(), Ix("mask", 0, [], tx.lo, tx.hi).what()))
        if inplace:
            rec.write(out, tx.pid, E.src)
        else:
            rec.bind(out, tx.pid)
        return
    if tx is not None and tx.kind == "picked":
        # the gather's masked rows hold x[r, 0]; zeroed, it is the pick (0 outside the range)
        m = _mask_of(E, mask, [int(s) for s in t.shape])
        if not tx.same_mask_rows(m) or tx.delta != (0.0, 0.0):
            E.fail("a gather of one logit per row zeroed with another mask (%s)" % m.what())
        if inplace:
            rec.write(out, tx.pid, E.src)
        else:
            rec.bind(out, tx.pid)
        return
    if tx is None and isinstance(t, torch.Tensor) and t.is_floating_point() and t.dim() >= 1 and not inplace:
        # (the backward's zeroing of the masked gradient rows; in place, other views of the
        # storage would keep the unzeroed value)
        m = _mask_of(E, mask, [int(s) for s in t.shape[:-1]])
        _bind(rec, out, Ix("gmask", m.base, m.bshape, m.lo, m.hi, pid=E.x(t)), E.src)
        return
    E.fail("a masked fill of %s" % (tx.what() if tx is not None else "a tensor by a mask computed from data"))


def _embedding(E, args):
    w, ids = args[0], args[1]
    ix = _ix(E.rec, ids)
    if ix is None or ix.kind != "shift":
        E.fail("an embedding lookup of %s" % (ix.what() if ix else "a table computed from ids"))
    rows = int(w.shape[0])
    if not ix.masked or ix.lo is None or ix.hi is None:
        E.fail("a lookup of shifted ids (%s) without masking the ids outside the table's range"
               % ix.what())
    if ix.off != ix.lo or ix.hi - ix.lo != rows:
        E.fail("a masked lookup whose shift (%d) or range [%d, %d) is not the table's rows "
               "[start, start + %d)" % (ix.off, ix.lo, ix.hi, rows))
    if (len(args) > 2 and args[2] not in (-1, None)) or any(bool(a) for a in args[3:5]):
        E.fail("padding_idx, scale_grad_by_freq and sparse are not supported")
    shape = list(ix.bshape) + [int(w.shape[1])]
    pid = E.op("embedding", [ix.base, E.x(w)], shape, {"start": ix.off}, _dt(w))
    return Ix("emb", ix.base, ix.bshape, ix.lo, ix.hi, ix.off, True, pid)


def _embedding_bwd(E, args, out):
    g, ids, n_rows = args[0], args[1], int(args[2])
    gx, ix = _ix(E.rec, g), _ix(E.rec, ids)
    if ix is None or ix.kind != "shift" or not ix.masked:
        E.fail("the backward of a lookup of %s" % (ix.what() if ix else "ids computed from data"))
    if gx is None or gx.kind != "gmask" or not ix.same_mask(Ix("mask", gx.base, gx.bshape, gx.lo, gx.hi)):
        E.fail("the backward of a masked lookup whose gradient rows of masked ids are not zeroed")
    if ix.off != ix.lo or ix.hi - ix.lo != n_rows or (len(args) > 3 and args[3] not in (-1, None)):
        E.fail("the backward of a masked lookup whose range is not the table's rows")
    return E.op("embedding_backward", [ix.base, gx.pid], [n_rows, int(out.shape[-1])],
                {"start": ix.off}, _dt(out))


# ---- Megatron's target logit: a gather of one column per row and its write-back ----------------

def _reshaped(E, ix, shape):
    """A row-major reshape of shifted ids (the ids viewed to the new shape, same positions) or
    of a gather (its value viewed too)."""
    if _numel(shape) != _numel(ix.bshape):
        E.fail("a view of %s to shape %s" % (ix.what(), shape))
    if ix.kind == "shift":
        base = E.op("view", [ix.base], shape, {}, "i64")
        return Ix("shift", base, shape, ix.lo, ix.hi, ix.off, ix.masked, root=ix.root)
    pid = E.op("view", [ix.pid], shape, {}, E.rec.values[ix.pid]["dtype"]) if ix.pid is not None else None
    src = E.op("view", [ix.src], shape, {}, E.rec.values[ix.src]["dtype"]) if ix.src is not None else None
    return Ix("picked", ix.base, shape, ix.lo, ix.hi, ix.off, True, pid, ix.root, src, ix.delta)


def _rows_and_cols(E, x, idx):
    """x[arange(n), m]: x a [n, w] float tensor, the rows a constant 0, 1, ..., n-1 and m the
    masked shifted ids (1-D, n of them) whose range is the w columns [start, start + w)."""
    rows, cols = idx
    if not isinstance(x, torch.Tensor) or x.dim() != 2 or not x.is_floating_point() or _ix(E.rec, x):
        E.fail("advanced indexing of %s with two index tensors (only x2d[arange(n), ids - start] "
               "of a [n, columns] float tensor is supported)" % ("a tensor" if _ix(E.rec, x) is None
                                                                   else _ix(E.rec, x).what()))
    n, w = int(x.shape[0]), int(x.shape[1])
    rc = E.rec.cell_of(rows) if isinstance(rows, torch.Tensor) else None
    if rc is None or rc.kind != "const" or [int(v) for v in rows.reshape(-1).tolist()] != list(range(n)) \
            or rows.dim() != 1:
        E.fail("a gather whose row index is not the constant arange(%d)" % n)
    ix = _ix(E.rec, cols)
    if ix is None or ix.kind != "shift" or not ix.masked or list(ix.bshape) != [n]:
        E.fail("a gather of one column per row by %s (only masked shifted ids of one row each)"
               % (ix.what() if ix else "a column index computed from data"))
    if ix.lo is None or ix.hi is None or ix.off != ix.lo or ix.hi - ix.lo != w:
        E.fail("a gather by ids masked outside [%s, %s) and shifted by %d: the mask's range is not "
               "the %d columns [start, start + %d)" % (ix.lo, ix.hi, ix.off, w, w))
    return ix


def _gather(E, x, idx):
    """p = x2d[arange(n), m]: pick(x2d, ids, start) once the masked rows are zeroed."""
    if len(idx) != 2 or any(i is None for i in idx):
        E.fail("advanced indexing with %d index tensors reads ids or masks" % len(idx))
    ix = _rows_and_cols(E, x, idx)
    px = E.x(x)
    pid = E.op("pick", [px, ix.base], [int(x.shape[0])], {"start": ix.off}, _dt(x))
    return Ix("picked", ix.base, list(ix.bshape), ix.lo, ix.hi, ix.off, True, pid, ix.root, px)


def _ind(m, c0, c1):
    return Ix("ind", m.base, m.bshape, m.lo, m.hi, root=m.root, delta=(c0, c1))


def _scalar_of(E, v):
    if isinstance(v, torch.Tensor):
        c = E.rec.cell_of(v)
        if (c is not None and c.kind != "const") or v.numel() != 1:
            return None
        v = v.item()
    return float(v) if isinstance(v, numbers.Number) and not isinstance(v, bool) else None


def _affine(E, name, args, kw):
    """c0 + c1 [masked] (an indicator) under rsub / mul / neg / add / sub by constants, and a
    gather plus such an indicator (p -= u)."""
    a = _ix(E.rec, args[0])
    if a is None or a.kind not in ("ind", "picked"):
        E.fail("arithmetic on %s" % (a.what() if a else "a tensor and an integer index"))
    if name == "neg":
        if a.kind != "ind":
            E.fail("a negated gather of one logit per row")
        return _ind(a, -a.delta[0], -a.delta[1])
    b = args[1] if len(args) > 1 else kw.get("other")
    alpha = float(kw.get("alpha", args[2] if len(args) > 2 else 1))
    k = _scalar_of(E, b)
    bx = _ix(E.rec, b) if isinstance(b, torch.Tensor) else None
    if name == "mul":
        if k is None or a.kind != "ind":
            E.fail("a product of %s with a value that is not a constant" % a.what())
        return _ind(a, a.delta[0] * k, a.delta[1] * k)
    if name == "rsub":
        if k is None or a.kind != "ind":
            E.fail("%s subtracted from a value that is not a constant" % a.what())
        return _ind(a, k - alpha * a.delta[0], -alpha * a.delta[1])
    sign = alpha if name == "add" else -alpha
    if k is not None and a.kind == "ind":
        return _ind(a, a.delta[0] + sign * k, a.delta[1])
    if a.kind == "picked" and bx is not None and bx.kind == "ind" and bx.same_mask_rows(
            Ix("mask", a.base, a.bshape, a.lo, a.hi, root=a.root)):
        return _with_delta(a, a.delta[0] + sign * bx.delta[0], a.delta[1] + sign * bx.delta[1])
    E.fail("%s of %s and %s (only a gather plus or minus the indicator of the same mask)"
           % (name, a.what(), bx.what() if bx else "a data value" if k is None else "a constant"))


def _with_delta(a, c0, c1):
    if a.kind == "ind":
        return _ind(a, c0, c1)
    return Ix("picked", a.base, a.bshape, a.lo, a.hi, a.off, True, a.pid, a.root, a.src, (c0, c1))


def _scatter(E, x, idx, v, accumulate):
    """x2d[arange(n), m] = v (or += v with accumulate): each in-range row r gets x[r, id_r - start]
    changed by d_r; a masked row writes column 0, so its change must be 0.  v is the gather of
    the same x and ids plus c0 + c1 [masked] (written back), or, accumulated, the indicator
    itself: d = c0 on in-range rows, c0 + c1 = 0 on masked ones.  Then the result is
    x2d + pick_backward(ids, c0, start)."""
    ix = _rows_and_cols(E, x, idx)
    vx = _ix(E.rec, v) if isinstance(v, torch.Tensor) else None
    mask = Ix("mask", ix.base, ix.bshape, ix.lo, ix.hi, root=ix.root)
    px = E.x(x)
    if accumulate and vx is not None and vx.kind == "ind" and vx.same_mask_rows(mask):
        c0, c1 = vx.delta
    elif not accumulate and vx is not None and vx.kind == "picked" and vx.src == px \
            and vx.same_mask_rows(mask) and vx.off == ix.off:
        c0, c1 = vx.delta
    else:
        E.fail("a write of %s into x2d[arange(n), ids - start] (only the gather of the same "
               "tensor changed by the mask's indicator, or that indicator accumulated)"
               % (vx.what() if vx else "a data value"))
    if c0 + c1 != 0.0:
        E.fail("a write-back that changes column 0 of the masked rows by %g (the masked rows "
               "must be left unchanged)" % (c0 + c1))
    n, w = int(x.shape[0]), int(x.shape[1])
    if c0 == 0.0:
        return px
    dt = _dt(x)
    z = E.op("scale", [E.op("pick", [px, ix.base], [n], {"start": ix.off}, dt)], [n], {"factor": 0.0}, dt)
    g = E.op("add", [z], [n], {"scalar": c0}, dt)
    d = E.op("pick_backward", [ix.base, g], [n, w], {"start": ix.off}, dt)
    return E.op("add", [px, d], [n, w], {}, dt)


def _dt(t):
    return {torch.float32: "f32", torch.float64: "f64", torch.float16: "f16",
            torch.bfloat16: "bf16"}.get(t.dtype, "f32")


def record(E, name, args, kw, out, inplace):
    """Records one aten call that computes or reads an Ix (handles() said so)."""
    rec = E.rec
    a0 = args[0]
    if name in CMP:
        if _ix(rec, a0) is not None:
            E.fail("a comparison of %s" % _ix(rec, a0).what())
        v = _int_scalar(E, args[1])
        lo, hi = {"lt": (v, None), "le": (v + 1, None), "ge": (None, v), "gt": (None, v + 1)}[name]
        _bind(rec, out, Ix("mask", E.x(a0), [int(s) for s in a0.shape], lo, hi), E.src)
        return
    if name in OR:
        m1, m2 = _ix(rec, a0), _ix(rec, args[1])
        if not (m1 and m2 and m1.kind == m2.kind == "mask" and m1.base == m2.base):
            E.fail("%s of masks that are not range masks of the same ids" % name)
        lo = max([x for x in (m1.lo, m2.lo) if x is not None], default=None)
        hi = min([x for x in (m1.hi, m2.hi) if x is not None], default=None)
        _bind(rec, out, Ix("mask", m1.base, m1.bshape, lo, hi), E.src)
        return
    if name in ("rsub", "mul", "neg") or (name in ("sub", "add") and _ix(rec, a0) is not None
                                            and _ix(rec, a0).kind in ("ind", "picked")):
        _bind(rec, out, _affine(E, name, args, kw), E.src)
        return
    if name in ("sub", "add"):
        if kw.get("alpha", 1) != 1 or isinstance(args[1], torch.Tensor) and _ix(rec, args[1]) is not None:
            E.fail("integer arithmetic on ids other than adding or subtracting a constant")
        if inplace:
            # an in-place shift would leave other views of the storage with the old values
            E.fail("an in-place shift of integer ids (write m = ids - c)")
        v = _int_scalar(E, args[1])
        ix = _ix(rec, a0)
        if ix is None:
            ix = Ix("shift", E.x(a0), [int(s) for s in a0.shape])
        if ix.kind != "shift" or ix.masked:
            E.fail("arithmetic on %s" % ix.what())
        _bind(rec, out, Ix("shift", ix.base, ix.bshape, off=ix.off + (v if name == "sub" else -v)), E.src)
        return
    if name in VIEWS:
        ix = _ix(rec, a0)
        same = [int(s) for s in out.shape] == [int(s) for s in a0.shape]
        if ix.kind == "mask" or same:
            _bind(rec, out, ix, E.src)   # a mask's positions are checked where it is used
            return
        if name in RESHAPES and ix.kind in ("shift", "picked"):
            _bind(rec, out, _reshaped(E, ix, [int(s) for s in out.shape]), E.src)
            return
        E.fail("a view of %s to shape %s" % (ix.what(), list(out.shape)))
    if name == "index":
        _bind(rec, out, _gather(E, a0, args[1]), E.src)
        return
    if name in ("index_put", "index_put_"):
        idx = args[1]
        acc = bool(args[3]) if len(args) > 3 else bool(kw.get("accumulate", False))
        if len(idx) == 2:
            pid = _scatter(E, a0, idx, args[2], acc)
            if name == "index_put_":
                rec.write(a0, pid, E.src)
            else:
                rec.bind(out, pid)
            return
        if len(idx) != 1 or acc:
            E.fail("index_put with %d indices or accumulate=True on a masked lookup" % len(idx))
        _fill(E, a0, idx[0], args[2], a0 if name == "index_put_" else out, name == "index_put_")
        return
    if name == "_to_copy" and _ix(rec, a0) is not None and _ix(rec, a0).kind in ("mask", "ind"):
        m = _ix(rec, a0)
        if out.dtype == torch.bool or not out.is_floating_point():
            E.fail("%s converted to %s" % (m.what(), out.dtype))
        _bind(rec, out, m if m.kind == "ind" else _ind(m, 0.0, 1.0), E.src)
        return
    if name in ("masked_fill", "masked_fill_"):
        _fill(E, a0, args[1], args[2], a0 if name == "masked_fill_" else out, name == "masked_fill_")
        return
    if name == "embedding":
        _bind(rec, out, _embedding(E, args), E.src)
        return
    if name == "embedding_dense_backward":
        rec.bind(out, _embedding_bwd(E, args, out))
        return
    bad = next((_ix(rec, t) for t in list(args) if isinstance(t, torch.Tensor) and _ix(rec, t)), None)
    E.fail("%s is read by aten.%s; of integer tensors and masks computed from the ids only "
           "Megatron's masked vocab-parallel lookup is supported (docs/torch.md)"
           % (bad.what() if bad else "an integer tensor computed from the ids", name))
