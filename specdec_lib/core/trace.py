"""What happened in a generation, round by round, and the metrics computed from it.

Vocabulary (used the same way in code, notebooks and plots):

- a **round** is one forward of the *target* model. Round 1 reads the prompt and yields the first new token (it is
  the prefill; with a drafter that drafts from the prompt it verifies drafts too). In the baseline every round emits exactly one token; in speculative decoding a round
  verifies ``drafted`` tokens, ``accepted`` of them survive, and the round appends ``emitted`` tokens
  (the accepted ones plus one recovered or bonus token from the target).
- **token times** are seconds since the start of generation at which each new token became available.
  Tokens emitted by the same round become available together and share a time.

**Acceptance, four numbers, one name each** (the same names in the library, the bench, the notebooks, the README):

| name | definition | function |
|---|---|---|
| **alpha** (α) | per-token acceptance, the parameter of Leviathan et al.'s theory: accepted drafts / drafts the target *examined* (a round examines drafts up to and including its first rejection) | `per_token_acceptance` |
| **acceptance rate** | accepted / drafted tokens (drafts after a rejection count as drafted, never examined) | `acceptance_rate` |
| **mean acceptance length** | tokens emitted per verification round, the recovered or bonus token included, rounds that drafted nothing (a prefill without drafts, the target's own steps) excluded: ``1 + accepted / verification rounds`` (vLLM's convention) | `mean_acceptance_length` |
| **per-position acceptance** | P(draft i accepted), i = 1 .. γ: the share of rounds drafting at least i tokens whose i-th draft survived | `per_position_acceptance` |

With independent acceptance at rate α and γ drafts per round, mean acceptance length is
``(1 - α^(γ+1)) / (1 - α)`` and per-position acceptance ``α^i``; acceptance rate is lower than α whenever drafts
are wasted after a rejection. `tokens_per_target_forward` (all new tokens / all target forwards, those that verified
no draft included) is a fifth, different number: what the whole generation got per expensive step.

The metric functions are pure (a trace in, numbers out), so they can be tested on hand-made traces. A trace is
written beside the decode loop by `specdec_lib.core.recording.Recorder`; the result that carries one trace per
row is `specdec_lib.core.result.GenerationResult`.
"""

from dataclasses import dataclass, field
from typing import Literal

from .errors import ConfigError


RoundKind = Literal["prefill", "target", "recovered", "bonus"]


@dataclass
class RoundRecord:
    """What happened in one target forward (one round).

    ``kind`` names the token the target itself added: ``"prefill"`` (the prompt's forward), ``"target"`` (a round
    that verified nothing: every baseline step, or a drafter that proposed nothing), ``"recovered"`` (it replaced
    the first rejected draft) or ``"bonus"`` (every draft was accepted)."""

    drafted: int  # draft tokens proposed to the target this round (0 for the baseline)
    accepted: int  # draft tokens the target accepted (0 <= accepted <= drafted)
    emitted: int  # tokens appended to the sequence this round (accepted + recovered/bonus; 1 for the baseline)
    draft_time: float  # seconds spent drafting this round
    verify_time: float  # seconds spent in the target forward and acceptance test
    draft_forwards: int  # forwards of the draft model this round (0 for drafters without a model)
    kind: RoundKind = "target"
    draft_tokens: tuple[int, ...] = ()  # the drafted tokens (a chain in order; a tree's nodes breadth first)


@dataclass
class Trace:
    """Timing and per-round records of one generation."""

    start_time: float  # time.perf_counter() when generation started (after a device synchronize)
    token_times: list[float] = field(default_factory=list)  # [N] seconds since start, one per new token
    rounds: list[RoundRecord] = field(default_factory=list)  # one per target forward, prefill included
    prefill_time: float = 0.0  # seconds until round 1 (the prompt's forward) gave the first token
    peak_kv_bytes: dict[str, int] = field(default_factory=dict)  # e.g. {"target": ..., "draft": ...}: KV-cache peak

    def note_kv_bytes(self, name: str, allocated: int) -> None:
        """Record that cache ``name`` held ``allocated`` bytes now; `peak_kv_bytes` keeps the maximum."""
        self.peak_kv_bytes[name] = max(self.peak_kv_bytes.get(name, 0), allocated)

    def add_round(self, record: RoundRecord, at: float) -> None:
        """Append a round whose ``record.emitted`` tokens all became available ``at`` seconds after the start."""
        self.rounds.append(record)
        self.token_times.extend([at] * record.emitted)


def time_to_first_token(trace: Trace) -> float | None:
    """Seconds from the start until the first new token was available (None if nothing was generated)."""
    return trace.token_times[0] if trace.token_times else None


def inter_token_latencies(trace: Trace) -> list[float]:
    """Gaps in seconds between consecutive *distinct* token times: the waits a reader of the stream sees.

    Tokens emitted by the same round share one time and count as a single arrival, so a round that emits
    four tokens contributes one gap (the wait for that round), not one gap plus three zeros. For the mean
    time per token, use ``1 / tokens_per_second``.
    """
    arrivals = sorted(set(trace.token_times))
    return [later - earlier for earlier, later in zip(arrivals, arrivals[1:])]


def latency_percentiles(values: list[float], percentiles: tuple[float, ...] = (50, 95)) -> dict[float, float | None]:
    """The given percentiles of ``values`` with linear interpolation (NumPy's default); None if ``values`` is empty.

    For sorted values ``v_0 <= ... <= v_{n-1}``, percentile p sits at rank ``r = p / 100 * (n - 1)`` and is
    ``v_floor(r) + (r - floor(r)) * (v_ceil(r) - v_floor(r))``.
    """
    for p in percentiles:
        if not 0 <= p <= 100:
            raise ConfigError(f"Percentiles must be between 0 and 100, got {p!r}. Use e.g. (50, 95).")
    ordered = sorted(values)
    result: dict[float, float | None] = {}
    for p in percentiles:
        if not ordered:
            result[p] = None
            continue
        rank = p / 100 * (len(ordered) - 1)
        low = int(rank)
        high = min(low + 1, len(ordered) - 1)
        result[p] = ordered[low] + (rank - low) * (ordered[high] - ordered[low])
    return result


def tokens_per_second(trace: Trace) -> float | None:
    """End-to-end throughput: new tokens / seconds until the last one (prefill included); None if undefined."""
    if not trace.token_times or trace.token_times[-1] <= 0:
        return None
    return len(trace.token_times) / trace.token_times[-1]


def target_forwards(trace: Trace) -> int:
    """Forwards of the target model, the expensive step speculative decoding saves (one per round)."""
    return len(trace.rounds)


def draft_forwards(trace: Trace) -> int:
    """Forwards of the draft model over the whole generation."""
    return sum(record.draft_forwards for record in trace.rounds)


def _examined(record: RoundRecord) -> int:
    """Drafts the target examined in one round: the accepted ones and the first rejected one (if any)."""
    return min(record.accepted + 1, record.drafted)


def per_token_acceptance(trace: Trace) -> float | None:
    """**alpha**: accepted drafts / examined drafts, ``sum(accepted) / sum(min(accepted + 1, drafted))``.

    Each examined draft is one accept-or-reject trial (a round stops at its first rejection, so later drafts are
    never tried); with independent trials of probability α this is the maximum-likelihood estimate of Leviathan
    et al.'s α. None if nothing was drafted."""
    examined = sum(_examined(record) for record in trace.rounds)
    if examined == 0:
        return None
    return sum(record.accepted for record in trace.rounds) / examined


def acceptance_rate(trace: Trace) -> float | None:
    """Fraction of drafted tokens the target accepted, ``sum(accepted) / sum(drafted)``; None if nothing was drafted."""
    drafted = sum(record.drafted for record in trace.rounds)
    if drafted == 0:
        return None
    return sum(record.accepted for record in trace.rounds) / drafted


def per_position_acceptance(trace: Trace) -> list[float]:
    """Acceptance by draft position: entry i is P(the i-th draft token is accepted | it was drafted).

    Over the rounds that drafted more than i tokens, the fraction that accepted more than i. A draft token is
    accepted only if every earlier one was, so with a constant per-token acceptance probability alpha entry i
    is about ``alpha ** (i + 1)``; rounds shortened near ``max_new_tokens`` enter only the first entries, so
    on short generations the list need not decrease exactly. Empty when nothing was drafted.
    """
    longest = max((record.drafted for record in trace.rounds), default=0)
    rates = []
    for i in range(longest):
        drafted_here = [record for record in trace.rounds if record.drafted > i]
        rates.append(sum(record.accepted > i for record in drafted_here) / len(drafted_here))
    return rates


def mean_acceptance_length(trace: Trace) -> float | None:
    """**Mean acceptance length**: ``1 + sum(accepted) / verification rounds``, over the rounds that verified at least
    one draft (rounds that drafted nothing excluded; vLLM's convention). Between 1 and γ + 1; what the theory's
    ``expected_tokens_per_round`` predicts. None if nothing was drafted."""
    verified = [record for record in trace.rounds if record.drafted > 0]
    if not verified:
        return None
    return 1 + sum(record.accepted for record in verified) / len(verified)


def tokens_per_target_forward(trace: Trace) -> float | None:
    """All new tokens per target forward, ``sum(emitted) / rounds`` (1.0 for the baseline); None if no rounds.

    The rounds that drafted nothing (a prefill without drafts, a last round with one token left) are included, so
    this is at most the mean acceptance length
    (`mean_acceptance_length`); it is what the whole generation got per expensive step, the speed-up speculative
    decoding would give if drafting and verifying several tokens were free.
    """
    if not trace.rounds:
        return None
    return sum(record.emitted for record in trace.rounds) / len(trace.rounds)
