"""tools/torchcap/capture.py - records one rank's training step at the aten level.

What it implements: the `Capture` handle a user's `step(cap)` receives (boundary declarations,
mesh, the step context) and the recorder behind it.  Inside `with cap.step():` a
TorchDispatchMode sees every operator that runs (forward, autograd backward, optimizer, and in
PyTorch 2 every torch.distributed call, DDP's C++ reducer and the functional collectives of
DTensor and FSDP2 included), executes it for real, and appends registry operators to the rank's
trace through the mapping tables (aten_map.py, collectives.py).

Values.  Each torch tensor the step touches has a *cell* holding the id of the SSA value it
currently holds (a "pid") and the version of its storage when it was bound.  Every recorded
operator output is a fresh pid; an in-place operator, an `out=` kernel or a collective writes a
fresh pid into the target, through whatever view of a storage the target is.  memory.py keeps
what every storage holds, so a cell stays valid until a later write overlaps it, and a read of a
region written through other views (a gradient bucket, a flat parameter) is rebuilt from the
pieces.  Aliases (detach, alias) share a cell; copies (clone, contiguous) get their own cell with
the same pid.  Every tensor seen is kept alive until the end of the capture, so Python ids and
storages are never reused.

Nothing is dropped silently: an aten operator without a mapping, a tensor that was neither
declared nor produced in the step, a constant created inside the step and then used as data,
Python control flow on a data value (.item()), or an unsupported collective each raise
CaptureError naming the operator and the user's source line.  Optimizer step counters are the
one declared exception: they are host-side bookkeeping (their value only feeds Python floats
such as Adam's bias correction), recorded as constants of the step, never as data.
"""
import os
import sys
import threading
from contextlib import contextmanager

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

from .api import CaptureError, Partial, Placement, Replicate, Shard
from . import aten_map, collectives, dtensor, fsdp, megatron, optim, pipelining
from .memory import Memory, rebuild

_TORCH_DIR = os.path.dirname(torch.__file__)
_TOOL_DIR = os.path.dirname(os.path.abspath(__file__))

DTYPES = {torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16",
          torch.int64: "i64", torch.int32: "i32", torch.bool: "bool"}


STACK_FRAMES = 6   # frames of the user's code kept per node (plan `stack`)


_LAUNCHER = os.path.join(os.path.dirname(_TOOL_DIR), "torch2plan")   # calls the user's step(cap)


def _user_code(f):
    fn = f.f_code.co_filename
    return not (fn.startswith(_TORCH_DIR) or fn.startswith(_TOOL_DIR) or fn.startswith("<") or fn == _LAUNCHER)


def user_frame():
    """The innermost frame outside torch and this tool: the user's line."""
    f = sys._getframe(1)
    while f is not None:
        if _user_code(f):
            return f.f_code.co_filename, f.f_lineno
        f = f.f_back
    return "?", 0


def user_stack(limit=STACK_FRAMES):
    """The user's frames, innermost first, as "path:LINE in function" (plan `stack`): which
    layer and which call of the step led to the operator, beyond its own line.  An operator
    that a DTensor parallel style's hook runs (a redistribute of PrepareModuleOutput, the
    from_local of ColwiseParallel's input) ends with one more line: where the program applied
    that style (dtensor.style_site), since the user's line for it is not on the call stack."""
    out = []
    style = None
    f = sys._getframe(1)
    while f is not None and len(out) < limit:
        if _user_code(f):
            out.append("%s:%d in %s" % (_display_path(f.f_code.co_filename), f.f_lineno, f.f_code.co_name))
        elif style is None and not out:
            style = dtensor.style_site(f)
        f = f.f_back
    if style is not None:
        out.append(style)
    return out


def _display_path(fn):
    """The user's file as reports show it (plan `src`): relative to the working directory when
    it lies below it (a CI job's checkout: GitHub and SARIF place annotations by such paths),
    else absolute."""
    full = os.path.abspath(fn)
    rel = os.path.relpath(full)
    return full if rel == ".." or rel.startswith(".." + os.sep) else rel


class Cell:
    __slots__ = ("pid", "kind", "version", "tensor", "src", "rebuilt")

    def __init__(self, pid, kind, tensor, version, src=None):
        self.pid = pid          # SSA value id, None for empty / host / const cells
        self.kind = kind        # "data", "empty", "const", "host", "aux" (saved statistics), "ix" (rec.ix)
        self.tensor = tensor    # kept alive: ids (and storages) must not be reused
        self.version = version  # the storage's version when pid was bound (memory.py)
        self.src = src
        # pid is a concatenation of the pieces the storage held when it was read (read()), not a
        # value the step made: views of it are taken lazily, piece by piece (aten_map._lazy_view)
        self.rebuilt = False


class Recorder:
    def __init__(self, rank, world):
        self.rank = rank
        self.world = world
        self.cells = {}          # id(tensor) -> Cell
        self.memory = Memory()   # what each storage holds (views, buckets, flat buffers)
        self.values = {}         # pid -> {"shape": [...], "dtype": str}
        self.nodes = []
        self.next_pid = 1
        self.phase = "fwd"
        self.seen_backward = False
        self.coll_seq = {}       # group tuple -> calls so far
        self.p2p_seq = {}        # (src, dst) -> messages so far
        self.fwd_src = []        # (tensor, src) of forward outputs, for backward attribution
        self.pending_bwd = []    # node indices waiting for their autograd node's forward line
        self.bwd_caller = None
        self.active = False
        self.redop_hint = None   # the reduction of the torch.distributed call being made
        self.last_work = None    # the Work of the c10d call being recorded
        self.pending_snapshots = []  # (work, tensor, pid) of receives, copied once complete
        self.paths = {}          # "file.py:LINE" -> "path/to/file.py:LINE" (None: two files share the name)
        self.stack_at = {}       # "file.py:LINE" -> the user's call stack when that line last ran an operator
        self.dump = None         # pid -> float64 copy of its value (torch2plan --dump-*), or None
        self.quiet = False       # taking a snapshot: the dispatch mode records nothing
        self.allreduce_inputs = None  # the current c10d all_reduce's inputs, before it ran
        self.ix = {}             # id(tensor) -> vocab.Ix: ids and masks computed from the ids
        self.ln_eps = {}         # data_ptr of a layer norm's saved mean -> its eps (the backward's)
        self.aliases = []        # tensors sharing another's cell (share), kept alive
        self.view_root = {}      # pid of a view (row-major reshape) -> the value it reshapes
        self.const_data = None   # (tensor, cell, where) -> pid: a constant read as data (Capture)
        self.const_replay = None  # (args, kwargs): --replay, constants take the plan's values first

    # ---- values and cells ----------------------------------------------------------------
    def new_value(self, shape, dtype):
        pid = self.next_pid
        self.next_pid += 1
        self.values[pid] = {"shape": [int(s) for s in shape], "dtype": dtype}
        return pid

    def cell_of(self, t):
        return self.cells.get(id(t))

    def bind(self, t, pid, kind="data", alias=False):
        """t holds value pid.  A fresh tensor's storage now holds pid; a view's (alias) storage
        already holds it, through the base's writes."""
        if kind == "data" and pid is not None and not alias:
            version = self.memory.store(t, self.stored_value(t, pid), t.numel())
        else:
            version = self.memory.version(t)
        c = Cell(pid, kind, t, version)
        self.cells[id(t)] = c
        if pid is not None and kind == "data":
            self.snapshot(t, pid)
        return c

    def snapshot(self, t, pid):
        """--dump-*: keeps a float64 copy of the value pid names (the real run's value, at the
        moment the step produced it; later in-place writes make new pids)."""
        if self.dump is None or not isinstance(t, torch.Tensor):
            return
        if t.numel() != _numel(self.values.get(pid, {}).get("shape", [])):
            return
        self.quiet = True
        try:
            self.dump[pid] = t.detach().to(torch.float64).reshape(-1).clone()
        finally:
            self.quiet = False

    def share(self, src_t, dst_t):
        """dst_t (an alias) shares src_t's cell.  dst_t is kept alive as every celled tensor is:
        a freed alias's id would be reused by a new tensor, which would find the alias's cell."""
        self.cells[id(dst_t)] = self.cells[id(src_t)]
        self.aliases.append(dst_t)

    def write(self, t, pid, where):
        """An in-place write of value pid into tensor t (through whatever view t is)."""
        c = self.cells.get(id(t))
        if c is None:
            c = self.bind(t, pid)
        else:
            c.pid = pid
            c.kind = "data"
            c.rebuilt = False
            c.version = self.memory.store(t, self.stored_value(t, pid), t.numel())
            self.snapshot(t, pid)
        return c

    def stored_value(self, t, pid):
        """The value a contiguous write of pid leaves in memory: a reshape's source, which has the
        same elements in the same order, so that a buffer holds the values as they were made
        (FSDP2 flattens each shard into its all-gather buffer: the buffer holds the shards)."""
        if not (t.is_contiguous() or t.numel() <= 1):
            return pid
        return self.view_root.get(pid, pid)

    def read(self, t, where, what):
        """The pid a tensor holds, or CaptureError when it holds no recordable value."""
        c = self.cells.get(id(t))
        if c is not None and c.kind == "data" and self.memory.unchanged_since(t, c.version):
            return c.pid
        if c is None or c.kind in ("data", "empty"):
            try:
                pieces = self.memory.pieces(t)
            except CaptureError as e:
                raise CaptureError("%s: %s: %s" % (where, what, e))
            if pieces:
                pid = rebuild(self, t, pieces, DTYPES.get(t.dtype, "f32"), where)
                self.bind(t, pid, alias=True).rebuilt = len(pieces) > 1
                return pid
        if c is None:
            raise CaptureError("%s: %s reads a tensor of shape %s that was neither declared "
                               "(cap.param / cap.input / cap.optimizer) nor produced inside the step"
                               % (where, what, list(t.shape)))
        if c.kind == "data":
            raise CaptureError("%s: %s reads a view whose storage was partly written in place "
                               "through another view that is not tracked element by element"
                               % (where, what))
        if c.kind == "empty":
            raise CaptureError("%s: %s reads an uninitialised tensor (torch.empty) created at %s"
                               % (where, what, c.src))
        if c.kind == "aux":
            raise CaptureError("%s: %s reads the statistics a layer norm at %s saves for its backward "
                               "(only its backward may)" % (where, what, c.src))
        if c.kind == "ix":
            raise CaptureError("%s: %s reads %s (only Megatron's masked vocab-parallel lookup "
                               "may read it)" % (where, what, self.ix[id(t)].what()))
        if c.kind == "const" and self.const_data is not None and t.is_floating_point():
            return self.const_data(t, c, where)
        if c.kind == "const":
            raise CaptureError("%s: %s reads a constant tensor created inside the step at %s; "
                               "create it before the step and declare it with cap.input"
                               % (where, what, c.src))
        return c.pid

    def flush_snapshots(self, wait=False):
        """--dump-*: a receive's value, copied once its work has completed."""
        if self.dump is None:
            self.pending_snapshots = []
            return
        left = []
        for work, t, pid in self.pending_snapshots:
            w = dist.distributed_c10d.Work.unbox(work) if isinstance(work, torch.ScriptObject) else work
            if w is None or wait or w.is_completed():
                if w is not None and wait:
                    w.wait()
                self.snapshot(t, pid)
            else:
                left.append((work, t, pid))
        self.pending_snapshots = left

    # ---- nodes -------------------------------------------------------------------------------
    def src_here(self):
        fn, line = user_frame()
        short = "%s:%d" % (os.path.basename(fn), line)
        if fn != "?":
            full = "%s:%d" % (_display_path(fn), line)
            if self.paths.setdefault(short, full) != full:
                self.paths[short] = None
        return short, (fn, line)

    def stack_here(self):
        """The user's call stack here (plan `stack`)."""
        return user_stack()

    def emit(self, op, ins, outs, attrs=None, aten="", phase=None, coll=None, src=None, stack=None):
        if op == "view" and len(ins) == 1 and len(outs) == 1:
            self.view_root[outs[0]] = self.view_root.get(ins[0], ins[0])
        node = {"op": op, "in": list(ins), "out": list(outs), "attrs": dict(attrs or {}),
                "phase": phase or self.phase, "ctx": self.phase, "aten": aten, "coll": coll}
        if src is None:
            s, frame = self.src_here()
            if self.phase == "bwd" and coll is None and frame == self.bwd_caller:
                node["src"] = None
                self.pending_bwd.append(len(self.nodes))
            else:
                node["src"] = s
                node["stack"] = self.stack_at[s] = user_stack()
        else:
            node["src"] = src
            node["stack"] = stack if stack is not None else self.stack_at.get(src)
        self.nodes.append(node)
        return node

    def backward_node_done(self, src):
        # a backward operator is named by its forward operator's line, as frameworks name a
        # backward node after its forward node (the phase says which is which), and carries
        # the call stack of that line's last forward run (a line that several call paths reach
        # gets the last one's)
        for i in self.pending_bwd:
            self.nodes[i]["src"] = src
            self.nodes[i]["stack"] = self.stack_at.get(src)
        self.pending_bwd = []


class _Mode(TorchDispatchMode):
    def __init__(self, rec):
        super().__init__()
        self.rec = rec
        self.thread = threading.get_ident()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if threading.get_ident() != self.thread:
            # a collective's own kernels on the backend's worker thread (gloo carries the
            # dispatch mode over to it): they are the collective, recorded once as such
            return func(*args, **kwargs)
        if dtensor.is_dtensor_call(types):
            # DTensor's own dispatch runs next, with this mode active: it sees the local
            # operators and collectives each rank executes (dtensor.py)
            return NotImplemented
        if dtensor.is_fake_call(types):
            # DTensor's sharding propagation on fake tensors: shapes only, nothing runs
            return func(*args, **kwargs)
        if fsdp.is_fsdp(func):
            # FSDP2's operators are Python functions over aten: run again with this mode active,
            # so that their aten calls are recorded (fsdp.py)
            impl = fsdp.kernel(func)
            if impl is None:
                raise CaptureError("%s: FSDP operator %s is not supported by this capture "
                                   "(tools/torchcap/fsdp.py lists the ones it knows)" % (self.rec.src_here()[0], func))
            with self:
                return impl(*args, **kwargs)
        if not self.rec.quiet and str(func).startswith("c10d.allreduce_"):
            # the reduction of a call from C++ is learnt from its inputs (collectives.py), which
            # an in-place all_reduce overwrites, maybe before it returns: copied first
            self.rec.allreduce_inputs = [t.detach().clone() for t in args[0]]
        if self.rec.const_replay is not None and not self.rec.quiet:
            self.rec.const_replay(args, kwargs)
        out = func(*args, **kwargs)
        if not self.rec.quiet:
            aten_map.record(self.rec, func, args, kwargs, out)
        return out


def _dims(x):
    return [int(s) for s in x.shape]


def _flat_index(shape, lo):
    """The row-major index of element lo of a tensor of shape."""
    i = 0
    for n, x in zip(shape, lo):
        i = i * int(n) + int(x)
    return i


def _numel(shape):
    n = 1
    for s in shape:
        n *= int(s)
    return n


class Decl:
    def __init__(self, kind, name, tensor, pid, placements, mb_index, src, at=None):
        self.at = at            # a box's first element in the single tensor (declare_range), or None
        self.kind = kind
        self.name = name
        self.tensor = tensor
        self.pid = pid
        self.placements = placements
        self.mb_index = mb_index
        self.src = src
        self.const = None       # a constant made inside the step: its values (float64)

    def to_dict(self, final_pid):
        d = {"kind": self.kind, "name": self.name, "pid": self.pid, "final": final_pid,
             "placements": [(k, p.kind, getattr(p, "dim", None)) for k, p in self.placements],
             "mb_index": self.mb_index, "src": self.src, "at": self.at}
        if self.const is not None:
            d["const"] = self.const
        return d


class Capture:
    """The handle passed to the user's step(cap)."""

    def __init__(self, rank, world, args, parallel):
        self.rank = rank
        self.world = world
        self.args = dict(args)
        self.parallel = parallel
        self.rec = Recorder(rank, world)
        self.decls = []
        self.mesh_dims = []      # [(name, size)], fastest first
        self.nm = 1
        self.host_tensors = []   # host-side tensors (optimizer step counters)
        self.stepped = False
        self.replay = None       # {name: initial values} in --replay mode (verdict exec --dump)
        self.all_ranks = False   # ZeroRedundancyOptimizer, FSDP1: ranks run different programs (optim.py)
        self.ranges = {}         # id(tensor) -> (name, shape, start): holds a flat range (declare_range)
        self.const_seen = {}     # (id(tensor), version) -> pid of a constant read as data
        self.const_by_value = {}  # (shape, dtype, bytes) -> pid: equal constants are one input
        self.const_names = {}    # pid -> its declaration's name
        self.rec.const_data = self._constant_input
        if parallel:
            dtensor.install_style_sites()   # reports name where a parallel style was applied

    # ---- mesh ------------------------------------------------------------------------------
    def mesh(self, **dims):
        """Declares the device mesh: cap.mesh(tp=2, pp=2, dp=2, mb=2); first dim fastest."""
        self.mesh_dims = []
        total = 1
        for k, v in dims.items():
            if k == "mb":
                self.nm = int(v)
                continue
            self.mesh_dims.append((k, int(v)))
            total *= int(v)
        if total != self.world:
            raise CaptureError("cap.mesh(%s): the mesh has %d devices but the run has %d ranks"
                               % (dims, total, self.world))
        names = [k for k, _ in self.mesh_dims]
        if "dp" in names and names[-1] != "dp":
            raise CaptureError("cap.mesh: dp must be the last (slowest-varying) mesh dim")
        return self.coords()

    def coords(self, rank=None):
        r = self.rank if rank is None else rank
        out = {}
        for k, n in self.mesh_dims:
            out[k] = r % n
            r //= n
        return out

    def rank_of(self, **coords):
        r, stride = 0, 1
        for k, n in self.mesh_dims:
            r += coords.get(k, 0) * stride
            stride *= n
        return r

    def group(self, *dims):
        """The torch process group of this rank's peers along the named mesh dims."""
        mine = self.coords()
        cache = getattr(self, "_groups", None)
        if cache is None:
            cache = self._groups = {}
        key = tuple(dims)
        if key not in cache:
            # every rank must create every group in the same order (torch.distributed rule)
            result = None
            others = [k for k, _ in self.mesh_dims if k not in dims]
            sizes = dict(self.mesh_dims)
            import itertools
            fixed = list(itertools.product(*[range(sizes[k]) for k in others]))
            for f in fixed:
                base = dict(zip(others, f))
                ranks = []
                for v in itertools.product(*[range(sizes[k]) for k in dims]):
                    c = dict(base)
                    c.update(zip(dims, v))
                    ranks.append(self.rank_of(**c))
                g = dist.new_group(sorted(ranks))
                if all(base[k] == mine[k] for k in others):
                    result = g
            cache[key] = result
        return cache[key]

    # ---- declarations ------------------------------------------------------------------------
    def _placements(self, kw):
        pl = []
        names = [k for k, _ in self.mesh_dims] + ["mb"]
        for k, p in kw.items():
            if k not in names:
                raise CaptureError("placement over unknown mesh dim %r (mesh: %s)" % (k, names))
            if not isinstance(p, Placement):
                raise CaptureError("placement for %r must be Shard(d), Replicate() or Partial()" % k)
            pl.append((k, p))
        return pl

    def _declare(self, kind, t, name, mb_index, kw, at=None):
        if not isinstance(t, torch.Tensor):
            raise CaptureError("cap.%s(%r): expected a tensor" % (kind, name))
        if self.stepped and kind != "loss":
            raise CaptureError("cap.%s(%r): declare inputs before the step" % (kind, name))
        if not self.parallel and kw:
            raise CaptureError("cap.%s(%r): the single-device program takes no placements" % (kind, name))
        src = self.rec.src_here()[0]
        if kind == "loss":
            pid = self.rec.read(t, src, "cap.loss(%r)" % name)
        else:
            c = self.rec.cell_of(t)
            if c is not None:
                raise CaptureError("%s: cap.%s(%r): this tensor is already declared" % (src, kind, name))
            pid = self.rec.new_value(_dims(t), DTYPES.get(t.dtype, "f32"))
            self.rec.bind(t, pid)
            self._replay_init(t, name)
        d = Decl(kind, name, t, pid, self._placements(kw), mb_index, src, at)
        self.decls.append(d)
        return t

    def declare_range(self, kind, flat, name, shape, start, end, offset, holder=None):
        """Declares that elements [offset, offset + end - start) of the 1-D tensor flat hold
        elements [start, end) of the row-major single-device tensor `name` (of `shape`): each box
        of that range (fsdp.boxes) as a view of flat, whose lineage is that box.  holder (the
        tensor the program reads the range through: FSDP1's original parameter, a 1-D view) is
        remembered, so that optimizer state created for it is declared the same way."""
        if not self.parallel:
            raise CaptureError("cap: a flat range is declared by a parallel program only")
        for lo, ext in fsdp.boxes(shape, start, end):
            first = offset + _flat_index(shape, lo) - start
            n = _numel(ext)
            view = flat[first:first + n].view(list(ext) or [])
            self._declare(kind, view, name, -1, {}, at=list(lo))
        if holder is not None:
            self.ranges[id(holder)] = (name, [int(s) for s in shape], start)

    def _constant_input(self, t, c, where):
        """A floating-point constant made inside the step from no data (rotary cos/sin tables
        from torch.arange, an additive torch.triu(-inf) mask, torch.ones(n)) read as data: it
        becomes an input of the plan, declared for the user, named after the line that made it
        ("constant@model.py:47"), and holding its values, by which the assembler finds the
        single-device constant (or the slice of it) a parallel rank's constant is.  Verdict
        then treats it as an arbitrary input that both programs read, which proves more than
        the equivalence for its real values; constants of equal values are one input."""
        key = (id(t), t._version)
        pid = self.const_seen.get(key)
        if pid is not None:
            return pid
        rec = self.rec
        rec.quiet = True
        try:
            vals = t.detach().to(torch.float64).contiguous().clone()
        finally:
            rec.quiet = False
        vkey = (tuple(vals.shape), str(t.dtype), vals.numpy().tobytes())
        pid = self.const_by_value.get(vkey)
        if pid is None:
            pid = rec.new_value(_dims(t), DTYPES.get(t.dtype, "f32"))
            base = "constant@" + (c.src or where).replace(" ", "_")   # no blank: dumps split on them
            name, k = base, 1
            while name in self.const_names.values():
                k += 1
                name = "%s#%d" % (base, k)
            d = Decl("input", name, t, pid, [], 0, where)
            d.const = vals
            self.decls.append(d)
            self.const_by_value[vkey] = pid
            self.const_names[pid] = name
        self.const_seen[key] = pid
        return pid

    def _forget_constant(self, t, pid):
        """Undo _constant_input for a constant that turned out to be no plan input."""
        self.decls = [d for d in self.decls if d.pid != pid]
        self.const_by_value = {k: p for k, p in self.const_by_value.items() if p != pid}
        self.const_seen.pop((id(t), t._version), None)
        del self.const_names[pid]

    def _constant_replay(self, args, kwargs):
        """--replay: a constant that the operator about to run reads as data takes the value the
        executor gave its plan input, before the operator runs (the plan treats it as an input)."""
        rec = self.rec
        ts = aten_map._flat_tensors(list(args) + list(kwargs.values()), [])
        cells = [rec.cell_of(t) for t in ts]
        if all(c is not None and c.kind == "const" for c in cells):
            return   # a constant computed from constants: no data read
        for t, c in zip(ts, cells):
            if c is None or c.kind != "const" or not t.is_floating_point() or (id(t), t._version) in self.const_seen:
                continue
            if t.numel() <= 1:
                continue   # a one-element constant is a scalar operand to the handlers (nll's total_weight)
            pid = self._constant_input(t, c, rec.src_here()[0])
            v = self.replay.get(self.const_names[pid])
            if v is None:
                # the capture folded this constant into the operator that reads it (the zeros
                # that gather's backward scatters into): no input of the plan, keep its values
                self._forget_constant(t, pid)
                continue
            rec.quiet = True
            try:
                with torch.no_grad():
                    t.copy_(torch.tensor(v, dtype=torch.float64).view(t.shape).to(t.dtype))
                    vals = t.detach().to(torch.float64).contiguous()
            finally:
                rec.quiet = False
            self.const_seen[(id(t), t._version)] = pid
            # a copy of it made later (a .to(), a broadcast) holds these values: the same input
            self.const_by_value[(tuple(vals.shape), str(t.dtype), vals.numpy().tobytes())] = pid

    def _replay_init(self, t, name):
        """--replay: the tensor starts from the value verdict's executor gave it."""
        if self.replay is None:
            return
        v = self.replay.get(name)
        if v is None:
            raise CaptureError("replay: the plan's values hold no initial value of %r" % name)
        with torch.no_grad():
            t.copy_(torch.tensor(v, dtype=torch.float64).view(t.shape).to(t.dtype))

    def param(self, t, name, **placements):
        """Declares one parameter: what a framework states about it (a DTensor's placements,
        Megatron-Core's tp mark) and the caller's placements, which win for Megatron's."""
        if dtensor.is_dtensor(t):
            at = dtensor.local_box(t, name)
            if at is not None:
                return self._declare("param", dtensor.local_of(t), name, -1, {}, at=at)
            pl = dict(placements)
            pl.update(dtensor.declared_placements(self, t, name))
            return self._declare("param", dtensor.local_of(t), name, -1, pl)
        return self._declare("param", t, name, -1, {**megatron.placements(t, name, self.mesh_dims), **placements})

    def input(self, t, name, mb_index=0, **placements):
        return self._declare("input", t, name, mb_index, placements)

    def loss(self, t, name="loss", mb_index=0, **placements):
        return self._declare("loss", t, name, mb_index, placements)

    def params(self, module, prefix="", **placements):
        """Declares every parameter of a module under its own (prefixed) name (with the placement
        Megatron-Core's layers state, tools/torchcap/megatron.py), and its buffers (a causal
        mask, position ids, a rotary or position table) as constants whose values the capture
        reads (a floating-point one read as data becomes an input of the plan, named
        "constant@buffer_NAME"): the module states all of them, so the user need not.  A buffer
        already declared (cap.input) is left."""
        managed = fsdp.declare_flat_parameters(self, module, prefix) if self.parallel else None
        clean = fsdp.clean_name if managed is not None else (lambda n: n)
        for n, p in module.named_parameters():
            if managed is not None and id(p) in managed:
                continue    # declared box by box from FSDP1's flat parameter
            n = clean(n)
            if dtensor.is_dtensor(p):
                # a DTensor parameter states its placements: its local tensor is declared
                self.param(p, prefix + n, **placements)
                continue
            self.param(p, prefix + n, **placements)
        for n, b in module.named_buffers():
            n = clean(n)
            if self.rec.cell_of(b) is not None:
                continue
            # a buffer (a causal mask, boolean or float as nanoGPT's tril of ones, positions, a
            # rotary table) is a constant of the model whose values the capture reads: a mask
            # is recognised by its values, and a floating-point one read as data becomes an
            # input matched to the single-device constant by its values (_constant_input)
            self.rec.bind(b, None, "const").src = "buffer " + prefix + n

    def optimizer(self, opt, step=1, seed=0):
        """Declares the optimizer's state (torch.optim.SGD with or without momentum, Adam, AdamW,
        ZeroRedundancyOptimizer over them): tools/torchcap/optim.py.  The state is created here
        with nonzero values (a steady-state step), named after its parameter plus ".momentum",
        ".exp_avg" or ".exp_avg_sq", with the parameter's placements; step counters are host
        state."""
        optim.declare(self, opt, step)

    # ---- the step ----------------------------------------------------------------------------
    @contextmanager
    def step(self):
        if self.stepped:
            raise CaptureError("cap.step() may run once")
        self.stepped = True
        rec = self.rec
        patches = collectives.hint_wrappers(rec) + pipelining.setup_wrappers(rec) if self.parallel else []
        patches += optim.clip_wrappers(rec) + (fsdp.clip_wrappers(rec) if self.parallel else [])
        real_backward = torch.autograd.backward

        def backward(tensors, grad_tensors=None, *a, **k):
            rec.phase = "bwd"
            rec.seen_backward = True
            _, rec.bwd_caller = rec.src_here()
            hooks = _hook_graph(rec, tensors)
            try:
                return real_backward(tensors, grad_tensors, *a, **k)
            finally:
                for h in hooks:
                    h.remove()
                rec.backward_node_done(rec.src_here()[0])
                rec.phase = "bwd"
                rec.bwd_caller = None
        torch.autograd.backward = backward
        for t in self.host_tensors:
            rec.bind(t, None, "host")
        if self.replay is not None:
            rec.const_replay = self._constant_replay
        rec.active = True
        try:
            with _Mode(rec):
                yield self
        finally:
            rec.active = False
            rec.flush_snapshots(wait=True)
            torch.autograd.backward = real_backward
            for mod, name, fn in patches:
                setattr(mod, name, fn)

    # ---- result ------------------------------------------------------------------------------
    def trace(self):
        """The rank's trace: values, nodes and declarations, final versions resolved."""
        rec = self.rec
        decls = []
        for d in self.decls:
            final = None
            if d.kind in ("param", "optstate"):
                c = rec.cell_of(d.tensor)
                final = c.pid if c is not None else d.pid
                if c is not None and not rec.memory.unchanged_since(d.tensor, c.version):
                    # written through another tensor of its storage (ZeRO's broadcast into
                    # param.data): the value the storage holds at the end
                    final = rec.read(d.tensor, d.src, "the final value of %r" % d.name)
            decls.append(d.to_dict(final))
        mesh = self.mesh_dims
        if self.all_ranks:
            # ranks that run different programs are not DP replicas: dp is a plain dim
            mesh = [("zero" if k == "dp" else k, n) for k, n in mesh]
            for x in decls:
                x["placements"] = [("zero" if k == "dp" else k, p, dim) for k, p, dim in x["placements"]]
        return {"rank": self.rank, "world": self.world, "mesh": mesh, "nm": self.nm,
                "values": rec.values, "nodes": rec.nodes, "decls": decls, "paths": rec.paths}


def _hook_graph(rec, tensors):
    """Post-hooks on every autograd node reachable from the roots: the recorder attributes the
    aten operators run since the previous hook to the node whose hook fires next."""
    if isinstance(tensors, torch.Tensor):
        tensors = [tensors]
    line_of = {}
    for t, src in rec.fwd_src:
        fn = t.grad_fn
        if fn is not None:
            line_of[fn] = src
    hooks = []
    seen = set()
    stack = [t.grad_fn for t in tensors if t.grad_fn is not None]
    while stack:
        fn = stack.pop()
        if fn in seen:
            continue
        seen.add(fn)
        src = line_of.get(fn)

        def hook(gi, go, src=src):
            if src is not None:
                rec.backward_node_done(src)
        try:
            hooks.append(fn.register_hook(hook))
        except Exception:
            pass
        for nxt, _ in fn.next_functions:
            if nxt is not None:
                stack.append(nxt)
    return hooks
