"""tests/fuzz/picklelib.py - building hostile pickles from real ones, for the importer's
bound tests (tests/e2e/19_nnscaler_bounds.sh) and the unpickler fuzzer
(tests/fuzz/fuzz_unpickler.py).  Standard library only (Debian's /usr/bin/python3).

A pickle is handled as its list of opcodes, each kept as its raw bytes, with the protocol-4
FRAME opcodes dropped (framing is optional; a stream without frames unpickles the same), so
an opcode can be replaced by one of another length.
"""
import pickle
import pickletools
import struct


def raw_ops(data):
    """[(name, arg, raw bytes)] of a pickle, frames dropped."""
    ops = list(pickletools.genops(data))
    out = []
    for i, (op, arg, pos) in enumerate(ops):
        end = ops[i + 1][2] if i + 1 < len(ops) else len(data)
        if op.name != "FRAME":
            out.append((op.name, arg, data[pos:end]))
    return out


def join(ops):
    return b"".join(r for _, _, r in ops)


def enc_int(v):
    """The opcode that pushes the integer v (any size)."""
    if 0 <= v < 256:
        return pickle.BININT1 + bytes([v])
    if -(1 << 31) <= v < (1 << 31):
        return pickle.BININT + struct.pack("<i", v)
    n = (v.bit_length() + 8) // 8
    body = v.to_bytes(n, "little", signed=True)
    if n < 256:
        return pickle.LONG1 + bytes([n]) + body
    return pickle.LONG4 + struct.pack("<I", n) + body


def enc_float(x):
    return pickle.BINFLOAT + struct.pack(">d", x)


def set_after_key(data, key, raw, nth=0):
    """The pickle with the value written after the literal string `key` (its nth literal
    occurrence; a MEMOIZE between them is kept) replaced by the opcode bytes `raw`.  Only a
    value that is one opcode (an integer, a float, None) can be replaced."""
    ops = raw_ops(data)
    seen = 0
    for i, (name, arg, _) in enumerate(ops):
        if name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE") and arg == key:
            if seen == nth:
                j = i + 1
                while ops[j][0] in ("MEMOIZE", "BINPUT", "LONG_BINPUT"):
                    j += 1
                ops[j] = ("RAW", None, raw)
                return join(ops)
            seen += 1
    raise KeyError(key)


def int_positions(data):
    """Indices (into raw_ops) of the opcodes that push an integer."""
    return [i for i, (n, _, _) in enumerate(raw_ops(data))
            if n in ("BININT", "BININT1", "BININT2", "LONG1", "LONG4", "INT", "LONG")]


def deep_tuple_key(depth):
    """A dict whose key is a tuple nested `depth` deep (1 byte per level: TUPLE1)."""
    return pickle.PROTO + b"\x02" + pickle.EMPTY_DICT + pickle.NONE + pickle.TUPLE1 * depth + pickle.NONE + \
        pickle.SETITEM + pickle.STOP


def colliding_keys(n):
    """A dict of n integer keys that all hash alike (k * (2^61 - 1)): filling it takes time
    quadratic in n (20,000 keys, 259 KB: 11 s)."""
    m = (1 << 61) - 1
    return pickle.PROTO + b"\x04" + pickle.EMPTY_DICT + pickle.MARK + \
        b"".join(enc_int(k * m) + pickle.NONE for k in range(1, n + 1)) + pickle.SETITEMS + pickle.STOP


def deep_list(depth):
    """A list nested `depth` deep: MARK * depth, [], then LIST * depth (each LIST wraps what
    follows the last MARK, the list below, into a new list)."""
    return pickle.PROTO + b"\x04" + pickle.MARK * depth + pickle.EMPTY_LIST + pickle.LIST * depth + pickle.STOP


def _memo_index(ops, k):
    """The memo index a MEMOIZE at ops[k] assigns (pickles of protocol 4 memoize only so)."""
    assert ops[k][0] == "MEMOIZE"
    return sum(1 for o in ops[:k] if o[0] == "MEMOIZE")


def shared_program(data, n):
    """An nnScaler ModuleCodeGen pickle whose `devices` are 0..n-1 and whose devices from 1 on
    (those it does not have) all run device 0's program: one memoized list referred to n times.
    The file grows with n, the program does not: converting it naively costs n x (device 0's
    cells)."""
    ops = raw_ops(data)
    i = next(k for k, (nm, a, _) in enumerate(ops) if nm.endswith("UNICODE") and a == "_seq")
    assert [o[0] for o in ops[i + 1:i + 4]] == ["MEMOIZE", "EMPTY_DICT", "MEMOIZE"], "unexpected _seq layout"
    dict_memo = _memo_index(ops, i + 3)
    lst = next(k for k in range(i + 4, len(ops)) if ops[k][0] == "EMPTY_LIST")
    list_memo = _memo_index(ops, lst + 1)
    have = {a for nm, a, _ in ops[i + 4:lst] if nm in ("BININT1", "BININT2", "BININT")}
    more = pickle.LONG_BINGET + struct.pack("<I", dict_memo) + pickle.MARK + b"".join(
        enc_int(k) + pickle.LONG_BINGET + struct.pack("<I", list_memo) for k in range(n) if k not in have) + \
        pickle.SETITEMS + pickle.POP
    assert ops[-1][0] == "STOP"
    ops.insert(len(ops) - 1, ("RAW", None, more))
    d = next(k for k, (nm, a, _) in enumerate(ops) if nm.endswith("UNICODE") and a == "devices")
    start = d + 2 if ops[d + 1][0] == "MEMOIZE" else d + 1
    end = next(k for k in range(start, len(ops)) if ops[k][0] in ("TUPLE", "TUPLE1", "TUPLE2", "TUPLE3"))
    ops[start:end + 1] = [("RAW", None, pickle.MARK + b"".join(enc_int(k) for k in range(n)) + pickle.TUPLE)]
    return set_after_key(join(ops), "runtime_ndevs", enc_int(n))
