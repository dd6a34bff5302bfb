"""tools/torchcap/memory.py - what each storage holds, so that views of it read the right values.

Frameworks keep tensors inside other tensors' memory: DDP copies gradients into flat buckets and
hands views of the reduced bucket back, FSDP all-gathers a flat buffer and uses views into it as
parameters, ZeRO and fused optimizers work on flat buffers.  A tensor's value then depends on
every write into the part of the storage it covers, through whatever view wrote it.

The model.  Each storage (keyed by its data pointer) keeps its *segments*: element ranges
[lo, hi) of the storage, each holding elements [base, base + hi - lo) of one SSA value in
row-major order; a contiguous write replaces the segments it covers.  A write through a view
that is not contiguous is kept as an *opaque* segment over its bounding range: reading exactly
that view gives its value back, any other overlapping read is refused (the elements are not
tracked one by one).  Every write is also logged with a version number, so that a cell (the
value a tensor object held when it was last bound) stays valid until a later write overlaps it.

A read of a contiguous range that no valid cell answers is rebuilt from the segments: each
piece is its value flattened (`view`), sliced (`chunk`, and a `concat` when unaligned), the
pieces concatenated and viewed to the tensor's shape.  Every step is an identity on values, so
the plan computes what the memory holds.  Elements no write covers are refused, as reads of
undeclared tensors are.
"""
import math

import torch

from .api import CaptureError


def storage_key(t):
    try:
        return t.untyped_storage().data_ptr()
    except Exception:  # pragma: no cover - tensors without storage (meta, sparse)
        return None


def _is_contiguous(t):
    return t.is_contiguous() or t.numel() <= 1


def span(t):
    """The element range [lo, hi) of t's storage that t may touch."""
    lo = t.storage_offset()
    if t.numel() == 0:
        return lo, lo
    hi = lo + 1 + sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride()))
    return lo, hi


def geometry(t):
    return (t.storage_offset(), tuple(int(n) for n in t.shape), tuple(int(s) for s in t.stride()),
            t.element_size())


class Segment:
    __slots__ = ("lo", "hi", "pid", "base", "numel", "geom")

    def __init__(self, lo, hi, pid, base, numel, geom=None):
        self.lo, self.hi = lo, hi
        self.pid = pid          # the SSA value whose elements the range holds
        self.base = base        # first element of pid at lo
        self.numel = numel      # pid's element count
        self.geom = geom        # opaque segment: the exact view that wrote it


class Storage:
    __slots__ = ("segments", "log", "version", "itemsize")

    def __init__(self, itemsize):
        self.segments = []      # sorted, non-overlapping
        self.log = []           # (version, lo, hi) of every write
        self.version = 0
        self.itemsize = itemsize


class Memory:
    def __init__(self):
        self.storages = {}      # storage key -> Storage

    def _storage(self, t):
        key = storage_key(t)
        if key is None:
            return None
        st = self.storages.get(key)
        if st is None:
            st = self.storages[key] = Storage(t.element_size())
        return st

    def version(self, t):
        """A stamp of t's storage now: which storage (its address) and its write count."""
        st = self._storage(t)
        return (None, 0) if st is None else (storage_key(t), st.version)

    def store(self, t, pid, numel):
        """Tensor t now holds value pid (numel elements): returns the storage's new version."""
        st = self._storage(t)
        if st is None:
            return (None, 0)
        if t.element_size() != st.itemsize:
            raise CaptureError("a write through a view of another element size (%d bytes, storage "
                               "of %d) is not tracked" % (t.element_size(), st.itemsize))
        lo, hi = span(t)
        return self._store(t, st, Segment(lo, hi, pid, 0, numel, None if _is_contiguous(t) else geometry(t)))

    def store_span(self, t, lo, hi, pid, numel, base=0):
        """Elements [lo, hi) of t's storage now hold elements [base, base + hi - lo) of value pid
        (numel elements): a buffer filled piece by piece (buckets.py, collectives.py)."""
        st = self._storage(t)
        return (None, 0) if st is None else self._store(t, st, Segment(lo, hi, pid, base, numel))

    def _store(self, t, st, seg):
        lo, hi = seg.lo, seg.hi
        kept = []
        for s in st.segments:
            if s.hi <= lo or s.lo >= hi:
                kept.append(s)
                continue
            if s.geom is not None:
                continue        # an opaque segment partly overwritten: its rest is unknown
            if s.lo < lo:
                kept.append(Segment(s.lo, lo, s.pid, s.base, s.numel))
            if s.hi > hi:
                kept.append(Segment(hi, s.hi, s.pid, s.base + (hi - s.lo), s.numel))
        kept.append(seg)
        kept.sort(key=lambda s: s.lo)
        st.segments = kept
        st.version += 1
        st.log.append((st.version, lo, hi))
        return (storage_key(t), st.version)

    def forget(self, t):
        """t's range of the storage now holds no recorded value (a constant was written there):
        reads through other views of it find a gap and are refused, never an old value."""
        st = self._storage(t)
        if st is None:
            return (None, 0)
        lo, hi = span(t)
        st.segments = [s for s in st.segments if s.hi <= lo or s.lo >= hi]
        st.version += 1
        st.log.append((st.version, lo, hi))
        return (storage_key(t), st.version)

    def unchanged_since(self, t, stamp):
        """No write since `stamp` (version) touched the part of the storage t covers, and t still
        lives in that storage (FSDP2 frees and reallocates a parameter's storage under it)."""
        key, version = stamp
        if key != storage_key(t):
            return False
        st = self._storage(t)
        if st is None or st.version == version:
            return True
        lo, hi = span(t)
        for v, a, b in reversed(st.log):
            if v <= version:
                break
            if a < hi and b > lo:
                return False
        return True

    def pieces(self, t):
        """The segments answering a read of t: [(segment, lo, hi)] covering t's range in order,
        or None when some element is not covered; CaptureError when an opaque write overlaps."""
        st = self._storage(t)
        if st is None:
            return None
        lo, hi = span(t)
        if not _is_contiguous(t):
            for s in st.segments:
                if s.geom == geometry(t) and s.lo == lo and s.hi == hi:
                    return [(s, lo, hi)]
            if permuted_layout(t) is None:
                return None
        return self.range_pieces(t, lo, hi)

    def range_pieces(self, t, lo, hi):
        """The segments answering elements [lo, hi) of t's storage, as pieces(t) does.  Adjacent
        segments that continue one another (the same value, consecutive elements) come back as
        one piece: a buffer copied piece by piece reads as the values it holds."""
        st = self._storage(t)
        if st is None:
            return None
        out, at = [], lo
        for s in st.segments:
            if s.hi <= lo or s.lo >= hi:
                continue
            if s.geom is not None:
                raise CaptureError("a view was written through a non-contiguous view of the same "
                                   "storage (strides %s); such writes are tracked only for reads of "
                                   "that same view" % (list(s.geom[2]),))
            if s.lo > at:
                return None
            a, b = max(s.lo, lo), min(s.hi, hi)
            if out and _continues(out[-1], s, a):
                p, pa, _ = out[-1]
                out[-1] = (Segment(pa, b, p.pid, p.base + pa - p.lo, p.numel), pa, b)
            else:
                out.append((s, a, b))
            at = b
        return out if at >= hi else None


def _continues(piece, s, a):
    """Segment s, read from element a on, continues piece (segment, lo, hi) of the same value."""
    p, _, pb = piece
    return (p.geom is None and p.pid == s.pid and pb == a
            and p.base + pb - p.lo == s.base + a - s.lo)


def permuted_layout(t):
    """The dims of t from outermost to innermost when t is a permutation of a contiguous tensor
    over exactly its span (a transposed weight autograd saved), else None."""
    lo, hi = span(t)
    if hi - lo != t.numel():
        return None
    order = sorted(range(t.dim()), key=lambda d: -t.stride(d))
    step = 1
    for d in reversed(order):
        if t.shape[d] != 1 and t.stride(d) != step:
            return None
        step *= int(t.shape[d])
    return order


def rebuild(rec, t, pieces, dtype, where):
    """The value of tensor t assembled from storage pieces (identities on values): a contiguous
    t directly, a permuted one as its contiguous layout, transposed into t's order."""
    order = None if _is_contiguous(t) or pieces[0][0].geom is not None else permuted_layout(t)
    if order is None:
        return _rebuild_contiguous(rec, [int(n) for n in t.shape], pieces, dtype, where)
    pid = _rebuild_contiguous(rec, [int(t.shape[d]) for d in order], pieces, dtype, where)
    shape = [int(t.shape[d]) for d in order]
    for i in range(len(order)):     # position i receives dim i of t: transpositions
        j = order.index(i)
        if j != i:
            order[i], order[j] = order[j], order[i]
            shape[i], shape[j] = shape[j], shape[i]
            out = rec.new_value(shape, dtype)
            rec.emit("transpose", [pid], [out], {"dim0": i, "dim1": j}, aten="memory", src=where)
            pid = out
    return pid


def _rebuild_contiguous(rec, shape, pieces, dtype, where):
    n = math.prod(shape)
    if len(pieces) == 1:
        s, a, b = pieces[0]
        if s.geom is not None or (s.base + a - s.lo == 0 and b - a == s.numel
                                  and rec.values[s.pid]["shape"] == shape):
            return s.pid
    parts = []
    for s, a, b in pieces:
        flat = _flat(rec, s.pid, dtype, where)
        start = s.base + a - s.lo
        parts.append(_range(rec, flat, s.numel, start, start + (b - a), dtype, where))
    if len(parts) == 1:
        whole = parts[0]
    else:
        whole = rec.new_value([n], dtype)
        rec.emit("concat", parts, [whole], {"dim": 0}, aten="memory", src=where)
    if shape == [n]:
        return whole
    out = rec.new_value(shape, dtype)
    rec.emit("view", [whole], [out], aten="memory", src=where)
    return out


def piece_value(rec, seg, a, b, dtype, where):
    """The value of storage piece (seg, a, b): seg's value itself when the piece is all of it,
    else the piece's elements of its flattening (view, chunks)."""
    start = seg.base + a - seg.lo
    if start == 0 and b - a == seg.numel:
        return seg.pid
    return _range(rec, _flat(rec, seg.pid, dtype, where), seg.numel, start, start + (b - a), dtype, where)


def _flat(rec, pid, dtype, where):
    shape = rec.values[pid]["shape"]
    if len(shape) == 1:
        return pid
    out = rec.new_value([math.prod(shape)], dtype)
    rec.emit("view", [pid], [out], aten="memory", src=where)
    return out


def _range(rec, pid, n, start, end, dtype, where):
    """Elements [start, end) of the 1-D value pid of n elements, as equal chunks."""
    if start == 0 and end == n:
        return pid
    ln = end - start
    if n % ln == 0 and start % ln == 0:
        out = rec.new_value([ln], dtype)
        rec.emit("chunk", [pid], [out], {"dim": 0, "index": start // ln, "chunks": n // ln},
                 aten="memory", src=where)
        return out
    g = math.gcd(math.gcd(start, end), n)
    parts = []
    for i in range(start // g, end // g):
        p = rec.new_value([g], dtype)
        rec.emit("chunk", [pid], [p], {"dim": 0, "index": i, "chunks": n // g}, aten="memory", src=where)
        parts.append(p)
    out = rec.new_value([ln], dtype)
    rec.emit("concat", parts, [out], {"dim": 0}, aten="memory", src=where)
    return out


def box(rec, pid, lo, ext, dtype, where):
    """The box [lo, lo + ext) of value pid, as chunks along each dim it slices (equal chunks
    where aligned, else chunks of the gcd concatenated): slices of pid, which lineage inference
    follows (FSDP1's reduce-scatter hands each rank boxes of the gradients)."""
    shape = list(rec.values[pid]["shape"])
    for d, (a, e) in enumerate(zip(lo, ext)):
        n = shape[d]
        if e == n:
            continue
        part = list(shape)
        if n % e == 0 and a % e == 0:
            part[d] = e
            out = rec.new_value(part, dtype)
            rec.emit("chunk", [pid], [out], {"dim": d, "index": a // e, "chunks": n // e}, aten="memory", src=where)
        else:
            g = math.gcd(math.gcd(a, a + e), n)
            part[d] = g
            pieces = []
            for i in range(a // g, (a + e) // g):
                p = rec.new_value(part, dtype)
                rec.emit("chunk", [pid], [p], {"dim": d, "index": i, "chunks": n // g}, aten="memory", src=where)
                pieces.append(p)
            part[d] = e
            out = rec.new_value(part, dtype)
            rec.emit("concat", pieces, [out], {"dim": d}, aten="memory", src=where)
        pid, shape = out, part
    return pid


def is_view_of(out, inputs):
    """out shares its storage with one of the input tensors (a view op's result)."""
    k = storage_key(out)
    return k is not None and any(isinstance(x, torch.Tensor) and storage_key(x) == k for x in inputs)
