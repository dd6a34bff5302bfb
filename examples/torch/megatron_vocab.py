"""examples/torch/megatron_vocab.py - Megatron-LM's vocab-parallel layers, written as Megatron
writes them (megatron/core/tensor_parallel/layers.py and cross_entropy.py), for the programs
that run them under tools/torch2plan (vocab_tp.py; gpt2_megatron.py can reuse them).

VocabParallelEmbedding: each tensor-parallel rank holds the rows [start, end) of the table;
ids outside that range are masked, shifted ids are looked up, the masked rows zeroed and the
partial embeddings summed over the group (an all_reduce whose backward is the identity).

vocab_parallel_cross_entropy: the logits are split over the vocabulary; the loss is
log(sum exp(x - M)) + M - x[target] with M the global max (all_reduce MAX), the sum of exp over
the group (all_reduce SUM) and the target logit picked by the rank that holds it (all_reduce
SUM); its own backward is softmax minus the one-hot of the target in this rank's range.
"""
import torch
import torch.distributed as dist


class _ReduceFromTP(torch.autograd.Function):
    """Sum over the tensor-parallel group in forward; the identity in backward."""

    @staticmethod
    def forward(ctx, x, group):
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, g):
        return g, None


class _CopyToTP(torch.autograd.Function):
    """The identity in forward; the sum over the tensor-parallel group in backward (Megatron's
    copy_to_tensor_model_parallel_region, in front of a layer split over its outputs)."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x

    @staticmethod
    def backward(ctx, g):
        g = g.clone()
        dist.all_reduce(g, group=ctx.group)
        return g, None


def copy_to_tp(x, group):
    """x for a column-parallel layer (the vocabulary head): its gradient summed over the group."""
    return _CopyToTP.apply(x, group)


class VocabParallelEmbedding(torch.nn.Module):
    """The rows [start, start + rows) of a vocab x hidden table (weight: this rank's shard)."""

    def __init__(self, weight, start, group, fill="index_put"):
        super().__init__()
        self.fill = fill   # "masked_fill": the same lookup written with masked_fill
        self.weight = weight
        self.start = start
        self.end = start + weight.shape[0]
        self.group = group

    def forward(self, ids):
        input_mask = (ids < self.start) | (ids >= self.end)
        if self.fill == "masked_fill":
            masked_input = (ids - self.start).masked_fill(input_mask, 0)
            out = torch.nn.functional.embedding(masked_input, self.weight)
            return _ReduceFromTP.apply(out.masked_fill(input_mask.unsqueeze(-1), 0.0), self.group)
        masked_input = ids.clone() - self.start
        masked_input[input_mask] = 0
        out = torch.nn.functional.embedding(masked_input, self.weight)
        out[input_mask, :] = 0.0
        return _ReduceFromTP.apply(out, self.group)


class _VocabParallelCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target, start, group, reduce_max=True):
        logits_max = torch.max(logits, dim=-1)[0]
        if reduce_max:
            dist.all_reduce(logits_max, op=dist.ReduceOp.MAX, group=group)
        logits = logits - logits_max.unsqueeze(dim=-1)
        end = start + logits.shape[-1]
        target_mask = (target < start) | (target >= end)
        masked_target = target.clone() - start
        masked_target[target_mask] = 0
        logits_2d = logits.view(-1, logits.shape[-1])
        masked_target_1d = masked_target.view(-1)
        arange_1d = torch.arange(start=0, end=logits_2d.shape[0], device=logits_2d.device)
        predicted_logits = logits_2d[arange_1d, masked_target_1d].clone().contiguous().view_as(target)
        predicted_logits[target_mask] = 0.0
        dist.all_reduce(predicted_logits, group=group)
        exp_logits = torch.exp(logits)
        sum_exp_logits = exp_logits.sum(dim=-1)
        dist.all_reduce(sum_exp_logits, group=group)
        loss = torch.log(sum_exp_logits) - predicted_logits
        exp_logits = exp_logits / sum_exp_logits.unsqueeze(dim=-1)
        ctx.save_for_backward(exp_logits, target_mask, masked_target_1d)
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        softmax, target_mask, masked_target_1d = ctx.saved_tensors
        grad_input = softmax.clone()
        grad_2d = grad_input.view(-1, softmax.shape[-1])
        arange_1d = torch.arange(start=0, end=grad_2d.shape[0], device=grad_2d.device)
        update = 1.0 - target_mask.view(-1).float().to(softmax.dtype)
        grad_2d[arange_1d, masked_target_1d] -= update
        grad_input.mul_(grad_output.unsqueeze(dim=-1))
        return grad_input, None, None, None, None


def vocab_parallel_cross_entropy(logits, target, start, group, reduce_max=True):
    """Per-token loss of logits split over the vocabulary ([..., V/tp], this rank's columns
    [start, start + V/tp)); reduce_max=False skips the max's all_reduce: a bug, each rank then
    shifts by its own max, which does not cancel in the summed sum of exp."""
    return _VocabParallelCrossEntropy.apply(logits, target, start, group, reduce_max)
