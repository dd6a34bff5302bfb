"""examples/torch/vocab_model.py - a tiny language model for the vocab-parallel layers of
megatron_vocab.py: token embedding -> gelu(linear) -> vocabulary head -> cross-entropy.
vocab_single.py trains it on one device the natural way (nn.Embedding, F.cross_entropy);
vocab_tp.py with the embedding split over the vocabulary (Megatron's VocabParallelEmbedding),
tensor parallel x data parallel.  Shared here: sizes, initial weights, batch, config.
--set vocab=V sets the vocabulary size (default 16; a multiple of tp).
"""
import torch

VOCAB, HIDDEN, BATCH, SEQ = 16, 8, 4, 4
LR = 0.1


def config(args):
    """The run's configuration from --set; --set vocab=V also sets VOCAB for this process (every
    program of a pair calls config before it builds weights or the batch)."""
    global VOCAB
    c = {"tp": 1, "dp": 1, "bug": "", "ce": "full", "fill": "index_put", "vocab": VOCAB}
    for k, v in args.items():
        c[k] = v if k in ("bug", "ce", "fill") else int(v)
    VOCAB = c["vocab"]
    if VOCAB % c["tp"]:
        raise ValueError(f"vocab={VOCAB} is not a multiple of tp={c['tp']}")
    return c


def weights():
    g = torch.Generator().manual_seed(7)
    return {"wte": torch.randn(VOCAB, HIDDEN, generator=g, dtype=torch.float64),
            "fc.weight": 0.5 * torch.randn(HIDDEN, HIDDEN, generator=g, dtype=torch.float64),
            "fc.bias": 0.1 * torch.randn(HIDDEN, generator=g, dtype=torch.float64),
            "head": 0.5 * torch.randn(VOCAB, HIDDEN, generator=g, dtype=torch.float64)}


def batch():
    g = torch.Generator().manual_seed(11)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
    targets = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
    return ids, targets
