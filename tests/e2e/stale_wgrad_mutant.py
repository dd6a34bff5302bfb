"""Writes a parallel plan whose weight gradient is wrong in ONE microbatch only.

Usage: stale_wgrad_mutant.py IN.plan OUT.plan RANK LAYER MB [BLOCK]

The linear_backward of 'layers.LAYER.ffn.down' on stored rank RANK reads the
gate activation (the silu output) instead of the gated product in microbatch
MB: a stale saved activation.  Its input gradient (g w) is unchanged, so only
that microbatch's weight-gradient contribution differs, and only the
per-part proof of the weight-gradient sum (docs/verifier.md section 2, "Sums
by part") can see it.  The node is confined to MB the way `verdict mutate
--microbatch` does it: the rank's nodes of its segment are split into
before / node / after segments, and a variant segment holding the mutated
copy runs for MB only.  BLOCK names the MLP (default "ffn": Llama's; "moe.shared"
is the MoE model's shared expert).  Used by tests/e2e/12_sum_by_part.sh.
"""
import sys

import msgpack

src, dst, rank, layer, mb = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
block = sys.argv[6] if len(sys.argv) > 6 else "ffn"
p = msgpack.unpackb(open(src, "rb").read(), raw=False, strict_map_key=False)
nodes = p["nodes"]
name = "layers.%d.%s.down" % (layer, block)
bwd = [n for n in nodes if n.get("rank") == rank and n["op"] == "linear_backward" and n.get("name") == name]
mul = [n for n in nodes if n.get("rank") == rank and n["op"] == "mul" and n.get("name") == "layers.%d.%s.mul" % (layer, block)]
if len(bwd) != 1 or len(mul) != 1:
    sys.exit("no single %s backward / ffn.mul on rank %d" % (name, rank))
bwd, mul = bwd[0], mul[0]
silu_out, prod = mul["in"][0], mul["out"][0]
assert bwd["in"][0] == prod, "the backward does not read the gated product"
seg = bwd["segment"]
segs = p["segments"]
mine = [i for i, n in enumerate(nodes) if n.get("rank") == rank and n["segment"] == seg]
at = mine.index(nodes.index(bwd))
base = segs[seg] + "#r%d." % rank
before, node, after, variant = len(segs), len(segs) + 1, len(segs) + 2, len(segs) + 3
segs += [base + "0", base + "1", base + "2", base + "1@mb%d" % mb]
for k, i in enumerate(mine):
    nodes[i]["segment"] = before if k < at else node if k == at else after
copy = dict(bwd)
copy["id"] = max(n["id"] for n in nodes) + 1
copy["segment"] = variant
copy["in"] = [silu_out] + list(bwd["in"][1:])
nodes.append(copy)
steps = []
for s, m in p["schedule"][rank]:
    if s != seg:
        steps.append([s, m])
        continue
    steps += [[before, m], [variant if m == mb else node, m], [after, m]]
p["schedule"][rank] = steps
open(dst, "wb").write(msgpack.packb(p, use_bin_type=True))
