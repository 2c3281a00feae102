"""specdec_lib: the library behind the specdec course on speculative decoding."""

# speculative decoding with a draft model (greedy verification)
from .drafters import Draft, Drafter, DraftModelDrafter
from .speculative import speculative_generate
from .verify import verify_greedy
