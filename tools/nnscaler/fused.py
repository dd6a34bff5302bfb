"""tools/nnscaler/fused.py - expands nnScaler's fused GPT blocks into registry operators.

What: the GPT models of the corpus (nnScaler examples/nlp/blocks) register two
fused operators, `self_attention` and `feedforward`, that have no registry
equivalent.  Instead of adding two large fused operators (with hand-written
symbolic gradients) to solver/, the converter writes each one out as the
sequence of registry operators nnScaler's own Python body runs, and its
backward node as a recomputation of that forward followed by the registry's
*_backward operators in reverse order (gradients of a value that fans out are
summed with `add`).

Why this is sound and cheap: every operator used here has its forward and
backward conventions fixed in docs/operators.md and checked against finite
differences; the tensors created here are internal to one rank's
computation of one node and get NO lineage (no `_sub`, so Conv.lineage
returns None), so the verifier never assumes anything about them: it only
cuts stages at lineage-annotated tensors, and an expansion just makes the
stage around the fused node larger.  The node's own inputs and outputs keep
the keys (and lineage) the converter gives them.

Conventions (as pickled by nnScaler):
  self_attention(query [L,N,E], qkv_proj [(h d 3),E], qkv_bias [(h d 3)],
                 out_proj [E,(h d)]; h, scale, dropout_p, mask) -> [L,N,E]
    qkv = linear(query, qkv_proj, qkv_bias) viewed [L,N,h,d,3]; q,k,v = the
    three slices of the last dim; nnScaler's (N h) merged batch is kept as
    two dims [N,h] (the same elements in the same order):
    attn = softmax(scale*q @ k^T [N,h,L,L], -1) (causal mask first when
    mask), dropout(dropout_p, training); out = attn @ v -> [L,N,(h d)];
    y = linear(out, out_proj).  Under tensor parallelism nnScaler splits h:
    each rank's weights hold its heads and `h` is taken from the node's own
    attribute, d = out_proj columns / h (a wrong split shows up as a
    mismatch, never as a silent pass).
  feedforward(x [L,N,E], proj1 [H,E], proj1_bias [H], proj2 [E,H]; dropout,
              is_training) -> linear(dropout(gelu(linear(x, proj1, b1))), proj2)
The backward node (converter convention: forward inputs, forward outputs,
output gradient -> input gradients) recomputes the forward from its inputs.
"""

from . import convert as cv

FUSED_OPS = ("self_attention", "feedforward")


class _Emit:
    """Node and temporary-tensor emission for one fused node on one rank."""

    def __init__(self, conv, rank, seg, base, phase, layer, dtype):
        self.c, self.rank, self.seg, self.base, self.phase, self.layer, self.dtype = \
            conv, rank, seg, base, phase, layer, dtype
        self.k = 0

    def tmp(self, shape, role="act", what="t"):
        """A fresh mb-scope tensor with no lineage (internal to this node)."""
        c = self.c
        key = ("x", c.next_tid)
        c.next_tid += 1
        c.tinfo[key] = {"name": "%s.%s" % (self.base, what), "rank": self.rank, "shape": [int(v) for v in shape],
                        "dtype": self.dtype, "role": role, "scope": "mb"}
        return key

    def op(self, op, ins, outs, attrs=None):
        self.k += 1
        self.c.node(self.rank, self.seg, op, "%s.%d.%s" % (self.base, self.k, op), self.phase, list(ins), list(outs),
                    dict(attrs or {}), layer=self.layer)

    def new(self, op, ins, shape, attrs=None, role="act", what=None):
        y = self.tmp(shape, role, what or op)
        self.op(op, ins, [y], attrs)
        return y


def _shape(conv, key):
    return list(conv.tinfo[key]["shape"])


def _dropout_attrs(p, training):
    return {"p": float(p), "training": 1 if training else 0}


def _training(v):
    """A kwarg `training`/`is_training` as 0/1 (a traced 'self.training' string is the module flag: true)."""
    if isinstance(v, str):
        return 0 if v in ("False", "false", "0") else 1
    return 1 if v else 0


# ---------------------------------------------------------------------------
# self_attention
# ---------------------------------------------------------------------------
def _attn_dims(conv, ins, attrs, what):
    cv.need(len(ins) == 4, "%s: self_attention expects 4 tensor inputs, got %d" % (what, len(ins)))
    xs, ws, bs, os_ = (_shape(conv, k) for k in ins)
    cv.need(len(xs) == 3 and len(ws) == 2 and len(bs) == 1 and len(os_) == 2,
            "%s: self_attention operand ranks %s %s %s %s" % (what, xs, ws, bs, os_))
    h = cv.as_int(attrs.get("h"), "%s: attrs.h" % what)
    L, N, E = xs
    hd = os_[1]
    cv.need(h > 0 and hd % h == 0 and ws[0] == 3 * hd and bs[0] == ws[0] and ws[1] == E and os_[0] == E,
            "%s: self_attention shapes %s %s %s %s do not fit h=%d" % (what, xs, ws, bs, os_, h))
    return L, N, E, h, hd // h


def _attn_forward(e, ins, attrs, dims, y=None):
    """Emits the forward; returns the intermediates the backward needs."""
    x, w, b, wo = ins
    L, N, E, h, d = dims
    qkv = e.new("linear", [x, w, b], [L, N, 3 * h * d], what="qkv")
    qkv5 = e.new("view", [qkv], [L, N, h, d, 3], what="qkv5")
    heads = []
    for c in range(3):
        t = e.new("chunk", [qkv5], [L, N, h, d, 1], {"dim": 4, "index": c, "chunks": 3}, what="qkv%d" % c)
        t = e.new("view", [t], [L, N, h, d])
        t = e.new("transpose", [t], [N, L, h, d], {"dim0": 0, "dim1": 1})
        heads.append(e.new("transpose", [t], [N, h, L, d], {"dim0": 1, "dim1": 2}, what="qkv%d.heads" % c))
    q, k, v = heads
    scale = float(attrs.get("scale", 1.0))
    qs = e.new("scale", [q], [N, h, L, d], {"factor": scale}, what="q.scaled")
    kt = e.new("transpose", [k], [N, h, d, L], {"dim0": 2, "dim1": 3}, what="k.t")
    a = e.new("matmul", [qs, kt], [N, h, L, L], what="scores")
    masked = bool(attrs.get("mask", 0))
    if masked:
        a = e.new("causal_mask", [a], [N, h, L, L], {"q_offset": 0, "k_offset": 0, "fill": -10000.0},
                  what="scores.masked")
    sm = e.new("softmax", [a], [N, h, L, L], {"dim": -1}, what="probs")
    dattrs = _dropout_attrs(attrs.get("dropout_p", 0.0), True)
    dr = e.new("dropout", [sm], [N, h, L, L], dattrs, what="probs.dropout")
    o = e.new("matmul", [dr, v], [N, h, L, d], what="ctx")
    o = e.new("transpose", [o], [N, L, h, d], {"dim0": 1, "dim1": 2})
    o = e.new("transpose", [o], [L, N, h, d], {"dim0": 0, "dim1": 1})
    o3 = e.new("view", [o], [L, N, h * d], what="ctx.flat")
    if y is not None:
        e.op("linear", [o3, wo], [y])
    return {"qkv5": qkv5, "q": q, "k": k, "v": v, "qs": qs, "kt": kt, "sm": sm, "dr": dr, "o3": o3,
            "masked": masked, "dattrs": dattrs, "scale": scale}


def _attn_backward(e, ins, attrs, dims, gy, gouts):
    """gouts: keys for (gx, gw, gb, gwo)."""
    x, w, b, wo = ins
    L, N, E, h, d = dims
    f = _attn_forward(e, ins, attrs, dims)
    g = "grad"
    go3 = e.tmp([L, N, h * d], g, "g.ctx.flat")
    e.op("linear_backward", [f["o3"], wo, gy], [go3, gouts[3]])
    t = e.new("view", [go3], [L, N, h, d], role=g)
    t = e.new("transpose", [t], [N, L, h, d], {"dim0": 0, "dim1": 1}, role=g)
    go = e.new("transpose", [t], [N, h, L, d], {"dim0": 1, "dim1": 2}, role=g, what="g.ctx")
    gdr, gv = e.tmp([N, h, L, L], g, "g.probs.dropout"), e.tmp([N, h, L, d], g, "g.v")
    e.op("matmul_backward", [f["dr"], f["v"], go], [gdr, gv])
    gsm = e.new("dropout_backward", [f["sm"], f["dr"], gdr], [N, h, L, L], f["dattrs"], role=g, what="g.probs")
    ga = e.new("softmax_backward", [f["sm"], gsm], [N, h, L, L], {"dim": -1}, role=g, what="g.scores")
    if f["masked"]:
        ga = e.new("causal_mask_backward", [ga], [N, h, L, L], {"q_offset": 0, "k_offset": 0, "fill": -10000.0},
                   role=g, what="g.scores.unmasked")
    gqs, gkt = e.tmp([N, h, L, d], g, "g.q.scaled"), e.tmp([N, h, d, L], g, "g.k.t")
    e.op("matmul_backward", [f["qs"], f["kt"], ga], [gqs, gkt])
    gq = e.new("scale_backward", [gqs], [N, h, L, d], {"factor": f["scale"]}, role=g, what="g.q")
    gk = e.new("transpose", [gkt], [N, h, L, d], {"dim0": 2, "dim1": 3}, role=g, what="g.k")
    parts = []
    for c, gh in enumerate((gq, gk, gv)):
        t = e.new("transpose", [gh], [N, L, h, d], {"dim0": 1, "dim1": 2}, role=g)
        t = e.new("transpose", [t], [L, N, h, d], {"dim0": 0, "dim1": 1}, role=g)
        t = e.new("view", [t], [L, N, h, d, 1], role=g)
        parts.append(e.new("chunk_backward", [t], [L, N, h, d, 3], {"dim": 4, "index": c, "chunks": 3}, role=g,
                           what="g.qkv%d" % c))
    s = e.new("add", [parts[0], parts[1]], [L, N, h, d, 3], role=g, what="g.qkv01")
    s = e.new("add", [s, parts[2]], [L, N, h, d, 3], role=g, what="g.qkv5")
    gqkv = e.new("view", [s], [L, N, 3 * h * d], role=g, what="g.qkv")
    e.op("linear_backward", [x, w, gqkv], [gouts[0], gouts[1], gouts[2]])


# ---------------------------------------------------------------------------
# feedforward
# ---------------------------------------------------------------------------
def _ff_dims(conv, ins, what):
    cv.need(len(ins) == 4, "%s: feedforward expects 4 tensor inputs, got %d" % (what, len(ins)))
    xs, w1, b1, w2 = (_shape(conv, k) for k in ins)
    cv.need(len(w1) == 2 and len(b1) == 1 and len(w2) == 2 and w1[1] == xs[-1] and b1[0] == w1[0]
            and w2[1] == w1[0], "%s: feedforward shapes %s %s %s %s" % (what, xs, w1, b1, w2))
    return xs[:-1], w1[0], w2[0]


def _ff_forward(e, ins, attrs, dims, y=None):
    x, w1, b1, w2 = ins
    lead, H, E = dims
    h1 = e.new("linear", [x, w1, b1], lead + [H], what="proj1")
    a = e.new("gelu", [h1], lead + [H], what="gelu")
    dattrs = _dropout_attrs(attrs.get("dropout", 0.0), _training(attrs.get("is_training", 1)))
    dr = e.new("dropout", [a], lead + [H], dattrs, what="gelu.dropout")
    if y is not None:
        e.op("linear", [dr, w2], [y])
    return h1, a, dr, dattrs


def _ff_backward(e, ins, attrs, dims, gy, gouts):
    x, w1, b1, w2 = ins
    lead, H, E = dims
    h1, a, dr, dattrs = _ff_forward(e, ins, attrs, dims)
    gdr = e.tmp(lead + [H], "grad", "g.gelu.dropout")
    e.op("linear_backward", [dr, w2, gy], [gdr, gouts[3]])
    ga = e.new("dropout_backward", [a, dr, gdr], lead + [H], dattrs, role="grad", what="g.gelu")
    gh = e.new("gelu_backward", [h1, ga], lead + [H], role="grad", what="g.proj1")
    e.op("linear_backward", [x, w1, gh], [gouts[0], gouts[1], gouts[2]])


# ---------------------------------------------------------------------------
# converter hooks
# ---------------------------------------------------------------------------
def _uncount(conv, name):
    n = conv.unmapped.get(name, 0) - 1
    if n > 0:
        conv.unmapped[name] = n
    else:
        conv.unmapped.pop(name, None)


def expand_fw(conv, rank, seg, n, attrs, ins, outs, layer):
    """Emits forward node n (already lowered: attrs, input/output keys) when it is a
    fused block; returns False (nothing emitted) for any other operator."""
    name = str(n.name)
    if name not in FUSED_OPS:
        return False
    what = "%s#%d" % (name, n._id)
    cv.need(len(outs) == 1, "%s: expected one output, got %d" % (what, len(outs)))
    e = _Emit(conv, rank, seg, what, "fwd", layer, conv.tinfo[ins[0]]["dtype"])
    if name == "self_attention":
        _attn_forward(e, ins, attrs, _attn_dims(conv, ins, attrs, what), y=outs[0])
    else:
        _ff_forward(e, ins, attrs, _ff_dims(conv, ins, what), y=outs[0])
    _uncount(conv, name)
    return True


def expand_bw(conv, rank, seg, fw, name, attrs, ins, gk, out_keys, layer):
    """Emits the backward node of fused forward fw: ins = forward input keys,
    gk = output-gradient keys (one), out_keys(positions) -> gradient keys of the
    forward inputs (fresh unused tensors where nnScaler computes none).  Returns
    False for any other operator."""
    fname = str(fw.name)
    if fname not in FUSED_OPS:
        return False
    what = "BW.%s#%d" % (fname, fw._id)
    cv.need(len(gk) == 1 and gk[0] is not None, "%s: expected one output gradient" % what)
    gouts = out_keys(list(range(len(ins))))
    e = _Emit(conv, rank, seg, what, "bwd", layer, conv.tinfo[ins[0]]["dtype"])
    if fname == "self_attention":
        _attn_backward(e, ins, attrs, _attn_dims(conv, ins, attrs, what), gk[0], gouts)
    else:
        _ff_backward(e, ins, attrs, _ff_dims(conv, ins, what), gk[0], gouts)
    _uncount(conv, fname)
    return True
