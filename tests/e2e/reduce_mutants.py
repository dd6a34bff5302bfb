#!/usr/bin/python3
"""tests/e2e/reduce_mutants.py - rewrites of one rank of a generated parallel
plan that probe shape reduction (issue 11, causes 1 and 2;
docs/shape-reduction.md).  Written from docs/plan-format.md and
docs/operators.md, on the file format only.

usage: reduce_mutants.py MUTATION IN.plan OUT.plan

  interleave      rank 0's first forward rope reads its input through
                  view [.., d/2, 2] -> transpose(-2, -1) -> view [.., d]
                  (the interleaved pair layout): different values.
  interleave_ok   the same views with the transpose applied twice: the
                  identity, equivalent.
  interleave_flat, interleave_flat_ok: the same, but the pairs are merged
                  with the heads into [.., heads*d] and split again into
                  [.., heads, d] (views of different run lengths).
  norm_half       rank 0's first forward rms_norm written out as
                  x * rsqrt(sum(x*x) * 0.5 + eps) * w: wrong (0.5 != 1/h).
  norm_inv_h      the same with 1/h (the true mean): equivalent.
  norm_tp_half, norm_tp_inv_h: the first forward rms_norm of stored ranks 0
                  and 1 (a TP pair) with its statistic split over h:
                  all_reduce(sum(x_half^2)) * 0.5 (wrong) or * 1/h (right).
  count_half      rank 0's first forward linear reads its input through
                  view [.., h, 1] -> expand [.., h, 64] -> sum(-1) * 0.5: a
                  sum of 64 copies of x is 64 x, so this is 32 x (wrong), yet
                  it equals x when the copies' extent is reduced to 2.
  count_inv       the same times 1/64: x again, equivalent.
  ids_double      rank 0's first forward embedding looks up 2 * ids: other
                  rows, yet the same row once a vocabulary shard is reduced
                  to one row (the index values are computed in the stage, so
                  it is not reduced).
  labels_tpose_ok the first rank's labels reach its ce.labels.flat view
                  through transpose -> transpose (the identity): equivalent
                  (the stage relates that rank's labels to the other rank's
                  flattened labels through the single plan's view).

New tensors get fresh ids; new nodes are inserted right before the node
they feed, in its segment, so file order stays a valid program order.
"""
import sys

import msgpack


def load(path):
    with open(path, "rb") as f:
        return msgpack.unpackb(f.read(), raw=False, strict_map_key=False)


def save(plan, path):
    with open(path, "wb") as f:
        f.write(msgpack.packb(plan, use_bin_type=True))


class Plan:
    def __init__(self, d):
        self.d = d
        self.tid = max(t["id"] for t in d["tensors"]) + 1
        self.nid = max(n["id"] for n in d["nodes"]) + 1
        self.tensors = {t["id"]: t for t in d["tensors"]}

    def tensor(self, like, name, shape):
        t = {k: v for k, v in like.items() if k not in ("id", "name", "shape", "lin")}
        t.update(id=self.tid, name=name, shape=list(shape))
        self.tid += 1
        self.d["tensors"].append(t)
        self.tensors[t["id"]] = t
        return t["id"]

    def node(self, tmpl, op, name, ins, outs, attrs=None):
        n = {k: tmpl[k] for k in ("rank", "segment", "layer", "phase") if k in tmpl}
        n.update(id=self.nid, op=op, name=name, **{"in": list(ins), "out": list(outs)})
        if attrs:
            n["attrs"] = attrs
        self.nid += 1
        return n

    def first(self, op, rank=0):
        for i, n in enumerate(self.d["nodes"]):
            if n["op"] == op and n.get("rank", 0) == rank and n["phase"] == "fwd":
                return i, n
        raise SystemExit("no forward %s on rank %d" % (op, rank))


def interleave(p, twice, flat=False):
    i, rope = p.first("rope")
    x = p.tensors[rope["in"][0]]
    shp = list(x["shape"])
    d = shp[-1]
    base = rope["name"] + ".interleave"
    a = p.tensor(x, base + ".pairs", shp[:-1] + [d // 2, 2])
    b = p.tensor(x, base + ".t", shp[:-1] + [2, d // 2])
    new = [p.node(rope, "view", base + ".split", [x["id"]], [a]),
           p.node(rope, "transpose", base + ".swap", [a], [b], {"dim0": -2, "dim1": -1})]
    last = b
    if twice:
        c = p.tensor(x, base + ".back", shp[:-1] + [d // 2, 2])
        new.append(p.node(rope, "transpose", base + ".swap_back", [b], [c], {"dim0": -2, "dim1": -1}))
        last = c
    if flat:
        # merge heads and the permuted pair dims in one view, split them in
        # another: the two views are runs of different lengths.
        f = p.tensor(x, base + ".flat", shp[:-2] + [shp[-2] * d])
        new.append(p.node(rope, "view", base + ".flatten", [last], [f]))
        last = f
    y = p.tensor(x, base + ".merged", shp)
    new.append(p.node(rope, "view", base + ".merge", [last], [y]))
    rope["in"] = [y]
    p.d["nodes"][i:i] = new


def rms_rest(p, nrm, x, base, total, factor):
    """The rest of rms_norm nrm written out once total (the sum of x*x over h,
    shape [.., 1]) is made: total * factor + eps, rsqrt, x normalized, then
    times the weight into nrm's output.  Returns the new nodes."""
    w = nrm["in"][1]
    y = nrm["out"][0]
    eps = nrm.get("attrs", {}).get("eps", 1e-6)
    shp = list(x["shape"])
    row = shp[:-1] + [1]
    ms = p.tensor(x, base + ".ms", row)
    e = p.tensor(x, base + ".eps", row)
    r = p.tensor(x, base + ".rsqrt", row)
    xn = p.tensor(x, base + ".xn", shp)
    return [p.node(nrm, "scale", base + ".mean", [total], [ms], {"factor": factor}),
            p.node(nrm, "add", base + ".eps", [ms], [e], {"scalar": eps}),
            p.node(nrm, "rsqrt", base + ".rsqrt", [e], [r]),
            p.node(nrm, "mul", base + ".normalize", [x["id"], r], [xn]),
            p.node(nrm, "mul", base + ".weight", [xn, w], [y])]


def norm(p, factor_of_h):
    i, nrm = p.first("rms_norm")
    x = p.tensors[nrm["in"][0]]
    shp = list(x["shape"])
    base = nrm["name"] + ".written"
    sq = p.tensor(x, base + ".sq", shp)
    s = p.tensor(x, base + ".sum", shp[:-1] + [1])
    new = [p.node(nrm, "mul", base + ".square", [x["id"], x["id"]], [sq]),
           p.node(nrm, "sum", base + ".sum", [sq], [s], {"dims": [-1], "keepdim": 1})]
    p.d["nodes"][i:i + 1] = new + rms_rest(p, nrm, x, base, s, factor_of_h(shp[-1]))


def norm_tp(p, factor_of_h):
    """rms_norm of layer 0 on the TP pair (stored ranks 0 and 1) with the
    statistic split over h: each rank squares its half of x, the partial
    sums are all-reduced, then scaled by factor_of_h(h)."""
    coll = 1 + max([n.get("coll", -1) for n in p.d["nodes"]] + [-1])
    for rank in (0, 1):
        i, nrm = p.first("rms_norm", rank)
        x = p.tensors[nrm["in"][0]]
        shp = list(x["shape"])
        h = shp[-1]
        half = shp[:-1] + [h // 2]
        row = shp[:-1] + [1]
        base = nrm["name"] + ".tp"
        mine = p.tensor(x, base + ".x%d" % rank, half)
        sq = p.tensor(x, base + ".sq", half)
        s = p.tensor(x, base + ".partial", row)
        st = p.tensor(x, base + ".sum", row)
        ar = p.node(nrm, "all_reduce", base + ".all_reduce", [s], [st])
        ar.update(phase="comm", coll=coll, group=[0, 1])
        new = [p.node(nrm, "chunk", base + ".split", [x["id"]], [mine], {"chunks": 2, "dim": -1, "index": rank}),
               p.node(nrm, "mul", base + ".square", [mine, mine], [sq]),
               p.node(nrm, "sum", base + ".sum", [sq], [s], {"dims": [-1], "keepdim": 1}),
               ar]
        p.d["nodes"][i:i + 1] = new + rms_rest(p, nrm, x, base, st, factor_of_h(h))


def count(p, factor):
    i, nrm = p.first("linear")
    x = p.tensors[nrm["in"][0]]
    shp = list(x["shape"])
    base = nrm["name"] + ".count"
    col = p.tensor(x, base + ".col", shp + [1])
    rep = p.tensor(x, base + ".copies", shp + [64])
    s = p.tensor(x, base + ".sum", shp)
    y = p.tensor(x, base + ".scaled", shp)
    new = [p.node(nrm, "view", base + ".col", [x["id"]], [col]),
           p.node(nrm, "expand", base + ".expand", [col], [rep]),
           p.node(nrm, "sum", base + ".sum", [rep], [s], {"dims": [-1]}),
           p.node(nrm, "scale", base + ".scale", [s], [y], {"factor": factor})]
    nrm["in"] = [y] + nrm["in"][1:]
    p.d["nodes"][i:i] = new


def ids_double(p):
    i, emb = p.first("embedding")
    x = p.tensors[emb["in"][0]]
    y = p.tensor(x, "ids.doubled", x["shape"])
    new = [p.node(emb, "scale", "ids.double", [x["id"]], [y], {"factor": 2.0})]
    emb["in"] = [y] + emb["in"][1:]
    p.d["nodes"][i:i] = new


def labels_tpose(p):
    for i, n in enumerate(p.d["nodes"]):
        if n["name"] == "ce.labels.flat" and n["op"] == "view":
            break
    else:
        raise SystemExit("no ce.labels.flat view")
    x = p.tensors[n["in"][0]]
    shp = list(x["shape"])
    a = p.tensor(x, "labels.t", shp[::-1])
    b = p.tensor(x, "labels.tt", shp)
    new = [p.node(n, "transpose", "labels.swap", [x["id"]], [a], {"dim0": 0, "dim1": 1}),
           p.node(n, "transpose", "labels.swap_back", [a], [b], {"dim0": 0, "dim1": 1})]
    n["in"] = [b]
    p.d["nodes"][i:i] = new


MUTATIONS = {
    "interleave": lambda p: interleave(p, False),
    "interleave_ok": lambda p: interleave(p, True),
    "interleave_flat": lambda p: interleave(p, False, True),
    "interleave_flat_ok": lambda p: interleave(p, True, True),
    "norm_half": lambda p: norm(p, lambda h: 0.5),
    "norm_inv_h": lambda p: norm(p, lambda h: 1.0 / h),
    "norm_tp_half": lambda p: norm_tp(p, lambda h: 0.5),
    "norm_tp_inv_h": lambda p: norm_tp(p, lambda h: 1.0 / h),
    "count_half": lambda p: count(p, 0.5),
    "count_inv": lambda p: count(p, 1.0 / 64),
    "labels_tpose_ok": labels_tpose,
    "ids_double": ids_double,
}


def main(argv):
    if len(argv) != 4 or argv[1] not in MUTATIONS:
        sys.stderr.write("usage: reduce_mutants.py %s IN.plan OUT.plan\n" % "|".join(sorted(MUTATIONS)))
        return 2
    p = Plan(load(argv[2]))
    MUTATIONS[argv[1]](p)
    save(p.d, argv[3])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
