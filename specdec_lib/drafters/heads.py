"""Medusa heads (Cai et al. 2024, Medusa-1): extra heads on the frozen target guess several tokens at once.

The target's last hidden state ``h_t`` (after its final norm, the LM head's input) already yields ``x_{t+1}``
through the LM head. Head j (j = 1 .. K) maps the *same* ``h_t`` to a guess of ``x_{t+1+j}``:

    head_j(h) = lm_head(h + SiLU(W_j h + b_j))        W_j: [D, D] (zero at initialisation: head_j = lm_head)

The LM head is the target's own, shared and frozen (not copied), so K heads add only ``K (D^2 + D)`` weights
(``2 K (D^2 + D)`` bytes in float16; the shared LM head alone has ``V D``). Drafting costs no model forward at all:
the hidden state comes with the target's verification forward (its ``hidden_layers``), and the heads are K small
matrix products plus the LM head on K rows.

One round, the committed sequence ``x_1 .. x_L``: the last hidden state the target reported, row ``n - 1`` of
`observe`, is ``h_{L-1}``, the one whose LM-head output was the last committed token ``x_L`` (the bonus
or correction token). Heads 1 .. min(k, K) on it propose ``d_1 .. d_k`` for ``x_{L+1} .. x_{L+k}``.

Sampling stays exact although head j ignores the drafts before it: exact verification needs each ``d_j`` to be
drawn from a distribution ``q_j`` that may depend on anything already fixed (the prefix, the earlier drafts) and
that exact distribution to be reported. Head j's ``q_j = logits_to_probs(head_j(h), sampling)`` depends on the
prefix only, a legitimate (if uninformed) choice of q given the earlier drafts; the rejection test then makes
the output follow the target whatever q is. Ignoring the earlier drafts only costs acceptance, never exactness.

What real Medusa adds and this leaves out: tree attention over the top-k candidates of every head (Medusa's
speed comes largely from verifying many candidate paths at once), Medusa-2's joint fine-tuning of the target, and
training on self-distilled data (the target's own generations). These heads are trained on the corpus with the
target frozen (`specdec_tools.training.heads`).
"""

from pathlib import Path

import torch
from torch import nn
from transformers import PreTrainedModel

from ..core.errors import ConfigError
from ..core.forward import LAST_HIDDEN
from ..core.paths import data_dir
from ..core.drafting import Context, Draft, Drafter, TargetOutput
from ..core.sampling import SamplingConfig, draw
from ..core.validation import check_count
from .frozen_target import load_drafter

KIND = "medusa-heads"
WHAT = "Medusa heads"


class MedusaHeads(nn.Module):
    """K residual SiLU blocks ``h -> h + SiLU(W_j h + b_j)`` of width D (Medusa-1); the LM head is not part of it."""

    def __init__(self, num_heads: int, hidden_size: int) -> None:
        super().__init__()
        check_count("num_heads", num_heads, minimum=1)
        self.blocks = nn.ModuleList(nn.Linear(hidden_size, hidden_size) for _ in range(num_heads))
        for block in self.blocks:  # each head starts as the LM head itself (Medusa's initialisation)
            nn.init.zeros_(block.weight)
            nn.init.zeros_(block.bias)

    @property
    def num_heads(self) -> int:
        return len(self.blocks)

    @property
    def architecture(self) -> dict:
        """What `load_heads` needs to rebuild the module (stored in ``config.json``)."""
        return {"num_heads": self.num_heads, "hidden_size": self.blocks[0].in_features,
                "block": "h + SiLU(W h + b)", "lm_head": "the target's, shared and frozen"}

    def forward(self, hidden: torch.Tensor, count: int | None = None) -> torch.Tensor:
        """Features ``[..., count, D]`` of heads 1 .. count (default all K) for ``hidden: [..., D]``; the target's
        LM head turns them into the logits of ``x_{t+2} .. x_{t+1+count}``."""
        blocks = self.blocks[: self.num_heads if count is None else count]
        return torch.stack([hidden + nn.functional.silu(block(hidden)) for block in blocks], dim=-2)


class HeadsDrafter(Drafter):
    """Draft with Medusa heads on the target's last hidden state (`speculative_generate` supplies it).

    ``HeadsDrafter(heads, target)`` uses ``target``'s LM head; `load` / `load_heads` read the shipped heads and
    refuse a target they were not trained for. Proposes ``min(k, K)`` tokens per round, greedy (argmax,
    ``probs=None``) or sampled from ``logits_to_probs(head logits, sampling)`` (those rows are ``probs``, over
    the target's ids: the LM head is the target's).
    """

    name = "medusa-heads"
    hidden_layers = LAST_HIDDEN  # the last layer's output after the final norm

    def __init__(self, heads: MedusaHeads, target: PreTrainedModel) -> None:
        self.heads = heads
        self.lm_head = target.get_output_embeddings()  # shared with the target, never trained here
        self._last: torch.Tensor | None = None  # [D]: h_{L-1}, the last hidden state the target reported
        self._observed = 0  # positions whose hidden state the target reported this generation

    @classmethod
    def load(cls, folder: str | Path, target: PreTrainedModel) -> "HeadsDrafter":
        """The heads saved in ``folder`` (config.json + float16 model.safetensors), on ``target``'s device and
        dtype, after checking that they were trained for ``target`` (`ConfigError` otherwise)."""
        architecture, state = load_drafter(Path(folder), KIND, target, WHAT)
        heads = MedusaHeads(architecture["num_heads"], architecture["hidden_size"])
        heads.load_state_dict(state)
        parameter = next(target.parameters())
        return cls(heads.to(device=parameter.device, dtype=parameter.dtype).eval(), target)

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return self.lm_head.weight.device

    def begin(self, context: Context, *, max_length: int | None = None, target_vocab_size: int | None = None) -> None:
        """Forget the last generation's hidden state (the heads need no buffers)."""
        self._last, self._observed = None, 0

    def observe(self, output: TargetOutput) -> None:
        """Keep the last row of ``output.hidden: [n, D]``: the state whose LM-head output is the newest committed
        token."""
        self._last = output.hidden[-1]
        self._observed += output.hidden.shape[0]

    @torch.inference_mode()
    def propose(self, context: Context, sampling: SamplingConfig, generator: torch.Generator | None) -> Draft:
        """Heads 1 .. min(k, K) on ``h_{L-1}`` propose ``x_{L+1} ..`` after the committed ``x_1 .. x_L``."""
        length = context.sequence.shape[1]
        if self._observed == 0:  # called before the target's first forward: nothing to draft from yet
            return Draft.empty(1, self.device)
        if self._observed != length - 1:
            raise ConfigError(
                f"HeadsDrafter drafts from the target's hidden states, which cover {self._observed} positions, but "
                f"the sequence has {length} tokens (they must cover all but the last). Run it through "
                "speculative_generate, which calls observe after every target forward."
            )
        count = min(context.k, self.heads.num_heads)
        if count == 0:
            return Draft.empty(1, self.device)
        hidden = self._last.to(self.lm_head.weight.dtype)
        tokens, probs = draw(self.lm_head(self.heads(hidden, count)).float(), sampling, generator)  # [count] ...
        return Draft(tokens=tokens, probs=probs)


def default_heads_folder() -> Path:
    """``data/models/heads``: the heads shipped for the embedded target."""
    return data_dir() / "models" / "heads"


def load_heads(target: PreTrainedModel, folder: str | Path | None = None) -> HeadsDrafter:
    """`HeadsDrafter.load` of ``folder`` (default: the shipped heads, trained for the embedded target)."""
    return HeadsDrafter.load(default_heads_folder() if folder is None else folder, target)
