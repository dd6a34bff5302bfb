"""tools/torchcap/api.py - what a user's program calls: placements and the capture handle.

A captured program is a Python file that defines `step(cap)`.  torch2plan runs it once per rank
(once for the single-device program) and passes a `Capture` handle.  The program builds its
model and data as usual, declares the *boundary* of one training step, and runs the step inside
`with cap.step():`.  Everything else (every intermediate tensor, gradients included) is left to
verdict's lineage inference.

Boundary declarations, in the style of DTensor placements:

    cap.mesh(tp=2, pp=2, dp=2, mb=2)       # mesh dims, first listed varies fastest; dp last
    cap.param(p, "layers.0.wq.weight", tp=Shard(0))
    cap.input(tok, "tokens", dp=Shard(0), mb=Shard(0), mb_index=m)
    cap.optimizer(opt)                      # its state inherits each parameter's placement
    cap.loss(l, "loss")                     # a checked output (Replicate by default)

A mesh dim not named in a declaration is Replicate().  Shard(d) on several mesh dims nests them
in the order written (the first is outermost).  Partial() says the tensor is one of the mesh
dim's parts whose element-wise sum is the single-device slice.  `mb` is a pseudo mesh dim of
size nm: the microbatch `mb_index` of a per-microbatch tensor.  Declarations name tensors of the
single-device program by the names that program declared.
"""


class Placement:
    kind = ""

    def __repr__(self):
        return self.kind


class Shard(Placement):
    kind = "shard"

    def __init__(self, dim):
        if not isinstance(dim, int):
            raise TypeError("Shard(dim): dim must be an int")
        self.dim = dim

    def __repr__(self):
        return "Shard(%d)" % self.dim


class Replicate(Placement):
    kind = "replicate"

    def __repr__(self):
        return "Replicate()"


class Partial(Placement):
    kind = "partial"

    def __repr__(self):
        return "Partial()"


class CaptureError(Exception):
    """A program that cannot be captured faithfully: the message names the reason and the line."""
