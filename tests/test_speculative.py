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
from specdec_lib.core.minimal import lean_generate
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
    assert rounds[0].kind != "target" and all(r.kind != "prefill" for r in rounds[1:])  # the first round: the prompt
    assert trace.token_times == sorted(trace.token_times) and time_to_first_token(trace) > 0
    assert all(r.draft_time >= 0 and r.verify_time > 0 for r in rounds)


def test_every_full_accept_adds_the_bonus_token(tiny_llama, references):
    """The target drafting for itself accepts every draft, so each round emits gamma + 1 tokens: its drafts and the
    bonus (greedy output would stay identical without the bonus; only the rounds show it).

    Generation ends on an EOS inside the third round's drafts, not on the budget: a loop that drops the bonus may
    never fill a budget (a round with no drafts would emit nothing), so the budget-ended tests below could hang
    instead of failing. That is also why this test comes first in the module (``-x`` stops here). The first round
    drafts too: the prompt's forward verifies its drafts."""
    ids, eos = eos_case(tiny_llama, references, 12)  # round 3 holds new tokens 11 .. 15: the 13th is its third draft
    result = speculative_generate(tiny_llama, DraftModelDrafter(tiny_llama), ids, gamma=4, max_new_tokens=LONGEST,
                                  eos_token_id=eos)
    rounds = [(r.drafted, r.accepted, r.emitted) for r in result.trace.rounds]
    assert rounds == [(4, 4, 5), (4, 4, 5), (4, 4, 3)]
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
            assert result.trace.rounds[0].drafted == min(gamma, max_new_tokens - 1)  # the prompt's forward verifies


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
        # 20 tokens: rounds of 4 accepted + 1 bonus from the first (the prompt's forward verifies), 5 + 5 + 5 + 5
        assert [r.emitted for r in result.trace.rounds] == [5, 5, 5, 5]
        assert tokens_per_target_forward(result.trace) == 5.0
        assert draft_forwards(result.trace) == 4 + 4 + 4 + 4  # one forward per drafted token


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
    (only,) = result.trace.rounds  # the first round: the prompt's forward verifies 8 drafts
    assert (only.drafted, only.accepted, only.emitted) == (8, 8, 4)  # all 8 accepted; only up to the EOS is kept
    assert result.new_token_list[-1] == eos and len(result.new_token_list) == 4


def test_drafts_are_cut_to_fit_max_new_tokens(tiny_llama):
    drafter, ids = DraftModelDrafter(tiny_llama), torch.tensor([[3]])
    result = speculative_generate(tiny_llama, drafter, ids, gamma=8, max_new_tokens=6)
    assert [(r.drafted, r.emitted) for r in result.trace.rounds] == [(5, 6)]
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
    # rounds start at new tokens 1, 5, 9; the drafts are right up to the 9th, then every draft is wrong
    assert [r.accepted for r in result.trace.rounds][:5] == [3, 3, 1, 0, 0]


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


def test_a_drafter_that_reads_the_target_sees_every_forward_and_drafts_from_the_second_round(tiny_llama, references):
    """The hooks a drafter that reads the target's work uses: ``hidden_layers`` asks for hidden states, `observe`
    is called after every forward (the first one reads the prompt: it covers every prompt position), and a drafter
    with nothing observed yet drafts nothing, so the first round is a plain prefill."""

    class Echo(Drafter):  # drafts the target's own next-token argmax after the observed logits: always accepted
        hidden_layers = (-1,)

        def begin(self, context, **limits):
            self.seen, self.logits = [], None

        def observe(self, output):
            self.seen.append((output.hidden.shape[0], output.accepted))
            self.logits = output.logits

        def propose(self, context, sampling, generator):
            if self.logits is None:
                return Draft.empty()
            return Draft(self.logits[-1:].argmax(-1)[: context.k])

    ids = torch.tensor([PROMPTS[0]])
    drafter = Echo()
    result = speculative_generate(tiny_llama, drafter, ids, gamma=2, max_new_tokens=LONGEST, eos_token_id=None)
    assert result.new_token_list == references[tuple(PROMPTS[0])]
    rounds = result.trace.rounds
    assert rounds[0].kind == "prefill" and all(r.drafted == 1 for r in rounds[1:])
    assert drafter.seen[0] == (len(PROMPTS[0]), 0)  # the prompt's forward: every prompt position
    assert drafter.seen[1:] == [(1 + r.accepted, r.accepted) for r in rounds[1:]]  # x_L and the accepted drafts


def test_a_drafter_with_only_propose_runs(tiny_llama, references):
    class Copycat(Drafter):  # every hook but propose left at its default
        def propose(self, context, sampling, generator):
            return Draft(context.sequence[0, -1:].repeat(context.k))

    ids = torch.tensor([PROMPTS[0]])
    result = speculative_generate(tiny_llama, Copycat(), ids, gamma=3, max_new_tokens=LONGEST)
    assert result.new_token_list == references[tuple(PROMPTS[0])] and result.trace.rounds[0].drafted == 3


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
    assert rounds[0].drafted > 0  # the prompt's forward verified drafts: its kind is its token's, not "prefill"
    for record in rounds:
        expected = "target" if record.drafted == 0 else "bonus" if record.accepted == record.drafted else "recovered"
        assert record.kind == expected
    assert {"recovered", "bonus"} <= {record.kind for record in rounds}
    baseline = autoregressive_generate(tiny_llama, ids, max_new_tokens=4)
    assert [record.kind for record in baseline.trace.rounds] == ["prefill", "target", "target", "target"]


def test_one_timing_wait_per_round_and_no_read_back_for_the_id_check(tiny_llama, monkeypatch):
    """On a GPU every wait for the device stalls the pipeline: the loop waits once per round for timing (before
    the verification forward), and checks the draft ids on the copy the verdict's read-back brings anyway."""
    import specdec_lib.core.recording as recording_module
    from specdec_lib.drafters import DraftModelDrafter

    waits = []
    monkeypatch.setattr(recording_module, "synchronize", lambda device: waits.append(device))
    prompt = torch.tensor([[0, 5, 17, 42, 3]])
    result = speculative_generate(tiny_llama, DraftModelDrafter(tiny_llama), prompt, gamma=3, max_new_tokens=20)
    rounds = len(result.trace.rounds)
    assert rounds > 1
    assert len(waits) == rounds + 1  # one per round, plus the start

    class OutOfRange(Drafter):
        def propose(self, context, sampling, generator):
            return Draft(torch.full((context.k,), tiny_llama.config.vocab_size + 3))

    with pytest.raises(ConfigError, match=f"token id {tiny_llama.config.vocab_size + 3}, outside the target's"):
        speculative_generate(tiny_llama, OutOfRange(), prompt, gamma=3, max_new_tokens=20)


@pytest.mark.parametrize("draft_name", ["unrelated", "noisy"])  # ("self" is the target: the hook would count it)
def test_the_minimal_loop_and_the_engine_give_the_same_tokens_and_forwards(tiny_llama, drafts, references, draft_name):
    """`specdec_lib.core.minimal.lean_generate`, the loop a reader meets first, is the engine's round: same tokens
    (the target's own), and the same target forwards (counted by a hook), EOS inside a round included."""
    draft = drafts[draft_name]
    calls = []
    hook = tiny_llama.register_forward_pre_hook(lambda *args: calls.append(1))
    try:
        for prompt in PROMPTS:
            ids = torch.tensor([prompt])
            for gamma, max_new_tokens, eos in [(1, 7, None), (3, 1, None), (4, LONGEST, None), (6, LONGEST, 12)]:
                eos_id = None if eos is None else references[tuple(prompt)][eos]
                calls.clear()
                lean = lean_generate(tiny_llama, draft, ids, gamma=gamma, max_new_tokens=max_new_tokens,
                                     eos_token_id=eos_id)
                lean_forwards = len(calls)
                result = speculative_generate(tiny_llama, DraftModelDrafter(draft), ids, gamma=gamma,
                                              max_new_tokens=max_new_tokens, eos_token_id=eos_id)
                assert lean == result.new_token_list, (prompt, gamma, max_new_tokens, eos)
                assert lean_forwards == len(result.trace.rounds), (prompt, gamma, max_new_tokens, eos)
    finally:
        hook.remove()
