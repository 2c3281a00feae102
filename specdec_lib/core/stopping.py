"""When generation stops early: the end-of-sequence ids, resolved once per generation as `transformers` does.

``model.generate`` stops at the model's EOS unless told otherwise; so do `autoregressive_generate` and
`speculative_generate`. Their ``eos_token_id`` argument takes:

- ``"auto"`` (the default): the model's own EOS, from its generation config, else its model config (transformers
  fills both from the tokenizer when a model is saved; the embedded family has EOS id 0 in both);
- an id, or a list of ids (any of them stops generation, as in transformers);
- ``None``: never stop early, always generate ``max_new_tokens`` tokens (what benchmarks use to compare methods on
  equal lengths).
"""

from collections.abc import Sequence

from transformers import PreTrainedModel

from .errors import ConfigError
from .validation import is_whole

AUTO = "auto"


def _model_eos(model: PreTrainedModel) -> int | list[int] | None:
    """The EOS id(s) the model declares: its generation config's, else its model config's (None: none)."""
    generation_config = getattr(model, "generation_config", None)
    eos = getattr(generation_config, "eos_token_id", None)
    if eos is None:
        eos = getattr(model.config, "eos_token_id", None)
    return eos


def stop_token_ids(model: PreTrainedModel, eos_token_id: int | Sequence[int] | str | None = AUTO) -> frozenset[int]:
    """The ids after which generation with ``model`` stops (empty: it never stops early); see the module docstring."""
    eos = _model_eos(model) if eos_token_id == AUTO else eos_token_id
    if eos is None:
        return frozenset()
    ids = [eos] if is_whole(eos) else eos
    if isinstance(ids, str) or not isinstance(ids, Sequence) or not all(is_whole(i) and i >= 0 for i in ids):
        raise ConfigError(
            f"eos_token_id must be 'auto' (the model's own EOS), a token id >= 0, a list of ids, or None (never stop "
            f"early), got {eos_token_id!r}."
        )
    return frozenset(ids)
