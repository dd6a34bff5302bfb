#!/usr/bin/python3
"""tests/ci/renumber.py IN OUT - the same parallel plan renumbered, for the stable-name test of
tests/e2e/50_ci_outputs.sh: every node and tensor id shifted by 100000 and the lists reversed
in the file, plus one extra unrelated node (a scale of the first f64 weight into a new tensor that
nothing reads).  What a plan means does not change; ids, positions and node counts do.  Uses
Debian's python3 (python3-msgpack)."""
import sys

import msgpack

SHIFT = 100000


def main(src, dst):
    with open(src, "rb") as f:
        p = msgpack.unpackb(f.read(), raw=False, strict_map_key=False)
    for t in p["tensors"]:
        t["id"] += SHIFT
    for n in p["nodes"]:
        n["id"] += SHIFT
        for k in ("in", "out"):
            if k in n:
                n[k] = [x + SHIFT for x in n[k]]
    w = next(t for t in p["tensors"] if t.get("role") == "weight" and t.get("dtype", "f32") != "i64")
    new_t = {"id": 1, "name": "unrelated.scaled", "shape": list(w["shape"]), "role": "act", "scope": "mb"}
    if "dtype" in w:
        new_t["dtype"] = w["dtype"]
    if "rank" in w:
        new_t["rank"] = w["rank"]
    user = next(n for n in p["nodes"] if w["id"] in n.get("in", []))
    node = {"id": 1, "op": "scale", "name": "unrelated.scale", "segment": user["segment"], "phase": user["phase"],
            "in": [w["id"]], "out": [1], "attrs": {"factor": 2.0}}
    if "rank" in user:
        node["rank"] = user["rank"]
    p["tensors"] = [new_t] + p["tensors"][::-1]
    p["nodes"] = [node] + p["nodes"]
    with open(dst, "wb") as f:
        f.write(msgpack.packb(p, use_bin_type=True))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
