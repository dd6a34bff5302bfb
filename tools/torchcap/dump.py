"""tools/torchcap/dump.py - the real run's values, written for `verdict compare` (docs/noise.md).

What it implements: torch2plan --dump-single F / --dump-parallel F.  While a program runs under
capture with dumping on, the recorder keeps a float64 copy of every value the step produces
(capture.Recorder.snapshot): forward activations, gradients, collective results, updated
weights and optimizer state.  This module writes them keyed by the plan's own tensor ids, so
that verdict can map them through the lineages (shards concatenated, partial sums added,
replicas compared with each other).

Format (text, one record per line; docs/noise.md "Dump format"):

    verdict-dump 1 single|parallel
    v TENSOR_ID REPLICA first|last N x1 ... xN

TENSOR_ID is the id of the tensor in the plan written by the same torch2plan run, REPLICA the
DP replica (global rank = REPLICA * stored_ranks + the tensor's rank; 0 in a single dump).
`first` is the value a declared parameter or optimizer state held before the step, `last` the
value after it; every other tensor is written once, as `last`.  Values are row-major, written
with Python's repr (shortest round-trip of the double; bfloat16 and float32 values are exact).
Values the capture decomposes into several registry operators (log_softmax -> exp, sum, log,
sub) have no torch tensor of their own and are absent: verdict recomputes them from their
inputs.
"""
from .assemble import _used  # the values a trace reads, writes or declares


def _fmt(vals):
    return " ".join(repr(float(x)) for x in vals)


def write(path, kind, trs, stored, tid):
    """trs: normalized traces by global rank; stored: ranks per replica; tid(r)(pid): plan id.
    Written through tools/safe_output.py, as the plans are (no FIFO, device or link replaced;
    an exclusive temporary renamed into place); raises safe_output.OutputError."""
    import io
    import safe_output
    f = io.StringIO()
    _write_records(f, kind, trs, stored, tid)
    safe_output.write_bytes(path, f.getvalue().encode())


def _write_records(f, kind, trs, stored, tid):
    f.write("verdict-dump 1 %s\n" % kind)
    for g, tr in enumerate(trs):
        r, d = g % stored, g // stored
        dump = tr.get("dump") or {}
        final = {x["pid"]: x["final"] for x in tr["decls"]
                 if x["kind"] in ("param", "optstate") and x.get("final") not in (None, x["pid"])}
        for pid in sorted(_used(tr)):
            ident = tid(r)(pid)
            if pid in final:
                if pid in dump:
                    f.write("v %d %d first %d %s\n" % (ident, d, len(dump[pid]), _fmt(dump[pid])))
                fin = final[pid]
                if fin in dump:
                    f.write("v %d %d last %d %s\n" % (ident, d, len(dump[fin]), _fmt(dump[fin])))
            elif pid in dump:
                f.write("v %d %d last %d %s\n" % (ident, d, len(dump[pid]), _fmt(dump[pid])))
