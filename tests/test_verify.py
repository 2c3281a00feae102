"""verify.py: greedy verification on hand-made logits whose answer is known (accepted / recovered / bonus)."""

import pytest
import torch

from specdec_lib.errors import ConfigError
from specdec_lib.verify import VerifyResult, verify_greedy

V = 6


def logits_choosing(*choices: int) -> torch.Tensor:
    """Logits ``[len(choices), V]`` whose row i has its argmax at ``choices[i]`` (and a runner-up elsewhere)."""
    logits = torch.zeros(len(choices), V)
    for row, token in enumerate(choices):
        logits[row, token] = 3.0
        logits[row, (token + 1) % V] = 2.0  # a close second, which must not matter
    return logits


def outcome(result: VerifyResult) -> tuple[int, int, str]:
    return result.num_accepted, result.next_token, result.kind


def test_all_accepted_gives_bonus_token():
    # target would say 4, 2, 5 then 1: the draft [4, 2, 5] is fully accepted, the bonus token is row 3's argmax
    assert outcome(verify_greedy(logits_choosing(4, 2, 5, 1), torch.tensor([4, 2, 5]))) == (3, 1, "bonus")


def test_first_rejected_gives_recovered_token():
    assert outcome(verify_greedy(logits_choosing(4, 2, 5, 1), torch.tensor([3, 2, 5]))) == (0, 4, "recovered")


def test_middle_rejected_stops_at_first_mismatch():
    # position 1 is wrong; position 2 matches but comes after a rejection, so it is not accepted
    assert outcome(verify_greedy(logits_choosing(4, 2, 5, 1), torch.tensor([4, 0, 5]))) == (1, 2, "recovered")


def test_last_rejected():
    assert outcome(verify_greedy(logits_choosing(4, 2, 5, 1), torch.tensor([4, 2, 0]))) == (2, 5, "recovered")


def test_k_zero_is_a_plain_greedy_step():
    assert outcome(verify_greedy(logits_choosing(3), torch.empty(0, dtype=torch.long))) == (0, 3, "bonus")


def test_ties_go_to_lowest_id_like_greedy_decoding():
    logits = torch.tensor([[0.0, 2.0, 2.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]])
    assert outcome(verify_greedy(logits, torch.tensor([2]))) == (0, 1, "recovered")
    assert outcome(verify_greedy(logits, torch.tensor([1]))) == (1, 0, "bonus")


def test_eos_inside_draft_is_not_special():
    # verify_greedy is EOS-agnostic: token 1 (say, EOS) in the middle is accepted like any other
    assert outcome(verify_greedy(logits_choosing(4, 1, 5, 2), torch.tensor([4, 1, 5]))) == (3, 2, "bonus")


def test_returns_the_same_result_type_as_verify_exact_with_python_ints():
    result = verify_greedy(logits_choosing(4, 2), torch.tensor([4]))
    assert isinstance(result, VerifyResult) and result.emitted == 2
    assert type(result.num_accepted) is int and type(result.next_token) is int


def test_wrong_number_of_rows_is_explained():
    with pytest.raises(ConfigError, match=r"k \+ 1 = 3 rows"):
        verify_greedy(logits_choosing(4, 2), torch.tensor([4, 2]))


def test_wrong_shapes_are_explained():
    with pytest.raises(ConfigError, match=r"\[k \+ 1, V\]"):
        verify_greedy(torch.zeros(V), torch.tensor([], dtype=torch.long))
    with pytest.raises(ConfigError, match=r"\[k\]"):
        verify_greedy(logits_choosing(1, 2), torch.tensor([[1]]))
