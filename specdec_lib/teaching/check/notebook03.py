"""Checks of notebook 03's exercises (the KV cache and its rollback): a crop by hand, the draft's rollback, KV bytes.

- ``my_crop(my_crop)``: the learner's in-place rollback of a ``DynamicCache`` against `crop_cache`, on small caches
  the check fills itself with random keys and values (no model);
- ``forget_draft_rollback(loop_with_rollbacks)``: the learner's two-cache loop, with the draft's rollback on or off,
  against the same loop written here, token for token and target forward for forward, on hidden prompts of the
  embedded pair (loaded once, like the notebook's: same device and dtype, so the two loops compute the same numbers);
- ``my_kv_bytes_per_token(my_kv_bytes_per_token)``: KV bytes per token from a config and a dtype, on hidden
  configs (multi-head, grouped-query and multi-query attention; float32, bfloat16, float16, float8);
- ``crossover_length(crossover_length)``: the first context length at which one sequence's cache exceeds the
  weights; ``llama_cache_crossover(tokens)``: that length for a Llama-3-8B-like model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import torch
from transformers import DynamicCache, LlamaConfig

from ...core.caches import cache_length, crop_cache, new_cache
from ...core.forward import forward_with_cache
from ...core.pair import ModelPair
from ...core.validation import is_whole
from ...core.verify import verify_greedy
from ...loading import load_pair
from ...prompts import load_prompts
from .core import Case, CheckReport, check_value, describe, is_number, mismatch, run_cases

# --- exercise 1: rollback in place --------------------------------------------------------------------------------


@dataclass(frozen=True)
class CacheSpec:
    """A small ``DynamicCache`` to build: ``layers`` layers of keys and values ``[1, heads, length, head_dim]``
    (random, from ``seed``), to be rolled back to its first ``keep`` positions."""

    layers: int
    heads: int
    length: int
    head_dim: int
    keep: int
    seed: int


def build_cache(spec: CacheSpec) -> DynamicCache:
    """A ``DynamicCache`` filled through ``cache.update`` (as a model's forward fills it), the same every call."""
    generator = torch.Generator().manual_seed(spec.seed)
    cache = DynamicCache()
    shape = (1, spec.heads, spec.length, spec.head_dim)
    for layer in range(spec.layers):
        cache.update(torch.randn(shape, generator=generator), torch.randn(shape, generator=generator), layer)
    return cache


def _crop_cases() -> list[Case]:
    specs = [("2 layers, 4 heads, 7 positions, keep 3", CacheSpec(2, 4, 7, 5, 3, 0)),
             ("3 layers, 2 heads, 9 positions, keep 8 (one rejected draft)", CacheSpec(3, 2, 9, 4, 8, 1)),
             ("1 layer, 1 head, 6 positions, keep 1", CacheSpec(1, 1, 6, 3, 1, 2)),
             ("2 layers, 3 heads, 5 positions, keep 5 (nothing rejected)", CacheSpec(2, 3, 5, 4, 5, 3)),
             ("4 layers, 2 heads, 8 positions, keep 0 (an empty cache)", CacheSpec(4, 2, 8, 2, 0, 4))]
    return [Case(name, (spec,)) for name, spec in specs]


def _keys_values(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
    """Each layer's ``(keys, values)`` of a transformers cache, or None if ``cache`` is not one."""
    layers = getattr(cache, "layers", None)
    if not isinstance(layers, list) or not all(hasattr(layer, "keys") for layer in layers):
        return None
    return [(layer.keys, layer.values) for layer in layers]


def _layer_problem(index: int, keys: Any, values: Any, original: tuple[torch.Tensor, torch.Tensor],
                   keep: int, assigned: bool = False) -> str | None:
    """Why one layer's ``keys`` / ``values`` are not ``original``'s first ``keep`` positions (None if they are).

    ``assigned``: whether the learner put new tensors on the layer (its keys are no longer the tensors it held)."""
    old_keys, old_values = original
    want = old_keys[:, :, :keep]
    total = old_keys.shape[2]
    if not isinstance(keys, torch.Tensor) or not isinstance(values, torch.Tensor):
        return f"Layer {index}'s keys or values are no longer tensors (got {type(keys).__name__})."
    if keys.shape != want.shape:
        if keys.dim() != 4:
            return mismatch(list(want.shape), list(keys.shape),
                            "keys must stay 4-D, [batch, kv_heads, T, head_dim]: slice only the positions, "
                            "keys[:, :, :keep].")
        if keys.shape[1] != old_keys.shape[1]:
            return mismatch(list(want.shape), list(keys.shape),
                            "you sliced dimension 1, the KV heads. Keys are [batch, kv_heads, T, head_dim]: the "
                            "positions are dimension 2, so keep keys[:, :, :keep].")
        if keys.shape[3] != old_keys.shape[3]:
            return mismatch(list(want.shape), list(keys.shape),
                            "you sliced the last dimension, head_dim (keys[..., :keep]). Keys are [batch, kv_heads, "
                            "T, head_dim]: the positions are dimension 2, so keep keys[:, :, :keep].")
        if keys.shape[2] == total and torch.equal(values, old_values[:, :, :keep]):
            return (f"Layer {index}'s values are cropped but its keys still hold all {total} positions. Hint: a layer "
                    "caches keys *and* values; crop both, or attention scores the rejected drafts' keys.")
        if keys.shape[2] == total and assigned:
            return (f"Layer {index} still holds all {total} positions, although you gave it new keys: your slice "
                    "cut another dimension than the positions (keys[:keep] slices the batch, which has size 1). "
                    "Hint: keys are [batch, kv_heads, T, head_dim]; keep keys[:, :, :keep].")
        if keys.shape[2] == total:
            return (f"Layer {index} still holds all {total} positions: nothing was removed from its keys. "
                    "Hint: assign the slice back to the layer, layer.keys = layer.keys[:, :, :keep] (slicing alone "
                    "makes a new tensor and leaves the layer as it was).")
        if 0 < keep < total and keys.shape[2] == total - keep and torch.equal(keys, old_keys[:, :, keep:]):
            return (f"Layer {index} kept the {total - keep} positions *after* the first {keep} and dropped the "
                    "prefix. Hint: [:, :, keep:] is the part a rollback removes (the rejected drafts); keep "
                    "[:, :, :keep].")
        if keys.shape[2] == 0 and keep == old_keys.shape[2]:
            return mismatch(list(want.shape), list(keys.shape),
                            "nothing was to be removed, yet the layer is empty: a slice like [:, :, :-(T - keep)] "
                            "becomes [:, :, :-0], which is empty. Slice by what you keep: [:, :, :keep].")
        removed = (" If you sliced [:, :, :-keep], that removes `keep` positions instead of keeping them."
                   if 0 < keep < total and keys.shape[2] == total - keep else "")
        if abs(keys.shape[2] - keep) == 1:
            return mismatch(list(want.shape), list(keys.shape),
                            f"layer {index} holds {keys.shape[2]} positions instead of {keep}: keep exactly the "
                            "first `keep` (the end of a slice is excluded: [:, :, :keep])." + removed)
        if removed:
            return mismatch(list(want.shape), list(keys.shape),
                            f"layer {index} holds T - keep = {keys.shape[2]} of its {total} positions: "
                            "[:, :, :-keep] removes `keep` "
                            "positions instead of keeping them. Keep the first `keep`: [:, :, :keep].")
        return mismatch(list(want.shape), list(keys.shape), f"layer {index} should hold the first {keep} positions.")
    if not torch.equal(keys, want):
        if keep and torch.equal(keys, old_keys[:, :, -keep:]):
            return (f"Layer {index} kept the *last* {keep} positions. Hint: the rejected drafts are the newest "
                    "tokens, at the end of the cache; a rollback keeps the oldest, keys[:, :, :keep].")
        return f"Layer {index}'s keys are not its first {keep} positions (same shape, other values)."
    if values.shape != want.shape or not torch.equal(values, old_values[:, :, :keep]):
        shown = list(values.shape)
        return (f"Layer {index}'s keys are right but its values are not (shape {shown}, expected {list(want.shape)}). "
                "Hint: a layer caches keys *and* values; crop both, or attention averages values of the rejected "
                "drafts.")
    return None


def _run_crop(learner: Any):
    """Build the case's cache, let ``learner`` crop it, and return (the caller's cache, what learner returned)."""
    def run(spec: CacheSpec):
        cache = build_cache(spec)
        held = [(layer.keys, layer.values) for layer in cache.layers]  # to tell "not assigned" from "sliced wrong"
        returned = learner(cache, spec.keep)
        return cache, returned, held
    return run


def _assigned(layers: list, held: list, index: int) -> bool:
    """Whether layer ``index``'s keys are another tensor object than the one it held before the learner's call."""
    return index < len(held) and layers[index][0] is not held[index][0]


def _judge_crop(case: Case, got: Any) -> str | None:
    spec = case.args[0]
    cache, returned, held = got
    original = _keys_values(build_cache(spec))
    reference = build_cache(spec)
    crop_cache(reference, spec.keep)
    layers = _keys_values(cache)
    if layers is None:
        return "After your function the cache no longer has its layers (cache.layers): crop each layer's tensors."
    if len(layers) != spec.layers:
        return f"The cache has {len(layers)} layers after your crop; it had {spec.layers}: crop them, keep them all."
    unchanged = all(torch.equal(k, ok) and torch.equal(v, ov) for (k, v), (ok, ov) in zip(layers, original))
    if unchanged and spec.keep < spec.length:
        returned_layers = _keys_values(returned)
        if returned is not None and returned is not cache and (
                returned_layers is not None or isinstance(returned, (list, tuple))):
            return ("The cache you were given is unchanged; your function returned another object instead. "
                    "Hint: the exercise rolls back *in place* (the loop keeps using the same cache object, as "
                    "crop_cache does): assign layer.keys and layer.values on the cache's own layers.")
        problem = _layer_problem(0, layers[0][0], layers[0][1], original[0], spec.keep, _assigned(layers, held, 0))
        return problem or "The cache is unchanged after your function."
    for index, ((keys, values), old) in enumerate(zip(layers, original)):
        problem = _layer_problem(index, keys, values, old, spec.keep, _assigned(layers, held, index))
        if problem is not None and index > 0:
            shape = list(keys.shape) if isinstance(keys, torch.Tensor) else type(keys).__name__
            return (f"Layer 0 is right but layer {index} is not (keys of shape {shape}, expected "
                    f"{list(old[0][:, :, :spec.keep].shape)}). Hint: every layer caches every token, so loop over "
                    "all of cache.layers.")
        if problem is not None:
            return problem
    if cache_length(cache) != cache_length(reference):
        return mismatch(cache_length(reference), cache_length(cache), "cache_length(cache) after the crop.")
    return None


def my_crop(learner: Any) -> CheckReport:
    """Check ``my_crop(cache, keep)``: rolls a ``DynamicCache`` back in place to its first ``keep`` positions."""
    return run_cases("my_crop", _run_crop(learner) if callable(learner) else learner, _crop_cases(), _judge_crop)


# --- exercise 2: forget only the draft's rollback -----------------------------------------------------------------

ROLLBACK_TOKENS = 24
# (prompt, gamma, draft_rollback): the learner's loop runs each; prompts the notebook does not show
ROLLBACK_CASES = [("code-004", 3, False), ("code-004", 3, True), ("code-007", 4, False), ("code-008", 4, False),
                  ("code-008", 4, True)]


@lru_cache(maxsize=1)
def embedded_pair() -> ModelPair:
    """The notebook's pair (``load_pair("embedded")``: same device and dtype), loaded on the first check."""
    return load_pair("embedded")


@torch.inference_mode()
def reference_loop(input_ids: torch.Tensor, gamma: int, max_new_tokens: int, *, draft_rollback: bool = True,
                   target_rollback: bool = True) -> tuple[list[int], int]:
    """The notebook's two-cache greedy loop (section 3) with each cache's rollback switched on or off: the new
    tokens and the target's forwards (one per round; the first round's reads the prompt and verifies its drafts)."""
    pair = embedded_pair()
    target, draft = pair.target, pair.draft
    t_cache, d_cache = new_cache(target), new_cache(draft)
    sequence, draft_read, forwards = input_ids, 0, 0
    while sequence.shape[1] - input_ids.shape[1] < max_new_tokens:
        length = sequence.shape[1]
        k = min(gamma, max_new_tokens - (length - input_ids.shape[1]) - 1)
        step, drafts = sequence[:, draft_read:], []
        for _ in range(k):
            token = forward_with_cache(draft, step, d_cache, logits_to_keep=1)[0, -1].argmax()
            drafts.append(int(token))
            step = token.view(1, 1)
        draft_tokens = torch.tensor(drafts, dtype=torch.long, device=input_ids.device)
        unread = sequence if length == input_ids.shape[1] else sequence[:, -1:]  # the prompt in round 1, then x_L
        block = torch.cat([unread, draft_tokens.view(1, -1)], dim=1)
        logits = forward_with_cache(target, block, t_cache, logits_to_keep=k + 1)[0]
        forwards += 1
        n, token, _ = verify_greedy(logits[None], draft_tokens[None]).tolist()[0]  # one round: a batch of one
        emitted = torch.tensor([drafts[:n] + [token]], device=input_ids.device)
        sequence = torch.cat([sequence, emitted], dim=1)
        if k > 0:
            draft_read = min(length + k - 1, sequence.shape[1] - 1)
        if target_rollback:
            crop_cache(t_cache, sequence.shape[1] - 1)
        if draft_rollback:
            crop_cache(d_cache, draft_read)
    return sequence[0, input_ids.shape[1]:].tolist(), forwards


@lru_cache(maxsize=None)
def _reference(prompt_id: str, gamma: int, draft_rollback: bool, target_rollback: bool = True) -> tuple:
    ids = _prompt_ids(prompt_id)
    tokens, forwards = reference_loop(ids, gamma, ROLLBACK_TOKENS, draft_rollback=draft_rollback,
                                      target_rollback=target_rollback)
    return tuple(tokens), forwards


def _prompt_ids(prompt_id: str) -> torch.Tensor:
    pair = embedded_pair()
    prompt = next(p for p in load_prompts("code") if p.id == prompt_id)
    return pair.target_tokenizer(prompt.prompt, return_tensors="pt").input_ids.to(pair.target.device)


def _rollback_cases() -> list[Case]:
    return [Case(f"{prompt_id}, gamma {gamma}, {ROLLBACK_TOKENS} tokens, draft_rollback={draft_rollback}",
                 (_prompt_ids(prompt_id), gamma, ROLLBACK_TOKENS, draft_rollback), (prompt_id, gamma, draft_rollback))
            for prompt_id, gamma, draft_rollback in ROLLBACK_CASES]


def _as_tokens(got: Any) -> list[int] | None:
    if isinstance(got, torch.Tensor):
        got = got.flatten().tolist()
    if isinstance(got, (list, tuple)) and all(is_whole(t) for t in got):
        return list(got)
    return None


def _judge_rollback(case: Case, got: Any) -> str | None:
    prompt_id, gamma, draft_rollback = case.expected
    tokens, forwards = _reference(prompt_id, gamma, draft_rollback)
    if not (isinstance(got, tuple) and len(got) == 2):
        return (f"Expected a pair (new tokens, target forwards), got {describe(got)}.\nHint: return "
                "sequence[0, input_ids.shape[1]:].tolist() and the number of target forwards, one per round.")
    mine, count = _as_tokens(got[0]), got[1]
    if mine is None or not is_number(count):
        return f"Expected (a list of token ids, a number of forwards), got {describe(got)}."
    if mine != list(tokens):
        at = next((i for i, (a, b) in enumerate(zip(mine, tokens)) if a != b), min(len(mine), len(tokens)))
        where = f"The new tokens differ from the reference loop's from position {at} on"
        if len(mine) != len(tokens):
            return (f"{where}: {len(mine)} tokens instead of {len(tokens)}.\nHint: the loop writes exactly "
                    "max_new_tokens new tokens (the prompt excluded).")
        unrolled = {_reference(prompt_id, gamma, rollback, target_rollback=False)[0] for rollback in (False, True)}
        if tuple(mine) in unrolled:
            return (f"{where}: they are the text of a loop whose *target* cache keeps the rejected drafts.\nHint: "
                    "whatever draft_rollback says, crop the target's cache every round, crop_cache(t_cache, "
                    "sequence.shape[1] - 1); only the draft's crop depends on draft_rollback.")
        return f"{where}.\nHint: start from section 3's loop; change only which caches are cropped."
    count = float(count)
    if count == forwards:
        return None
    other = _reference(prompt_id, gamma, not draft_rollback)[1]
    if count == other and other != forwards:
        if draft_rollback:
            return mismatch(forwards, count, "that is the count of the loop that never crops the draft's cache: with "
                                             "draft_rollback=True, crop it every round, crop_cache(d_cache, "
                                             "draft_read).")
        return mismatch(forwards, count, "that is the count of the loop that rolls both caches back: with "
                                         "draft_rollback=False the draft's cache must keep its rejected drafts (skip "
                                         "crop_cache(d_cache, ...)); the target's is still cropped.")
    if count == forwards + 1:
        return mismatch(forwards, count, "there is no forward before the first round: its forward reads the prompt "
                                         "and verifies the first drafts, so count one forward per round.")
    if count == len(tokens):
        return mismatch(forwards, count, "that is the number of new tokens; count the target's forwards, one per "
                                         "round.")
    return mismatch(forwards, count, "count one target forward per round of the loop, the first included.")


def forget_draft_rollback(learner: Any) -> CheckReport:
    """Check ``loop_with_rollbacks(input_ids, gamma, max_new_tokens, draft_rollback) -> (new tokens, target
    forwards)``: section 3's two-cache loop that crops the target's cache every round and the draft's only when
    ``draft_rollback``, against `reference_loop` on hidden prompts (both settings)."""
    report = run_cases("forget_draft_rollback", learner, _rollback_cases() if callable(learner) else [],
                       _judge_rollback)
    if report:
        return CheckReport(report.exercise, report.cases, note=(
            "Now compare draft_rollback=True and False on a few prompts of your own: are the tokens the same? the "
            "target forwards? Why?"))
    return report


# --- exercise 3: when does the cache outgrow the weights? ---------------------------------------------------------


def _element_bytes(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _config(layers: int, heads: int, kv_heads: int, head_dim: int) -> LlamaConfig:
    """A Llama config with these attention shapes (``hidden_size = heads * head_dim``, as in Llama)."""
    return LlamaConfig(num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                       head_dim=head_dim, hidden_size=heads * head_dim, intermediate_size=4 * heads * head_dim,
                       vocab_size=256)


def _kv_cases() -> list[Case]:
    configs = [("24 layers, 4 heads (all KV) of 48 dims, float32: the notebook's target", (24, 4, 4, 48),
                torch.float32),
               ("28 layers, 24 heads, 8 KV heads of 128 dims, bfloat16 (grouped-query attention)",
                (28, 24, 8, 128), torch.bfloat16),
               ("16 layers, 8 heads, 1 KV head of 64 dims, float16 (multi-query attention)", (16, 8, 1, 64),
                torch.float16),
               ("40 layers, 40 heads, 8 KV heads of 128 dims, float8_e4m3fn", (40, 40, 8, 128), torch.float8_e4m3fn),
               ("2 layers, 6 heads, 3 KV heads of 16 dims, float32", (2, 6, 3, 16), torch.float32)]
    out = []
    for name, shape, dtype in configs:
        layers, _, kv_heads, head_dim = shape
        out.append(Case(name, (_config(*shape), dtype), 2 * layers * kv_heads * head_dim * _element_bytes(dtype)))
    return out


def _judge_kv(case: Case, got: Any) -> str | None:
    config, dtype = case.args
    if not is_number(got):
        return f"Expected a number of bytes, got {describe(got)}."
    value, expected = float(got), case.expected
    if value == expected:
        return None
    layers, heads, kv_heads = config.num_hidden_layers, config.num_attention_heads, config.num_key_value_heads
    element = _element_bytes(dtype)
    slips = [(expected / 2, "you counted one tensor per layer: the cache keeps keys *and* values, a factor 2."),
             (expected * heads / kv_heads, "you used num_attention_heads; the cache stores num_key_value_heads heads "
                                           "(grouped-query attention shares each key/value head among several "
                                           "query heads)."),
             (expected / 2 * heads / kv_heads, "two slips: keys and values (a factor 2), and KV heads "
                                               "(num_key_value_heads), not attention heads."),
             (expected * 8, "that is bits, not bytes: torch.finfo(dtype).bits counts bits; one value takes "
                            "torch.empty((), dtype=dtype).element_size() bytes (bits // 8)."),
             (expected * 4 / element, "you assumed 4 bytes (float32) per value whatever the dtype; use the dtype's "
                                      "own size, torch.empty((), dtype=dtype).element_size()."),
             (expected / layers, "that is one layer's worth: every layer caches its own keys and values."),
             (expected / config.head_dim, "you left out head_dim: each KV head stores a vector of head_dim values "
                                          "per token, for the keys and for the values.")]
    for wrong, hint in slips:
        if wrong != expected and math.isclose(value, wrong):
            return mismatch(expected, got, hint)
    return mismatch(expected, got, "bytes per token = 2 (keys, values) x layers x KV heads x head_dim x bytes per "
                                   "value.")


def my_kv_bytes_per_token(learner: Any) -> CheckReport:
    """Check ``my_kv_bytes_per_token(config, dtype) -> int``: the KV-cache bytes one token costs."""
    return run_cases("my_kv_bytes_per_token", learner, _kv_cases(), _judge_kv)


def _crossover_cases() -> list[Case]:
    pairs = [("the target: 36864 bytes per token, 45650880 bytes of weights", 36_864, 45_650_880),
             ("weights exactly 1000 tokens' worth: at 1000 tokens the cache only equals them", 4_096, 4_096_000),
             ("a cache that outgrows the weights at the first token", 10_000, 5_000),
             ("131072 bytes per token, 16e9 bytes of weights (a Llama-3-8B-like model)", 131_072, 16 * 10**9)]
    return [Case(name, (per_token, weights), weights // per_token + 1) for name, per_token, weights in pairs]


def _judge_crossover(case: Case, got: Any) -> str | None:
    per_token, weights = case.args
    expected = case.expected
    if not is_number(got):
        return f"Expected a number of tokens, got {describe(got)}."
    value = float(got)
    if value == expected:
        return None
    if not value.is_integer() and math.isclose(value, weights / per_token):
        return mismatch(expected, got, "a context length is a whole number of tokens: the first T with "
                                       "T x bytes_per_token > weight_bytes.")
    if value == expected - 1:
        return mismatch(expected, got, f"at {int(value)} tokens the cache holds {int(value) * per_token} bytes, not "
                                       f"more than the {weights} bytes of weights: it must *exceed* them, one token "
                                       "more (weight_bytes // bytes_per_token + 1).")
    if math.isclose(value, per_token / weights) or math.isclose(value, per_token * weights):
        return mismatch(expected, got, "tokens = weight bytes / bytes per token (bytes over bytes per token).")
    return mismatch(expected, got, "the first T with T x bytes_per_token > weight_bytes: "
                                   "weight_bytes // bytes_per_token + 1.")


def crossover_length(learner: Any) -> CheckReport:
    """Check ``crossover_length(bytes_per_token, weight_bytes) -> int``: the first context length (tokens) at which
    one sequence's KV cache holds more bytes than the weights."""
    return run_cases("crossover_length", learner, _crossover_cases(), _judge_crossover)


def llama_cache_crossover(tokens: Any) -> CheckReport:
    """Check the context length at which a Llama-3-8B-like model's cache (32 layers, 8 KV heads of 128 dims, bf16)
    exceeds its weights, taken as 16e9 bytes (16 * 2**30 bytes is accepted too)."""
    per_token = 2 * 32 * 8 * 128 * 2
    return check_value(
        "llama_cache_crossover", tokens, 16 * 10**9 // per_token + 1, rel_tol=0.08,
        too_low="your bytes per token are too large: 8 KV heads (not the 32 attention heads), 2 bytes per bf16 value "
                "(not 16 bits, not float32's 4).",
        too_high="your bytes per token are too small: did you forget the factor 2 (keys and values) or the 32 layers?",
        note=f"{per_token} bytes ({per_token // 1024} KiB) per token: a sequence of 8192 tokens holds "
             f"{8192 * per_token / 2**30:g} GiB, and a batch of {16 * 10**9 // (8192 * per_token) + 1} such sequences "
             "already outweighs the weights. The draft adds its own cache per sequence.")
