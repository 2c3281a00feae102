"""verify.py: greedy verification on hand-made logits whose answer is known (accepted / recovered / bonus), one
round (a batch of one) and a batch of ragged rounds (each row as if verified alone), and the one `Verdict`."""

import pytest
import torch

from specdec_lib.core.errors import ConfigError
from specdec_lib.core.verify import Verdict, verify_greedy

V = 6


def logits_choosing(*choices: int) -> torch.Tensor:
    """Logits ``[len(choices), V]`` whose row i has its argmax at ``choices[i]`` (and a runner-up elsewhere)."""
    logits = torch.zeros(len(choices), V)
    for row, token in enumerate(choices):
        logits[row, token] = 3.0
        logits[row, (token + 1) % V] = 2.0  # a close second, which must not matter
    return logits


def outcome(logits: torch.Tensor, drafts: torch.Tensor) -> tuple[int, int, str]:
    """``(accepted, next_token, kind)`` of one round: ``logits [k + 1, V]``, ``drafts [k]`` as a batch of one."""
    return verify_greedy(logits[None], drafts[None]).tolist()[0]


def test_all_accepted_gives_bonus_token():
    # target would say 4, 2, 5 then 1: the draft [4, 2, 5] is fully accepted, the bonus token is row 3's argmax
    assert outcome(logits_choosing(4, 2, 5, 1), torch.tensor([4, 2, 5])) == (3, 1, "bonus")


def test_first_rejected_gives_recovered_token():
    assert outcome(logits_choosing(4, 2, 5, 1), torch.tensor([3, 2, 5])) == (0, 4, "recovered")


def test_middle_rejected_stops_at_first_mismatch():
    # position 1 is wrong; position 2 matches but comes after a rejection, so it is not accepted
    assert outcome(logits_choosing(4, 2, 5, 1), torch.tensor([4, 0, 5])) == (1, 2, "recovered")


def test_last_rejected():
    assert outcome(logits_choosing(4, 2, 5, 1), torch.tensor([4, 2, 0])) == (2, 5, "recovered")


def test_k_zero_is_a_plain_greedy_step():
    assert outcome(logits_choosing(3), torch.empty(0, dtype=torch.long)) == (0, 3, "bonus")


def test_ties_go_to_lowest_id_like_greedy_decoding():
    logits = torch.tensor([[0.0, 2.0, 2.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]])
    assert outcome(logits, torch.tensor([2])) == (0, 1, "recovered")
    assert outcome(logits, torch.tensor([1])) == (1, 0, "bonus")


def test_eos_inside_draft_is_not_special():
    # verify_greedy is EOS-agnostic: token 1 (say, EOS) in the middle is accepted like any other
    assert outcome(logits_choosing(4, 1, 5, 2), torch.tensor([4, 1, 5])) == (3, 2, "bonus")


def test_the_verdict_is_tensors_per_row_with_the_accepted_path():
    verdict = verify_greedy(logits_choosing(4, 2, 5, 1)[None].expand(2, 4, V), torch.tensor([[4, 2, 5], [4, 0, 5]]))
    assert isinstance(verdict, Verdict) and verdict.accepted.tolist() == [3, 1] and verdict.bonus.tolist() == [True, False]
    assert verdict.path.tolist() == [[0, 1, 2], [0, -1, -1]] and verdict.paths() == [(0, 1, 2), (0,)]
    assert verdict.tolist() == [(3, 1, "bonus"), (1, 2, "recovered")]


def test_wrong_shapes_are_explained():
    with pytest.raises(ConfigError, match=r"one round is a batch of one"):
        verify_greedy(logits_choosing(4, 2), torch.tensor([4]))  # one round without its batch dimension
    with pytest.raises(ConfigError, match=r"\[B, K \+ 1, V\] = \[1, 3, V\]"):
        verify_greedy(logits_choosing(4, 2)[None], torch.tensor([[4, 2]]))
    with pytest.raises(ConfigError, match=r"target_logits must have shape \[B, K \+ 1, V\]"):
        verify_greedy(logits_choosing(4, 2), torch.tensor([[4]]))
    with pytest.raises(ConfigError, match=r"draft_tokens must be a LongTensor \[B, K\]"):
        verify_greedy(logits_choosing(4, 2)[None], torch.tensor([4]))
    with pytest.raises(ConfigError, match=r"token ids in \[0, 6\)"):
        verify_greedy(logits_choosing(4, 2)[None], torch.tensor([[6]]))
    for bad in (torch.tensor([3]), torch.tensor([-1]), torch.tensor([1, 1])):  # above K = 2, negative, wrong shape
        with pytest.raises(ConfigError, match=r"num_drafts must be a LongTensor \[B\] = \[1\]"):
            verify_greedy(logits_choosing(4, 2, 5)[None], torch.tensor([[4, 2]]), bad)


# ---------------------------------------------------------------- a batch of ragged rounds


def test_a_batch_is_its_rows_verified_one_by_one():
    """64 random rounds of K = 4 drafts (mostly the target's argmax, so rows accept 0 .. 4), ragged num_drafts
    0 .. 4: row b's verdict is that of its own round ``logits[b, : n_b + 1]``, ``tokens[b, : n_b]`` alone."""
    generator = torch.Generator().manual_seed(0)
    batch, width = 64, 4
    logits = torch.randn(batch, width + 1, V, generator=generator)
    other = torch.randint(0, V, (batch, width), generator=generator)
    tokens = torch.where(torch.rand(batch, width, generator=generator) < 0.8, logits[:, :width].argmax(-1), other)
    num_drafts = torch.arange(batch) % (width + 1)
    ragged = verify_greedy(logits, tokens, num_drafts).tolist()
    assert ragged == [outcome(logits[b, : n + 1], tokens[b, :n]) for b, n in enumerate(num_drafts.tolist())]
    full = verify_greedy(logits, tokens).tolist()
    assert full == [outcome(row_logits, row_tokens) for row_logits, row_tokens in zip(logits, tokens)]
    assert {n for n, _, _ in full} == set(range(width + 1)) and {kind for _, _, kind in full} == {"bonus", "recovered"}


def test_ragged_rows_never_accept_padding_and_take_their_bonus_from_their_own_row():
    """Row b drafted b of K = 3 tokens; its padding is what the target would accept. Row b accepts exactly b and
    appends the argmax of its row b: 4, 2, 5, 1 (the rows differ, so a bonus read off another row shows)."""
    logits = logits_choosing(4, 2, 5, 1).expand(4, 4, V)
    tokens = torch.tensor([[4, 2, 5]] * 4)
    verdict = verify_greedy(logits, tokens, torch.arange(4))
    assert verdict.tolist() == [(0, 4, "bonus"), (1, 2, "bonus"), (2, 5, "bonus"), (3, 1, "bonus")]
    assert verdict.bonus.tolist() == [True] * 4
