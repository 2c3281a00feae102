"""The self-checks of notebook 01's exercises: the solutions pass, typical mistakes get their hint, stubs are named."""

import pytest

from specdec_lib import check


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


def test_forwards_saved_a_forgotten_prefill_is_named():
    assert "the prefill is a target forward too" in repr(
        check.forwards_saved(lambda results: saved(results) + len(results)))


def test_forwards_saved_a_share_is_named():
    def share(results):
        return saved(results) / sum(r.new_tokens.numel() for r in results)

    assert "that is the share saved" in repr(check.forwards_saved(share))


def test_forwards_saved_stub():
    assert "still raises NotImplementedError" in repr(check.forwards_saved(stub))


@pytest.mark.parametrize("question", [check.best_gamma_gap, check.grounded_prompts])
@pytest.mark.parametrize("wrong", ["a", "c", "d"])
def test_multiple_choice_wrong_options_fail_with_their_feedback(question, wrong):
    report = question(wrong)
    assert not report and f"Not ({wrong})." in repr(report)


@pytest.mark.parametrize("question", [check.best_gamma_gap, check.grounded_prompts])
def test_multiple_choice_the_right_option_passes_and_the_stub_is_asked_for_a_letter(question):
    assert question("b") and question("(B)")
    assert "Answer with one of 'a', 'b', 'c', 'd'" in repr(question(None))
