"""examples/torch/gpt2_mcore.py - the GPT-2 of gpt2.py with tensor parallelism from Megatron-Core's
own layers (megatron.core.tensor_parallel, on CPU ranks with gloo): the attention's q/k/v
projections and the MLP's fc become ColumnParallelLinear (each rank computes its heads / its part
of the hidden units), the attention's out_proj and the MLP's proj RowParallelLinear (the partial
sums all-reduced by Megatron's autograd functions, the bias added after the all-reduce).  The
embedding, the norms and the tied head stay replicated.  The parallel program of gpt2_single.py
(tools/torch2plan --nproc TP, --set tp=TP).  The placements of the split weights are not
declared here: cap.params reads the marks Megatron-Core puts on them (tools/torchcap/megatron.py).
Bugs (--set bug=NAME): no_bias_rowwise builds the row-parallel layers with skip_bias_add and
drops the bias they hand back (the layer's output misses its bias).
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2  # noqa: E402


def tp_layers(c, tp):
    """Megatron-Core's column- and row-parallel linears, returning the output alone (gpt2.py's
    modules call a linear as a function of x) and, for the column-parallel one, the rank's
    out_features (gpt2.py's attention counts its heads by it)."""
    from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear
    from megatron.core.transformer.transformer_config import TransformerConfig
    cfg = TransformerConfig(num_layers=gpt2.N_LAYER, hidden_size=gpt2.N_EMBD, num_attention_heads=gpt2.N_HEAD,
                            use_cpu_initialization=True, params_dtype=torch.float64,
                            gradient_accumulation_fusion=False, tensor_model_parallel_size=tp)
    keep = lambda w: w   # noqa: E731  (the weights are copied from the checkpoint below)

    class Column(ColumnParallelLinear):
        def __init__(self, lin):
            super().__init__(lin.in_features, lin.out_features, config=cfg, init_method=keep, bias=True,
                             gather_output=False)
            self.out_features = self.output_size_per_partition

        def forward(self, x):
            return super().forward(x)[0]

    class Row(RowParallelLinear):
        def __init__(self, lin):
            super().__init__(lin.in_features, lin.out_features, config=cfg, init_method=keep, bias=True,
                             input_is_parallel=True, skip_bias_add=c["bug"] == "no_bias_rowwise")

        def forward(self, x):
            return super().forward(x)[0]   # BUG no_bias_rowwise: the skipped bias is dropped

    return Column, Row


def parallelize(model, c, tp, rank):
    """Every block's linears replaced by Megatron-Core's, holding this rank's slice of the
    checkpoint's weights."""
    Column, Row = tp_layers(c, tp)

    def swap(parent, name, cls, dim):
        lin = getattr(parent, name)
        new = cls(lin)
        with torch.no_grad():
            new.weight.copy_(lin.weight.chunk(tp, dim)[rank])
            new.bias.copy_(lin.bias.chunk(tp, 0)[rank] if dim == 0 else lin.bias)
        setattr(parent, name, new)
    for block in model.h:
        for name in ("q_proj", "k_proj", "v_proj"):
            swap(block.attn, name, Column, 0)
        swap(block.attn, "out_proj", Row, 1)
        swap(block.mlp, "fc", Column, 0)
        swap(block.mlp, "proj", Row, 1)


def step(cap):
    from megatron.core import parallel_state
    c = gpt2.config(cap.args)
    tp = int(c["tp"]) if int(c["tp"]) > 1 else cap.world
    cap.mesh(tp=tp)
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=tp)
    model = gpt2.build(c)
    parallelize(model, c, tp, parallel_state.get_tensor_model_parallel_rank())
    idx, targets = gpt2.batch()
    cap.params(model)             # tp placements from Megatron-Core's marks
    cap.input(idx, "idx")
    cap.input(targets, "targets")
    opt = gpt2.make_optimizer(c, model.parameters())
    cap.optimizer(opt)
    with cap.step():
        loss = model(idx, targets)
        loss.backward()
        opt.step()
    cap.loss(loss, "loss")
