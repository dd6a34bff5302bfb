"""tools/torchcap/worker.py - one captured process: a rank of the parallel program, or the
single-device program.

Forked by tools/torch2plan, which calls main([PROG, RANK, WORLD, PORT, OUT, ARGS_JSON,
single|parallel]) (or, by hand, python3 -m torchcap.worker with the same arguments).  Loads PROG, calls its step(cap), and pickles the rank's trace to OUT.  A CaptureError is
written to OUT + ".err" (one line) and the exit code is 2; any other exception prints its
traceback and exits 3.  Parallel ranks join a gloo process group on 127.0.0.1:PORT.
"""
import json
import os
import pickle
import runpy
import sys
import traceback


def read_values(path, which):
    """name -> list of floats, from `verdict exec --dump` lines 'initial|final ID NAME N v..'."""
    out = {}
    with open(path) as f:
        for line in f:
            w = line.split()
            if len(w) >= 4 and w[0] == which and w[2] != "-":
                out[w[2]] = [float(x) for x in w[4:]]
    return out


def main(argv):
    prog, rank, world, port, out, args_json, mode = argv
    rank, world = int(rank), int(world)
    import torch
    torch.set_num_threads(1)
    from .api import CaptureError
    from .capture import Capture
    parallel = mode == "parallel"
    try:
        if parallel:
            import torch.distributed as dist
            dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%s" % port,
                                    rank=rank, world_size=world)
        sys.path.insert(0, os.path.dirname(os.path.abspath(prog)))  # as `python3 prog.py` would
        ns = runpy.run_path(prog, run_name="torch2plan_program")
        if "step" not in ns:
            raise CaptureError("%s: defines no step(cap) function" % prog)
        cap = Capture(rank, world, json.loads(args_json), parallel)
        replay = os.environ.get("TORCH2PLAN_REPLAY")
        if replay:
            cap.replay = read_values(replay, "initial")
        if os.environ.get("TORCH2PLAN_DUMP"):
            cap.rec.dump = {}                  # torch2plan --dump-single / --dump-parallel
        ns["step"](cap)
        if not cap.stepped:
            raise CaptureError("%s: step(cap) never entered `with cap.step():`" % prog)
        tr = cap.trace()
        tr["prog"] = os.path.basename(prog)
        if cap.rec.dump is not None:
            tr["dump"] = {pid: v.tolist() for pid, v in cap.rec.dump.items()}
        if replay:
            tr["replay"] = [(d.name, d.tensor.detach().double().reshape(-1).tolist())
                            for d in cap.decls if d.kind in ("param", "optstate", "loss")]
        # tools/safe_output.py: an exclusive temporary, never a fixed OUT.tmp
        import safe_output
        safe_output.write_bytes(out, pickle.dumps(tr))
        if parallel:
            import torch.distributed as dist
            dist.destroy_process_group()
        return 0
    except CaptureError as e:
        return _refuse(out, "%s" % e, rank, parallel)
    except RuntimeError as e:
        from .dtensor import runtime_refusal
        why = runtime_refusal(e) or _cuda_refusal(e)
        if why is None:
            raise
        return _refuse(out, why, rank, parallel)


# What a program asks of CUDA that a CPU rank cannot give, by the torch function that asked
# (a frame of the traceback), and what to write instead.
CUDA_NEEDS = (("pin_memory", "pins host memory for copies to a GPU (FSDP2's CPUOffloadPolicy pins by "
               "default)", "pass CPUOffloadPolicy(pin_memory=False), or pin_memory=False"),)


def _cuda_refusal(exc):
    """The refusal of a program that needs CUDA (torch2plan runs every rank on the CPU, with
    gloo), naming the user's line and what to do, or None for other errors."""
    import traceback
    from .dtensor import user_line
    text = str(exc)
    if "NVIDIA driver" not in text and "CUDA" not in text:
        return None
    frames = traceback.extract_tb(exc.__traceback__)
    where = user_line(frames)
    for fn, what, instead in CUDA_NEEDS:
        if any(fn in (f.line or "") or f.name == fn for f in frames):
            return "%s: the program %s, which needs CUDA; torch2plan runs the ranks on the CPU: %s" % (
                where, what, instead)
    return ("%s: the program needs CUDA (%s); torch2plan runs the ranks on the CPU with gloo: keep "
            "tensors and modules on the CPU device" % (where, text.strip().splitlines()[0]))


def _refuse(out, why, rank, parallel):
    with open(out + ".err", "w") as f:
        f.write("%s (rank %d)\n" % (why, rank) if parallel else "%s\n" % why)
    return 2


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except SystemExit:
        raise
    except BaseException:
        traceback.print_exc()
        sys.exit(3)
