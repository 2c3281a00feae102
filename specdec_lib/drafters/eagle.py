"""EAGLE-style drafting (Li et al. 2024, EAGLE-1): autoregress on the target's *features*, not on its tokens.

The target's last hidden state ``h_i`` (after its final norm: the LM head's input, the "feature") is far more
predictable than the token it produces. EAGLE trains one small decoder layer to predict the next feature from the
current one and the token actually chosen after it (which resolves the sampling's uncertainty):

    input at position i:   fc(concat(embed(x_{i+1}), h_i))      [2D] -> [D]; embed = the target's, frozen
    one decoder layer:     a LlamaDecoderLayer (own small config, the target's width, causal attention, RoPE)
    output:                RMSNorm -> the predicted feature  h^_{i+1}
    draft token:           lm_head(h^_{i+1}) -> x_{i+2}           lm_head = the target's, frozen

Training (`specdec_tools.training.heads`) regresses ``h^_{i+1}`` onto the true ``h_{i+1}`` (smooth L1) plus the
cross-entropy between the target's next-token distribution and the LM head's on the predicted feature, with the
target frozen. The final RMSNorm (initialised from the target's) keeps the predictions in the target's
post-norm feature space; EAGLE-1 has none there.

Drafting, with the committed sequence ``x_1 .. x_L``: the target has reported the features of positions
``1 .. L-1`` (`observe`), so the pairs ``(h_i, x_{i+1})`` are known for ``i <= L-1``. The drafter keeps its
own KV cache over those *true* pairs, feeds the new ones in one forward, and its output at position ``L-1`` is
``h^_L`` -> ``d_1``. Then it autoregresses on its *own* features: the pair ``(h^_L, d_1)`` -> ``h^_{L+1}`` -> ``d_2``,
and so on: k drafts cost k forwards of one layer. `accept` crops the cache back to the true pairs (the drafted
pairs hold predicted features, which the target's real ones replace at the next round). Drafting runs the layer
through `EagleRunner` (`specdec_lib.drafters.eagle_runner`): the same math with fused projections and a
pre-allocated cache, because at this size a draft step's cost is mostly the framework's bookkeeping.

EAGLE-3 (Li et al. 2025) changes two things, both available here. The true feature of a committed position can be a
*fusion* of several target layers (``feature_layers``, e.g. a low, a middle and the last: their hidden states side
by side, ``[3D]``, mapped to ``[D]`` by one linear layer, `EagleModule.fuse_features`), captured in the
verification forward the target runs anyway (the drafter's ``hidden_layers``); drafted positions still carry the
layer's own predicted feature. And training can unroll several draft steps on the layer's own predictions
(*training-time test*, `specdec_tools.training.heads.unrolled_predictions`), so that steps 2, 3, ... are trained on
the inputs they meet when drafting. (EAGLE-3 also drops the feature-regression loss; training keeps it by default,
``--eagle-regression-weight 0`` drops it, and the target's LM head reads the output either way.)

Training data: the target's features on corpus windows, or (``--train-text target``) on text the target wrote
itself, a corpus prompt and its greedy continuation per window: the contexts greedy decoding shows the drafter.

Token trees (`tree_speculative_generate`): a static `TreeShape` (EAGLE-1) or a `DynamicTree` grown by the layer's
confidence (EAGLE-2). Each depth's expanded nodes are fed in one forward, node n as the pair (its parent's predicted
feature, its token) at the position of its depth, seeing the true pairs and its ancestors only; `accept` drops every
drafted pair as after a chain. What EAGLE has and this leaves out: feature noise during training.
"""

from pathlib import Path

import torch
from torch import nn
from transformers import LlamaConfig, PreTrainedModel
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRMSNorm, LlamaRotaryEmbedding

from ..core.errors import ConfigError
from ..core.forward import LAST_HIDDEN, num_layers, run_layers
from ..core.paths import data_dir
from ..core.drafting import Context, Draft, Drafter, TargetOutput
from ..core.sampling import GREEDY, SamplingConfig, draw
from ..core.trees import grow_tree
from ..core.validation import is_whole
from .eagle_runner import EagleRunner
from .frozen_target import load_drafter

KIND = "eagle"
WHAT = "EAGLE weights"


def eagle_architecture(target: PreTrainedModel, intermediate_size: int | None = None,
                       feature_layers: tuple[int, ...] = LAST_HIDDEN) -> dict:
    """The decoder layer's config for ``target``: its width, heads, RoPE and context; the MLP width is
    ``intermediate_size`` (default: the target's); ``feature_layers``: the target's hidden states it reads
    (`EagleModule`)."""
    config = target.config
    heads = config.num_attention_heads
    return {
        "feature_layers": list(feature_layers),
        "hidden_size": config.hidden_size,
        "intermediate_size": intermediate_size or config.intermediate_size,
        "num_attention_heads": heads,
        "num_key_value_heads": getattr(config, "num_key_value_heads", None) or heads,
        "head_dim": getattr(config, "head_dim", None) or config.hidden_size // heads,
        "max_position_embeddings": config.max_position_embeddings,
        "rms_norm_eps": config.rms_norm_eps,
        "rope_parameters": dict(config.rope_parameters),
    }


def check_feature_layers(layers, target: PreTrainedModel) -> tuple[int, ...]:
    """``layers`` as a tuple of the target's hidden-state indices (0: the embeddings, i: after layer i, -1: after
    the final norm), refused unless they are distinct, increasing and end with -1: the last layer's normed state is
    also what the layer learns to predict."""
    count = num_layers(target)
    layers = tuple(layers)
    inner = layers[:-1]
    if (not layers or layers[-1] != -1 or any(not is_whole(i) or not 0 <= i < count for i in inner)
            or list(inner) != sorted(set(inner))):
        raise ConfigError(f"feature_layers must be increasing hidden-state indices in [0, {count}) followed by -1 "
                          f"(the last layer, normed), e.g. (4, 12, -1); got {list(layers)}.")
    return layers


class EagleModule(nn.Module):
    """fc + one decoder layer + RMSNorm: ``(h_i, x_{i+1}) -> h^_{i+1}`` (module docstring).

    Holds the target's embedding table and LM head *by reference* (not registered: they are the frozen target's,
    never saved, moved or cast with this module). It quacks like a one-layer decoder (``get_decoder``, ``layers``,
    ``rotary_emb``, ``norm``, ``embed_tokens``, ``config``) so that `run_layers` and `new_cache` serve it as they
    serve the target's own layer slices.
    """

    def __init__(self, architecture: dict, target: PreTrainedModel) -> None:
        super().__init__()
        layer_config = {key: value for key, value in architecture.items() if key != "feature_layers"}
        self.feature_layers = check_feature_layers(architecture.get("feature_layers", LAST_HIDDEN), target)
        self.config = LlamaConfig(num_hidden_layers=1, vocab_size=target.get_output_embeddings().out_features,
                                  **layer_config)
        self.config._attn_implementation = "sdpa"
        width = self.config.hidden_size
        if width != target.config.hidden_size:
            raise ConfigError(f"An EAGLE layer of width {width} cannot read a target of width {target.config.hidden_size}.")
        self.architecture = dict(architecture)
        fused = len(self.feature_layers) * width  # EAGLE-3: a low, a middle and the last hidden state side by side
        self.fuse = None
        if len(self.feature_layers) > 1:  # starts as the last layer's feature alone: EAGLE-1's input, then learns
            self.fuse = nn.Linear(fused, width, bias=False)
            with torch.no_grad():
                self.fuse.weight.zero_()
                self.fuse.weight[:, -width:].copy_(torch.eye(width))
        self.fc = nn.Linear(2 * width, width)
        self.layers = nn.ModuleList([LlamaDecoderLayer(self.config, layer_idx=0)])
        self.norm = LlamaRMSNorm(width, eps=self.config.rms_norm_eps)
        self.rotary_emb = LlamaRotaryEmbedding(self.config)
        self._target_parts = (target.get_input_embeddings(), target.get_output_embeddings())  # a tuple: not registered

    @property
    def embed_tokens(self) -> nn.Module:
        """The target's token embedding (frozen, shared)."""
        return self._target_parts[0]

    @property
    def lm_head(self) -> nn.Module:
        """The target's LM head (frozen, shared)."""
        return self._target_parts[1]

    @property
    def device(self) -> torch.device:
        return self.fc.weight.device

    def get_decoder(self) -> "EagleModule":
        return self

    def forward(self, features: torch.Tensor, next_ids: torch.Tensor, cache, *, positions: torch.Tensor | None = None,
                allowed: torch.Tensor | None = None) -> torch.Tensor:
        """Predicted features ``[B, T, D]`` for the pairs ``features: [B, T, D]`` (``h_i``) and
        ``next_ids: LongTensor[B, T]`` (``x_{i+1}``) at the T positions after those in ``cache`` (extended in place);
        ``positions`` and ``allowed`` as in `run_layers` (training-time test), else causal after the cache."""
        embedded = self.embed_tokens(next_ids).to(features.dtype)
        fused = self.fc(torch.cat([embedded, features], dim=-1))  # [B, T, D]
        return self.norm(run_layers(self, fused, cache, 0, 1, positions=positions, allowed=allowed))

    def fuse_features(self, states: torch.Tensor) -> torch.Tensor:
        """The target's hidden states ``[..., H * D]`` (its ``feature_layers``, side by side) as the one feature
        ``[..., D]`` a true pair carries: the last layer's itself (H = 1), or their learned fusion (EAGLE-3). Drafted
        pairs carry the layer's own predicted feature instead."""
        return states if self.fuse is None else self.fuse(states)

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        """float32 next-token logits ``[..., V]`` of features ``[..., D]`` through the target's LM head."""
        return self.lm_head(features.to(self.lm_head.weight.dtype)).float()


class EagleDrafter(Drafter):
    """Draft with an `EagleModule`, autoregressing on its own predicted features (module docstring).

    Keeps a KV cache over the committed positions whose true target features it has read (an `EagleRunner`, made
    per generation); `accept` rolls back the drafted ones. Greedy: argmax, ``probs=None``; sampling: each draft
    drawn from ``logits_to_probs(logits, sampling)``, those rows (over the target's ids) reported as ``probs``.
    """

    name = "eagle"
    trees = True

    def __init__(self, module: EagleModule) -> None:
        self.module = module
        self.runner: EagleRunner | None = None
        self._pending: list[torch.Tensor] = []  # [n, D] blocks: true features not yet fed to the cache
        self._observed = 0  # positions whose true feature the target reported this generation
        self._fed = 0  # true pairs in the cache (positions 0 .. fed - 1); drafted pairs sit after them

    @classmethod
    def load(cls, folder: str | Path, target: PreTrainedModel) -> "EagleDrafter":
        """The EAGLE layer saved in ``folder`` (config.json + float16 model.safetensors), on ``target``'s device
        and dtype, after checking that it was trained for ``target`` (`ConfigError` otherwise)."""
        architecture, state = load_drafter(Path(folder), KIND, target, WHAT)
        module = EagleModule(architecture, target)
        module.load_state_dict(state)
        parameter = next(target.parameters())
        return cls(module.to(device=parameter.device, dtype=parameter.dtype).eval())

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return self.module.device

    def begin(self, context: Context, *, max_length: int | None = None, target_vocab_size: int | None = None) -> None:
        """An empty cache sized for ``max_length`` positions (default: the layer's context); no features observed
        yet."""
        self.runner = EagleRunner(self.module, max_length or self.module.config.max_position_embeddings)
        self._pending, self._observed, self._fed = [], 0, 0

    @property
    def hidden_layers(self) -> tuple[int, ...]:  # type: ignore[override]
        """The target's hidden states the layer reads (`EagleModule.feature_layers`)."""
        return self.module.feature_layers

    def observe(self, output: TargetOutput) -> None:
        """Queue the target's hidden states ``output.hidden: [n, H * D]`` of the next n positions (fed at the next
        `propose`)."""
        self._pending.append(output.hidden)
        self._observed += output.hidden.shape[0]

    @torch.inference_mode()
    def propose(self, context: Context, sampling: SamplingConfig, generator: torch.Generator | None) -> Draft:
        """Up to ``context.k`` drafts after the committed sequence: feed the new true pairs, then autoregress."""
        sequence, k = context.sequence, context.k
        length = sequence.shape[1]
        if self.runner is not None and self._observed == 0:  # before the target's first forward: nothing to draft from
            return Draft.empty(1, self.device)
        if self.runner is None or self._observed != length - 1:
            raise ConfigError(
                f"EagleDrafter drafts from the target's hidden states, which cover {self._observed} positions, but "
                f"the sequence has {length} tokens (they must cover all but the last). Run it through "
                "speculative_generate, which calls observe after every target forward."
            )
        if k == 0:
            return Draft.empty(1, self.device)
        dtype = self.module.fc.weight.dtype
        # 0-based: the new true pairs (h_i, x_{i+1}) for i = fed .. L-2; the output at position L-2 is h^_{L-1}
        states = torch.cat(self._pending).to(device=self.device, dtype=dtype)  # [P, H * D]
        features = self.module.fuse_features(states)  # [P, D]: the features of positions fed .. L-2
        next_ids = sequence[0, self._fed + 1 : length].to(self.device)  # [P]: x_{fed+1} .. x_{L-1}
        self._pending = []
        predicted = self.runner.forward(features, next_ids)[-1]  # [D]: h^_{L-1}, whose LM head gives d_1
        self._fed = length - 1
        if context.tree is not None and not context.tree.is_chain:
            return self._propose_tree(context, predicted)
        if context.tree is not None:  # a chain-shaped tree: top-1 candidates, verified as point masses
            sampling = GREEDY
        tokens: list[torch.Tensor] = []
        rows: list[torch.Tensor] = []  # sampling only: the q rows
        for step in range(k):
            token, q = draw(self.module.logits(predicted), sampling, generator)  # [], [V] | None
            tokens.append(token)
            if q is not None:
                rows.append(q)
            if step + 1 < k:  # the last draft is never fed: nothing would read its output
                predicted = self.runner.forward(predicted.view(1, -1), token.view(1))[0]
        return Draft(tokens=torch.stack(tokens), probs=torch.stack(rows) if rows else None, forwards=k)

    def _propose_tree(self, context: Context, predicted: torch.Tensor) -> Draft:
        """A tree of ``context.tree`` (`grow_tree`) after the true pairs, whose last one (the root's, at cache slot
        ``fed - 1``) predicted ``predicted: [D]``: a fed node's pair is its parent's predicted feature and its own
        token (module docstring)."""
        outputs = [predicted]  # the predicted feature after the root, then after each fed node

        def feed(ids: torch.Tensor, parents: tuple[int, ...], first: int) -> torch.Tensor:
            features = torch.stack([outputs[1 + parent] for parent in parents[first - 1:]])  # [n, D]
            predicted_here = self.runner.forward(features, ids, tree=(parents, first, self._fed - 1))  # [n, D]
            outputs.extend(predicted_here)
            return self.module.logits(predicted_here)

        tree = grow_tree(context.tree, self.module.logits(predicted), feed)
        return Draft(tree.tokens[None], None, forwards=tree.forwards, parents=tree.parents)

    def accept(self, context: Context) -> None:
        """Drop the drafted pairs: keep the true ones (the target's features of the accepted drafts arrive through
        `observe` and are fed at the next `propose`)."""
        if self.runner is not None:
            self.runner.crop(self._fed)


def default_eagle_folder() -> Path:
    """``data/models/eagle``: the EAGLE layer shipped for the embedded target."""
    return data_dir() / "models" / "eagle"


def eagle3_folder() -> Path:
    """``data/models/eagle3``: the EAGLE-3-style layer shipped for the embedded target (fused features, trained with
    training-time test)."""
    return data_dir() / "models" / "eagle3"


def load_eagle(target: PreTrainedModel, folder: str | Path | None = None) -> EagleDrafter:
    """`EagleDrafter.load` of ``folder`` (default: the shipped layer, trained for the embedded target; the
    EAGLE-3-style one is in `eagle3_folder`)."""
    return EagleDrafter.load(default_eagle_folder() if folder is None else folder, target)
