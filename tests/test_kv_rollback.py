"""The rollback invariant of speculative decoding, checked after every round, and proof that the check bites.

After each round the target's KV cache must equal (allclose) the cache a fresh prefill of the committed tokens
but the last would build, and the draft model's cache must equal a fresh prefill of what its ``state.ids``
says it holds (a prefix of the committed sequence). The library's loop is not copied: a drafter subclass
snapshots both caches in `accept` (called right after the target's rollback), and the target's cache is
captured by wrapping the round engine's ``CachedRows``. The fast suite checks each prompt at one gamma (every
gamma once); the rest of the prompt x gamma grid is marked ``slow``.
"""

import copy
from dataclasses import dataclass

import pytest
import torch

import specdec_lib.core.engine as engine_module
import specdec_lib.drafters.cached_model as cached_model_module
from specdec_lib import DraftModelDrafter, autoregressive_generate, speculative_generate
from specdec_lib.core.forward import forward_with_cache
from specdec_lib.core.caches import new_cache
from specdec_lib.core.sampling import GREEDY, SamplingConfig

PROMPTS = [[0, 5, 17, 42, 3, 8, 61], [0, 9], [0, 33, 33, 12, 50, 7, 7, 7, 21, 40, 2, 6]]
GAMMAS = [1, 3, 5]
# the fast suite pairs each prompt with one gamma (all three gammas, all three prompts); the rest of the grid is slow
PROMPT_GAMMA_GRID = [
    pytest.param(prompt, gamma, id=f"prompt{index}-gamma{gamma}",
                 marks=() if index == GAMMAS.index(gamma) else pytest.mark.slow)
    for index, prompt in enumerate(PROMPTS) for gamma in GAMMAS
]


def perturbed_copy(model, scale: float, seed: int = 3):
    """``model`` with Gaussian noise (``scale`` x each tensor's std) on its weights: a draft that agrees sometimes."""
    copied = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in copied.parameters():
            noise = torch.randn(parameter.shape, generator=generator)
            parameter.add_(noise * scale * parameter.std().clamp_min(1e-3))
    return copied


@pytest.fixture(scope="module")
def target():
    """A tiny random Llama with a sharpened LM head: random models are near-uniform, so a sampled draft is
    almost always accepted; logits x 10 make sampling reject sometimes too (greedy is unchanged)."""
    from helpers import build_tiny_model, sharpen

    return sharpen(build_tiny_model("llama", seed=0, num_layers=2), 10.0)


@pytest.fixture(scope="module")
def close_draft(target):
    """Accepts roughly half of its drafts on the tiny target (some rounds 0, some all)."""
    return perturbed_copy(target, 0.2)


def kv(cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Clones of the in-use keys and values per layer: ``[1, kv_heads, T, head_dim]`` each."""
    return [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers if layer.keys is not None]


@dataclass
class Snapshot:
    sequence_length: int  # committed tokens L after the round
    target: list  # the target's cache after its rollback
    draft: list  # the draft's cache after accept
    draft_ids: torch.Tensor  # [1, C]: what the drafter says its cache holds


class SnapshotDrafter(DraftModelDrafter):
    """A DraftModelDrafter that snapshots both caches after every round's rollback."""

    def __init__(self, model, target_caches: list, **kwargs):
        super().__init__(model, **kwargs)
        self.target_caches = target_caches
        self.snapshots: list[Snapshot] = []

    def accept(self, context) -> None:
        super().accept(context)
        held = self.state.ids[:1, : self.state.held[0]].clone()
        self.snapshots.append(Snapshot(context.lengths[0], kv(self.target_caches[-1]), kv(self.cache), held))


@pytest.fixture
def captured_target_caches(monkeypatch) -> list:
    """Every cache the round engine creates for the target, in order."""
    caches = []

    class CapturingRows(engine_module.CachedRows):
        def __init__(self, *args, **options):
            super().__init__(*args, **options)
            caches.append(self.cache)

    monkeypatch.setattr(engine_module, "CachedRows", CapturingRows)
    return caches


def prefill_kv(model, ids: torch.Tensor) -> list:
    """The caches a fresh prefill of ``ids: [1, T]`` builds (empty list for T = 0)."""
    if ids.shape[1] == 0:
        return []
    cache = new_cache(model)
    with torch.inference_mode():
        forward_with_cache(model, ids, cache)
    return kv(cache)


def kv_mismatch(actual: list, expected: list) -> str | None:
    lengths = [k.shape[-2] for k, _ in actual], [k.shape[-2] for k, _ in expected]
    if len(expected) == 0:
        return None if all(n == 0 for n in lengths[0]) else f"holds {lengths[0]} tokens, expected none"
    if lengths[0] != lengths[1]:
        return f"holds {lengths[0]} tokens per layer, a fresh prefill {lengths[1]}"
    for index, ((k, v), (k_ref, v_ref)) in enumerate(zip(actual, expected)):
        if not (torch.allclose(k, k_ref, rtol=1e-4, atol=1e-5) and torch.allclose(v, v_ref, rtol=1e-4, atol=1e-5)):
            return f"layer {index} keys/values differ from a fresh prefill"
    return None


def rollback_violations(target, draft, sequence: torch.Tensor, snapshots: list[Snapshot]) -> list[str]:
    """Every round where a cache differs from the fresh prefill of what it should hold (empty: invariant holds)."""
    problems = []
    for round_index, snap in enumerate(snapshots):
        committed = sequence[:, : snap.sequence_length]
        problem = kv_mismatch(snap.target, prefill_kv(target, committed[:, :-1]))
        if problem:
            problems.append(f"round {round_index}: target cache {problem}")
        cached = snap.draft_ids.shape[1]
        if cached > snap.sequence_length - 1 or not torch.equal(snap.draft_ids, committed[:, :cached]):
            problems.append(f"round {round_index}: draft cache ids are not a prefix of the committed tokens")
            continue
        problem = kv_mismatch(snap.draft, prefill_kv(draft, snap.draft_ids))
        if problem:
            problems.append(f"round {round_index}: draft cache {problem}")
    return problems


def run_with_snapshots(target, draft, ids, target_caches, *, gamma, max_new_tokens, sampling=GREEDY, seed=None,
                       eos_token_id=None, cache_kind="dynamic"):
    drafter = SnapshotDrafter(draft, target_caches, cache_kind=cache_kind)
    result = speculative_generate(
        target, drafter, ids, gamma=gamma, max_new_tokens=max_new_tokens, sampling=sampling, seed=seed,
        eos_token_id=eos_token_id, cache_kind=cache_kind,
    )
    assert len(drafter.snapshots) == len(result.trace.rounds)  # one snapshot per round, prefill included
    return result, drafter.snapshots


# ---- the invariant holds ------------------------------------------------------------------------------------

@pytest.mark.parametrize("prompt, gamma", PROMPT_GAMMA_GRID)
@pytest.mark.parametrize("sampling", [GREEDY, SamplingConfig(temperature=1.0)], ids=["greedy", "sampling"])
def test_caches_equal_fresh_prefill_after_every_round(target, close_draft, captured_target_caches, prompt, gamma, sampling):
    draft = close_draft
    ids = torch.tensor([prompt])
    result, snapshots = run_with_snapshots(
        target, draft, ids, captured_target_caches, gamma=gamma, max_new_tokens=24, sampling=sampling, seed=12
    )
    assert rollback_violations(target, draft, result.sequence, snapshots) == []
    rollbacks = sum(r.accepted < r.drafted for r in result.trace.rounds)
    assert rollbacks > 0 or (gamma == 1 and not sampling.is_greedy)  # rollbacks happened (gamma 1 may accept all)
    if sampling.is_greedy:
        assert result.new_token_list == autoregressive_generate(target, ids, max_new_tokens=24).new_token_list


@pytest.mark.parametrize("sampling", [GREEDY, SamplingConfig(temperature=1.0)], ids=["greedy", "sampling"])
def test_invariant_holds_with_preallocated_caches(target, close_draft, captured_target_caches, sampling):
    ids = torch.tensor([PROMPTS[0]])
    result, snapshots = run_with_snapshots(
        target, close_draft, ids, captured_target_caches, gamma=4, max_new_tokens=24, sampling=sampling, seed=5,
        cache_kind="preallocated",
    )
    assert rollback_violations(target, close_draft, result.sequence, snapshots) == []


# ---- without rollback it breaks, and the check sees it ------------------------------------------------------

def disable_target_rollback(monkeypatch) -> None:
    """The loop *believes* it rolled the target's cache back (its bookkeeping moves on) but the cache keeps the
    rejected drafts' keys/values: the next forward places its tokens after them and attends to them."""

    class ForgetfulRows(engine_module.CachedRows):
        def truncate(self, keep) -> None:
            pass

    monkeypatch.setattr(engine_module, "CachedRows", ForgetfulRows)


@pytest.mark.parametrize("prompt", PROMPTS)
def test_without_target_rollback_tokens_are_wrong(target, close_draft, captured_target_caches, monkeypatch, prompt):
    ids = torch.tensor([prompt])
    expected = autoregressive_generate(target, ids, max_new_tokens=16).new_token_list
    disable_target_rollback(monkeypatch)
    result, snapshots = run_with_snapshots(target, close_draft, ids, captured_target_caches, gamma=3, max_new_tokens=16)
    assert result.new_token_list != expected  # wrong text
    violations = rollback_violations(target, close_draft, result.sequence, snapshots)
    assert any("target cache" in v for v in violations)  # and the invariant check catches it


def test_without_draft_rollback_check_catches_it_though_greedy_tokens_survive(
    target, close_draft, captured_target_caches, monkeypatch
):
    """A drafter that forgets to crop drafts garbage; greedy verification still protects the output (only the
    speed suffers), which is exactly why the cache check, not the tokens, must catch this bug."""
    ids = torch.tensor([PROMPTS[0]])
    expected = autoregressive_generate(target, ids, max_new_tokens=16).new_token_list
    def forgetful_crop(self, keep) -> None:  # the bookkeeping moves on, the cache keeps every drafted token
        self.held = [min(k, held) for k, held in zip(keep, self.held)]
        self.trusted = [min(t, h) for t, h in zip(self.trusted, self.held)]

    monkeypatch.setattr(cached_model_module.CachedModel, "crop", forgetful_crop)
    result, snapshots = run_with_snapshots(target, close_draft, ids, captured_target_caches, gamma=3, max_new_tokens=16)
    assert result.new_token_list == expected
    violations = rollback_violations(target, close_draft, result.sequence, snapshots)
    assert violations and all("draft cache" in v for v in violations)


# ---- edges --------------------------------------------------------------------------------------------------

def test_zero_accepted_rounds(target, tiny_draft_llama, captured_target_caches):
    ids = torch.tensor([PROMPTS[0]])
    result, snapshots = run_with_snapshots(target, tiny_draft_llama, ids, captured_target_caches, gamma=4, max_new_tokens=20)
    assert any(r.drafted > 0 and r.accepted == 0 for r in result.trace.rounds)
    assert rollback_violations(target, tiny_draft_llama, result.sequence, snapshots) == []
    assert result.new_token_list == autoregressive_generate(target, ids, max_new_tokens=20).new_token_list


def test_all_accepted_plus_bonus(target, captured_target_caches):
    ids = torch.tensor([PROMPTS[0]])
    result, snapshots = run_with_snapshots(target, target, ids, captured_target_caches, gamma=4, max_new_tokens=20)
    rounds = result.trace.rounds  # the first one too: the prompt's forward verifies 4 drafts
    assert all(r.accepted == r.drafted == 4 and r.emitted == 5 for r in rounds)
    assert rollback_violations(target, target, result.sequence, snapshots) == []
    # after an all-accepted round the draft never fed its last draft d_k: its cache holds L - 2 tokens
    assert all(s.draft_ids.shape[1] == s.sequence_length - 2 for s in snapshots)


def test_stop_at_max_new_tokens_mid_draft(target, close_draft, captured_target_caches):
    ids = torch.tensor([PROMPTS[1]])
    for max_new_tokens in (2, 4, 7):
        result, snapshots = run_with_snapshots(
            target, target, ids, captured_target_caches, gamma=4, max_new_tokens=max_new_tokens
        )
        assert len(result.new_token_list) == max_new_tokens
        assert result.trace.rounds[-1].drafted < 4  # the last round drafted fewer than gamma
        assert rollback_violations(target, target, result.sequence, snapshots) == []
        result, snapshots = run_with_snapshots(
            target, close_draft, ids, captured_target_caches, gamma=4, max_new_tokens=max_new_tokens
        )
        assert rollback_violations(target, close_draft, result.sequence, snapshots) == []


def test_eos_inside_an_accepted_draft(target, captured_target_caches):
    ids = torch.tensor([PROMPTS[0]])
    full = autoregressive_generate(target, ids, max_new_tokens=20).new_token_list
    # with the target as its own draft every round emits 5 tokens (1 + 5 + 5 ...): position 3 of round 2 is a
    # middle draft; pick as EOS a token first appearing there
    position = next(i for i in range(2, 6) if full[i] not in full[:i])
    eos = full[position]
    result, snapshots = run_with_snapshots(
        target, target, ids, captured_target_caches, gamma=4, max_new_tokens=20, eos_token_id=eos
    )
    assert result.new_token_list == full[: position + 1]
    last = result.trace.rounds[-1]
    assert last.accepted == 4 and last.emitted < last.accepted + 1  # stopped inside the accepted draft
    assert rollback_violations(target, target, result.sequence, snapshots) == []
