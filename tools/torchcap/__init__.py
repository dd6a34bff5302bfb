"""tools/torchcap - capture of PyTorch training code into verdict plans (docs/torch.md).

api.py (what user programs import: Shard, Replicate, Partial), capture.py (the per-rank
recorder), aten_map.py (aten -> registry operators), assemble.py (traces -> plans), worker.py
(one captured process).  The entry point is tools/torch2plan.
"""
from .api import CaptureError, Partial, Replicate, Shard  # noqa: F401
