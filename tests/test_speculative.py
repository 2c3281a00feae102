"""speculative.py: greedy speculative decoding is token-identical to the target alone, for any draft quality.

Three drafts span the range of acceptance: the target itself (everything accepted), an unrelated random model
(almost nothing accepted) and the target with noise on one layer (in between). The fast suite runs them at
`FAST_GAMMAS`; the other gammas of the grid are marked ``slow`` (gamma 8 is also met by the EOS, budget and
context-limit tests below).
"""

import copy

import pytest
import torch

from helpers import hf_greedy
from specdec_lib import Draft, Drafter, DraftModelDrafter, speculative_generate
from specdec_lib import autoregressive_generate
from specdec_lib.core.errors import ConfigError, InputError
from specdec_lib.core.sampling import SamplingConfig
from specdec_lib.core.validation import check_same_device
from specdec_lib.core.trace import (
    RoundRecord,
    Trace,
    acceptance_rate,
    draft_forwards,
    per_position_acceptance,
    target_forwards,
    time_to_first_token,
    tokens_per_target_forward,
)

PROMPTS = [[0, 5, 17, 42, 3, 8, 61], [7], [2, 9, 30]]
GAMMAS = [1, 2, 3, 4, 6, 8]
FAST_GAMMAS = (1, 4)  # gamma 1, and a longer one (its lengths gamma and gamma + 1 cut the first round's drafts)
LONGEST = 20


def with_noise(model, scale, seed=0):
    """A copy of ``model`` with Gaussian noise on its last layer's MLP: a draft that agrees only partly."""
    noisy = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    last = model.config.num_hidden_layers - 1
    with torch.no_grad():
        for name, parameter in noisy.named_parameters():
            if f"layers.{last}.mlp" in name:
                parameter.add_(torch.randn(parameter.shape, generator=generator) * scale)
    return noisy


@pytest.fixture(scope="module")
def drafts(tiny_llama, tiny_draft_llama):
    return {"self": tiny_llama, "unrelated": tiny_draft_llama, "noisy": with_noise(tiny_llama, 0.03)}


@pytest.fixture(scope="module")
def references(tiny_llama):
    """Per prompt: the target's greedy continuation of LONGEST tokens, checked against transformers."""
    refs = {}
    for prompt in PROMPTS:
        ids = torch.tensor([prompt])
        ours = autoregressive_generate(tiny_llama, ids, max_new_tokens=LONGEST).new_token_list
        assert ours == hf_greedy(tiny_llama, ids, LONGEST)
        refs[tuple(prompt)] = ours
    return refs


def check_trace(result):
    trace = result.trace
    rounds = trace.rounds
    assert sum(r.emitted for r in rounds) == len(result.new_token_list) == len(trace.token_times)
    assert all(0 <= r.accepted <= r.drafted for r in rounds)
    assert all(r.emitted == r.accepted + 1 for r in rounds)  # no EOS here: every round adds one target token
    assert target_forwards(trace) == len(rounds)
    assert draft_forwards(trace) == sum(r.draft_forwards for r in rounds)
    assert rounds[0].drafted == 0 and rounds[0].emitted == 1  # the prefill round
    assert trace.token_times == sorted(trace.token_times) and time_to_first_token(trace) > 0
    assert all(r.draft_time >= 0 and r.verify_time > 0 for r in rounds)


def test_every_full_accept_adds_the_bonus_token(tiny_llama, references):
    """The target drafting for itself accepts every draft, so each round emits gamma + 1 tokens: its drafts and the
    bonus (greedy output would stay identical without the bonus; only the rounds show it).

    Generation ends on an EOS inside the third round's drafts, not on the budget: a loop that drops the bonus may
    never fill a budget (a round with no drafts would emit nothing), so the budget-ended tests below could hang
    instead of failing. That is also why this test comes first in the module (``-x`` stops here)."""
    ids, eos = eos_case(tiny_llama, references, 12)  # round 3 holds new tokens 11 .. 15: 12 is its second draft
    result = speculative_generate(tiny_llama, DraftModelDrafter(tiny_llama), ids, gamma=4, max_new_tokens=LONGEST,
                                  eos_token_id=eos)
    rounds = [(r.drafted, r.accepted, r.emitted) for r in result.trace.rounds]
    assert rounds == [(0, 0, 1), (4, 4, 5), (4, 4, 5), (4, 4, 2)]
    assert result.new_token_list == references[tuple(PROMPTS[0])][:13]


@pytest.mark.parametrize("gamma", [g if g in FAST_GAMMAS else pytest.param(g, marks=pytest.mark.slow) for g in GAMMAS])
@pytest.mark.parametrize("draft_name", ["self", "unrelated", "noisy"])
def test_greedy_is_token_identical_to_the_target_alone(tiny_llama, drafts, references, draft_name, gamma):
    drafter = DraftModelDrafter(drafts[draft_name])
    for prompt in PROMPTS:
        ids = torch.tensor([prompt])
        for max_new_tokens in sorted({1, gamma, gamma + 1, LONGEST}):
            result = speculative_generate(tiny_llama, drafter, ids, gamma=gamma, max_new_tokens=max_new_tokens)
            assert result.new_token_list == references[tuple(prompt)][:max_new_tokens], (prompt, max_new_tokens)
            assert torch.equal(result.sequence[:, : len(prompt)], ids)
            assert result.method == "speculative[draft-model]"
            check_trace(result)
            assert all(r.drafted <= gamma for r in result.trace.rounds)


def acceptance_over_prompts(target, draft, gamma=4):
    results = [
        speculative_generate(target, DraftModelDrafter(draft), torch.tensor([p]), gamma=gamma, max_new_tokens=LONGEST)
        for p in PROMPTS
    ]
    drafted = sum(r.drafted for result in results for r in result.trace.rounds)
    return sum(r.accepted for result in results for r in result.trace.rounds) / drafted, results


def test_per_position_acceptance_on_a_hand_made_trace():
    trace = Trace(start_time=0.0)
    for drafted, accepted in [(0, 0), (3, 3), (3, 1), (3, 0), (2, 2)]:  # the prefill, then 4 rounds
        trace.add_round(RoundRecord(drafted, accepted, accepted + 1, 0.0, 0.0, drafted), 1.0)
    # position 0: drafted 4 times, accepted in 3; position 1: 3 of 4; position 2: drafted 3 times, accepted once
    assert per_position_acceptance(trace) == [3 / 4, 2 / 4, 1 / 3]
    assert per_position_acceptance(Trace(start_time=0.0)) == []


def test_the_target_as_its_own_draft_accepts_everything(tiny_llama):
    rate, results = acceptance_over_prompts(tiny_llama, tiny_llama)
    assert rate == 1.0
    for result in results:
        assert per_position_acceptance(result.trace) == [1.0] * 4
        # 20 tokens: the prefill's 1, then rounds of 4 accepted + 1 bonus, the last one shortened: 1 + 5 + 5 + 5 + 4
        assert [r.emitted for r in result.trace.rounds] == [1, 5, 5, 5, 4]
        assert tokens_per_target_forward(result.trace) == 4.0
        assert draft_forwards(result.trace) == 4 + 4 + 4 + 3  # one forward per drafted token


def test_acceptance_orders_the_drafts(tiny_llama, drafts):
    unrelated, _ = acceptance_over_prompts(tiny_llama, drafts["unrelated"])
    noisy, results = acceptance_over_prompts(tiny_llama, drafts["noisy"])
    assert unrelated < 0.2 < noisy < 0.9
    for result in results:
        by_position = per_position_acceptance(result.trace)
        assert len(by_position) == 4 and all(0 <= rate <= 1 for rate in by_position)
        assert by_position[0] >= by_position[-1]  # position i is accepted only if 0 .. i - 1 were


def test_draft_in_another_dtype_is_fine(tiny_llama, references):
    half = copy.deepcopy(tiny_llama).to(torch.bfloat16)
    ids = torch.tensor([PROMPTS[0]])
    result = speculative_generate(tiny_llama, DraftModelDrafter(half), ids, gamma=4, max_new_tokens=LONGEST)
    assert result.new_token_list == references[tuple(PROMPTS[0])]
    assert acceptance_rate(result.trace) > 0.5


def eos_case(tiny_llama, references, index):
    """An eos id equal to the target's greedy token at ``index`` (its first occurrence there)."""
    greedy = references[tuple(PROMPTS[0])]
    eos = greedy[index]
    assert greedy.index(eos) == index, "pick an index where the token appears for the first time"
    return torch.tensor([PROMPTS[0]]), eos


@pytest.mark.parametrize("draft_name", ["self", "unrelated", "noisy"])
@pytest.mark.parametrize("index", [0, 3, 6])
def test_stops_right_after_eos_like_the_baseline(tiny_llama, drafts, references, draft_name, index):
    ids, eos = eos_case(tiny_llama, references, index)
    expected = autoregressive_generate(tiny_llama, ids, max_new_tokens=LONGEST, eos_token_id=eos).new_token_list
    assert expected[-1] == eos and len(expected) == index + 1
    result = speculative_generate(
        tiny_llama, DraftModelDrafter(drafts[draft_name]), ids, gamma=8, max_new_tokens=LONGEST, eos_token_id=eos
    )
    assert result.new_token_list == expected
    assert sum(r.emitted for r in result.trace.rounds) == len(expected)


def test_eos_inside_an_accepted_draft_ends_the_round_there(tiny_llama, references):
    ids, eos = eos_case(tiny_llama, references, 3)
    result = speculative_generate(
        tiny_llama, DraftModelDrafter(tiny_llama), ids, gamma=8, max_new_tokens=LONGEST, eos_token_id=eos
    )
    prefill, last = result.trace.rounds
    assert (last.drafted, last.accepted, last.emitted) == (8, 8, 3)  # all 8 accepted; only up to the EOS is kept
    assert result.new_token_list[-1] == eos and len(result.new_token_list) == 4


def test_drafts_are_cut_to_fit_max_new_tokens(tiny_llama):
    drafter, ids = DraftModelDrafter(tiny_llama), torch.tensor([[3]])
    result = speculative_generate(tiny_llama, drafter, ids, gamma=8, max_new_tokens=6)
    assert [(r.drafted, r.emitted) for r in result.trace.rounds] == [(0, 1), (4, 5)]
    single = speculative_generate(tiny_llama, drafter, ids, gamma=8, max_new_tokens=1)
    assert [(r.drafted, r.draft_forwards) for r in single.trace.rounds] == [(0, 0)]


def test_generation_up_to_the_context_limit(tiny_llama, make_tiny_model):
    context = tiny_llama.config.max_position_embeddings
    ids = torch.arange(2, 2 + context - 10).remainder(64).view(1, -1)
    expected = autoregressive_generate(tiny_llama, ids, max_new_tokens=10).new_token_list
    assert speculative_generate(
        tiny_llama, DraftModelDrafter(tiny_llama), ids, gamma=8, max_new_tokens=10
    ).new_token_list == expected
    short_draft = make_tiny_model(seed=1, num_layers=1)
    short_draft.config.max_position_embeddings = 16  # shorter than the prompt: it proposes nothing, all still works
    result = speculative_generate(tiny_llama, DraftModelDrafter(short_draft), ids, gamma=4, max_new_tokens=10)
    assert result.new_token_list == expected and draft_forwards(result.trace) == 0


class OracleDrafter(Drafter):
    """Proposes a fixed continuation (wrong from position ``wrong_at`` on), without probabilities."""

    name = "oracle"

    def __init__(self, prompt_length, continuation, wrong_at):
        self.prompt_length, self.continuation, self.wrong_at = prompt_length, continuation, wrong_at

    def propose(self, context, sampling, generator):
        sequence, k = context.sequence, context.k
        start = sequence.shape[1] - self.prompt_length
        block = self.continuation[start : start + k]
        tokens = [t if start + i < self.wrong_at else (t + 1) % 64 for i, t in enumerate(block)]
        return Draft(torch.tensor(tokens, dtype=torch.long))


def test_any_drafter_behind_the_interface(tiny_llama, references):
    reference = references[tuple(PROMPTS[0])]
    drafter = OracleDrafter(len(PROMPTS[0]), reference + [0] * 10, wrong_at=9)
    result = speculative_generate(tiny_llama, drafter, torch.tensor([PROMPTS[0]]), gamma=3, max_new_tokens=LONGEST)
    assert result.new_token_list == reference and result.method == "speculative[oracle]"
    assert draft_forwards(result.trace) == 0
    # rounds start at new tokens 1, 5, 9 (all right up to 9), then every draft is wrong: one token per round
    assert [r.accepted for r in result.trace.rounds][:5] == [0, 3, 3, 0, 0]


@pytest.mark.parametrize("gamma", [0, -1, 2.5, True, "4", None])
def test_bad_gamma_is_explained(tiny_llama, gamma):
    drafter = DraftModelDrafter(tiny_llama)
    with pytest.raises(ConfigError, match="gamma"):
        speculative_generate(tiny_llama, drafter, torch.tensor([[3]]), gamma=gamma, max_new_tokens=4)


def test_sampling_is_verified_exactly(tiny_llama):
    """Sampling runs through verify_exact (distribution checks: tests/test_sampling_distribution.py); a draft that
    is the target itself is always accepted, since p == q (up to float rounding) makes min(1, p/q) = 1."""
    result = speculative_generate(
        tiny_llama, DraftModelDrafter(tiny_llama), torch.tensor([[3]]), gamma=2, max_new_tokens=7,
        sampling=SamplingConfig(temperature=0.7), seed=0,
    )
    assert len(result.new_token_list) == 7 and acceptance_rate(result.trace) == 1.0
    with pytest.raises(ConfigError, match="verification"):
        speculative_generate(tiny_llama, DraftModelDrafter(tiny_llama), torch.tensor([[3]]), gamma=2,
                             max_new_tokens=4, sampling=SamplingConfig(temperature=0.7), verification="greedy")


def test_inputs_are_checked_like_the_baseline(tiny_llama):
    drafter = DraftModelDrafter(tiny_llama)
    with pytest.raises(InputError, match="empty"):
        speculative_generate(tiny_llama, drafter, torch.tensor([[]], dtype=torch.long), gamma=2, max_new_tokens=4)
    with pytest.raises(ConfigError, match="max_new_tokens"):
        speculative_generate(tiny_llama, drafter, torch.tensor([[3]]), gamma=2, max_new_tokens=0)
    with pytest.raises(ConfigError, match="Drafter"):
        speculative_generate(tiny_llama, tiny_llama, torch.tensor([[3]]), gamma=2, max_new_tokens=4)


def test_mismatched_devices_are_explained(tiny_llama):
    check_same_device(torch.device("cpu"), torch.device("cpu"))
    check_same_device("cpu", None)  # a drafter without a model
    with pytest.raises(ConfigError, match=r"cuda:0.*\.to\(target\.device\)"):
        check_same_device(torch.device("cpu"), torch.device("cuda", 0))
    meta_draft = copy.deepcopy(tiny_llama).to("meta")
    with pytest.raises(ConfigError, match="meta"):
        speculative_generate(tiny_llama, DraftModelDrafter(meta_draft), torch.tensor([[3]]), gamma=2, max_new_tokens=4)


def test_drafts_outside_the_target_vocabulary_are_explained(tiny_llama):
    class OutOfRange(Drafter):
        def propose(self, context, sampling, generator):
            k = context.k
            return Draft(torch.tensor([99] * k))

    with pytest.raises(ConfigError, match="token id 99"):
        speculative_generate(tiny_llama, OutOfRange(), torch.tensor([[3]]), gamma=2, max_new_tokens=4)


def test_a_drafter_proposing_too_much_is_explained(tiny_llama):
    class Greedy(Drafter):
        def propose(self, context, sampling, generator):
            k = context.k
            return Draft(torch.tensor([5] * (k + 1)))

    with pytest.raises(ConfigError, match=r"asked for at most \[2\]"):
        speculative_generate(tiny_llama, Greedy(), torch.tensor([[3]]), gamma=2, max_new_tokens=4)


def test_a_drafter_claiming_both_target_capabilities_is_refused(tiny_llama):
    class Both(Drafter):
        wants_target_hidden = shares_target_cache = True

        def propose(self, context, sampling, generator):
            return Draft.empty()

    with pytest.raises(ConfigError, match="both wants_target_hidden and shares_target_cache"):
        speculative_generate(tiny_llama, Both(), torch.tensor([[3]]), gamma=2, max_new_tokens=4)


def test_a_capability_without_its_method_is_explained(tiny_llama):
    class ForgetsToObserve(Drafter):
        wants_target_hidden = True

        def propose(self, context, sampling, generator):
            return Draft.empty()

    with pytest.raises(NotImplementedError, match="no observe_target"):
        speculative_generate(tiny_llama, ForgetsToObserve(), torch.tensor([[3]]), gamma=2, max_new_tokens=4)


@pytest.fixture
def target_with_eos(tiny_llama, references):
    """A copy of the tiny target whose generation config names its greedy token at index 3 as EOS."""
    model = copy.deepcopy(tiny_llama)
    greedy = references[tuple(PROMPTS[0])]
    model.generation_config.eos_token_id = greedy[3]
    assert greedy.index(greedy[3]) == 3
    return model, greedy


def test_generation_stops_at_the_models_eos_by_default_like_transformers(target_with_eos, tiny_draft_llama):
    """Before core v2, eos_token_id defaulted to None: generation ran past the model's EOS unless told its id."""
    model, greedy = target_with_eos
    ids = torch.tensor([PROMPTS[0]])
    with torch.no_grad():
        hf = model.generate(ids, do_sample=False, max_new_tokens=LONGEST, attention_mask=torch.ones_like(ids),
                            pad_token_id=model.config.pad_token_id)[0, ids.shape[1]:].tolist()
    assert hf == greedy[:4]  # transformers stops at the generation config's EOS
    baseline = autoregressive_generate(model, ids, max_new_tokens=LONGEST)
    speculative = speculative_generate(model, DraftModelDrafter(tiny_draft_llama), ids, gamma=4, max_new_tokens=LONGEST)
    assert baseline.new_token_list == speculative.new_token_list == hf
    # switched off for benchmarks: exactly max_new_tokens
    off = speculative_generate(model, DraftModelDrafter(tiny_draft_llama), ids, gamma=4, max_new_tokens=LONGEST,
                               eos_token_id=None)
    assert off.new_token_list == greedy
    assert autoregressive_generate(model, ids, max_new_tokens=LONGEST, eos_token_id=None).new_token_list == greedy


def test_a_list_of_eos_ids_stops_at_the_first_one_met(target_with_eos, tiny_draft_llama):
    model, greedy = target_with_eos
    ids = torch.tensor([PROMPTS[0]])
    stops = [greedy[5], greedy[2]]
    first = min(greedy.index(t) for t in stops)
    result = speculative_generate(model, DraftModelDrafter(tiny_draft_llama), ids, gamma=4, max_new_tokens=LONGEST,
                                  eos_token_id=stops)
    assert result.new_token_list == greedy[: first + 1]
    for bad in ("eos", -1, 2.0, [1, "x"], True):
        with pytest.raises(ConfigError, match="eos_token_id must be 'auto'"):
            speculative_generate(model, DraftModelDrafter(tiny_draft_llama), ids, gamma=4, max_new_tokens=4,
                                 eos_token_id=bad)


def test_rounds_record_which_token_the_target_added(tiny_llama, drafts):
    ids = torch.tensor([PROMPTS[0]])
    result = speculative_generate(tiny_llama, DraftModelDrafter(drafts["noisy"]), ids, gamma=4,
                                  max_new_tokens=LONGEST, eos_token_id=None)
    rounds = result.trace.rounds
    assert rounds[0].kind == "prefill"
    for record in rounds[1:]:
        expected = "target" if record.drafted == 0 else "bonus" if record.accepted == record.drafted else "recovered"
        assert record.kind == expected
    assert {"recovered", "bonus"} <= {record.kind for record in rounds}
    baseline = autoregressive_generate(tiny_llama, ids, max_new_tokens=4)
    assert [record.kind for record in baseline.trace.rounds] == ["prefill", "target", "target", "target"]


def test_one_timing_wait_per_round_and_the_id_check_only_for_untrusted_drafters(tiny_llama, monkeypatch):
    """On a GPU every wait for the device stalls the pipeline: the loop waits once per round for timing (before
    the verification forward), and checks draft ids only for drafters that cannot vouch for them."""
    import specdec_lib.core.recording as recording_module
    import specdec_lib.core.run as run_module
    from specdec_lib.drafters import DraftModelDrafter

    waits, checks = [], []
    monkeypatch.setattr(recording_module, "synchronize", lambda device: waits.append(device))
    real_check = run_module.check_draft_ids
    monkeypatch.setattr(run_module, "check_draft_ids", lambda *a: checks.append(1) or real_check(*a))
    prompt = torch.tensor([[0, 5, 17, 42, 3]])
    result = speculative_generate(tiny_llama, DraftModelDrafter(tiny_llama), prompt, gamma=3, max_new_tokens=20)
    rounds = len(result.trace.rounds) - 1  # verification rounds (the prefill is round 0)
    assert rounds > 1
    assert len(waits) == rounds + 2  # one per round, plus the start and the prefill
    assert checks == []  # a draft model's ids are the target's by construction

    class Untrusted(DraftModelDrafter):
        proposes_target_ids = False

    speculative_generate(tiny_llama, Untrusted(tiny_llama), prompt, gamma=3, max_new_tokens=20)
    assert len(checks) == rounds  # same tokens, same rounds: one check per round
