#!/usr/bin/python3
"""nasty_names.py IN.plan OUT.plan [short]: rewrite a plan's
tensor and node names (and give every node a source location) so that each
name carries what a report writer must survive: a long run of multi-byte
characters that every fixed-size buffer cuts (2, 3 and 4 byte sequences,
so cuts land inside characters), an ESC sequence, a line that reads
"EQUIVALENT", U+FFFF, C0/DEL/C1 controls, U+2028, a bidi override, XML
and dot metacharacters (]]>, --, <!--, &, quotes, backslash escapes of
dot).  With "short" the multi-byte run is left out (so the other parts fit
in the pictures' label budget).  The rewrite depends only on the old name, so running it on both
plans of a pair keeps the names that match across plans matching.
Debian's /usr/bin/python3 (python3-msgpack)."""
import sys

import msgpack

MB = "\u00e9\u20ac\U0001d11e" * 60  # 2+3+4 bytes, 540 bytes
NASTY = ("\x1b[31m\x1b]0;owned\x07\nEQUIVALENT\n\r\t\x01\x7f\u0085\u2028\u202e\uffff\ufffe"
         "]]>--<!--&amp;&#xFFFF;\"'<>\\G\\N\\l")


def nasty(name, mb):
    return mb + NASTY + name + NASTY


def main():
    src, dst = sys.argv[1], sys.argv[2]
    mb = "" if sys.argv[3:] == ["short"] else MB
    d = msgpack.unpackb(open(src, "rb").read(), raw=False, strict_map_key=False)
    for t in d["tensors"]:
        t["name"] = nasty(t["name"], mb)
    for n in d["nodes"]:
        n["name"] = nasty(n["name"], mb)
        n["src"] = mb + NASTY + "model.py:%d" % (n["id"] + 1)
    open(dst, "wb").write(msgpack.packb(d, use_bin_type=True))


if __name__ == "__main__":
    main()
