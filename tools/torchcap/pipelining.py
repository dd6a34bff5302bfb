"""tools/torchcap/pipelining.py - what torch.distributed.pipelining does besides the model's
computation, and how the capture treats it.

A schedule's first step initializes its stages: it exchanges a dummy tensor with each neighbour
stage to set up the point-to-point communicators (PipelineStage._get_init_p2p_neighbors_ops) and
allocates the receive buffers of every microbatch.  None of it is the model's data, so it runs
for real but unrecorded (the recorder's quiet mode), on every rank alike, so send/recv pairs
stay matched.  The dummy exchange itself is skipped: in torch 2.9.1 it sends an int64 scalar
into a float32 buffer, which gloo rejects (the process aborts: "Received data size doesn't
match expected size"); it only warms up communicators (NCCL's lazy init), so on CPU ranks
nothing is lost.  Everything after
it (the activations and gradients sent between stages, each microbatch's forward, loss and
backward, the gradient scaling) is recorded as any other operator or send/recv.
"""


def setup_wrappers(rec):
    """Wraps the schedules' stage initialization to run quietly and drops the dummy exchange:
    [(class, name, original)] to restore after the step (nothing when
    torch.distributed.pipelining is not importable)."""
    try:
        from torch.distributed.pipelining import schedules, stage
    except ImportError:
        return []
    patches = []

    def quiet(fn):
        def w(*a, **k):
            was, rec.quiet = rec.quiet, True
            try:
                return fn(*a, **k)
            finally:
                rec.quiet = was
        return w

    def no_warmup(self):
        return []
    for cls, name, wrap in ((getattr(stage, "_PipelineStageBase", None), "_get_init_p2p_neighbors_ops",
                             lambda fn: no_warmup),
                            (getattr(schedules, "PipelineScheduleSingle", None), "_initialize_stage", quiet),
                            (getattr(schedules, "PipelineScheduleMulti", None), "_initialize_stages", quiet)):
        orig = cls.__dict__.get(name) if cls is not None else None
        if orig is not None:
            patches.append((cls, name, orig))
            setattr(cls, name, wrap(orig))
    return patches
