"""tools/nnscaler/pickle_safe.py - load a pickle WITHOUT executing anything from it.

Why: nnScaler plans are dill pickles of ModuleCodeGen objects.  Loading them
with pickle.load would import torch/nnscaler/dill and run whatever callables
the file names (REDUCE), which is arbitrary code execution for a hostile file.

How: SafeUnpickler.find_class never imports.  It returns
  - a real object only for a short allow-list of inert containers
    (list/dict/set/tuple/OrderedDict/slice, ...);
  - decoders for numpy scalars (ints/floats as Python numbers, via struct)
    and numpy dtypes;
  - otherwise a cached *stub class* per (module, qualname).  Instantiating a
    stub (NEWOBJ, REDUCE, a call) only records the arguments; BUILD stores the
    state in __dict__.  Calling a stub instance also only records.  So a
    GLOBAL 'os system' + REDUCE yields a Stub('posix.system') object holding
    its argument; nothing runs.
Limits: a file-size cap; memory bounded by the file size while unpickling
(see _memory_cap); nesting at most MAX_DEPTH deep (SafeUnpickler is Python's
pure-Python unpickler, so nothing of its own recurses in C, and it counts
every container's depth as it is built); at most MAX_EQUAL_HASHES keys of one
hash per dict or set; BUILD only on instances; nothing may follow the STOP
opcode; every failure becomes PickleError(file, what).
"""
import io
import pickle
import resource
import struct

MAX_FILE_BYTES = 512 << 20
# Unpickling a real plan takes about 12 bytes of memory per pickle byte.  A
# hostile pickle can ask for much more from a few bytes: LONG_BINPUT with
# index 2^27 makes the C unpickler size its memo array to 2^28 slots (2 GB
# from a 10-byte file).  So the address space grows by at most this many
# bytes per file byte, plus a fixed allowance, while the pickle is read.
MEMORY_PER_BYTE = 64
MEMORY_SLACK = 128 << 20


def _vm_bytes():
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[0]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return None


def _memory_cap(size):
    """Lowers RLIMIT_AS to what `size` bytes of pickle may need; returns the
    limits to restore, or None when nothing was changed."""
    now = _vm_bytes()
    if now is None:
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = now + MEMORY_PER_BYTE * size + MEMORY_SLACK
    if soft != resource.RLIM_INFINITY and soft <= cap:
        return None
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    try:
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    except (ValueError, OSError):
        return None
    return (soft, hard)


class PickleError(Exception):
    """A pickle that cannot be loaded safely; str() is a one-line reason."""


class Stub:
    """Base of every stub class; instances keep their fields in __dict__."""
    _stub_module = "?"
    _stub_name = "?"

    def __new__(cls, *args, **kwargs):
        self = object.__new__(cls)
        object.__setattr__(self, "_stub_args", args)
        if kwargs:
            object.__setattr__(self, "_stub_kwargs", kwargs)
        return self

    def __init__(self, *args, **kwargs):
        pass

    def __setstate__(self, state):
        slots = None
        if isinstance(state, tuple) and len(state) == 2 and (state[0] is None or isinstance(state[0], dict)) \
                and (state[1] is None or isinstance(state[1], dict)):
            state, slots = state
        if isinstance(state, dict):
            for k, v in state.items():
                if isinstance(k, str):
                    self.__dict__[k] = v
        elif state is not None:
            self.__dict__["_stub_state"] = state
        if slots:
            for k, v in slots.items():
                if isinstance(k, str):
                    self.__dict__[k] = v

    def __call__(self, *args, **kwargs):
        return StubCall(self, args, kwargs)

    # hash/eq by identity (the default); containers keyed by stubs stay valid
    def __reduce__(self):  # never re-pickle a stub
        raise TypeError("stub objects cannot be pickled")

    def __repr__(self):
        return "<stub %s.%s>" % (type(self)._stub_module, type(self)._stub_name)

    # list.append / dict.__setitem__ style BUILD fallbacks (APPENDS on a stub)
    def append(self, item):
        self.__dict__.setdefault("_stub_items", []).append(item)

    def extend(self, items):
        self.__dict__.setdefault("_stub_items", []).extend(items)

    def __setitem__(self, k, v):
        self.__dict__.setdefault("_stub_setitems", []).append((k, v))


class StubCall(Stub):
    """The recorded result of calling a stub instance (never executed)."""
    _stub_module = "<call>"
    _stub_name = "call"

    def __new__(cls, fn=None, args=(), kwargs=None):
        self = object.__new__(cls)
        self.__dict__.update(fn=fn, args=args, kwargs=kwargs or {})
        return self


class NumpyDType:
    """numpy.dtype('i8') etc.: only its type string matters."""

    def __init__(self, code="", *rest):
        self.code = code if isinstance(code, str) else "?"
        self.order = "<"

    def __setstate__(self, state):
        if isinstance(state, tuple) and len(state) > 1 and state[1] in ("<", ">", "|", "="):
            self.order = "<" if state[1] in ("|", "=") else state[1]


_NP_FMT = {"i8": "q", "i4": "i", "i2": "h", "i1": "b", "u8": "Q", "u4": "I", "u2": "H", "u1": "B",
           "f8": "d", "f4": "f", "b1": "?"}


def numpy_scalar(dtype, data=None, *rest):
    """numpy.core.multiarray.scalar(dtype, bytes) -> Python int/float/bool."""
    if not isinstance(dtype, NumpyDType) or not isinstance(data, (bytes, bytearray)):
        raise PickleError("numpy scalar with unexpected arguments")
    fmt = _NP_FMT.get(dtype.code)
    if fmt is None or struct.calcsize(fmt) != len(data):
        raise PickleError("numpy scalar of unsupported dtype %r" % dtype.code)
    return struct.unpack(dtype.order + fmt, bytes(data))[0]


class TorchDType:
    """torch.float32 and friends; a singleton per name."""
    _cache = {}

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return "torch." + self.name


def _ordered_dict(*args):
    from collections import OrderedDict
    if args:
        if len(args) != 1 or not isinstance(args[0], (list, tuple)):
            raise PickleError("OrderedDict with unexpected arguments")
        pairs = _pairs(args[0])
        _check_keys([k for k, _ in pairs])
        return OrderedDict(pairs)
    return OrderedDict()


def _pairs(items):
    out = []
    for it in items:
        if not isinstance(it, (list, tuple)) or len(it) != 2:
            raise PickleError("mapping item is not a pair")
        out.append((it[0], it[1]))
    return out


def _reconstructor(cls, base, state=None):
    # copyreg._reconstructor(cls, object, None): a plain new instance
    if isinstance(cls, type) and issubclass(cls, Stub):
        return cls.__new__(cls)
    if cls in (dict, list, set):
        return cls()
    raise PickleError("copyreg._reconstructor of a non-stub class")


def _newobj(cls, *args):
    if isinstance(cls, type) and issubclass(cls, Stub):
        return cls.__new__(cls, *args)
    raise PickleError("copyreg.__newobj__ of a non-stub class")


def _safe_set(*args):
    if len(args) > 1:
        raise PickleError("set() with more than one argument")
    return set(_check_keys(list(args[0]))) if args else set()


def _safe_dict(*args, **kwargs):
    # dict(), dict(mapping), dict(pairs), dict(**kw): a mapping's keys were
    # counted when it was filled; pairs are counted here
    if len(args) > 1:
        raise PickleError("dict() with more than one argument")
    if args and not isinstance(args[0], dict):
        pairs = _pairs(args[0])
        _check_keys([k for k, _ in pairs])
        return dict(pairs, **kwargs)
    return dict(*args, **kwargs)


def _safe_frozenset(*args):
    if len(args) > 1:
        raise PickleError("frozenset() with more than one argument")
    return frozenset(_check_keys(list(args[0]))) if args else frozenset()


def _safe_slice(*args):
    # ints and None only: a slice is hashable from Python 3.12 on, and a
    # slice of slices would be a nesting the depth count does not see
    if len(args) > 3 or not all(a is None or (isinstance(a, int) and not isinstance(a, bool)) for a in args):
        raise PickleError("slice() with unexpected arguments")
    return slice(*args)


def _safe_complex(*args):
    if len(args) > 2 or not all(isinstance(a, (int, float)) for a in args):
        raise PickleError("complex() with unexpected arguments")
    return complex(*args)


def _safe_bytearray(*args):
    if len(args) > 1 or (args and not isinstance(args[0], (bytes, str, list))):
        raise PickleError("bytearray() with unexpected arguments")
    if args and isinstance(args[0], str):
        return bytearray(args[0], "latin-1")
    return bytearray(args[0]) if args else bytearray()


# Real callables allowed; each validates its arguments and only builds data.
_ALLOWED = {
    ("collections", "OrderedDict"): _ordered_dict,
    ("builtins", "set"): _safe_set,
    ("builtins", "frozenset"): _safe_frozenset,
    ("builtins", "slice"): _safe_slice,
    ("builtins", "complex"): _safe_complex,
    ("builtins", "bytearray"): _safe_bytearray,
    ("__builtin__", "set"): _safe_set,
    ("copyreg", "_reconstructor"): _reconstructor,
    ("copy_reg", "_reconstructor"): _reconstructor,
    ("copyreg", "__newobj__"): _newobj,
    ("builtins", "object"): object,
    ("builtins", "list"): list,
    ("builtins", "dict"): _safe_dict,
    ("builtins", "tuple"): tuple,
    ("numpy", "dtype"): NumpyDType,
    ("numpy.core.multiarray", "scalar"): numpy_scalar,
    ("numpy._core.multiarray", "scalar"): numpy_scalar,
}

_TORCH_DTYPES = {"float32", "float16", "bfloat16", "float64", "int64", "int32", "int16", "int8",
                 "uint8", "bool", "complex64", "complex128", "float", "half", "double", "long", "int"}


# The deepest nesting of containers an accepted pickle may build (a tuple in
# a tuple ..., a stub whose state holds a list of stubs ...).  Why: hashing a
# tuple recurses in C without any check, so a 150 KB pickle of a tuple nested
# 150,000 deep used as a dict key crashed the importer (SIGSEGV, issue 29
# item 7).  The 103 pickles of the corpus nest at most 140 deep as counted
# here (a pickler recurses once per level and stops near Python's recursion
# limit of 1000); 1000 bounds the C stack a hash or a comparison may use to
# well under 1 MB.
MAX_DEPTH = 1000

_ATOMS = frozenset((int, float, str, bytes, bool, type(None), complex))

# Keys whose hash does not depend on the process's hash seed (str and bytes
# are randomized; stubs hash by identity): a file can make many of them hash
# alike (k * (2^61 - 1) for every k; -1 and -2), and a dict or set filled with
# n such keys takes time quadratic in n (20,000 of them in a 259 KB pickle took
# 11 s, issue 29's sibling of the deep key).  More than MAX_EQUAL_HASHES keys
# of one hash in one dict or set are refused before they are inserted.
_FIXED_HASH = frozenset((int, float, complex, bool, tuple, frozenset))
MAX_EQUAL_HASHES = 32


def _count_hashes(counts, owner, keys):
    """Counts the fixed-hash keys about to go into the container `owner` (an id)."""
    for k in keys:
        if type(k) in _FIXED_HASH:
            try:
                h = hash(k)
            except TypeError:  # unhashable (a list in a tuple): the insert itself refuses it
                continue
            c = counts.get((owner, h), 0) + 1
            counts[(owner, h)] = c
            if c > MAX_EQUAL_HASHES:
                raise PickleError("more than %d keys with one hash in a dict or set: refused (filling it would "
                                  "take time quadratic in their number)" % MAX_EQUAL_HASHES)


def _check_keys(keys):
    """The keys of one dict or set built by an allowed callable (set(), OrderedDict(), ...)."""
    _count_hashes({}, 0, keys)
    return keys


def _is_code_object(x):
    """Classes and functions (ours or stubs'): never the target of BUILD."""
    return isinstance(x, type) or callable(x) and not isinstance(x, Stub)


class SafeUnpickler(pickle._Unpickler):
    """Python's own unpickler (pickle._Unpickler, pure Python: no C recursion
    of its own) with find_class made inert and every container's nesting
    depth tracked as it is built (bottom-up, as the pickler writes: exact for
    tuples, which are immutable; a mutable container filled after it was
    placed elsewhere is counted where it is filled).  Deeper than MAX_DEPTH
    is refused before any deeper object exists."""

    def __init__(self, f):
        super().__init__(f)
        self._stubs = {}
        self._dtypes = {}
        # id -> (depth, object) of containers deeper than 1; holding the
        # object keeps its id from being reused by another.
        self._depth = {}
        self.max_seen = 1
        # (id of a dict or set, hash) -> fixed-hash keys inserted; _keep holds
        # those containers so that their ids stay theirs
        self._hashes = {}
        self._keep = {}

    def find_class(self, module, name):
        if not isinstance(module, str) or not isinstance(name, str) or len(module) > 512 or len(name) > 512:
            raise PickleError("bad global name")
        key = (module, name)
        fn = _ALLOWED.get(key)
        if fn is not None:
            return fn
        if module == "torch" and name in _TORCH_DTYPES:
            d = self._dtypes.get(name)
            if d is None:
                d = self._dtypes[name] = TorchDType(name)
            return d
        cls = self._stubs.get(key)
        if cls is None:
            cls = type("Stub_" + name.replace(".", "_")[:64], (Stub,),
                       {"_stub_module": module, "_stub_name": name, "__module__": "stub"})
            self._stubs[key] = cls
        return cls

    def persistent_load(self, pid):
        raise PickleError("persistent ids are not supported")

    # ---- depth ----------------------------------------------------------
    def _d(self, x):
        if type(x) in _ATOMS:
            return 0
        e = self._depth.get(id(x))
        return e[0] if e is not None else 1

    def _dmax(self, items):
        m = 0
        for x in items:
            if type(x) not in _ATOMS:
                d = self._d(x)
                if d > m:
                    m = d
        return m

    def _raise(self, x, d):
        """x holds something d deep: x is at least d deep."""
        if type(x) in _ATOMS or d <= 1 or d <= self._d(x):
            return
        if d > MAX_DEPTH:
            raise PickleError("objects nested more than %d deep: refused (the limit bounds the recursion of "
                              "hashing and comparing them)" % MAX_DEPTH)
        self._depth[id(x)] = (d, x)
        if d > self.max_seen:
            self.max_seen = d

    def _keys_into(self, target, keys):
        """Fixed-hash keys about to be inserted into target (None: a new one)."""
        owner = id(target) if target is not None else -len(self._keep) - 1
        before = len(self._hashes)
        _count_hashes(self._hashes, owner, keys)
        if target is not None and len(self._hashes) != before:
            self._keep[owner] = target

    def _new_top(self, inner):
        """The object on top of the stack was just built around things
        `inner` deep; a tuple is measured exactly from its elements."""
        x = self.stack[-1]
        if type(x) is tuple:
            inner = self._dmax(x)
        self._raise(x, inner + 1)


def _built_from_mark(fn, keys=None):
    # TUPLE, LIST, DICT, FROZENSET, OBJ, INST: the items since MARK
    def run(self):
        if keys is not None:
            self._keys_into(None, keys(self.stack))
        inner = self._dmax(self.stack)
        fn(self)
        self._new_top(inner)
    return run


def _built_from_top(n):
    # TUPLE1..3 (n items), REDUCE and NEWOBJ (args on top), NEWOBJ_EX
    def wrap(fn):
        def run(self):
            inner = self._dmax(self.stack[-n:])
            fn(self)
            self._new_top(inner)
        return run
    return wrap


def _filled_from_mark(fn, keys=None):
    # APPENDS, SETITEMS, ADDITEMS: the items since MARK go into the object below
    def run(self):
        if keys is not None and self.metastack and self.metastack[-1]:
            self._keys_into(self.metastack[-1][-1], keys(self.stack))
        inner = self._dmax(self.stack)
        fn(self)
        self._raise(self.stack[-1], inner + 1)
    return run


def _filled_from_top(n, key_at=None):
    # APPEND (1 item), SETITEM (2: key at -2, into the object at -3)
    def wrap(fn):
        def run(self):
            if key_at is not None and len(self.stack) >= n + 1:
                self._keys_into(self.stack[-n - 1], (self.stack[key_at],))
            inner = self._dmax(self.stack[-n:])
            fn(self)
            self._raise(self.stack[-1], inner + 1)
        return run
    return wrap


def _even(items):
    return items[0::2]


def _all(items):
    return items


def _load_build(self):
    # BUILD: the state becomes the object's fields.  Only on an instance:
    # BUILD on one of the allowed classes or functions would set attributes
    # of this module's code (their __defaults__, say) from the file.
    if len(self.stack) < 2 or _is_code_object(self.stack[-2]):
        raise PickleError("BUILD on a class or a function" if len(self.stack) >= 2 else "BUILD on an empty stack")
    inner = self._d(self.stack[-1])
    pickle._Unpickler.load_build(self)
    self._raise(self.stack[-1], inner)


_P = pickle._Unpickler.dispatch
_OP = pickle
SafeUnpickler.dispatch = dict(_P)
for _code, _wrap in ((_OP.TUPLE, _built_from_mark), (_OP.LIST, _built_from_mark),
                     (_OP.DICT, lambda fn: _built_from_mark(fn, _even)),
                     (_OP.FROZENSET, lambda fn: _built_from_mark(fn, _all)),
                     (_OP.OBJ, _built_from_mark), (_OP.INST, _built_from_mark),
                     (_OP.TUPLE1, _built_from_top(1)), (_OP.TUPLE2, _built_from_top(2)),
                     (_OP.TUPLE3, _built_from_top(3)), (_OP.REDUCE, _built_from_top(2)),
                     (_OP.NEWOBJ, _built_from_top(2)), (_OP.NEWOBJ_EX, _built_from_top(3)),
                     (_OP.APPENDS, _filled_from_mark), (_OP.SETITEMS, lambda fn: _filled_from_mark(fn, _even)),
                     (_OP.ADDITEMS, lambda fn: _filled_from_mark(fn, _all)), (_OP.APPEND, _filled_from_top(1)),
                     (_OP.SETITEM, _filled_from_top(2, -2))):
    SafeUnpickler.dispatch[_code[0]] = _wrap(_P[_code[0]])
SafeUnpickler.dispatch[_OP.BUILD[0]] = _load_build


def _trailing(u, stream, size):
    """Bytes of the file after the STOP opcode (inside the last frame, or
    after it)."""
    fr = getattr(u, "_unframer", None)
    fr = fr.current_frame if fr is not None else None
    inside = len(fr.getbuffer()) - fr.tell() if fr is not None else 0
    return inside + size - stream.tell()


def load(path):
    """Loads `path` inertly.  Raises PickleError with a one-line reason."""
    try:
        with open(path, "rb") as f:
            f.seek(0, io.SEEK_END)
            size = f.tell()
            if size > MAX_FILE_BYTES:
                raise PickleError("file is %d bytes, more than the %d-byte limit" % (size, MAX_FILE_BYTES))
            if size == 0:
                raise PickleError("empty file")
            f.seek(0)
            data = f.read()
    except OSError as e:
        raise PickleError("cannot read: %s" % (e.strerror or e))
    limits = None
    try:
        stream = io.BytesIO(data)
        u = SafeUnpickler(stream)
        limits = _memory_cap(len(data))
        obj = u.load()
        # pickle ignores the bytes after STOP; refuse them (a concatenated
        # or padded file is not what the producer wrote).
        extra = _trailing(u, stream, len(data))
        if extra:
            raise PickleError("%d trailing bytes after the STOP opcode" % extra)
        return obj
    except PickleError:
        raise
    except RecursionError:
        raise PickleError("nesting too deep")
    except MemoryError:
        raise PickleError("the pickle needs more memory than a %d-byte file may (%d bytes per byte + %d MB); "
                          "refused" % (len(data), MEMORY_PER_BYTE, MEMORY_SLACK >> 20))
    except Exception as e:  # UnpicklingError, EOFError, TypeError from a bad opcode, ...
        msg = _one_line(e)
        raise PickleError("unpickling failed: %s%s" % (type(e).__name__, ": " + msg if msg else ""))
    finally:
        if limits is not None:
            resource.setrlimit(resource.RLIMIT_AS, limits)


def _one_line(e):
    try:
        text = str(e)
    except Exception:  # str() of a huge int in the message, say
        return ""
    lines = text.splitlines()
    return lines[0][:300] if lines else ""
