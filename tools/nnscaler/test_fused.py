"""tools/nnscaler/test_fused.py - checks fused.py's expansions against nnScaler's own code.

Run from the repository root: python3 -m unittest tools.nnscaler.test_fused

Why this test exists: the verifier compares a single plan with a parallel plan
that BOTH go through fused.py, so a wiring mistake in an expansion (a wrong
transpose, a missing gradient term) would be the same on both sides and stay
invisible.  Here the expanded node lists are executed by a tiny interpreter of
the registry operators they use (docs/operators.md semantics, stdlib only) and
compared with
  - a literal transcription of nnScaler's self_attention / feedforward bodies
    (examples/nlp/blocks: the (N h) merged layout, bmm, views), and
  - central finite differences of that transcription for every input of the
    backward nodes (dropout's mask frozen at the base point, as torch's is).
"""
import math
import random
import unittest

from . import fused


# ---- tensors: (shape, flat row-major list) ---------------------------------
def numel(s):
    n = 1
    for v in s:
        n *= v
    return n


def unravel(s, f):
    idx = [0] * len(s)
    for i in range(len(s) - 1, -1, -1):
        idx[i] = f % s[i]
        f //= s[i]
    return idx


def ravel(s, idx):
    f = 0
    for i, v in enumerate(idx):
        f = f * s[i] + v
    return f


def transpose(x, d0, d1):
    s, v = x
    d0, d1 = d0 % len(s), d1 % len(s)
    t = list(s)
    t[d0], t[d1] = t[d1], t[d0]
    out = [0.0] * len(v)
    for f in range(len(v)):
        idx = unravel(s, f)
        idx[d0], idx[d1] = idx[d1], idx[d0]
        out[ravel(t, idx)] = v[f]
    return (tuple(t), out)


def matmul(a, b):
    (sa, va), (sb, vb) = a, b
    m, k, n = sa[-2], sa[-1], sb[-1]
    assert sb[-2] == k and sa[:-2] == sb[:-2]
    nb = numel(sa[:-2])
    out = []
    for bi in range(nb):
        for i in range(m):
            for j in range(n):
                out.append(sum(va[bi * m * k + i * k + t] * vb[bi * k * n + t * n + j] for t in range(k)))
    return (tuple(sa[:-2]) + (m, n), out)


def linear(x, w, b=None):
    (sx, vx), (sw, vw) = x, w
    o, i = sw
    rows = numel(sx[:-1])
    out = []
    for r in range(rows):
        for j in range(o):
            out.append(sum(vx[r * i + t] * vw[j * i + t] for t in range(i)) + (b[1][j] if b else 0.0))
    return (tuple(sx[:-1]) + (o,), out)


def softmax_last(x):
    s, v = x
    n = s[-1]
    out = []
    for r in range(len(v) // n):
        row = v[r * n:(r + 1) * n]
        mx = max(row)
        e = [math.exp(t - mx) for t in row]
        z = sum(e)
        out.extend(t / z for t in e)
    return (s, out)


def mask_of(x, p):
    """ops_numeric.c's surrogate dropout mask."""
    return [0.0 if p >= 1 else (1.0 + 0.5 * math.sin(3.0 * t)) / (1.0 - p) for t in x[1]]


def gelu(t):
    return 0.5 * t * (1.0 + math.erf(t / math.sqrt(2.0)))


def gelu_grad(t):
    return 0.5 * (1.0 + math.erf(t / math.sqrt(2.0))) + t * math.exp(-0.5 * t * t) / math.sqrt(2.0 * math.pi)


def causal(x, fill):
    s, v = x
    L = s[-1]
    return (s, [fill if (f % L) > (f // L) % s[-2] else v[f] for f in range(len(v))])


# ---- interpreter of the registry operators fused.py emits ------------------
def run_nodes(nodes, shapes, vals):
    def attr(n, k, d=None):
        return n["attrs"].get(k, d)

    for n in nodes:
        op, ins = n["op"], [vals[k] for k in n["in"]]
        outs = n["out"]
        if op == "linear":
            r = [linear(*ins)]
        elif op == "linear_backward":
            (sx, vx), (sw, vw), (sg, vg) = ins
            o, i = sw
            rows = numel(sx[:-1])
            gx = [sum(vg[r * o + j] * vw[j * i + t] for j in range(o)) for r in range(rows) for t in range(i)]
            gw = [sum(vg[r * o + j] * vx[r * i + t] for r in range(rows)) for j in range(o) for t in range(i)]
            gb = [sum(vg[r * o + j] for r in range(rows)) for j in range(o)]
            r = [(sx, gx), (sw, gw), ((o,), gb)][:len(outs)]
        elif op == "view":
            r = [(tuple(shapes[outs[0]]), list(ins[0][1]))]
        elif op == "chunk":
            (s, v), dim, idx, ch = ins[0], attr(n, "dim"), attr(n, "index"), attr(n, "chunks")
            os_ = tuple(shapes[outs[0]])
            w = s[dim] // ch
            out = []
            for f in range(numel(os_)):
                ii = unravel(os_, f)
                ii[dim] += idx * w
                out.append(v[ravel(s, ii)])
            r = [(os_, out)]
        elif op == "chunk_backward":
            (s, v), dim, idx, ch = ins[0], attr(n, "dim"), attr(n, "index"), attr(n, "chunks")
            os_ = tuple(shapes[outs[0]])
            out = [0.0] * numel(os_)
            for f in range(len(v)):
                ii = unravel(s, f)
                ii[dim] += idx * s[dim]
                out[ravel(os_, ii)] = v[f]
            r = [(os_, out)]
        elif op == "transpose":
            r = [transpose(ins[0], attr(n, "dim0"), attr(n, "dim1"))]
        elif op in ("scale", "scale_backward"):
            r = [(ins[0][0], [attr(n, "factor") * t for t in ins[0][1]])]
        elif op == "matmul":
            r = [matmul(*ins)]
        elif op == "matmul_backward":
            a, b, g = ins
            r = [matmul(g, transpose(b, -1, -2)), matmul(transpose(a, -1, -2), g)]
        elif op == "softmax":
            assert attr(n, "dim") == -1
            r = [softmax_last(ins[0])]
        elif op == "softmax_backward":
            (s, y), (_, g) = ins
            L = s[-1]
            out = []
            for row in range(len(y) // L):
                sl = slice(row * L, (row + 1) * L)
                dot = sum(a * b for a, b in zip(y[sl], g[sl]))
                out.extend(a * (b - dot) for a, b in zip(y[sl], g[sl]))
            r = [(s, out)]
        elif op == "dropout":
            on = attr(n, "p") > 0 and attr(n, "training")
            m = mask_of(ins[0], attr(n, "p")) if on else [1.0] * len(ins[0][1])
            r = [(ins[0][0], [a * b for a, b in zip(ins[0][1], m)])]
        elif op == "dropout_backward":
            on = attr(n, "p") > 0 and attr(n, "training")
            m = mask_of(ins[0], attr(n, "p")) if on else [1.0] * len(ins[0][1])
            r = [(ins[0][0], [a * b for a, b in zip(ins[2][1], m)])]
        elif op == "causal_mask":
            r = [causal(ins[0], attr(n, "fill"))]
        elif op == "causal_mask_backward":
            r = [causal(ins[0], 0.0)]
        elif op == "add":
            r = [(ins[0][0], [a + b for a, b in zip(ins[0][1], ins[1][1])])]
        elif op == "gelu":
            r = [(ins[0][0], [gelu(t) for t in ins[0][1]])]
        elif op == "gelu_backward":
            r = [(ins[0][0], [g * gelu_grad(t) for t, g in zip(ins[0][1], ins[1][1])])]
        else:
            raise AssertionError("interpreter lacks %s" % op)
        assert len(r) == len(outs), op
        for k, t in zip(outs, r):
            assert list(t[0]) == list(shapes[k]), (n["name"], t[0], shapes[k])
            vals[k] = t


# ---- nnScaler's bodies, transcribed --------------------------------------------
def ref_attention(x, w, b, wo, h, scale, p, mask, frozen=None):
    """examples/nlp/blocks self_attention; frozen: dropout mask to use instead of m(attn)."""
    L, N, E = x[0]
    d = w[0][0] // h // 3
    qkv = linear(x, w, b)
    qkv = ((L, N, h * d, 3), qkv[1])
    parts = []
    for c in range(3):
        v = [qkv[1][f * 3 + c] for f in range(L * N * h * d)]   # chunk(3, dim=-1)
        t = ((L, N * h, d), v)                                   # .contiguous().view(L, N*h, d)
        parts.append(transpose(t, 0, 1))                         # (N h) L d
    q, k, v = parts
    q = (q[0], [t * scale for t in q[1]])
    k = transpose(k, 1, 2)
    attn = matmul(q, k)                                          # (N h) L L
    if mask:
        attn = causal(attn, -10000.0)
    attn = softmax_last(attn)
    m = frozen if frozen is not None else (mask_of(attn, p) if p > 0 else [1.0] * len(attn[1]))
    attn_d = (attn[0], [a * b for a, b in zip(attn[1], m)])
    out = matmul(attn_d, v)                                      # (N h) L d
    out = transpose(out, 0, 1)                                   # L (N h) d
    out = ((L, N, h * d), out[1])
    return linear(out, wo), m


def ref_feedforward(x, w1, b1, w2, p, training, frozen=None):
    t = linear(x, w1, b1)
    t = (t[0], [gelu(v) for v in t[1]])
    m = frozen if frozen is not None else (mask_of(t, p) if p > 0 and training else [1.0] * len(t[1]))
    t = (t[0], [a * b for a, b in zip(t[1], m)])
    return linear(t, w2), m


# ---- a converter stand-in that records what fused.py emits -----------------
class FakeConv:
    def __init__(self):
        self.tinfo, self.next_tid, self.nodes, self.unmapped = {}, 1, [], {}

    def tensor(self, name, shape):
        k = ("in", name)
        self.tinfo[k] = {"name": name, "rank": 0, "shape": list(shape), "dtype": "f32", "role": "act", "scope": "mb"}
        return k

    def node(self, rank, seg, op, name, phase, ins, outs, attrs=None, coll=None, layer=-1, grads=False):
        self.nodes.append({"op": op, "name": name, "in": list(ins), "out": list(outs), "attrs": attrs or {}})


class Op:
    def __init__(self, name, i):
        self.name, self._id = name, i


def rnd(shape, rng, lo=-1.0, hi=1.0):
    return (tuple(shape), [rng.uniform(lo, hi) for _ in range(numel(shape))])


class TestFused(unittest.TestCase):
    def expand(self, name, shapes, attrs, inputs):
        conv = FakeConv()
        ins = [conv.tensor("in%d" % i, s) for i, s in enumerate(shapes)]
        y = conv.tensor("y", self.out_shape)
        gy = conv.tensor("gy", self.out_shape)
        grads = [conv.tensor("g%d" % i, s) for i, s in enumerate(shapes)]
        self.assertTrue(fused.expand_fw(conv, 0, 0, Op(name, 1), attrs, ins, [y], -1))
        nf = len(conv.nodes)
        self.assertTrue(fused.expand_bw(conv, 0, 0, Op(name, 1), "BW", attrs, ins, [gy],
                                        lambda pos: [grads[i] for i in pos], -1))
        shp = {k: v["shape"] for k, v in conv.tinfo.items()}
        vals = dict(zip(ins, inputs))
        vals[gy] = self.g
        run_nodes(conv.nodes[:nf], shp, vals)
        fwd = vals[y]
        vals2 = dict(zip(ins, inputs))
        vals2[gy] = self.g
        run_nodes(conv.nodes[nf:], shp, vals2)
        return fwd, [vals2[k] for k in grads], conv

    def check_grads(self, ref, inputs, grads, frozen):
        eps = 1e-6
        for i, t in enumerate(inputs):
            for e in range(len(t[1])):
                def loss(delta):
                    xs = [(s, list(v)) for s, v in inputs]
                    xs[i][1][e] += delta
                    y, _ = ref(xs, frozen)
                    return sum(a * b for a, b in zip(y[1], self.g[1]))
                fd = (loss(eps) - loss(-eps)) / (2 * eps)
                self.assertAlmostEqual(grads[i][1][e], fd, delta=1e-6 * max(1.0, abs(fd)),
                                       msg="input %d element %d" % (i, e))

    def test_self_attention(self):
        rng = random.Random(7)
        L, N, E, h, d = 3, 2, 3, 2, 2
        shapes = [(L, N, E), (3 * h * d, E), (3 * h * d,), (E, h * d)]
        self.out_shape = (L, N, E)
        for mask in (0, 1):
            for p in (0.0, 0.2):
                inputs = [rnd(s, rng) for s in shapes]
                self.g = rnd(self.out_shape, rng)
                attrs = {"h": h, "scale": 0.7, "dropout_p": p, "mask": mask}
                fwd, grads, conv = self.expand("self_attention", shapes, attrs, inputs)

                def ref(xs, frozen):
                    return ref_attention(*xs, h=h, scale=0.7, p=p, mask=mask, frozen=frozen)
                want, m = ref(inputs, None)
                for a, b in zip(fwd[1], want[1]):
                    self.assertAlmostEqual(a, b, delta=1e-12)
                self.check_grads(ref, inputs, grads, m)
                self.assertNotIn("self_attention", conv.unmapped)

    def test_feedforward(self):
        rng = random.Random(11)
        L, N, E, H = 2, 3, 3, 4
        shapes = [(L, N, E), (H, E), (H,), (E, H)]
        self.out_shape = (L, N, E)
        for training in (0, 1, "self.training"):
            inputs = [rnd(s, rng) for s in shapes]
            self.g = rnd(self.out_shape, rng)
            attrs = {"dropout": 0.2, "is_training": training}
            fwd, grads, _ = self.expand("feedforward", shapes, attrs, inputs)

            def ref(xs, frozen):
                return ref_feedforward(*xs, p=0.2, training=bool(training), frozen=frozen)
            want, m = ref(inputs, None)
            for a, b in zip(fwd[1], want[1]):
                self.assertAlmostEqual(a, b, delta=1e-12)
            self.check_grads(ref, inputs, grads, m)

    def test_bad_shapes_are_one_line_errors(self):
        conv = FakeConv()
        ins = [conv.tensor("x", (2, 2, 4)), conv.tensor("w", (12, 4)), conv.tensor("b", (12,)),
               conv.tensor("wo", (4, 4))]
        y = conv.tensor("y", (2, 2, 4))
        with self.assertRaises(fused.cv.ConvertError) as cm:
            fused.expand_fw(conv, 0, 0, Op("self_attention", 3), {"h": 3}, ins, [y], -1)
        self.assertIn("h=3", str(cm.exception))
        self.assertFalse(fused.expand_fw(conv, 0, 0, Op("linear", 4), {}, ins[:2], [y], -1))


if __name__ == "__main__":
    unittest.main()
