"""Self-speculative drafting with the target's own first layers (LayerSkip, Elhoushi et al. 2024).

The target's first E layers plus its LM head (through the final norm) form the draft model: no second model, no
second tokenizer. The embedded target was trained with an auxiliary loss on layer E's exit (see
`specdec_tools.training.model_training`), so that shallow exit predicts well. What makes it cheaper than running a
separate E-layer draft is that **the drafting and the verification share one KV cache**: the keys and values
layers 1..E write while drafting are exactly the ones the full forward would write for the same tokens (a layer's
output depends only on the tokens before it), so verification runs only layers E+1..L on the drafted positions,
starting from the shallow hidden states the drafting already computed:

    round, committed sequence [..., t] (cache: layers 1..L hold every committed token but t)
    draft i = 1..k:  layers 1..E on the previous token (t, then d_1 ..) -> exit head -> d_i   (k shallow passes)
    verify:          layers 1..E on d_k (the one draft not yet through them), then layers E+1..L on
                     [t, d_1 .. d_k] from their saved shallow states -> logits [k + 1, V]    (one deep pass)
    rollback:        the loop crops every layer to the committed length, shallow and deep alike

A round therefore costs k + 1 shallow passes and one pass of the remaining L - E layers over k + 1 tokens, where
transformers' ``assistant_early_exit`` (which shares only the weights) also re-runs layers 1..E on the drafts
during verification and keeps a separate cache for the draft. The drafter plugs into the round engine through its
``verifier`` hook (`specdec_lib.core.drafting`): it keeps the target's cache and runs the verification forward
itself (`forward`), whose logits equal the full model's. The first round, whose forward reads the prompt, drafts
nothing: the shallow layers have no cache to draft from yet.
"""

import torch
from transformers import PreTrainedModel
from transformers.cache_utils import Cache

from ..core.errors import ConfigError
from ..core.forward import embed, lm_head_logits, num_layers, run_layers
from ..core.drafting import Context, Draft, Drafter
from ..core.sampling import SamplingConfig, draw
from ..core.validation import check_count


class EarlyExitDrafter(Drafter):
    """Draft with layers ``1 .. exit_layer`` of ``target`` and its LM head; verify with the rest (shared KV cache).

    ``exit_layer``: how many of the target's layers draft (default: the ``early_exit_layer`` the target's config
    records, 4 of 24 for the embedded target). The drafts' distribution is ``logits_to_probs`` of the exit head's
    logits, so exact sampling verification holds like for any drafter that reports its q.
    """

    name = "early-exit"

    def __init__(self, target: PreTrainedModel, exit_layer: int | None = None) -> None:
        layers = num_layers(target)
        if exit_layer is None:
            exit_layer = getattr(target.config, "early_exit_layer", None)
            if exit_layer is None:
                raise ConfigError(
                    f"{type(target).__name__}'s config records no early_exit_layer: pass exit_layer=E "
                    f"(1 <= E < {layers}), the number of its first layers that draft."
                )
        check_count("exit_layer", exit_layer, minimum=1, maximum=layers - 1,
                    hint=f"The first exit_layer of the target's {layers} layers draft, the remaining ones verify.")
        self.target = target
        self.exit_layer = exit_layer
        self.num_layers = layers  # L: the verification runs layers exit_layer .. L - 1
        self.name = f"early-exit@{exit_layer}"
        self._cache: Cache | None = None
        self._shallow: list[torch.Tensor] = []  # layer-E outputs [1, 1, D] of this round's drafted positions

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return self.target.device

    def verifier(self, rows) -> "EarlyExitDrafter":
        """The target's `CachedRows` for this generation: its cache is the one this drafter drafts into, and the
        drafter runs the verification forward (`forward`)."""
        self._cache = rows.cache
        return self

    def begin(self, context: Context, *, max_length: int | None = None, target_vocab_size: int | None = None) -> None:
        self._shallow = []

    def _require_cache(self) -> Cache:
        if self._cache is None:
            raise ConfigError(
                "EarlyExitDrafter drafts into the target's own KV cache: run it through speculative_generate, "
                "which lends it the cache (its verifier hook) before the first round."
            )
        return self._cache

    def propose(self, context: Context, sampling: SamplingConfig, generator: torch.Generator | None) -> Draft:
        """``context.k`` tokens from the exit head, each after one pass of layers ``1 .. E`` (written to the shared
        cache). The cache must hold every committed token but the last in every layer (the loop's invariant after
        each rollback)."""
        cache = self._require_cache()
        sequence, k = context.sequence, context.k
        committed = sequence.shape[1] - 1
        if cache.get_seq_length(0) == 0:  # before the prompt's forward has filled the cache: nothing to draft from
            return Draft.empty(1, self.device)
        if not cache.get_seq_length(0) == cache.get_seq_length(self.exit_layer) == committed:
            raise ConfigError(
                f"The shared cache holds {cache.get_seq_length(0)} tokens in the shallow layers and "
                f"{cache.get_seq_length(self.exit_layer)} in the deep ones, but the sequence has {committed + 1} "
                "(expected one fewer in every layer). Each propose() must be followed by the forward() "
                "that verifies it."
            )
        token = sequence[:, -1:]  # [1, 1]
        tokens, rows, self._shallow = [], [], []
        for _ in range(k):
            hidden = run_layers(self.target, embed(self.target, token), cache, 0, self.exit_layer)  # [1, 1, D]
            self._shallow.append(hidden)
            chosen, q = draw(lm_head_logits(self.target, hidden)[0, -1], sampling, generator)  # [], [V] | None
            token = chosen.view(1, 1)
            tokens.append(token)
            if q is not None:
                rows.append(q)
        if not tokens:
            return Draft.empty(1, self.device)
        return Draft(tokens=torch.cat(tokens, dim=1)[0], probs=torch.stack(rows) if rows else None, forwards=k)

    def forward(self, step_input: torch.Tensor, valid: torch.Tensor | None = None, *, logits_to_keep: int,
                tree_parents=None, hidden=None) -> tuple[torch.Tensor, None]:
        """The verification forward of ``step_input: LongTensor[1, T]`` (what the cache lacks, then the drafts):
        layers ``1 .. E`` only on the inputs drafting has not fed (``d_k``; all of them when nothing was drafted),
        then layers ``E + 1 .. L`` on every input from its layer-E state. Returns float32 logits ``[1,
        logits_to_keep, V]``, equal to the full target forward's, and no hidden states (one row, a chain: ``valid``,
        ``tree_parents`` and ``hidden`` are None)."""
        if valid is not None or tree_parents is not None or hidden is not None:
            raise ConfigError("EarlyExitDrafter verifies one row's chain of drafts: no batch, tree or hidden states.")
        cache = self._require_cache()
        fed = cache.get_seq_length(0) - cache.get_seq_length(self.exit_layer)  # inputs already through 1..E
        if fed != len(self._shallow) or fed > step_input.shape[1]:
            raise ConfigError(
                f"The shallow layers have cached {fed} tokens beyond the deep ones but this round drafted "
                f"{len(self._shallow)}: verify right after propose(), on the tokens it proposed."
            )
        shallow = self._shallow
        if fed < step_input.shape[1]:
            shallow = shallow + [run_layers(self.target, embed(self.target, step_input[:, fed:]), cache, 0,
                                            self.exit_layer)]
        self._shallow = []
        deep = run_layers(self.target, torch.cat(shallow, dim=1), cache, self.exit_layer, self.num_layers)
        return lm_head_logits(self.target, deep[:, -logits_to_keep:]), None  # [1, logits_to_keep, V]
