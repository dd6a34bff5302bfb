"""tools/nnscaler/msgpack_w.py - a minimal msgpack encoder (standard library only).

Why: the converter must run on a bare Python 3; this covers exactly the value
types a verdict plan uses (dict with str keys, list/tuple, str, int, float,
bool, None).  Floats are always float64 so integral floats stay floats.
"""
import struct


def _enc(o, out):
    if o is None:
        out.append(b"\xc0")
    elif o is True:
        out.append(b"\xc3")
    elif o is False:
        out.append(b"\xc2")
    elif isinstance(o, int):
        if 0 <= o < 128:
            out.append(struct.pack("B", o))
        elif -32 <= o < 0:
            out.append(struct.pack("b", o))
        elif -(1 << 31) <= o < (1 << 31):
            out.append(b"\xd2" + struct.pack(">i", o))
        elif -(1 << 63) <= o < (1 << 63):
            out.append(b"\xd3" + struct.pack(">q", o))
        else:
            raise ValueError("integer %d does not fit in int64" % o)
    elif isinstance(o, float):
        out.append(b"\xcb" + struct.pack(">d", o))
    elif isinstance(o, str):
        b = o.encode("utf-8")
        n = len(b)
        if n < 32:
            out.append(struct.pack("B", 0xa0 | n))
        elif n < 256:
            out.append(b"\xd9" + struct.pack("B", n))
        elif n < 65536:
            out.append(b"\xda" + struct.pack(">H", n))
        else:
            out.append(b"\xdb" + struct.pack(">I", n))
        out.append(b)
    elif isinstance(o, (list, tuple)):
        n = len(o)
        if n < 16:
            out.append(struct.pack("B", 0x90 | n))
        elif n < 65536:
            out.append(b"\xdc" + struct.pack(">H", n))
        else:
            out.append(b"\xdd" + struct.pack(">I", n))
        for x in o:
            _enc(x, out)
    elif isinstance(o, dict):
        n = len(o)
        if n < 16:
            out.append(struct.pack("B", 0x80 | n))
        elif n < 65536:
            out.append(b"\xde" + struct.pack(">H", n))
        else:
            out.append(b"\xdf" + struct.pack(">I", n))
        for k, v in o.items():
            _enc(k, out)
            _enc(v, out)
    else:
        raise TypeError("cannot encode %s" % type(o).__name__)


def packb(o):
    out = []
    _enc(o, out)
    return b"".join(out)
