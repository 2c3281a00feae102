"""The one result type of every decoder: the target alone or any speculative method, one row or a batch (a batch of
one is a batch).

    sequences[b]    LongTensor[1, T_b + N_b]: row b's prompt followed by its N_b new tokens
    traces[b]       row b's rounds (one `RoundRecord` per target forward it took part in) and token times
                    (`specdec_lib.core.trace`)
    forwards        every target forward of the generation, as the records of the rows it ran on: rows only leave
                    the batch, so row b took part in the first ``len(traces[b].rounds)`` forwards

A result of one row reads as before: ``result.new_token_list``, ``result.trace``, ``result.sequence``. A batch
reads per row: ``result.tokens[b]``, ``result.traces[b]``, ``result.time_to_first_token()`` ...
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .errors import ConfigError
from .trace import (RoundRecord, Trace, acceptance_rate, draft_forwards, inter_token_latencies, latency_percentiles,
                    mean_acceptance_length, per_position_acceptance, per_token_acceptance, target_forwards,
                    time_to_first_token, tokens_per_second, tokens_per_target_forward)


@dataclass
class GenerationResult:
    """Tokens and traces of one generation (module docstring), in the order of the prompts."""

    sequences: list[torch.Tensor]
    prompt_lengths: list[int]
    method: str  # e.g. "autoregressive", "speculative[draft-model]", "batched-speculative[prompt-lookup]"
    traces: list[Trace]

    @classmethod
    def single(cls, sequence: torch.Tensor, prompt_length: int, method: str, trace: Trace) -> "GenerationResult":
        """A result of one row, ``sequence: LongTensor[1, T + N]`` (for a trace made by hand)."""
        return cls([sequence], [prompt_length], method, [trace])

    @property
    def batch(self) -> int:
        """The number of rows."""
        return len(self.sequences)

    def _only_row(self, what: str) -> int:
        if self.batch != 1:
            raise ConfigError(f"result.{what} is the only row of a batch of one; this result holds {self.batch} rows "
                              "(read result.tokens[b], result.traces[b], result.sequences[b]).")
        return 0

    # ------------------------------------------------------------------------------------------- one row
    @property
    def sequence(self) -> torch.Tensor:
        """``LongTensor[1, T_prompt + N]``: the prompt followed by the N new tokens (one row)."""
        return self.sequences[self._only_row("sequence")]

    @property
    def prompt_length(self) -> int:
        return self.prompt_lengths[self._only_row("prompt_length")]

    @property
    def trace(self) -> Trace:
        return self.traces[self._only_row("trace")]

    @property
    def new_tokens(self) -> torch.Tensor:
        """The generated tokens only, ``LongTensor[N]`` (one row)."""
        row = self._only_row("new_tokens")
        return self.sequences[row][0, self.prompt_lengths[row]:]

    @property
    def new_token_list(self) -> list[int]:
        """The generated tokens as a Python list (handy for ``tokenizer.decode`` and equality checks)."""
        return self.new_tokens.tolist()

    # ------------------------------------------------------------------------------------------- per row
    @property
    def tokens(self) -> list[list[int]]:
        """Per row, in prompt order: its new tokens."""
        return [sequence[0, start:].tolist() for sequence, start in zip(self.sequences, self.prompt_lengths)]

    @property
    def token_times(self) -> list[list[float]]:
        """Per row: the seconds at which each of its new tokens became available."""
        return [trace.token_times for trace in self.traces]

    @property
    def target_forwards(self) -> int:
        """Forwards of the target model, prefill included (each runs on every active row at once)."""
        return max((len(trace.rounds) for trace in self.traces), default=0)

    @property
    def forwards(self) -> list[list[RoundRecord]]:
        """Per target forward, in order: the records of the rows it ran on, in prompt order (module docstring)."""
        return [[trace.rounds[i] for trace in self.traces if len(trace.rounds) > i]
                for i in range(self.target_forwards)]

    @property
    def wall_time(self) -> float:
        """Seconds until the last row's last token."""
        return max((trace.token_times[-1] for trace in self.traces if trace.token_times), default=0.0)

    @property
    def tokens_per_second(self) -> float | None:
        """Throughput of the whole batch: all rows' new tokens / wall seconds (None if undefined)."""
        total = sum(len(trace.token_times) for trace in self.traces)
        return total / self.wall_time if total and self.wall_time > 0 else None

    def time_to_first_token(self) -> list[float | None]:
        """Per row: seconds until its first new token (round 1's, the prompt's forward)."""
        return [time_to_first_token(trace) for trace in self.traces]

    def inter_token_latencies(self) -> list[list[float]]:
        """Per row: gaps between its consecutive distinct token times (tokens of one round arrive together)."""
        return [inter_token_latencies(trace) for trace in self.traces]

    def acceptance_rate(self) -> list[float | None]:
        """Per row: accepted / drafted (None for a row that verified no draft)."""
        return [acceptance_rate(trace) for trace in self.traces]

    @property
    def accepted(self) -> list[int]:
        """Per row: draft tokens the target accepted."""
        return [sum(record.accepted for record in trace.rounds) for trace in self.traces]

    @property
    def drafted(self) -> list[int]:
        """Per row: draft tokens the target verified."""
        return [sum(record.drafted for record in trace.rounds) for trace in self.traces]

    @property
    def rounds(self) -> list[int]:
        """Per row: the target forwards it took part in, round 1 (the prompt's) included."""
        return [len(trace.rounds) for trace in self.traces]


def summarize(result: GenerationResult) -> dict[str, object]:
    """The headline numbers of a one-row generation as a flat dict (for notebook tables and benchmarks)."""
    trace = result.trace
    gaps = latency_percentiles(inter_token_latencies(trace), (50, 95))
    return {
        "method": result.method,
        "prompt_tokens": result.prompt_length,
        "new_tokens": result.new_tokens.numel(),
        "time_to_first_token_s": time_to_first_token(trace),
        "inter_token_latency_p50_s": gaps[50],
        "inter_token_latency_p95_s": gaps[95],
        "tokens_per_second": tokens_per_second(trace),
        "prefill_time_s": trace.prefill_time,
        "draft_time_s": sum(record.draft_time for record in trace.rounds),
        "verify_time_s": sum(record.verify_time for record in trace.rounds),
        "target_forwards": target_forwards(trace),
        "draft_forwards": draft_forwards(trace),
        "alpha": per_token_acceptance(trace),
        "acceptance_rate": acceptance_rate(trace),
        "mean_acceptance_length": mean_acceptance_length(trace),
        "per_position_acceptance": per_position_acceptance(trace),
        "tokens_per_target_forward": tokens_per_target_forward(trace),
    }
