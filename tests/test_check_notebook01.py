"""The self-checks of notebook 01's exercises: the solutions pass, typical mistakes get their hint, stubs are named."""

import random
import statistics

import pytest

from specdec_lib import check
from specdec_lib.core.theory import expected_tokens_per_round


def verify(target_logits, draft_tokens):  # the solution
    k = draft_tokens.shape[0]
    target_choice = target_logits.argmax(dim=-1)
    n = 0
    while n < k and int(draft_tokens[n]) == int(target_choice[n]):
        n += 1
    return n, int(target_choice[n])


def stub(*args):
    raise NotImplementedError  # your code here


def test_verify_the_solution_passes():
    assert repr(check.my_verify_greedy(verify)) == "✅ my_verify_greedy: all 6 hidden cases pass."


def test_verify_counting_past_the_first_mismatch_is_named():
    def count_all(target_logits, draft_tokens):
        choice = target_logits.argmax(dim=-1)
        n = sum(int(d) == int(t) for d, t in zip(draft_tokens, choice))
        return n, int(choice[n])

    assert "stops at the first mismatch" in repr(check.my_verify_greedy(count_all))


def test_verify_the_next_token_from_the_wrong_row_is_named():
    def previous_row(target_logits, draft_tokens):
        n, _ = verify(target_logits, draft_tokens)
        return n, int(target_logits[max(n - 1, 0)].argmax())

    assert "comes from the wrong row" in repr(check.my_verify_greedy(previous_row))


def test_verify_returning_the_rejected_draft_is_named():
    def rejected(target_logits, draft_tokens):
        n, token = verify(target_logits, draft_tokens)
        return n, int(draft_tokens[n]) if n < len(draft_tokens) else token

    assert "that is the rejected draft itself" in repr(check.my_verify_greedy(rejected))


def test_verify_a_crash_on_k_zero_gets_its_hint():
    def no_empty_draft(target_logits, draft_tokens):
        assert len(draft_tokens) > 0, "no draft"
        return verify(target_logits, draft_tokens)

    report = check.my_verify_greedy(no_empty_draft)
    assert "k = 0" in report.case_name and "a plain decoding step" in repr(report)


def test_verify_stub():
    assert "still raises NotImplementedError" in repr(check.my_verify_greedy(stub))


def speedup(alpha, gamma, c):  # the solution
    return sum(alpha**i for i in range(gamma + 1)) / (gamma * c + 1)


def test_speedup_the_solution_passes():
    assert check.my_expected_speedup(speedup)


def test_speedup_the_closed_form_needs_its_limit_at_alpha_one():
    def closed_form(alpha, gamma, c):
        return (1 - alpha ** (gamma + 1)) / ((1 - alpha) * (gamma * c + 1))

    report = check.my_expected_speedup(closed_form)
    assert "alpha 1" in report.case_name and "ZeroDivisionError" in repr(report) and "its limit" in repr(report)


def test_speedup_the_exponent_gamma_is_named():
    def exponent_gamma(alpha, gamma, c):
        return (1 - alpha**gamma) / ((1 - alpha) * (gamma * c + 1))

    assert "the numerator is 1 − α^(γ + 1)" in repr(check.my_expected_speedup(exponent_gamma))


def test_speedup_forgetting_the_targets_own_token_is_named():
    def accepted_only(alpha, gamma, c):
        return sum(alpha**i for i in range(1, gamma + 1)) / (gamma * c + 1)

    report = check.my_expected_speedup(accepted_only)
    assert not report and "left out the target's own token" in repr(report), repr(report)


def test_speedup_tokens_per_round_only_is_named():
    def tokens(alpha, gamma, c):
        return sum(alpha**i for i in range(gamma + 1))

    assert "divide by the cost of a round" in repr(check.my_expected_speedup(tokens))


def test_speedup_a_wrong_round_cost_is_named():
    def cost(alpha, gamma, c):
        return sum(alpha**i for i in range(gamma + 1)) / (gamma * (c + 1))

    assert "plus ONE target forward" in repr(check.my_expected_speedup(cost))


def test_speedup_stub():
    assert "still raises NotImplementedError" in repr(check.my_expected_speedup(stub))


def saved(results):  # the solution
    return sum(result.new_tokens.numel() - len(result.trace.rounds) for result in results)


def test_forwards_saved_the_solution_and_the_accepted_count_pass():
    assert check.forwards_saved(saved)
    assert check.forwards_saved(lambda results: sum(r.accepted for x in results for r in x.trace.rounds))


def test_forwards_saved_the_forwards_used_are_named():
    assert "how many target forwards speculative decoding used" in repr(
        check.forwards_saved(lambda results: sum(len(r.trace.rounds) for r in results)))


def test_forwards_saved_a_forgotten_first_round_is_named():
    assert "the first round is a target forward too" in repr(
        check.forwards_saved(lambda results: saved(results) + len(results)))


def test_forwards_saved_a_share_is_named():
    def share(results):
        return saved(results) / sum(r.new_tokens.numel() for r in results)

    assert "that is the share saved" in repr(check.forwards_saved(share))


def test_forwards_saved_stub():
    assert "still raises NotImplementedError" in repr(check.forwards_saved(stub))


def loop_costs(gamma, rounds, alone_rounds):  # the solution (the rounds come after each run's first)
    step = statistics.median(r.verify_time for r in alone_rounds)
    c = statistics.median(r.draft_time / r.draft_forwards for r in rounds if r.draft_forwards > 0)
    v = statistics.median(r.verify_time for r in rounds if r.drafted == gamma)
    return c / step, v / step


def test_loop_costs_the_solution_passes():
    assert repr(check.best_gamma_gap(loop_costs)) == "✅ best_gamma_gap: all 4 hidden cases pass."


def test_loop_costs_the_theorys_own_assumptions_are_named():
    # the shortcut: the stated conclusion ("c is larger in the loop"; v at the theory's 1) without reading the traces
    report = check.best_gamma_gap(lambda gamma, rounds, alone_rounds: (0.12, 1.0))
    assert not report and "v = 1 is the theory's own assumption" in repr(report)


def step(alone_rounds):  # the target alone's step in its loop: the median verify time of its rounds
    return statistics.median(r.verify_time for r in alone_rounds)


def in_seconds(gamma, rounds, alone_rounds):
    return tuple(x * step(alone_rounds) for x in loop_costs(gamma, rounds, alone_rounds))


def per_round(gamma, rounds, alone_rounds):  # a whole round's drafting, not one draft forward's
    c = statistics.median(r.draft_time for r in rounds if r.drafted) / step(alone_rounds)
    return c, loop_costs(gamma, rounds, alone_rounds)[1]


def per_gamma(gamma, rounds, alone_rounds):  # a shortened round's drafting divided by gamma
    c = statistics.median(r.draft_time / gamma for r in rounds if r.drafted) / step(alone_rounds)
    return c, loop_costs(gamma, rounds, alone_rounds)[1]


def shortened_rounds_in_v(gamma, rounds, alone_rounds):
    v = statistics.median(r.verify_time for r in rounds if r.drafted) / step(alone_rounds)
    return loop_costs(gamma, rounds, alone_rounds)[0], v


def means(gamma, rounds, alone_rounds):
    unit = statistics.mean(r.verify_time for r in alone_rounds)
    return (statistics.mean(r.draft_time / r.draft_forwards for r in rounds if r.drafted) / unit,
            statistics.mean(r.verify_time for r in rounds if r.drafted == gamma) / unit)


@pytest.mark.parametrize("wrong, named", [
    (in_seconds, "those are seconds"), (per_round, "a whole round's drafting"), (per_gamma, "not by gamma"),
    (shortened_rounds_in_v, "a shortened round verifies fewer"), (means, "that is the mean"),
    (lambda gamma, rounds, alone_rounds: loop_costs(gamma, rounds, alone_rounds)[::-1], "c and v are swapped"),
], ids=["seconds", "per round", "divided by gamma", "shortened rounds in v", "mean", "swapped"])
def test_loop_costs_plausible_mistakes_are_named(wrong, named):
    report = check.best_gamma_gap(wrong)
    assert not report and named in repr(report), repr(report)


def test_loop_costs_a_letter_or_a_stub_is_told_what_to_pass():
    assert "takes your function itself" in repr(check.best_gamma_gap("b"))
    assert "still raises NotImplementedError" in repr(check.best_gamma_gap(stub))


def expected_forwards(alpha, gamma, new_tokens):  # the solution: a recursion over the tokens left, every round drafts
    rounds_for = [0.0] * (new_tokens + 1)
    for left in range(1, new_tokens + 1):
        k = min(gamma, left - 1)
        exactly = [alpha**n * (1 - alpha) for n in range(k)] + [alpha**k]
        rounds_for[left] = 1 + sum(p * rounds_for[left - n - 1] for n, p in enumerate(exactly))
    return rounds_for[new_tokens]


def test_expected_forwards_the_solution_passes():
    assert repr(check.grounded_prompts(expected_forwards)) == "✅ grounded_prompts: all 6 hidden cases pass."


def test_expected_forwards_the_theorys_tokens_per_round_alone_is_named():
    # the shortcut: the formula the notebook states, new tokens / E[tokens per round], without the rounds' mechanism
    report = check.grounded_prompts(lambda alpha, gamma, new: new / expected_tokens_per_round(alpha, gamma))
    assert not report and "the last rounds draft fewer" in repr(report)


def a_prefill_first(alpha, gamma, new_tokens):  # a forward for the prompt alone, then rounds for the other tokens
    return 1 + expected_forwards(alpha, gamma, new_tokens - 1)


def chance_of_at_least_n(alpha, gamma, new_tokens):  # alpha^n where exactly n needs alpha^n (1 - alpha)
    rounds_for = [0.0] * (new_tokens + 1)
    for left in range(1, new_tokens + 1):
        k = min(gamma, left - 1)
        rounds_for[left] = 1 + sum(alpha**n * rounds_for[left - n - 1] for n in range(k + 1))
    return rounds_for[new_tokens]


@pytest.mark.parametrize("wrong, named", [
    (lambda alpha, gamma, new: new / expected_tokens_per_round(alpha, gamma), "the last rounds draft fewer"),
    (a_prefill_first, "there is no separate prefill"),
    (chance_of_at_least_n, "not that exactly n are"),
], ids=["no shortened rounds", "a prefill first", "at least n"])
def test_expected_forwards_plausible_mistakes_are_named(wrong, named):
    report = check.grounded_prompts(wrong)
    assert not report and named in repr(report), repr(report)


def test_expected_forwards_a_simulation_is_asked_for_the_exact_value():
    def simulated(alpha, gamma, new_tokens, trials=4000):
        generator, total = random.Random(0), 0
        for _ in range(trials):
            left, forwards = new_tokens, 0
            while left > 0:
                k, n = min(gamma, left - 1), 0
                while n < k and generator.random() < alpha:
                    n += 1
                left, forwards = left - n - 1, forwards + 1
            total += forwards
        return total / trials

    assert "a simulation only approximates it" in repr(check.grounded_prompts(simulated))


def test_expected_forwards_a_letter_or_a_stub_is_told_what_to_pass():
    assert "takes your function itself" in repr(check.grounded_prompts("b"))
    assert "still raises NotImplementedError" in repr(check.grounded_prompts(stub))
