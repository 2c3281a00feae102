"""An EAGLE layer at draft time: the same math as `EagleModule.forward`, in fewer framework calls.

Drafting runs the EAGLE layer once per drafted token, on one new position: ``[1, 1, D]``. At the embedded target's
width its matrices are tiny, so a step costs what the framework does around them: transformers'
decoder layer dispatches its cache update, its attention function and its rotary embedding through several module
calls, and that bookkeeping costs more than the arithmetic. The drafter's cost ratio c is paid on every drafted
token, so here the step is written out once, over the module's own weights:

    x       = fc(concat(embed(x_{i+1}), h_i))                      [T, D]
    q, k, v = split(x_n W_qkv),  x_n = input_norm(x)               W_qkv = [W_q; W_k; W_v]: one matmul, not three
    q, k    = RoPE(q, k) at positions P .. P+T-1                   cos / sin of every position computed once
    K[P:P+T], V[P:P+T] = k, v                                      storage allocated once; a length pointer
    x      += o_proj(softmax(q K[:P+T]^T / sqrt(d) + causal) V[:P+T])
    x      += down(act(g) * u),  g, u = split(post_norm(x) W_gu)   W_gu = [W_gate; W_up]: one matmul
    h^      = norm(x)                                              the predicted features [T, D]

Rolling back past rejected drafts is moving the length pointer (`crop`), as in `specdec_lib.core.caches`'
pre-allocated cache. A token tree's nodes (`forward` with ``tree``) sit after the cached pairs in feeding order, each
at the position of its depth and seeing only its ancestors (`specdec_lib.core.trees.tree_attention_mask`); near the
end of the context they take more slots than positions are left, and the storage grows to hold them. The weights
are read from the module when the runner is made (`EagleDrafter.begin` makes one per generation), so a module that
was trained since is run with its new weights. Training keeps `EagleModule.forward` (it needs arbitrary positions
and masks for training-time test); a test checks the two agree.
"""

import torch
from torch.nn import functional as F
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from ..core.errors import ContextOverflowError
from ..core.trees import tree_attention_mask, tree_position_ids


class EagleRunner:
    """Runs an `EagleModule`'s layer on new pairs after those it has cached (module docstring), one row.

    ``max_length``: the positions its key/value storage holds (``[1, kv_heads, max_length, head_dim]`` each).
    """

    def __init__(self, module, max_length: int) -> None:
        config, layer = module.config, module.layers[0]
        attention, mlp = layer.self_attn, layer.mlp
        if max_length > config.max_position_embeddings:
            raise ContextOverflowError(
                f"An EAGLE layer built for {config.max_position_embeddings} positions cannot draft for {max_length}. "
                "Shorten the prompt or generate fewer tokens.")
        self.module, self.layer, self.max_length = module, layer, max_length
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim, self.scaling = attention.head_dim, attention.scaling
        self.qkv = _stacked(attention.q_proj, attention.k_proj, attention.v_proj)  # (weight, bias)
        self.gate_up = _stacked(mlp.gate_proj, mlp.up_proj)
        self.o_proj, self.down_proj, self.act = attention.o_proj, mlp.down_proj, mlp.act_fn
        weight = module.fc.weight
        positions = torch.arange(max_length, device=weight.device)[None]  # [1, max_length]
        self.cos, self.sin = module.rotary_emb(weight[None, :1], position_ids=positions)  # [1, max_length, head_dim]
        shape = (1, self.kv_heads, max_length, self.head_dim)
        self.keys = torch.zeros(shape, device=weight.device, dtype=weight.dtype)
        self.values = torch.zeros_like(self.keys)
        self.length = 0  # positions 0 .. length - 1 hold keys and values

    def forward(self, features: torch.Tensor, next_ids: torch.Tensor,
                tree: tuple[tuple[int, ...], int, int] | None = None) -> torch.Tensor:
        """Predicted features ``[T, D]`` for the pairs ``features: [T, D]`` (``h_i``) and ``next_ids:
        LongTensor[T]`` (``x_{i+1}``) after the cached ones (which grow by T): at the T positions that follow them,
        or, for tree nodes, ``tree = (parents, first, root)``: the nodes ``first - 1 ..`` of the tree ``parents``
        whose root is the cached pair at ``root`` (the nodes before them cached right after it)."""
        start, new = self.length, next_ids.shape[0]
        end = start + new
        if tree is None and end > self.max_length:  # a chain's slots are its positions
            raise ContextOverflowError(
                f"Cannot draft {new} more positions after {start}: this generation's EAGLE storage holds "
                f"{self.max_length}. Generate fewer tokens or a shorter draft.")
        if end > self.keys.shape[2]:  # tree nodes: slots beyond the positions (theirs are root + depth)
            pad = self.keys.new_zeros(*self.keys.shape[:2], end - self.keys.shape[2], self.keys.shape[3])
            self.keys, self.values = torch.cat([self.keys, pad], dim=2), torch.cat([self.values, pad], dim=2)
        module, layer = self.module, self.layer
        embedded = module.embed_tokens(next_ids).to(features.dtype)
        hidden = module.fc(torch.cat([embedded, features], dim=-1))[None]  # [1, T, D]
        q, k, v = F.linear(layer.input_layernorm(hidden), *self.qkv).view(1, new, -1, self.head_dim).transpose(1, 2) \
            .split([self.heads, self.kv_heads, self.kv_heads], dim=1)  # [1, heads or kv_heads, T, head_dim]
        if tree is None:
            cos, sin = self.cos[:, start:end], self.sin[:, start:end]
            mask = None if new == 1 else torch.ones(new, end, dtype=torch.bool, device=q.device).tril(start)
        else:
            parents, first, root = tree
            positions = tree_position_ids(parents, root, first, device=q.device)[0]  # [T]: root + depth
            cos, sin = self.cos[:, positions], self.sin[:, positions]
            mask = tree_attention_mask(parents, root, first, dtype=q.dtype, device=q.device)  # [1, 1, T, end]
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        self.keys[:, :, start:end], self.values[:, :, start:end] = k, v
        attended = F.scaled_dot_product_attention(q, self.keys[:, :, :end], self.values[:, :, :end],
                                                  attn_mask=mask, scale=self.scaling,
                                                  enable_gqa=self.heads != self.kv_heads)  # [1, heads, T, head_dim]
        hidden = hidden + self.o_proj(attended.transpose(1, 2).reshape(1, new, -1))
        gate, up = F.linear(layer.post_attention_layernorm(hidden), *self.gate_up).chunk(2, dim=-1)
        hidden = hidden + self.down_proj(self.act(gate) * up)
        self.length = end
        return module.norm(hidden)[0]

    def crop(self, length: int) -> None:
        """Keep the first ``length`` cached positions (the later ones are overwritten by the next `forward`)."""
        self.length = min(self.length, length)


def _stacked(*linears: torch.nn.Linear) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The weights (and biases, if any) of linear layers reading the same input, stacked into one: ``(W, b)``."""
    biases = [linear.bias for linear in linears]
    bias = None if biases[0] is None else torch.cat(biases)
    return torch.cat([linear.weight for linear in linears]), bias
