"""verify.py: greedy verification on hand-made logits whose answer is known (accepted / recovered / bonus), one
round (`verify_greedy`) and a batch of ragged rounds (`verify_greedy_batch`: each row as if verified alone)."""

import pytest
import torch

from specdec_lib.core.errors import ConfigError
from specdec_lib.core.verify import VerifyResult, verify_greedy, verify_greedy_batch

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


# ---------------------------------------------------------------- a batch of rounds: verify_greedy_batch


def test_a_batch_is_its_rows_verified_one_by_one():
    """64 random rounds of K = 4 drafts (mostly the target's argmax, so rows accept 0 .. 4), ragged num_drafts
    0 .. 4: row b's verdict is `verify_greedy` on its own ``logits[b, : n_b + 1]`` and ``tokens[b, : n_b]``."""
    generator = torch.Generator().manual_seed(0)
    batch, width = 64, 4
    logits = torch.randn(batch, width + 1, V, generator=generator)
    other = torch.randint(0, V, (batch, width), generator=generator)
    tokens = torch.where(torch.rand(batch, width, generator=generator) < 0.8, logits[:, :width].argmax(-1), other)
    num_drafts = torch.arange(batch) % (width + 1)
    ragged = verify_greedy_batch(logits, tokens, num_drafts).results()
    assert ragged == [verify_greedy(logits[b, : n + 1], tokens[b, :n]) for b, n in enumerate(num_drafts.tolist())]
    full = verify_greedy_batch(logits, tokens).results()
    assert full == [verify_greedy(row_logits, row_tokens) for row_logits, row_tokens in zip(logits, tokens)]
    assert {r.num_accepted for r in full} == set(range(width + 1)) and {r.kind for r in full} == {"bonus", "recovered"}


def test_ragged_rows_never_accept_padding_and_take_their_bonus_from_their_own_row():
    """Row b drafted b of K = 3 tokens; its padding is what the target would accept. Row b accepts exactly b and
    appends the argmax of its row b: 4, 2, 5, 1 (the rows differ, so a bonus read off another row shows)."""
    logits = logits_choosing(4, 2, 5, 1).expand(4, 4, V)
    tokens = torch.tensor([[4, 2, 5]] * 4)
    verdict = verify_greedy_batch(logits, tokens, torch.arange(4))
    assert [outcome(r) for r in verdict.results()] == [(0, 4, "bonus"), (1, 2, "bonus"), (2, 5, "bonus"),
                                                       (3, 1, "bonus")]
    assert verdict.bonus.tolist() == [True] * 4


def test_wrong_batch_shapes_are_explained():
    with pytest.raises(ConfigError, match=r"target_logits must have shape \[B, K \+ 1, V\]"):
        verify_greedy_batch(logits_choosing(4, 2), torch.tensor([[4]]))
    with pytest.raises(ConfigError, match=r"draft_tokens must have shape \[B, K\]"):
        verify_greedy_batch(logits_choosing(4, 2)[None], torch.tensor([4]))
    with pytest.raises(ConfigError, match=r"\[1, 3, V\] for draft tokens \[1, 2\]"):
        verify_greedy_batch(logits_choosing(4, 2)[None], torch.tensor([[4, 2]]))
    for bad in (torch.tensor([3]), torch.tensor([-1]), torch.tensor([1, 1])):  # above K = 2, negative, wrong shape
        with pytest.raises(ConfigError, match=r"num_drafts must be a LongTensor \[B\] = \[1\]"):
            verify_greedy_batch(logits_choosing(4, 2, 5)[None], torch.tensor([[4, 2]]), bad)
