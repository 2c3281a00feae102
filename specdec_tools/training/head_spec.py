"""What ``train heads`` trains, on how much data, how long, and how it measures: `HeadsSpec`, and the two specs
the command starts from (`FULL`, the shipped drafters' run; `QUICK`, seconds, for tests)."""
from __future__ import annotations

from dataclasses import dataclass

from specdec_lib.core.forward import LAST_HIDDEN


@dataclass(frozen=True)
class HeadsSpec:
    """What to train (K heads, the EAGLE layer's MLP width), on how much data, how long, and how to measure."""

    num_heads: int  # K Medusa heads (drafting proposes at most K tokens per round)
    eagle_intermediate: int  # MLP width of the EAGLE decoder layer
    train_windows: int  # W windows of the training split whose target features are computed once
    window: int  # T tokens of features per window (T + 1 tokens are read: the last one is only a label)
    val_windows: int  # validation windows (spread evenly over the split) for the accuracies
    medusa_steps: int
    eagle_steps: int
    batch_windows: int  # windows per optimiser step
    learning_rate: float
    warmup_steps: int
    eagle_eval_windows: int  # validation windows on which EAGLE drafts greedily at every position
    acceptance_prompts: int | None  # first N code prompts for the acceptance runs (None: all of them)
    new_tokens: int  # generated per prompt in the acceptance runs
    eagle_gammas: tuple[int, ...]
    head_decay: float = 0.8  # head j's loss weight head_decay ** (j - 1) (Medusa's lambda)
    eagle_cls_weight: float = 0.1  # EAGLE-1's weight of the classification loss
    eagle_regression_weight: float = 1.0  # weight of the feature regression (EAGLE-1: 1; EAGLE-3 drops it: 0)
    eagle_test_steps: int = 1  # draft steps unrolled in training (training-time test; 1: EAGLE-1's loss alone)
    eagle_step_decay: float = 0.8  # step j's loss weight eagle_step_decay ** (j - 1)
    eagle_feature_layers: tuple[int, ...] = LAST_HIDDEN  # the target's hidden states the EAGLE layer reads (EAGLE-3: a
    # low, a middle and the last); the heads read the last one
    train_text: str = "corpus"  # "corpus": random corpus windows; "target": the target's own greedy continuations
    target_text_prompt: int = 64  # with train_text "target": the corpus tokens each continuation starts from
    kinds: tuple[str, ...] = ("medusa-heads", "eagle")  # which drafters to train
    eval_steps: int = 4  # EAGLE drafting steps measured at each validation position
    max_files: int | None = None
    seed: int = 1234
    threads: int = 2


FULL = HeadsSpec(num_heads=4, eagle_intermediate=512, train_windows=512, window=256, val_windows=32,
                 medusa_steps=300, eagle_steps=400, batch_windows=12, learning_rate=3e-3, warmup_steps=20,
                 eagle_eval_windows=8, acceptance_prompts=None, new_tokens=48, eagle_gammas=(3, 4, 5))
QUICK = HeadsSpec(num_heads=3, eagle_intermediate=64, train_windows=6, window=32, val_windows=2, medusa_steps=3,
                  eagle_steps=3, batch_windows=2, learning_rate=1e-3, warmup_steps=1, eagle_eval_windows=1,
                  acceptance_prompts=2, new_tokens=8, eagle_gammas=(3,), target_text_prompt=8, max_files=12, threads=1)
TRAIN_TEXTS = ("corpus", "target")
