"""The fork analysis and the dtype setting (`specdec_lib.core.numerics`, `specdec_lib.core.forks`): tolerances per
dtype, verdicts on hand-made logits (an exact tie, a near-tie, a clear disagreement), the replay of a generation's
verification forwards, a real near-tie built into a tiny model, and the planted-bug verifier of the numerics bench."""

import copy

import pytest
import torch

from specdec_lib import (DraftModelDrafter, assert_same_greedy, autoregressive_generate, explain_fork, get_dtype,
                         replay_verification, same_up_to_rounding, speculative_generate, tree_speculative_generate)
from specdec_lib.bench.numerics import confident_replacement, planted_bug, planted_bug_verify
from specdec_lib.core.devices import course_setup
from specdec_lib.core.drafting import Draft, Drafter
from specdec_lib.core.errors import ConfigError, InputError
from specdec_lib.core.forks import greedy_with_logits, judge_fork, one_token_logits
from specdec_lib.core.numerics import near_tie_tolerance, relative_tolerance, spacing
from specdec_lib.core.trees import TreeShape

from helpers import tiny_prompts

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32


# ------------------------------------------------------------------------------------------- the dtype setting
def test_get_dtype_reads_the_argument_then_the_environment_then_defaults_to_float32(monkeypatch):
    monkeypatch.delenv("SPECDEC_DTYPE", raising=False)
    assert get_dtype() is FP32
    monkeypatch.setenv("SPECDEC_DTYPE", "bfloat16")
    assert get_dtype() is BF16
    assert get_dtype("float16") is FP16 and get_dtype(torch.float32) is FP32
    monkeypatch.setenv("SPECDEC_DTYPE", "bf16")
    assert get_dtype() is BF16


def test_a_bad_dtype_name_fails_in_course_setup_naming_the_choices(monkeypatch):
    monkeypatch.setenv("SPECDEC_DTYPE", "float8")
    with pytest.raises(ConfigError, match=r"SPECDEC_DTYPE asks for dtype 'float8'.*float32, bfloat16, float16"):
        course_setup()
    with pytest.raises(ConfigError, match="float64"):
        get_dtype(torch.float64)


# ------------------------------------------------------------------------------------------- tolerances
@pytest.mark.parametrize(("dtype", "step"), [(BF16, 2**-7 * 8), (FP16, 2**-10 * 8), (FP32, 2**-23 * 8)])
def test_spacing_is_one_rounding_step_of_the_dtype(dtype, step):
    assert spacing(dtype, 8.0) == step == spacing(dtype, -15.9)  # [8, 16): one binade, one step
    assert float(torch.tensor(8.0, dtype=dtype) + step) != 8.0  # the next number up
    assert float(torch.tensor(8.0, dtype=dtype) + step / 4) == 8.0  # a quarter step rounds away


def test_the_near_tie_tolerance_is_four_steps_in_half_precision_and_accumulation_in_float32():
    assert near_tie_tolerance(BF16, 8.0) == 4 * spacing(BF16, 8.0) == 0.25
    assert near_tie_tolerance(FP16, 8.0) == 4 * spacing(FP16, 8.0)
    assert near_tie_tolerance(FP32, 8.0) == pytest.approx(64 * 2**-23 * 8.0)  # far above 4 float32 steps
    assert near_tie_tolerance(FP32, 8.0) < near_tie_tolerance(FP16, 8.0) < near_tie_tolerance(BF16, 8.0)
    assert relative_tolerance(BF16) == 4 * 2**-7 and relative_tolerance(FP32) == 64 * 2**-23


def test_same_up_to_rounding_allows_the_dtypes_rounding_and_nothing_more():
    base = torch.linspace(-4, 4, 50)
    nudged = base + relative_tolerance(BF16) * 4 * 0.9  # within the tolerance at the largest magnitude, 4
    assert same_up_to_rounding(nudged, base, BF16) and not same_up_to_rounding(nudged, base, FP32)
    assert not same_up_to_rounding(base + 1.0, base, BF16)  # a real difference
    assert not same_up_to_rounding(base[:10], base)  # another shape


# ------------------------------------------------------------------------------------------- verdicts on logits
def logits_with(top: float, second: float, *, positions: int = 3, vocab: int = 6) -> torch.Tensor:
    """[positions, vocab] logits: token 2 on top at every position; at position 1 token 3 at ``second``."""
    logits = torch.zeros(positions, vocab)
    logits[:, 2] = top
    logits[1, 3] = second
    return logits


@pytest.mark.parametrize("dtype", [BF16, FP16, FP32])
def test_an_exact_tie_is_a_near_tie_in_every_dtype(dtype):
    logits = logits_with(8.0, 8.0)  # at position 1, tokens 2 and 3 tie: the reference took the lower id
    report = judge_fork(logits, torch.tensor([2, 2, 2]), torch.tensor([2, 3, 2]), dtype)
    assert (report.verdict, report.position, report.margin) == ("near-tie", 1, 0.0)
    assert report.tolerance == near_tie_tolerance(dtype, 8.0)


def test_one_bfloat16_step_is_a_near_tie_in_bfloat16_and_a_disagreement_in_float32():
    logits = logits_with(8.0, 8.0 - spacing(BF16, 8.0))
    fork = (torch.tensor([2, 2, 2]), torch.tensor([2, 3, 2]))
    assert judge_fork(logits, *fork, BF16).verdict == "near-tie"
    assert judge_fork(logits, *fork, FP16).verdict == "disagreement"  # 8 float16 steps: past its 4
    report = judge_fork(logits, *fork, FP32)
    assert report.verdict == "disagreement" and report.margin == spacing(BF16, 8.0)


@pytest.mark.parametrize("dtype", [BF16, FP16, FP32])
def test_a_clear_disagreement_is_one_in_every_dtype(dtype):
    report = judge_fork(logits_with(8.0, 6.0), torch.tensor([2, 2, 2]), torch.tensor([2, 3, 2]), dtype)
    assert (report.verdict, report.margin) == ("disagreement", 2.0)
    assert report.worst.position == 1 and report.worst.gap == 2.0


def test_a_reference_that_is_not_the_targets_choice_is_a_disagreement():
    logits = logits_with(8.0, 2.0)  # position 1: the candidate's token 2 is the top; the reference's token 3 is not
    report = judge_fork(logits, torch.tensor([2, 3, 2]), torch.tensor([2, 2, 2]), BF16)
    assert report.verdict == "disagreement" and report.margin == -6.0


def test_a_bug_after_a_near_tie_fork_is_caught_by_the_every_position_check():
    logits = logits_with(8.0, 8.0)
    logits[2, 4] = 5.0  # position 2: token 4 is three nats below the top
    report = judge_fork(logits, torch.tensor([2, 2, 2]), torch.tensor([2, 3, 4]), BF16)
    assert report.verdict == "disagreement" and report.position == 1 and report.margin == 0.0
    assert (report.worst.position, report.worst.gap) == (2, 3.0)


def test_judge_fork_refuses_outputs_that_do_not_fork_and_logits_of_the_wrong_shape():
    with pytest.raises(InputError, match="do not fork"):
        judge_fork(logits_with(8.0, 1.0), torch.tensor([2, 2, 2]), torch.tensor([2, 2, 2]), BF16)
    with pytest.raises(InputError, match=r"one row per candidate token \(N = 3\)"):
        judge_fork(logits_with(8.0, 1.0, positions=2), torch.tensor([2, 2, 2]), torch.tensor([2, 3, 2]), BF16)


# ------------------------------------------------------------------------------------------- on models
@pytest.fixture(scope="module")
def tiny_pair(request):
    from helpers import sharp_pair

    return sharp_pair(seed=3, factor=4.0)


def test_identical_outputs_in_every_form_the_analysis_accepts(tiny_pair):
    target, draft = tiny_pair
    prompt = tiny_prompts(1, seed=5)[0]
    reference = autoregressive_generate(target, prompt, max_new_tokens=20, eos_token_id=None)
    result = speculative_generate(target, DraftModelDrafter(draft), prompt, gamma=3, max_new_tokens=20,
                                  eos_token_id=None)
    assert explain_fork(target, reference, result).verdict == "identical"
    assert explain_fork(target, reference.sequence, result.sequence, prompt=prompt.shape[1]).verdict == "identical"
    assert explain_fork(target, reference.new_token_list, result.new_token_list, prompt=prompt).verdict == "identical"
    assert str(explain_fork(target, reference, result)) == "identical (20 new tokens, float32)"


def test_a_confident_token_replaced_is_a_disagreement(tiny_pair):
    target, _ = tiny_pair
    prompt = tiny_prompts(1, seed=6)[0]
    reference = autoregressive_generate(target, prompt, max_new_tokens=16, eos_token_id=None)
    wrong = confident_replacement(target, reference.sequence[0], prompt.shape[1])
    report = explain_fork(target, reference, wrong, prompt=prompt)
    assert report.verdict == "disagreement" and report.margin > 10 * report.tolerance
    with pytest.raises(AssertionError, match="not the target's own greedy output: disagreement"):
        assert_same_greedy(target, prompt, reference, wrong)


def test_bad_inputs_get_clear_errors(tiny_pair):
    target, _ = tiny_pair
    prompt = tiny_prompts(1, seed=7)[0]
    reference = autoregressive_generate(target, prompt, max_new_tokens=8, eos_token_id=None)
    with pytest.raises(InputError, match="needs the prompt"):
        explain_fork(target, reference.sequence, reference.sequence)
    with pytest.raises(InputError, match="pass prompt=input_ids"):
        explain_fork(target, reference.new_token_list, reference.new_token_list, prompt=5)
    with pytest.raises(InputError, match="same length"):
        explain_fork(target, reference.new_token_list, reference.new_token_list[:-1], prompt=prompt)
    with pytest.raises(InputError, match="different prompts"):
        explain_fork(target, reference, reference.new_token_list, prompt=prompt + 1)


def tied_model(target, prompt, position: int, dtype: torch.dtype):
    """A copy of ``target`` in ``dtype`` whose LM head gives the token it chooses at new token ``position`` a twin
    with the same logit everywhere, and the candidate that takes the twin there and then follows the target."""
    model = copy.deepcopy(target).to(dtype)
    chosen = autoregressive_generate(model, prompt, max_new_tokens=position + 1, eos_token_id=None).new_token_list
    token = chosen[position]
    twin = token + 1 if token + 1 < model.config.vocab_size else token - 1
    with torch.no_grad():
        model.lm_head.weight[twin] = model.lm_head.weight[token]
    reference = autoregressive_generate(model, prompt, max_new_tokens=12, eos_token_id=None)
    head = reference.new_token_list[:position] + [twin]
    rest = autoregressive_generate(model, torch.cat([prompt, torch.tensor([head])], dim=1),
                                   max_new_tokens=12 - len(head), eos_token_id=None).new_token_list
    return model, reference, head + rest


@pytest.mark.parametrize("dtype", [BF16, FP32])
def test_a_real_tie_forks_as_a_near_tie_which_only_float32_refuses(tiny_pair, dtype, capsys):
    model, reference, candidate = tied_model(tiny_pair[0], tiny_prompts(1, seed=8)[0], 3, dtype)
    prompt = tiny_prompts(1, seed=8)[0]
    report = explain_fork(model, reference, candidate, prompt=prompt)
    assert (report.verdict, report.position, report.margin) == ("near-tie", 3, 0.0)
    if dtype == FP32:
        with pytest.raises(AssertionError, match="near-tie: forks at new token 3"):
            assert_same_greedy(model, prompt, reference, candidate)
    else:
        assert_same_greedy(model, prompt, reference, candidate, reference, label="tied")
        assert capsys.readouterr().out.startswith("tied: bfloat16: 1 of 2 identical to the target's own greedy "
                                                  "output; the others fork at near-ties: near-tie: forks at new token 3")


@pytest.mark.parametrize("dtype", [BF16, FP32])
def test_greedy_with_logits_is_the_target_alone_and_its_one_token_logits_in_one_pass(tiny_pair, dtype):
    prompt = tiny_prompts(1, seed=8)[0]
    tied, _, _ = tied_model(tiny_pair[0], prompt, 3, dtype)  # an exact tie at new token 3: the lowest id wins
    for model in (copy.deepcopy(tiny_pair[0]).to(dtype), tied):
        ids, logits = greedy_with_logits(model, prompt, 12)
        alone = autoregressive_generate(model, prompt, max_new_tokens=12, eos_token_id=None)
        assert torch.equal(ids, alone.sequence[0])
        assert logits.dtype == FP32 and torch.equal(logits, one_token_logits(model, ids, prompt.shape[1]))  # [12, V]
    with pytest.raises(ConfigError, match="max_new_tokens"):
        greedy_with_logits(tied, prompt, 0)


def test_assert_same_greedy_prints_nothing_in_float32(tiny_pair, capsys):
    target, draft = tiny_pair
    prompt = tiny_prompts(1, seed=9)[0]
    reference = autoregressive_generate(target, prompt, max_new_tokens=10, eos_token_id=None)
    assert [r.verdict for r in assert_same_greedy(target, prompt, reference, reference.new_token_list)] == ["identical"]
    assert capsys.readouterr().out == ""


# ------------------------------------------------------------------------------------------- the replay
def test_the_replay_reproduces_the_verification_logits_and_catches_a_wrong_token(tiny_pair):
    target, draft = tiny_pair
    prompt = tiny_prompts(1, seed=10)[0]
    result = speculative_generate(target, DraftModelDrafter(draft), prompt, gamma=4, max_new_tokens=18,
                                  eos_token_id=None)
    replay = replay_verification(target, result)
    assert replay.ok and len(replay.rounds) == len(result.trace.rounds)
    assert sum(len(r.emitted) for r in replay.rounds) == 18
    tampered = copy.deepcopy(result)
    position = replay.rounds[2].first  # the first token a verification round emitted
    tampered.sequences[0][0, prompt.shape[1] + position] += 1
    violations = replay_verification(target, tampered).violations
    assert violations and violations[0][0] == position


def test_the_replay_refuses_trees_and_batches(tiny_pair):
    target, draft = tiny_pair
    prompt = tiny_prompts(1, seed=11)[0]
    tree = tree_speculative_generate(target, DraftModelDrafter(draft), prompt, shape=TreeShape((2, 1)),
                                     max_new_tokens=8, eos_token_id=None)
    with pytest.raises(ConfigError, match="replays chains"):
        replay_verification(target, tree)
    no_cache = autoregressive_generate(target, prompt, max_new_tokens=8, eos_token_id=None, use_cache=False)
    with pytest.raises(ConfigError, match="or no cache"):
        replay_verification(target, no_cache)
    reference = autoregressive_generate(target, prompt, max_new_tokens=8, eos_token_id=None)
    assert explain_fork(target, reference, tree).verdict == "identical"  # explain_fork judges any output


# ------------------------------------------------------------------------------------------- the planted bug
def test_the_planted_bug_accepts_a_clear_second_choice_and_nothing_else():
    logits = torch.zeros(1, 3, 5)
    logits[0, :, 0] = 4.0
    logits[0, 0, 1] = 2.5  # position 0: token 1 second, 1.5 nats behind (clear)
    logits[0, 1, 1] = 3.5  # position 1: token 1 second, 0.5 nats behind (not clear)
    verdict = planted_bug_verify(logits, torch.tensor([[1, 1]]))
    assert verdict.tolist() == [(1, 0, "recovered")]  # accepted the clear second choice
    clean = planted_bug_verify(logits, torch.tensor([[0, 0]]))
    assert int(clean.accepted[0]) == 2  # the target's own choices: as greedy verification


class SecondChoiceDrafter(Drafter):
    """Proposes one token: the target's second choice after the context (what the planted bug waves through)."""

    def __init__(self, target) -> None:
        self.target = target

    def propose(self, context, sampling, generator) -> Draft:
        with torch.inference_mode():
            logits = self.target(context.sequence).logits[0, -1]
        return Draft(tokens=logits.topk(2).indices[1:])


def test_a_generation_under_the_planted_bug_is_judged_a_disagreement(sharp_tiny_pair):
    target, _ = sharp_tiny_pair  # sharp: its top choice often leads the second by more than the planted margin
    changed = 0
    for prompt in tiny_prompts(3, seed=12):
        reference = autoregressive_generate(target, prompt, max_new_tokens=12, eos_token_id=None)
        with planted_bug():
            bugged = speculative_generate(target, SecondChoiceDrafter(target), prompt, gamma=1, max_new_tokens=12,
                                          eos_token_id=None)
        if bugged.new_token_list != reference.new_token_list:
            changed += 1
            assert explain_fork(target, reference, bugged).verdict == "disagreement"
            assert not replay_verification(target, bugged).ok  # caught in any dtype
    assert changed  # the bug fired, so the assertions above were reached
