"""trace.py: the result type and every metric, on hand-made traces with known answers."""

import pytest
import torch

from specdec_lib.core.errors import ConfigError
from specdec_lib.core.recording import Recorder
from specdec_lib.core.result import GenerationResult, summarize
from specdec_lib.core.trace import (
    RoundRecord,
    Trace,
    acceptance_rate,
    draft_forwards,
    inter_token_latencies,
    latency_percentiles,
    mean_acceptance_length,
    per_position_acceptance,
    per_token_acceptance,
    target_forwards,
    time_to_first_token,
    tokens_per_second,
    tokens_per_target_forward,
)


def speculative_trace() -> Trace:
    """Prefill (1 token at 0.1 s), then two rounds: 4 drafted / 3 accepted (+1), 4 drafted / 1 accepted (+1)."""
    trace = Trace(start_time=0.0, prefill_time=0.1)
    trace.add_round(RoundRecord(0, 0, 1, draft_time=0.0, verify_time=0.1, draft_forwards=0), at=0.1)
    trace.add_round(RoundRecord(4, 3, 4, draft_time=0.02, verify_time=0.03, draft_forwards=4), at=0.15)
    trace.add_round(RoundRecord(4, 1, 2, draft_time=0.02, verify_time=0.03, draft_forwards=4), at=0.2)
    return trace


def test_add_round_gives_tokens_of_a_round_one_time():
    trace = speculative_trace()
    assert trace.token_times == [0.1, 0.15, 0.15, 0.15, 0.15, 0.2, 0.2]


def test_time_and_latency_metrics():
    trace = speculative_trace()
    assert time_to_first_token(trace) == 0.1
    assert inter_token_latencies(trace) == pytest.approx([0.05, 0.05])  # one gap per round, not per token
    assert tokens_per_second(trace) == pytest.approx(7 / 0.2)


def test_count_metrics():
    trace = speculative_trace()
    assert target_forwards(trace) == 3
    assert draft_forwards(trace) == 8
    assert acceptance_rate(trace) == pytest.approx(4 / 8)
    assert tokens_per_target_forward(trace) == pytest.approx(7 / 3)


def test_the_four_acceptance_metrics_by_hand():
    """Rounds 4/3 (drafts 1-3 accepted, 4 rejected) and 4/1 (draft 1 accepted, 2 rejected, 3-4 never examined)."""
    trace = speculative_trace()
    assert per_token_acceptance(trace) == pytest.approx(4 / 6)  # alpha: 4 accepted of 4 + 2 examined
    assert acceptance_rate(trace) == pytest.approx(4 / 8)  # accepted / drafted
    assert mean_acceptance_length(trace) == pytest.approx((4 + 2) / 2)  # per verification round, prefill excluded
    assert per_position_acceptance(trace) == pytest.approx([1.0, 0.5, 0.5, 0.0])
    # the prefill is what made "tokens per target forward" read below the mean acceptance length (core v2, §1)
    assert tokens_per_target_forward(trace) == pytest.approx(7 / 3)
    assert tokens_per_target_forward(trace) < mean_acceptance_length(trace)


def test_mean_acceptance_length_ignores_rounds_that_drafted_nothing():
    trace = speculative_trace()
    trace.add_round(RoundRecord(0, 0, 1, draft_time=0.0, verify_time=0.03, draft_forwards=0), at=0.25)
    assert mean_acceptance_length(trace) == pytest.approx(3.0)
    assert per_token_acceptance(Trace(start_time=0.0)) is None and mean_acceptance_length(Trace(start_time=0.0)) is None


def test_baseline_like_trace():
    trace = Trace(start_time=0.0)
    for t in (0.5, 0.6, 0.8):
        trace.add_round(RoundRecord(0, 0, 1, draft_time=0.0, verify_time=0.1, draft_forwards=0), t)
    assert acceptance_rate(trace) is None  # nothing drafted
    assert per_token_acceptance(trace) is None and mean_acceptance_length(trace) is None
    assert tokens_per_target_forward(trace) == 1.0
    assert inter_token_latencies(trace) == pytest.approx([0.1, 0.2])


def test_empty_trace_metrics_are_none():
    trace = Trace(start_time=0.0)
    assert time_to_first_token(trace) is None
    assert tokens_per_second(trace) is None
    assert tokens_per_target_forward(trace) is None
    assert inter_token_latencies(trace) == []


def test_latency_percentiles_interpolate_like_numpy():
    values = [0.4, 0.1, 0.3, 0.2]
    assert latency_percentiles(values) == pytest.approx({50: 0.25, 95: 0.385})
    assert latency_percentiles(values, (0, 100)) == pytest.approx({0: 0.1, 100: 0.4})
    assert latency_percentiles([0.7], (50,)) == {50: 0.7}
    assert latency_percentiles([], (50, 95)) == {50: None, 95: None}


def test_latency_percentiles_out_of_range():
    with pytest.raises(ConfigError, match="Percentiles must be between 0 and 100, got 150"):
        latency_percentiles([1.0], (150,))


def test_the_recorders_clock_runs_forward():
    recorder = Recorder(torch.device("cpu"), batch=2)
    assert 0 <= recorder.now() <= recorder.now(wait=True)
    assert len(recorder.traces) == 2 and all(trace.start_time == recorder.start for trace in recorder.traces)


def test_generation_result_and_summary():
    result = GenerationResult.single(torch.tensor([[5, 6, 7, 1, 2, 3, 4, 5, 6, 7]]), 3, "speculative",
                                     speculative_trace())
    assert torch.equal(result.new_tokens, torch.tensor([1, 2, 3, 4, 5, 6, 7]))
    assert result.new_token_list == [1, 2, 3, 4, 5, 6, 7]
    summary = summarize(result)
    assert summary["method"] == "speculative"
    assert summary["prompt_tokens"] == 3 and summary["new_tokens"] == 7
    assert summary["target_forwards"] == 3 and summary["draft_forwards"] == 8
    assert summary["alpha"] == pytest.approx(4 / 6)
    assert summary["acceptance_rate"] == pytest.approx(0.5)
    assert summary["mean_acceptance_length"] == pytest.approx(3.0)
    assert summary["per_position_acceptance"] == pytest.approx([1.0, 0.5, 0.5, 0.0])
    assert summary["tokens_per_target_forward"] == pytest.approx(7 / 3)
    assert summary["time_to_first_token_s"] == 0.1
    assert summary["inter_token_latency_p50_s"] == pytest.approx(0.05)
    assert summary["draft_time_s"] == pytest.approx(0.04)
    assert summary["verify_time_s"] == pytest.approx(0.16)
    assert summary["prefill_time_s"] == 0.1


def test_a_result_of_several_rows_reads_per_row_and_refuses_the_one_row_fields():
    first = Trace(start_time=0.0, token_times=[0.5, 1.0, 1.0], rounds=[RoundRecord(0, 0, 1, 0.0, 0.5, 0, "prefill"),
                                                                      RoundRecord(2, 1, 2, 0.1, 0.4, 2, "recovered")])
    second = Trace(start_time=0.0, token_times=[0.5, 2.0], rounds=[RoundRecord(0, 0, 1, 0.0, 0.5, 0, "prefill"),
                                                                  RoundRecord(0, 0, 1, 0.1, 0.4, 0, "target")])
    result = GenerationResult([torch.tensor([[9, 1, 2, 3]]), torch.tensor([[9, 9, 4, 5]])], [1, 2], "batched",
                              [first, second])
    assert result.batch == 2 and result.tokens == [[1, 2, 3], [4, 5]]
    assert result.wall_time == 2.0 and result.tokens_per_second == pytest.approx(5 / 2.0)
    assert result.time_to_first_token() == [0.5, 0.5] and result.inter_token_latencies() == [[0.5], [1.5]]
    assert result.accepted == [1, 0] and result.drafted == [2, 0] and result.rounds == [2, 2]
    assert result.acceptance_rate() == [0.5, None]
    with pytest.raises(ConfigError, match="holds 2 rows"):
        result.new_token_list
