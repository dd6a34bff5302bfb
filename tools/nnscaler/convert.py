"""tools/nnscaler/convert.py - nnScaler execution plans -> verdict plan format v1.

What: converts a ModuleCodeGen pickle (loaded inertly by pickle_safe) into a
plan dict (docs/plan-format.md), for the single-device plan (kind "single",
tensor id = nnScaler full-tensor id) and for the parallel plan (kind
"parallel": the per-device programs of DP replica 0, world.replicas = dp,
lineage annotations pointing at the single plan's full-tensor ids).

Why this shape: nnScaler stores only replica 0 (`execplan._seq[dev]`) and
re-executes segment cells per microbatch; verdict's format has the same two
rules (replicas, segments + schedule steps), so the conversion is 1:1 and
the file stays as small as the distinct programs.

Conventions reproduced (see ../shared/corpus/nnscaler-format.md, section 5):
 1. one segment per top-level cell id; a step [segment, mb] per occurrence,
    mb = occurrence index of the cell id on that device; reducers mb = -1;
    dataloaders become data inputs (no node).
 2. tensor identity is (rank, tid); ids of activations are reused by every
    microbatch (scope mb); attrs and attr grads are persistent.  A weight's
    gradient is one buffer per rank (rank, ftid, region): the value parts of
    a tied weight's gradient are writes into it (accumulated, rule 6).
 3. fused adapter primitives take the adapter's I/O and flip meaning in
    backward adapters (PRIM_MEANING); identity adapters with in == out are
    dropped.
 4. Move/Broadcast halves become send/recv (or broadcast) nodes sharing a
    coll key (adapter cid, src, dst, ordinal).
 5. weight reducers become one all_reduce per weight on that rank's local
    grad (found through the backward op that produced it), group = the
    reducer's plan devices, span_replicas when dp > 1.
 6. implicit gradient accumulation becomes explicit: a persistent grad
    written more than once per iteration gets a zero_grad step
    (scale factor 0) and every write goes through `accumulate`; an mb-scope
    grad written twice in one microbatch gets `accumulate` for the later
    writes.  A non-grad tensor written again by a chunk is a redundant
    re-output (VERDICT's ChunkPrim patch): the node is dropped; a gradient
    written again by a chunk is another branch's contribution.
 7. multiref outputs are re-created per partition by nnScaler: their lineage
    is their input's on the same rank (chained through multirefs); the
    gradients of multiref outputs get no lineage.
 8. backward ops get the forward inputs (or output, for softmax) the
    registry's *_backward operator needs; a missing gradient output is a
    fresh unused tensor; multiref_backward drops never-produced gradients.
 9. lineage: full = full-tensor id, lo = IndexMap starts, part = ValueMap;
    a dim where the single tensor is dp*nm times larger is the batch
    (dp_shift = nm*b, mb_shift = b); loss pieces are partial sums over
    (replica, microbatch); final weight grads are claimed complete
    (part [0,1]) because reducers must have summed them; dataloader outputs
    are sharded along dim 0 even when the shapes agree (so a parallel plan
    reading another global batch is a BATCH mismatch).  No lineage (never a
    guess) when the ftid names another tensor in the single plan, for a
    per-microbatch gradient seen only by adapters/identities/accumulation,
    or for one completed later on its rank under another tensor id (see
    plan() and superseded_grads()).
11. GPT's fused self_attention / feedforward are written out as registry
    operators (fused.py).
10. an operator with no registry equivalent keeps its nnScaler name
    (`<name>_backward` for its backward) and all its attributes.
"""
import collections
import os
import re

from . import pickle_safe as ps
from . import fused


# One primitive of an adapter as the lowering sees it: on rank, in segment
# s, of adapter acid; pc its class name; name the plan node name; kw its
# keyword arguments; pin/pout its tensor inputs and outputs.
Prim = collections.namedtuple("Prim", "rank s acid pc name kw pin pout")


class ConvertError(Exception):
    """A plan whose structure the converter cannot map; str() is one line."""


SRC_RE = re.compile(r'File "([^"]*)", line (\d+)')


def source_of(n):
    """'gpt.py:84 torch.sum' from an nnScaler node's comment (the user's
    file and line) and signature; "" when it has neither."""
    m = SRC_RE.search(str(getattr(n, "_comment", "") or ""))
    sig = getattr(n, "signature", None)
    sig = sig if isinstance(sig, str) else ""
    where = "%s:%s" % (os.path.basename(m.group(1)), m.group(2)) if m else ""
    return (where + " " + sig).strip() if where else ""


def sname(o):
    """nnScaler class name of a stub (or the Python type name)."""
    return type(o)._stub_name if isinstance(o, ps.Stub) else type(o).__name__


def is_tensor(o):
    return isinstance(o, ps.Stub) and sname(o) == "IRSubTensor"


def need(cond, what):
    if not cond:
        raise ConvertError(what)


# Integers that size something are bounded where they are read (a degree
# verdict stores in int32, an id or an index in int64); bounds.py checks the
# finished plan against every rule of verdict's reader on integers.
INT32_MAX = (1 << 31) - 1
INT64 = (-(1 << 63), (1 << 63) - 1)

# The records a conversion may create (nodes, tensors, schedule steps) per
# byte of its pickle, plus a fixed allowance.  nnScaler stores every
# device's program, so a real plan costs 400 to 4,000 pickle bytes per record
# (the corpus); a pickle whose devices all share one memoized program would
# make the work (and memory, about 1 KB per record) grow with devices x
# cells from a file that grows with devices + cells.  Beyond the budget the
# pickle is refused: work and memory stay proportional to the file.
BYTES_PER_RECORD = 16
RECORD_SLACK = 100000


def as_int(x, what, lo=INT64[0], hi=INT64[1]):
    if isinstance(x, bool) or not isinstance(x, int):
        raise ConvertError("%s: expected an integer, got %s" % (what, type(x).__name__))
    if not lo <= x <= hi:
        shown = "a %d-bit integer" % x.bit_length() if abs(x) >= 1 << 64 else "%d" % x
        raise ConvertError("%s: expected an integer in [%d, %d], got %s" % (what, lo, hi, shown))
    return x


def int_list(x, what):
    need(isinstance(x, (list, tuple)), "%s: expected a list" % what)
    return [as_int(v, what) for v in x]


# ---------------------------------------------------------------------------
# Operator mapping.  nnScaler IRDimops.name -> (registry op, backward op).
# A None backward means "no backward node is emitted by nnScaler" or the same
# operator applied to the gradient (marked "same").
# ---------------------------------------------------------------------------
OP_MAP = {
    # torch.nn.functional.linear(x, w[, b]): y = x w^T (+ b), same semantics
    "linear": ("linear", "linear_backward"),
    # torch.matmul with >= 2-d operands: batched matrix product
    "matmul": ("matmul", "matmul_backward"),
    # torch.sum(x) / torch.sum(x, dim, keepdim): reduction; dims = all when absent
    "sum": ("sum", "sum_backward"),
    # torch.mean(x, dim, keepdim)
    "mean": ("mean", "mean_backward"),
    # torch.add(a, b, alpha=1) / torch.add(x, scalar): only alpha == 1 maps
    "add": ("add", "add_backward"),
    # torch.mul(a, b) / torch.mul(x, scalar)
    "mul": ("mul", "mul_backward"),
    # torch.div(x, scalar, rounding_mode=None): true division only
    "div": ("div", "div_backward"),
    # torch.pow(x, exponent) with a constant exponent
    "pow": ("pow", "pow_backward"),
    # torch.rsqrt: 1/sqrt(x)
    "rsqrt": ("rsqrt", "rsqrt_backward"),
    # torch.nn.functional.silu (inplace=False)
    "silu": ("silu", "silu_backward"),
    # torch.nn.functional.softmax(x, dim, dtype=None); backward needs the output
    "softmax": ("softmax", "softmax_backward"),
    # torch.transpose(x, dim0, dim1); backward: the same transpose of g
    "transpose": ("transpose", "same"),
    # torch.Tensor.view(size): row-major relabelling; backward: view g back
    "view": ("view", "same"),
    # torch.Tensor.contiguous: layout only
    "contiguous": ("contiguous", "same"),
    # torch.Tensor.float: dtype cast (values are reals)
    "float": ("cast", "same"),
    # nnscaler.runtime.function.to(x, dtype): dtype cast
    "to": ("cast", "same"),
    # nnscaler.runtime.function.identity
    "identity": ("identity", "same"),
    # nnscaler.runtime.function.multiref(x, times): n copies; backward sums
    "multiref": ("multiref", "multiref_backward"),
    # nnscaler.runtime.function.embedding(ids, table, padding_idx=None, start, stop):
    # vocab-parallel lookup, rows outside [start, stop) give 0 (registry: start attr)
    "embedding": ("embedding", "embedding_backward"),
    # nnscaler.runtime.function.layer_norm(x, w, b, normalized_shape=(h,), eps)
    "layernorm": ("layer_norm", "layer_norm_backward"),
}

# adapter primitive class -> (meaning in a forward adapter, in a backward adapter)
PRIM_MEANING = {
    "MovePrim": ("move", "move"),
    "BroadcastPrim": ("broadcast", "broadcast"),
    "ChunkPrim": ("chunk", "chunk"),
    "AllGatherPrim": ("all_gather", "all_gather"),
    "AllReducePrim": ("all_reduce", "all_reduce"),
    "AllToAllPrim": ("all_to_all", "all_to_all"),
    "IdentityPrim": ("identity", "identity"),
    "SplitAllGatherPrim": ("chunk", "all_gather"),
    "AllGatherSplitPrim": ("all_gather", "chunk"),
    "AllReduceIdentityPrim": ("all_reduce", "identity"),
    "IdentityAllreducePrim": ("identity", "all_reduce"),
    "AllToAllAllToAllPrim": ("all_to_all", "all_to_all"),
    "AllReduceAllReducePrim": ("all_reduce", "all_reduce"),
}
FUSED = {"SplitAllGatherPrim", "AllGatherSplitPrim", "AllReduceIdentityPrim", "IdentityAllreducePrim",
         "AllToAllAllToAllPrim", "AllReduceAllReducePrim"}

# Operators the converter emits for adapters, replication and accumulation:
# not "original" operators of the model (section 5 of nnscaler-format.md).
NON_ORIGINAL = {"send", "recv", "broadcast", "all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                "chunk", "identity", "multiref", "multiref_backward", "accumulate", "scale"}

DTYPES = {"float32": "f32", "float": "f32", "float16": "f16", "half": "f16", "bfloat16": "bf16",
          "float64": "f64", "double": "f64", "int64": "i64", "long": "i64", "int32": "i32", "int": "i32",
          "bool": "bool"}

LAYER_RE = re.compile(r"layers\.(\d+)\.")


def attr_value(v):
    """A kwarg as a plan attribute value, or None when it has no v1 encoding."""
    if isinstance(v, bool):
        return 1 if v else 0
    if isinstance(v, (int, float, str)):
        return v
    if isinstance(v, ps.TorchDType):
        return v.name
    if isinstance(v, (list, tuple)) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
        return list(v)
    return None


class World:
    def __init__(self, mg, path):
        need(isinstance(mg, ps.Stub) and sname(mg) == "ModuleCodeGen",
             "not an nnScaler ModuleCodeGen (top-level object: %s)" % (
                 "%s.%s" % (type(mg)._stub_module, sname(mg)) if isinstance(mg, ps.Stub) else type(mg).__name__))
        devs = getattr(mg, "devices", None)
        need(isinstance(devs, (list, tuple)) and devs, "ModuleCodeGen.devices: missing or empty")
        self.plan = len(devs)
        need(int_list(devs, "devices") == list(range(self.plan)), "devices: expected 0..n-1")
        # verdict stores replicas * stored ranks (= runtime_ndevs) in int32
        rt = as_int(getattr(mg, "runtime_ndevs", self.plan), "runtime_ndevs", 1, INT32_MAX)
        need(rt >= self.plan and rt % self.plan == 0, "runtime_ndevs %d is not a multiple of %d devices" % (rt, self.plan))
        self.dp = rt // self.plan
        ep = getattr(mg, "execplan", None)
        need(isinstance(ep, ps.Stub), "ModuleCodeGen.execplan: missing")
        self.ep = ep
        g = getattr(ep, "_graph", None)
        sched = getattr(g, "_sched", None) if g is not None else None
        if isinstance(sched, ps.Stub):
            self.nm = as_int(getattr(sched, "_num_microbatches", 1), "_num_microbatches", 1, INT32_MAX)
            fw = [n for n in getattr(g, "_nodes", []) if sname(n) == "IRSegment" and self._isfw(n)]
            self.pp = max(1, len(fw))
        else:
            self.nm, self.pp = 1, 1
        need(self.nm >= 1 and self.plan % self.pp == 0, "pipeline stages %d do not divide %d devices" % (self.pp, self.plan))
        self.tp = self.plan // self.pp

    @staticmethod
    def _isfw(seg):
        for n in getattr(seg, "_nodes", []):
            k = sname(n)
            if k == "IRDimops":
                return True
            if k == "IRBpOperation":
                return False
        return False


# Conv, the converter of one ModuleCodeGen, is four layers, each a class
# that adds one responsibility to the one before:
#   ConvState     tensors (keys, records), segments, raw nodes, collectives
#   Lowering      nnScaler's computation nodes -> registry operators
#   CommLowering  adapters (by primitive meaning) and reducers -> collectives
#   Conv          gradient accumulation, lineage annotations, the plan dict


class ConvState:
    """The plan being built: tensor keys and records, segments, raw nodes
    and collective instances of one ModuleCodeGen."""

    def __init__(self, mg, path, kind, single_info=None):
        self.path, self.kind = path, kind
        self.w = World(mg, path)
        if kind == "single":
            need(self.w.plan == 1 and self.w.dp == 1, "not a single-device plan (%d devices x dp %d)" % (self.w.plan, self.w.dp))
        self.single = single_info  # {ftid: (shape, name)} of the single plan
        self.tinfo = {}      # key -> tensor record (without id)
        self.tid = {}        # key -> plan tensor id
        self.next_tid = 1
        self.segments, self.segidx = [], {}
        self.raw = []        # raw nodes: dict(rank, seg, op, ...)
        self.schedule = {}
        self.ncoll, self.collkey = 0, {}
        self.wgrad = {}      # (rank, weight tid) -> grad key
        self.alias = {}      # (rank, multiref output tid) -> input sub-tensor
        self.cur_src = ""   # source line of the cell being written (source_of)
        self.mref_grads = set()  # ftids of gradients of multiref outputs (parallel plan)
        self.data_keys = set()
        self.dropped = 0
        self.round_trips = 0  # chunk(all_gather(k)) -> k writes dropped (round_trip)
        self.unmapped = {}
        self.gs = {}         # (rank, key) -> produced at least once (for multiref_backward)
        try:
            size = os.path.getsize(path)
        except (OSError, TypeError):
            size = 0
        self.budget = RECORD_SLACK + size // BYTES_PER_RECORD
        self.records = 0

    def grow(self, n=1):
        """Counts n new records against the budget (see BYTES_PER_RECORD)."""
        self.records += n
        if self.records > self.budget:
            raise ConvertError("the plan would hold more than %d nodes, tensors and schedule steps (one per %d "
                               "bytes of the pickle, plus %d): refused (work and memory stay proportional to "
                               "the file)" % (self.budget, BYTES_PER_RECORD, RECORD_SLACK))

    # ---------------- tensors ----------------
    def tkey(self, rank, t):
        ft = t._full_tensor
        # A weight's gradient is one buffer per rank (autograd accumulates
        # into param.grad): the value parts nnScaler gives the writers of a
        # tied weight's gradient (v0/2 from the LM head, v1/2 from the
        # embedding) are writes into that buffer, summed by `accumulate`.
        wgrad = bool(getattr(ft, "_is_attr", False)) and bool(getattr(ft, "_is_grad", False))
        ind = tuple(tuple(int_list(x, "indmap")) for x in t._indmap._indices)
        if self.kind == "single":
            full = list(ind) == [(0, s) for s in int_list(ft._shape, "shape")]
            if full and (wgrad or tuple(t._valmap._weight) == (0, 1)):
                key = ("f", as_int(ft._id, "ftid"))
            else:
                key = ("t", as_int(t._id, "tid"))
        elif wgrad:
            key = ("g", rank, as_int(ft._id, "ftid"), ind)
        else:
            key = ("t", rank, as_int(t._id, "tid"))
        if key not in self.tinfo:
            self.grow()
            self.tinfo[key] = self.describe(rank, t)
        return key

    def describe(self, rank, t):
        ft = t._full_tensor
        need(isinstance(ft, ps.Stub), "tensor t%s: no full tensor" % getattr(t, "_id", "?"))
        shape = int_list(t._shape, "tensor t%s shape" % t._id)
        if shape == []:
            shape = [1]
        dt = getattr(t, "_dtype", None)
        dname = dt.name if isinstance(dt, ps.TorchDType) else "float32"
        is_attr, is_grad = bool(getattr(ft, "_is_attr", False)), bool(getattr(ft, "_is_grad", False))
        if is_attr and not is_grad:
            role = "weight" if getattr(ft, "_requires_grad", False) else "input"
            scope = "persistent"
        elif is_attr and is_grad:
            role, scope = "grad", "persistent"
        elif is_grad:
            role, scope = "grad", "mb"
        elif getattr(ft, "_is_loss", False):
            role, scope = "loss", "mb"
        else:
            role, scope = "act", "mb"
        name = getattr(ft, "name", "") or ""
        rec = {"name": "%s.t%d" % (name, t._id) if self.kind == "parallel" else "%s.f%d" % (name, ft._id),
               "rank": rank, "shape": shape, "dtype": DTYPES.get(dname, "f32"), "role": role, "scope": scope}
        if dname not in DTYPES:
            rec["x_dtype"] = dname
        rec["_sub"] = t
        return rec

    def temp(self, rank, like_key, role=None, scope=None, name="tmp"):
        base = self.tinfo[like_key]
        key = ("x", self.next_tid)
        self.next_tid += 1
        self.grow()
        self.tinfo[key] = {"name": "%s.%s" % (base["name"], name), "rank": rank, "shape": list(base["shape"]),
                           "dtype": base["dtype"], "role": role or base["role"], "scope": scope or base["scope"]}
        return key

    # ---------------- nodes ----------------
    def seg(self, name):
        i = self.segidx.get(name)
        if i is None:
            i = self.segidx[name] = len(self.segments)
            self.segments.append(name)
        return i

    def node(self, rank, seg, op, name, phase, ins, outs, attrs=None, coll=None, layer=-1, grads=False):
        self.grow()
        n = {"rank": rank, "segment": seg, "op": op, "name": name, "phase": phase, "in": ins, "out": outs,
             "attrs": attrs or {}, "layer": layer}
        if self.cur_src:
            n["src"] = self.cur_src
        if coll is not None:
            n["_coll"] = coll
        self.raw.append(n)
        return n

    def coll(self, key, rank, group, span=False, order=None):
        c = self.collkey.get(key)
        if c is None:
            c = self.collkey[key] = {"id": self.ncoll, "members": {}, "group": list(group), "span": span}
            self.ncoll += 1
        c["members"][rank] = order
        return c

class Lowering(ConvState):
    """Walks every device's schedule and lowers nnScaler's forward and
    backward computation nodes to registry operators."""

    def run(self):
        seqs = getattr(self.w.ep, "_seq", None)
        need(isinstance(seqs, dict), "execplan._seq: missing")
        for dev in sorted(seqs):
            rank = as_int(dev, "device")
            need(0 <= rank < self.w.plan, "execplan._seq: device %d out of range" % rank)
            steps = self.schedule.setdefault(rank, [])
            occ, done = {}, set()
            for cell in seqs[dev]:
                real = cell._cell if sname(cell) == "ExeReuseCell" else cell
                k = sname(real)
                cid = as_int(real._id, "cell id")
                mb = occ.get(cid, 0)
                occ[cid] = mb + 1
                if k == "IRDataOperation":
                    for t in real._outputs:
                        if is_tensor(t):
                            self.data_keys.add(self.tkey(rank, t))
                    continue
                if k == "IRWeightReducer":
                    s = self.seg("reducer%d" % cid)
                    self.grow()
                    steps.append([s, -1])
                    if cid not in done:
                        done.add(cid)
                        self.reducer(rank, s, real)
                    continue
                need(mb < self.w.nm, "device %d: cell %d runs %d times, more than %d microbatches" % (rank, cid, mb + 1, self.w.nm))
                if k == "IRSegment":
                    fw = World._isfw(real)
                    s = self.seg(("fwd" if fw else "bwd") + ".seg%d" % cid)
                    if cid not in done:
                        done.add(cid)
                        for n in real._nodes:
                            self.cell(rank, s, n)
                elif k == "IRAdapter":
                    s = self.seg(("fwd" if getattr(real, "_forward", True) else "bwd") + ".adapter%d" % cid)
                    if cid not in done:
                        done.add(cid)
                        self.adapter(rank, s, real)
                else:
                    raise ConvertError("device %d: unexpected top-level cell %s" % (rank, k))
                self.grow()
                steps.append([s, mb])

    def cell(self, rank, s, n):
        k = sname(n)
        # nodes written for this cell carry the user's source line
        self.cur_src = source_of(n._mirror if k == "IRBpOperation" else n)
        if k == "IRAdapter":
            # communication nnScaler inserted: name the user's operator that
            # produced what it moves
            for t in n._inputs:
                if is_tensor(t):
                    cell = getattr(t._full_tensor, "_cell", None)
                    where = source_of(cell) if cell is not None else ""
                    self.cur_src = "after " + where if where else ""
                    break
        try:
            self.cell_body(rank, s, n, k)
        finally:
            self.cur_src = ""

    def cell_body(self, rank, s, n, k):
        if k == "IRDimops":
            self.fwop(rank, s, n)
        elif k == "IRBpOperation":
            self.bwop(rank, s, n)
        elif k == "IRAdapter":
            self.adapter(rank, s, n)
        elif k == "IRDataOperation":
            for t in n._outputs:
                if is_tensor(t):
                    self.data_keys.add(self.tkey(rank, t))
        else:
            raise ConvertError("device %d: unexpected node class %s" % (rank, k))

    def layer_of(self, n):
        for t in n._inputs:
            if is_tensor(t) and getattr(t._full_tensor, "_is_attr", False):
                m = LAYER_RE.search(getattr(t._full_tensor, "name", "") or "")
                if m:
                    # a layer number is informational; one beyond int32 is "none"
                    return int(m.group(1)) if len(m.group(1)) <= 9 else -1
        return -1

    def lower_fw(self, n):
        """-> (op, attrs, tensor inputs, ok) for a forward IRDimops."""
        name = str(n.name)
        kw = n._kwargs if isinstance(n._kwargs, dict) else {}
        tins = [x for x in n._inputs if is_tensor(x)]
        consts = [x for x in n._inputs if not is_tensor(x)]
        ent = OP_MAP.get(name)
        attrs = {}
        op = ent[0] if ent else None
        if op in ("add", "mul", "div"):
            if kw.get("alpha", 1) != 1 or kw.get("rounding_mode") is not None or len(consts) > 1 or \
                    any(not isinstance(c, (int, float)) or isinstance(c, bool) for c in consts):
                op = None
            elif consts:
                attrs["scalar"] = float(consts[0])
        elif op == "pow":
            if len(consts) != 1 or not isinstance(consts[0], (int, float)):
                op = None
            else:
                attrs["exponent"] = float(consts[0])
        elif op in ("sum", "mean"):
            nd = len(tins[0]._shape) if tins else 0
            d = kw.get("dim")
            dims = list(range(nd)) if d is None else ([d] if isinstance(d, int) else list(d))
            attrs["dims"] = [as_int(x, "dim") for x in dims]
            attrs["keepdim"] = 1 if kw.get("keepdim") else 0
        elif op == "softmax":
            if kw.get("dtype") is not None:
                op = None
            else:
                attrs["dim"] = as_int(kw.get("dim", -1), "dim")
        elif op == "transpose":
            attrs["dim0"], attrs["dim1"] = as_int(kw.get("dim0"), "dim0"), as_int(kw.get("dim1"), "dim1")
        elif op == "embedding":
            if kw.get("padding_idx") is not None:
                op = None
            else:
                attrs["start"] = as_int(kw.get("start", 0), "start")
        elif op == "layer_norm":
            ns = kw.get("normalized_shape")
            ns = [ns] if isinstance(ns, int) else list(ns or [])
            if len(tins) != 3 or len(ns) != 1 or ns[0] != tins[0]._shape[-1]:
                op = None
            else:
                attrs["eps"] = float(kw.get("eps", 1e-5))
        elif op == "linear":
            if len(tins) not in (2, 3):
                op = None
        elif op == "silu":
            if kw.get("inplace"):
                op = None
        if op is not None and consts and op not in ("add", "mul", "div", "pow"):
            op = None
        if op is None:  # own name, every representable kwarg kept
            op = name
            attrs = {}
            for k2, v in kw.items():
                a = attr_value(v)
                if a is not None and isinstance(k2, str) and k2:
                    attrs[k2] = a
            for i, c in enumerate(consts):
                a = attr_value(c)
                if a is not None:
                    attrs["const%d" % i] = a
            self.unmapped[name] = self.unmapped.get(name, 0) + 1
        return op, attrs, tins, op in OP_MAP.get(name, ("", ""))[:1]

    def fwop(self, rank, s, n):
        op, attrs, tins, mapped = self.lower_fw(n)
        ins = [self.tkey(rank, t) for t in tins]
        outs = [self.tkey(rank, t) for t in n._outputs if is_tensor(t)]
        if str(n.name) == "multiref" and self.kind == "parallel":
            for t in n._outputs:
                if is_tensor(t):
                    self.alias[(rank, as_int(t._id, "tid"))] = tins[0]
                    g = getattr(t._full_tensor, "_grad", None)
                    if isinstance(g, ps.Stub) and isinstance(getattr(g, "_id", None), int):
                        self.mref_grads.add(g._id)
        if fused.expand_fw(self, rank, s, n, attrs, ins, outs, self.layer_of(n)):
            return  # fused GPT block written out as registry operators (fused.py)
        self.node(rank, s, op, "%s#%d" % (n.name, n._id), "fwd", ins, outs, attrs, layer=self.layer_of(n))

    def bwop(self, rank, s, n):
        fw = n._mirror
        need(isinstance(fw, ps.Stub) and sname(fw) == "IRDimops", "backward %s: no forward mirror" % n._id)
        op, attrs, tins, mapped = self.lower_fw(fw)
        fwouts = [t for t in fw._outputs if is_tensor(t)]
        # align gradients by full-tensor id: grad of fw tensor x has ftid x.full.grad.id
        gin = [t for t in n._inputs if is_tensor(t)]
        gout = [t for t in n._outputs if is_tensor(t)]

        def gid(t):
            g = getattr(t._full_tensor, "_grad", None)
            return getattr(g, "_id", None)

        def align(fwts, grads):
            res, used = [], set()
            for x in fwts:
                hit = None
                for j, g in enumerate(grads):
                    if j not in used and gid(x) is not None and g._full_tensor._id == gid(x):
                        hit = j
                        break
                if hit is not None:
                    used.add(hit)
                    res.append(grads[hit])
                else:
                    res.append(None)
            need(len(used) == len(grads), "backward %s: cannot match its gradients to forward tensors" % n._id)
            return res

        g_of_out = align(fwouts, gin)
        g_of_in = align(tins, gout)
        layer = self.layer_of(fw)
        name = "BW.%s#%d" % (fw.name, fw._id)
        fwname = str(fw.name)
        bop = OP_MAP[fwname][1] if mapped else None

        def out_keys(positions):
            res = []
            for i in positions:
                g = g_of_in[i]
                if g is not None:
                    k = self.tkey(rank, g)
                    res.append(k)
                    if getattr(tins[i]._full_tensor, "_is_attr", False):
                        self.wgrad[(rank, as_int(tins[i]._id, "tid"))] = k
                else:
                    xk = self.tkey(rank, tins[i])
                    res.append(self.temp(rank, xk, role="grad", scope="mb", name="nograd"))
            return res

        gk = [self.tkey(rank, g) if g is not None else None for g in g_of_out]
        if bop == "same":
            need(gk[0] is not None and len(tins) == 1, "backward %s: unexpected arity" % n._id)
            self.node(rank, s, op, name, "bwd", [gk[0]], out_keys([0]), attrs, layer=layer, grads=True)
        elif bop == "multiref_backward":
            ins = [k for k in gk if k is not None]
            self.node(rank, s, bop, name, "bwd", ins, out_keys([0]), {}, layer=layer, grads=True)
            self.raw[-1]["_drop_unproduced"] = True
        elif bop is not None:
            need(len(gk) == 1 and gk[0] is not None, "backward %s: expected one output gradient" % n._id)
            xs = [self.tkey(rank, t) for t in tins]
            if bop in ("linear_backward", "matmul_backward", "mul_backward", "div_backward"):
                ins = (xs + [gk[0]]) if len(xs) == 2 or bop == "linear_backward" else [gk[0]]
            elif bop in ("pow_backward", "rsqrt_backward", "silu_backward"):
                ins = [xs[0], gk[0]]
            elif bop == "softmax_backward":
                ins = [self.tkey(rank, fwouts[0]), gk[0]]
            elif bop == "embedding_backward":
                ins = [xs[0], gk[0]]
            elif bop == "layer_norm_backward":
                ins = [xs[0], xs[1], gk[0]]
            else:  # sum, mean, add: only the gradient
                ins = [gk[0]]
            if bop == "embedding_backward":
                pos = [1]
            elif bop == "linear_backward" and len(xs) == 3:
                pos = [0, 1, 2]
            else:
                pos = list(range(len(tins)))
            if bop == "linear_backward" and len(xs) == 3:
                ins = xs[:2] + [gk[0]]
            self.node(rank, s, bop, name, "bwd", ins, out_keys(pos), attrs, layer=layer, grads=True)
        elif fused.expand_bw(self, rank, s, fw, name, attrs, [self.tkey(rank, t) for t in tins], gk, out_keys, layer):
            pass  # fused GPT block: recomputed forward + registry backward operators (fused.py)
        else:  # unknown operator: forward inputs, forward outputs, then output gradients
            ins = [self.tkey(rank, t) for t in tins] + [self.tkey(rank, t) for t in fwouts] + [k for k in gk if k is not None]
            pos = [i for i in range(len(tins)) if g_of_in[i] is not None]
            self.node(rank, s, op + "_backward", name, "bwd", ins, out_keys(pos), attrs, layer=layer, grads=True)

class CommLowering(Lowering):
    """Lowers adapters (one collective or move per primitive) and reducers
    (data-parallel gradient all-reduces)."""

    def adapter(self, rank, s, a):
        """Lowers one adapter: each primitive by its meaning (PRIM_MEANING)."""
        prims = getattr(a, "_prims", None) or []
        isfw = bool(getattr(a, "_forward", True))
        acid = as_int(a._id, "adapter id")
        ain = [t for t in a._inputs if is_tensor(t)]
        aout = [t for t in a._outputs if is_tensor(t)]
        counters = {}   # instance counters that keep collective keys distinct
        for p in prims:
            pc = sname(p)
            need(pc in PRIM_MEANING, "adapter %d: unknown primitive %s" % (acid, pc))
            meaning = PRIM_MEANING[pc][0 if isfw else 1]
            kw = p.kwargs if isinstance(getattr(p, "kwargs", None), dict) else {}
            if pc in FUSED:
                pin, pout = ain, aout
            else:
                pin = [t for t in p._inputs if is_tensor(t)]
                pout = [t for t in p._outputs if is_tensor(t)]
            name = "%s#%d" % (pc, acid)
            if pc == "IdentityAllreducePrim":
                # the entry of a tensor-parallel region (forward identity,
                # backward all-reduce): named like our generators' ".enter"
                # adapters so that bug class 5 finds its backward half
                name += ".enter"
            prim = Prim(rank, s, acid, pc, name, kw, pin, pout)
            if meaning == "identity":
                self.prim_identity(prim)
            elif meaning == "move":
                self.prim_move(prim, counters)
            elif meaning == "chunk":
                self.prim_chunk(prim)
            elif meaning == "broadcast":
                self.prim_broadcast(prim, counters)
            else:
                self.prim_collective(prim, meaning, counters)

    def prim_identity(self, p):
        if len(p.pin) == 1 and len(p.pout) == 1 and p.pin[0]._id == p.pout[0]._id:
            return
        need(len(p.pin) == 1 and len(p.pout) == 1, "adapter %d: identity arity" % p.acid)
        self.node(p.rank, p.s, "identity", p.name, "comm", [self.tkey(p.rank, p.pin[0])], [self.tkey(p.rank, p.pout[0])])

    def prim_move(self, p, counters):
        """One half of a point-to-point move: send on src, recv on dst."""
        rank, acid = p.rank, p.acid
        src, dst = as_int(p.kw.get("src"), "src"), as_int(p.kw.get("dst"), "dst")
        c = counters.get((src, dst), 0)
        counters[(src, dst)] = c + 1
        ckey = ("move", acid, src, dst, c)
        if src == dst:
            return
        if p.pin and not p.pout:
            need(rank == src, "adapter %d: send on rank %d but src %d" % (acid, rank, src))
            n = self.node(rank, p.s, "send", p.name, "comm", [self.tkey(rank, p.pin[0])], [])
        elif p.pout and not p.pin:
            need(rank == dst, "adapter %d: recv on rank %d but dst %d" % (acid, rank, dst))
            n = self.node(rank, p.s, "recv", p.name, "comm", [], [self.tkey(rank, p.pout[0])])
        else:
            raise ConvertError("adapter %d: move half with both inputs and outputs" % acid)
        n["_coll"] = self.coll(ckey, rank, [src, dst])

    def prim_chunk(self, p):
        """A local chunk: y is piece `index` of `chunks` of x along dim."""
        acid = p.acid
        need(len(p.pin) == 1 and len(p.pout) == 1, "adapter %d: chunk arity" % acid)
        dim = as_int(p.kw.get("dim"), "dim")
        x, y = p.pin[0], p.pout[0]
        nd = len(x._shape)
        need(-nd <= dim < nd, "adapter %d: chunk dim %d out of range" % (acid, dim))
        dim %= nd
        xs, ys = x._shape[dim], y._shape[dim]
        need(ys > 0 and xs % ys == 0, "adapter %d: chunk of %d into pieces of %d" % (acid, xs, ys))
        off = y._indmap._indices[dim][0] - x._indmap._indices[dim][0]
        need(off % ys == 0, "adapter %d: chunk offset %d not a multiple of %d" % (acid, off, ys))
        xk, yk = self.tkey(p.rank, x), self.tkey(p.rank, y)
        self.node(p.rank, p.s, "chunk", p.name, "comm", [xk], [yk],
                  {"dim": dim, "index": off // ys, "chunks": xs // ys})

    def coll_key(self, p, meaning, counters):
        ranks = int_list(p.kw.get("ranks", []), "ranks")
        c = counters.get(p.pc, 0)
        counters[p.pc] = c + 1
        return ranks, (meaning, p.acid, p.pc, c, tuple(sorted(ranks)))

    def prim_broadcast(self, p, counters):
        """Broadcast from src to ranks (src joins the group if absent)."""
        rank = p.rank
        need((len(p.pin) == 1 and len(p.pout) <= 1) or (not p.pin and len(p.pout) == 1),
             "adapter %d: %s arity" % (p.acid, p.pc))
        ranks, ckey = self.coll_key(p, "broadcast", counters)
        src = as_int(p.kw.get("src"), "src")
        group = ranks if src in ranks else [src] + ranks
        if rank == src:
            xk = self.tkey(rank, p.pin[0])
            yk = self.tkey(rank, p.pout[0]) if p.pout else self.temp(rank, xk, name="bcast")
            n = self.node(rank, p.s, "broadcast", p.name, "comm", [xk], [yk], {"root": group.index(src)})
        else:
            n = self.node(rank, p.s, "broadcast", p.name, "comm", [], [self.tkey(rank, p.pout[0])],
                          {"root": group.index(src)})
        n["_coll"] = self.coll(ckey, rank, group)

    def prim_collective(self, p, meaning, counters):
        """all_gather, all_to_all, all_reduce, reduce_scatter: one input, one
        output; the member's order in the group comes from its slice."""
        need(len(p.pin) == 1 and len(p.pout) == 1, "adapter %d: %s arity" % (p.acid, p.pc))
        ranks, ckey = self.coll_key(p, meaning, counters)
        x, y = p.pin[0], p.pout[0]
        xk, yk = self.tkey(p.rank, x), self.tkey(p.rank, y)
        attrs, order = {}, 0
        if meaning == "all_gather":
            dim = as_int(p.kw.get("dim"), "dim") % len(x._shape)
            attrs["dim"] = dim
            order = x._indmap._indices[dim][0]
        elif meaning == "all_to_all":
            nd = len(x._shape)
            sd = [d for d in range(nd) if y._shape[d] < x._shape[d]]
            cd = [d for d in range(nd) if y._shape[d] > x._shape[d]]
            need(len(sd) == 1 and len(cd) == 1,
                 "adapter %d: all_to_all shapes %s -> %s" % (p.acid, list(x._shape), list(y._shape)))
            attrs["split_dim"], attrs["concat_dim"] = sd[0], cd[0]
            order = x._indmap._indices[cd[0]][0]
        elif meaning == "all_reduce":
            order = ranks.index(p.rank) if p.rank in ranks else 0
        n = self.node(p.rank, p.s, meaning, p.name, "comm", [xk], [yk], attrs)
        n["_coll"] = self.coll(ckey, p.rank, sorted(ranks), order=order)

    def reducer(self, rank, s, r):
        dev = int_list(r._device, "reducer devices")
        need(rank in dev, "reducer %s: rank %d not in its devices" % (r._id, rank))
        for w in r._inputs:
            if not is_tensor(w):
                continue
            gk = self.wgrad.get((rank, as_int(w._id, "tid")))
            if gk is None:
                self.dropped += 1
                continue
            n = self.node(rank, s, "all_reduce", "reducer#%d.%s" % (r._id, getattr(w._full_tensor, "name", "")), "comm",
                          [gk], [gk], {}, layer=-1)
            n["_coll"] = self.coll(("red", r._id, w._id), rank, sorted(dev), span=self.w.dp > 1)
            n["_reducer"] = True

class Conv(CommLowering):
    """Builds one plan dict from one ModuleCodeGen: accumulation of
    gradients, lineage annotations and the output."""

    def finish(self):
        byseg = {}
        for i, n in enumerate(self.raw):
            byseg.setdefault((n["rank"], n["segment"]), []).append(i)
        drop = set()
        acc_of = {}      # node index -> set of output positions that accumulate
        zero = {}        # rank -> [persistent keys to zero]
        for rank, steps in self.schedule.items():
            pwrites, written = {}, set()
            last_w, wtime, nseq = {}, {}, {}   # key -> last writer; key -> its time; node -> time
            first_mb = [st for st in steps if st[1] in (0, -1)]
            for s, mb in steps:
                for i in byseg.get((rank, s), []):
                    for k in self.raw[i]["out"]:
                        if self.tinfo[k]["scope"] == "persistent" and not self.raw[i].get("_reducer"):
                            pwrites[k] = pwrites.get(k, 0) + 1
            for s, mb in first_mb:
                for i in byseg.get((rank, s), []):
                    n = self.raw[i]
                    if n.get("_drop_unproduced"):
                        n["in"] = [k for k in n["in"] if k in written or k in self.data_keys]
                        if not n["in"]:
                            drop.add(i)
                            continue
                    outs = n["out"]
                    if n.get("_reducer"):
                        continue
                    # a re-write that reads the tensor itself is an in-place update (broadcast root)
                    again = [j for j, k in enumerate(outs)
                             if self.tinfo[k]["scope"] == "mb" and k in written and k not in n["in"]]
                    if again and self.round_trip(rank, i, n, last_w, wtime, nseq):
                        # chunk(all_gather(k)) -> k on the piece k itself gave: k is rewritten
                        # with its own value, whether k is a gradient or not (rule 6).
                        drop.add(i)
                        self.dropped += 1
                        self.round_trips += 1
                        continue
                    if again:
                        if n["op"] == "chunk" and len(again) == len(outs) and \
                                all(self.tinfo[outs[j]]["role"] != "grad" for j in again):
                            # VERDICT's patch: a ChunkPrim re-outputting an existing activation is
                            # redundant.  A gradient written again is a second contribution (a fused
                            # backward adapter chunking another branch's gradient): accumulated below.
                            drop.add(i)
                            self.dropped += 1
                            continue
                        if any(self.tinfo[outs[j]]["role"] != "grad" for j in again):
                            raise ConvertError("rank %d: node %s writes non-gradient tensor %s twice in one microbatch"
                                               % (rank, n["name"], self.tinfo[outs[again[0]]]["name"]))
                        acc_of.setdefault(i, set()).update(again)
                    nseq[i] = len(nseq)
                    for k in outs:
                        written.add(k)
                        last_w[k], wtime[k] = i, nseq[i]
            for k, c in pwrites.items():
                if c > 1:
                    zero.setdefault(rank, []).append(k)
        zset = {(self.tinfo[k]["rank"], k) for ks in zero.values() for k in ks}
        # expand into final nodes
        nodes = []
        zseg = self.seg("zero_grad") if zero else None
        for rank, ks in sorted(zero.items()):
            for k in ks:
                nodes.append({"rank": rank, "segment": zseg, "op": "scale", "name": "zero_grad." + self.tinfo[k]["name"],
                              "phase": "opt", "in": [k], "out": [k], "attrs": {"factor": 0.0}, "layer": -1})
            self.schedule[rank].insert(0, [zseg, -1])
        for i, n in enumerate(self.raw):
            if i in drop:
                continue
            accs = acc_of.get(i, set())
            post = []
            outs = list(n["out"])
            for j, k in enumerate(outs):
                if n.get("_reducer"):
                    continue
                if j in accs or (n["rank"], k) in zset:
                    t = self.temp(n["rank"], k, scope="mb", name="part%d" % len(nodes))
                    outs[j] = t
                    post.append({"rank": n["rank"], "segment": n["segment"], "op": "accumulate",
                                 "name": "accumulate." + self.tinfo[k]["name"], "phase": "bwd", "in": [k, t],
                                 "out": [k], "attrs": {}, "layer": n["layer"]})
            n["out"] = outs
            nodes.append(n)
            nodes.extend(post)
        return nodes

    def round_trip(self, rank, i, n, last_w, wtime, nseq):
        """True when node i is a chunk that writes back into k exactly the piece
        k contributed to the all_gather it reads, k unchanged since: nnScaler's
        fused adapters do this (a forward that sends a chunk of an all-gather
        of x as x; its backward all-gathers x's gradient and chunks it back
        into the same gradient).  The write is then k := k, not a second
        contribution to sum.  Decided from the plan's own structure: the
        all_gather's input is the chunk's output tensor, same dim, as many
        chunks as members, and the chunk index is this rank's position in the
        gather order (the order convert writes the group in, see plan())."""
        if n["op"] != "chunk" or len(n["in"]) != 1 or len(n["out"]) != 1:
            return False
        k, x = n["out"][0], n["in"][0]
        p = last_w.get(x)
        if p is None:
            return False
        g = self.raw[p]
        if g["op"] != "all_gather" or g["rank"] != rank or g["in"] != [k] or wtime.get(k, -1) >= nseq[p]:
            return False
        if g["attrs"].get("dim") != n["attrs"].get("dim"):
            return False
        c = g.get("_coll")
        if c is None or set(c["members"]) != set(c["group"]) or any(v is None for v in c["members"].values()):
            return False
        order = sorted(c["group"], key=lambda r: (c["members"][r], r))
        return n["attrs"].get("chunks") == len(order) and n["attrs"].get("index") == order.index(rank)

    def lineage(self, key, rec):
        sub = rec.get("_sub")
        if sub is None or self.single is None:
            return None
        ft = sub._full_tensor
        fid = as_int(ft._id, "ftid")
        indices = [list(x) for x in sub._indmap._indices]
        k, num = (as_int(v, "valmap") for v in sub._valmap._weight)
        if fid in self.mref_grads:
            # SOUNDNESS: the gradient of one multiref output is one consumer's
            # contribution; its fresh ftid may coincide with a different Gs
            # tensor of the same name.  No lineage: multiref_backward sums it.
            return None
        src, hops = sub, 0
        while (rec["rank"], as_int(src._id, "tid")) in self.alias and hops < 64:
            # multiref output (per rank: each rank's copy has its own input),
            # possibly of another multiref's output: the input's lineage
            src, hops = self.alias[(rec["rank"], as_int(src._id, "tid"))], hops + 1
        if src is not sub:
            ft, fid = src._full_tensor, as_int(src._full_tensor._id, "ftid")
            base = [list(x) for x in src._indmap._indices]
            if [b - a for a, b in base] != [b - a for a, b in indices]:
                return None
            indices = base
        if self.single.get(fid, (None, None))[1] not in (None, getattr(ft, "name", None)):
            # SOUNDNESS: ftids are shared by Gs and Gp only for traced tensors;
            # tensors nnScaler re-creates per partition (multiref outputs and
            # their gradients) get fresh ids that may collide with an unrelated
            # Gs tensor.  A name mismatch means "no lineage", never a guess.
            return None
        sinfo = self.single.get(fid)
        if sinfo is None:
            return None
        sshape, _ = sinfo
        pfull = int_list(ft._shape, "shape") or [1]
        shape = rec["shape"]
        if len(indices) != len(shape):
            return None
        lo = [a for a, b in indices]
        if len(sshape) != len(pfull):
            return None
        diff = [d for d in range(len(pfull)) if sshape[d] != pfull[d]]
        scope = rec["scope"]
        if not diff and scope == "mb" and key in self.data_keys and self.w.dp * self.w.nm > 1 and pfull:
            # Each replica's dataloader reads its own samples and each
            # microbatch its own slice (dim 0, the batch): state that, so a
            # pair whose parallel plan reads dp*nm times the single batch
            # shows up as a batch mismatch instead of silently shared data.
            diff = [0]
        lin = {"full": fid}
        if any(lo):
            lin["lo"] = lo
        dp, nm = self.w.dp, self.w.nm
        if len(diff) == 1 and scope == "mb":
            d = diff[0]
            dsh = [0] * len(shape)
            msh = [0] * len(shape)
            dsh[d], msh[d] = nm * pfull[d], pfull[d]
            if dp > 1:
                lin["dp_shift"] = dsh
            if nm > 1:
                lin["mb_shift"] = msh
        elif diff:
            return None
        if rec["role"] == "grad" and scope == "persistent":
            return lin  # final weight gradient: complete after the reducers
        if getattr(ft, "_is_loss", False) and not getattr(ft, "_is_grad", False) and not diff and (dp > 1 or nm > 1):
            lin["part"] = [k, num * dp * nm]
            if dp > 1:
                lin["dp_part"] = num * nm
            if nm > 1:
                lin["mb_part"] = num
            return lin
        if num != 1:
            lin["part"] = [k, num]
        return lin

    def superseded_grads(self, nodes):
        """Per-microbatch gradients that a later write on the same rank
        completes: a gradient of one full tensor that is written (or
        accumulated) under another tensor id later in the rank's program,
        over an overlapping region, held only some consumers' contributions
        (e.g. the layer-norm branch of a residual, summed with the residual
        branch after an all-to-all changed its partitioning).  nnScaler's
        ValueMap calls both complete; only the last one is."""
        last = {}
        for i, n in enumerate(nodes):
            for k in n["out"]:
                if self.tinfo[k]["role"] == "grad" and self.tinfo[k]["scope"] == "mb" and "_sub" in self.tinfo[k]:
                    last[k] = i
        by = {}
        for k, i in last.items():
            sub = self.tinfo[k]["_sub"]
            region = [tuple(x) for x in sub._indmap._indices]
            by.setdefault((self.tinfo[k]["rank"], as_int(sub._full_tensor._id, "ftid")), []).append((i, k, region))
        out = set()
        for writes in by.values():
            for i, k, r in writes:
                for j, k2, r2 in writes:
                    if j > i and len(r) == len(r2) and all(a < d and c < b for (a, b), (c, d) in zip(r, r2)):
                        out.add(k)
        return out

    def plan(self, model):
        nodes = self.finish()
        used = {}
        for n in nodes:
            for k in n["in"] + n["out"]:
                used[k] = True
        tensors = []
        # A per-microbatch gradient seen only by adapters, identities,
        # multirefs or accumulation may hold a partial value on its rank (the
        # gradient of a pipeline-forwarded activation before it is sent back
        # and summed), which nnScaler's ValueMap does not record: such a
        # gradient gets a lineage only at the inputs and outputs of original
        # operators, where VERDICT's alignment claims it.  Forward tensors
        # (activations, the loss after its all-reduce) keep theirs.
        touched = set()
        for n in nodes:
            if n["op"] not in NON_ORIGINAL:
                touched.update(n["in"])
                touched.update(n["out"])
        superseded = self.superseded_grads(nodes)
        ids = {}
        nid = 1
        for k in used:
            rec = self.tinfo[k]
            if self.kind == "single" and k[0] == "f":
                ids[k] = k[1]
        taken = set(ids.values())
        for k in used:
            if k not in ids:
                while nid in taken:
                    nid += 1
                ids[k] = nid
                taken.add(nid)
        for k in used:
            rec = self.tinfo[k]
            t = {"id": ids[k], "name": rec["name"]}
            if rec["rank"]:
                t["rank"] = rec["rank"]
            t["shape"] = rec["shape"]
            if rec["dtype"] != "f32":
                t["dtype"] = rec["dtype"]
            role = rec["role"]
            if k in self.data_keys:
                role = "input"
            t["role"], t["scope"] = role, rec["scope"]
            if "x_dtype" in rec:
                t["x_dtype"] = rec["x_dtype"]
            if self.kind == "parallel" and k not in superseded and \
                    (k in touched or k in self.data_keys or rec["scope"] == "persistent" or rec["role"] != "grad"):
                lin = self.lineage(k, rec)
                if lin is not None:
                    t["lin"] = lin
            tensors.append(t)
        out_nodes = []
        for i, n in enumerate(nodes):
            o = {"id": i + 1, "op": n["op"], "name": n["name"]}
            if n.get("src"):
                o["src"] = n["src"]
            if n["rank"]:
                o["rank"] = n["rank"]
            o["segment"] = n["segment"]
            if n["layer"] != -1:
                o["layer"] = n["layer"]
            o["phase"] = n["phase"]
            if n["in"]:
                o["in"] = [ids[k] for k in n["in"]]
            if n["out"]:
                o["out"] = [ids[k] for k in n["out"]]
            if n["attrs"]:
                o["attrs"] = n["attrs"]
            c = n.get("_coll")
            if c is not None:
                o["coll"] = c["id"]
                grp = c["group"]
                if any(v is not None for v in c["members"].values()) and all(v is not None for v in c["members"].values()) \
                        and set(c["members"]) == set(grp):
                    grp = sorted(grp, key=lambda r: (c["members"][r], r))
                o["group"] = grp
                if c["span"]:
                    o["span_replicas"] = True
            out_nodes.append(o)
        w = self.w
        world = {"dp": w.dp, "tp": w.tp, "pp": w.pp, "nm": w.nm, "replicas": w.dp, "stored_ranks": w.plan,
                 "layout": "tp,pp,dp"}
        sched = [self.schedule.get(r, []) for r in range(w.plan)]
        p = {"format": "verdict-plan", "version": 1, "kind": self.kind, "model": model}
        if self.kind == "parallel":
            p["world"] = world
        p.update({"segments": self.segments, "schedule": sched, "tensors": tensors, "nodes": out_nodes,
                  "x_source": "nnscaler2plan",
                  # operators written under their nnScaler name (the registry
                  # knows the corpus ones by that name); expanded blocks are not
                  "x_nnscaler_named_ops": sorted(k for k in self.unmapped if k not in fused.FUSED_OPS)})
        return p


def single_info(mg, path):
    """{ftid: (shape, name)} of every full tensor reachable from the single plan's programs."""
    c = Conv(mg, path, "single")
    c.run()
    info = {}
    for key, rec in c.tinfo.items():
        sub = rec.get("_sub")
        # Only full tensors the single plan writes under their ftid: a
        # partial sub-tensor gets a fresh id, which a lineage must not name.
        if sub is not None and key[0] == "f":
            ft = sub._full_tensor
            info[as_int(ft._id, "ftid")] = (int_list(ft._shape, "shape") or [1], getattr(ft, "name", None))
    return c, info


def check_pair(pplan):
    """Parameters are traced tensors: in a pair of one model each parallel
    parameter shares its full tensor (id and name) with the single plan, so
    it gets a lineage.  When most do not, the pickles come from different
    models or configurations: say so instead of writing a plan whose
    verification would print thousands of structural problems."""
    weights = [t for t in pplan["tensors"] if t.get("role") == "weight"]
    lost = [t for t in weights if "lin" not in t]
    if weights and 2 * len(lost) > len(weights):
        raise ConvertError("the pickles do not belong together: %d of %d parameters of the parallel plan have "
                           "no counterpart (same full-tensor id and name) in the single-device plan, first '%s'; "
                           "check that both come from the same model" % (len(lost), len(weights), lost[0]["name"]))


def convert_pair(sm, smpath, pm, pmpath, model=""):
    cs, info = single_info(sm, smpath)
    sp = cs.plan(model)
    cp = Conv(pm, pmpath, "parallel", info)
    cp.run()
    pp = cp.plan(model)
    check_pair(pp)
    return sp, pp
