"""From logits to the probability distribution a token is drawn from: temperature, top-k, top-p (nucleus).

The baseline, every drafter and every verifier go through `logits_to_probs` with the same `SamplingConfig`.
That matters for correctness, not tidiness: exact speculative sampling accepts a draft token x with
probability ``min(1, p(x) / q(x))`` and resamples rejections from ``norm(max(0, p - q))``, which reproduces the
target's distribution only if ``p`` is the *processed* target distribution the baseline would sample from, and
``q`` is the distribution the drafter *actually* sampled from. Processing p and q differently (say, top-k on
one of them only) silently changes the output distribution.
"""

import math
from dataclasses import dataclass
import torch

from .errors import ConfigError
from .validation import check_count, check_lenience, check_number, is_whole


@dataclass(frozen=True)
class SamplingConfig:
    """How next-token logits become a distribution.

    ``temperature == 0`` means greedy decoding (always the most likely token). Any temperature > 0 samples, however
    small: `logits_to_probs` divides the logits *after* subtracting their maximum, so ``temperature=1e-40`` gives a
    finite distribution (all mass on the most likely tokens, shared evenly among exact ties: the limit of
    sampling as T -> 0) instead of ``inf / inf = NaN``. ``top_k == 0`` and ``top_p == 1`` switch those filters
    off. Validated on construction, so a bad value fails where it is written.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        check_number("temperature", self.temperature, minimum=0,
                     hint="Use 0 for greedy decoding or a positive value such as 0.7 or 1.0 for sampling.")
        check_count("top_k", self.top_k, minimum=0,
                    hint="Use 0 to switch top-k off, or e.g. 50 to keep the 50 most likely tokens.")
        check_number("top_p", self.top_p, minimum=0, maximum=1, open_low=True,
                     hint="Use 1.0 to switch nucleus sampling off, or e.g. 0.9 to keep the smallest set holding 0.9 "
                          "of the mass.")

    @classmethod
    def greedy(cls) -> "SamplingConfig":
        """Greedy decoding: always the argmax token (``temperature=0``)."""
        return cls(temperature=0.0)

    @property
    def is_greedy(self) -> bool:
        """True when decoding is deterministic argmax (``temperature == 0``)."""
        return self.temperature == 0


GREEDY = SamplingConfig.greedy()
VERIFICATIONS = ("exact", "block", "relaxed")


def check_sampling(sampling: SamplingConfig, verification: str = "exact", lenience: float | None = None) -> None:
    """Refuse a sampling config that is not a `SamplingConfig` and an unknown or inconsistent verification mode."""
    if not isinstance(sampling, SamplingConfig):
        raise ConfigError(f"sampling must be a SamplingConfig, got {type(sampling).__name__}. Use e.g. GREEDY.")
    if verification not in VERIFICATIONS:
        raise ConfigError(
            f"verification must be 'exact' (token-wise rejection sampling), 'block' (block verification: the "
            f"accepted prefix decided jointly; both keep the target's distribution) or 'relaxed' (accepts more, "
            f"changes the distribution), got {verification!r}."
        )
    if verification == "relaxed":
        if sampling.is_greedy:
            raise ConfigError(
                "verification='relaxed' relaxes the acceptance test of *sampled* drafts; greedy decoding "
                "(temperature 0) has nothing to relax. Sample (e.g. SamplingConfig(temperature=1.0)) or use 'exact'."
            )
        check_lenience(lenience)
    elif lenience is not None:
        raise ConfigError(
            f"lenience={lenience!r} only applies to verification='relaxed'; {verification} verification has no "
            "lenience."
        )


def logits_to_probs(logits: torch.Tensor, config: SamplingConfig) -> torch.Tensor:
    """Turn ``logits: FloatTensor[..., V]`` into the float32 distribution ``FloatTensor[..., V]`` to sample from.

    Greedy: the one-hot vector of the argmax (ties go to the lowest token id, like `torch.argmax`), so greedy
    decoding is "sampling" from a point mass and the same verification code handles both. Otherwise, in order:

    1. temperature: ``z = (logits - max(logits)) / T`` (the shift leaves the softmax unchanged and keeps z finite
       for any T > 0: the top token gets z = 0, the others z <= 0, at worst -inf);
    2. top-k: keep the tokens whose logit is at least the k-th largest (ties with the k-th are kept too);
    3. top-p: keep the smallest set of most likely tokens whose probability reaches ``top_p`` (always at
       least the top token);
    4. ``softmax`` over the kept tokens (the others get probability exactly 0).
    """
    logits = logits.float()
    if config.is_greedy:
        return torch.nn.functional.one_hot(logits.argmax(dim=-1), logits.shape[-1]).float()  # [..., V]
    z = (logits - logits.amax(dim=-1, keepdim=True)) / config.temperature  # z_i = (l_i - max l) / T <= 0
    if 0 < config.top_k < z.shape[-1]:
        kth_largest = torch.topk(z, config.top_k, dim=-1).values[..., -1:]  # [..., 1]
        z = z.masked_fill(z < kth_largest, -math.inf)
    if config.top_p < 1:
        probs_sorted, order = torch.sort(torch.softmax(z, dim=-1), dim=-1, descending=True, stable=True)
        mass_before = probs_sorted.cumsum(dim=-1) - probs_sorted  # sum_{j < i} p_(j): mass of more likely tokens
        remove_sorted = mass_before >= config.top_p  # set already reached top_p without token i (never i = 0)
        remove = torch.zeros_like(remove_sorted).scatter(-1, order, remove_sorted)  # back to vocabulary order
        z = z.masked_fill(remove, -math.inf)
    return torch.softmax(z, dim=-1)


def sample_token(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw one token id per distribution in ``probs: FloatTensor[..., V]``; returns ``LongTensor[...]``.

    A one-hot (greedy) distribution always yields its argmax. ``generator`` (on the same device as ``probs``)
    makes draws reproducible independently of the global RNG; None uses the global RNG.
    """
    flat = probs.reshape(-1, probs.shape[-1])  # [B, V] for torch.multinomial
    return torch.multinomial(flat, num_samples=1, generator=generator).reshape(probs.shape[:-1])


def make_generator(seed: int | None, device: torch.device | str) -> torch.Generator | None:
    """A private RNG on ``device`` seeded with ``seed``, for `sample_token`; None (global RNG) when seed is None."""
    if seed is None:
        return None
    if not is_whole(seed):
        raise ConfigError(f"seed must be an integer or None, got {seed!r}. Pass a whole number such as 0 or 1234.")
    return torch.Generator(device=device).manual_seed(seed)


def draw(logits: torch.Tensor, sampling: SamplingConfig,
         generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One draft token per row of ``logits: [..., V]``: ``(tokens LongTensor[...], q FloatTensor[..., V] | None)``.

    Greedy: the argmax and None (a point mass needs no q row). Sampling: a draw from ``q = logits_to_probs(logits,
    sampling)``, the processing the target's p gets too, and that q: the distribution the token really came from,
    which a drafter must report (`specdec_lib.core.drafting`). Every model drafter draws with this function."""
    if sampling.is_greedy:
        return logits.argmax(dim=-1), None
    q = logits_to_probs(logits, sampling)
    return sample_token(q, generator), q
