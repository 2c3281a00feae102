"""Prompt sets for the course: code, prose inside code, and input-grounded code.

The embedded models are trained on Python standard-library source, so every
prompt is Python-source-like text that such a model can continue.  The three
sets stress speculative decoding differently:

- ``code``: code completion from a signature, docstring or partial body.
  Drafts are usually easy to accept.
- ``prose``: natural language inside code (docstrings, comments, help and
  error strings).  Higher entropy, so acceptance rates drop.
- ``grounded``: the continuation repeats or edits text already in the prompt
  (a second method mirroring the first, ``__all__`` after the definitions,
  a ``__repr__`` listing attributes).  This is where prompt-lookup drafting
  shines.

The data lives in ``data/prompts/<task>.jsonl``, one JSON object per line::

    {"id": "code-001", "task": "code", "prompt": "...", "note": "..."}

See ``data/prompts/README.md`` for how the sets were written and how to add
prompts.  Loading validates the files and fails with an error that names the
file, the line and what to fix, because a broken prompt file would otherwise
surface much later as a confusing tokenizer or benchmark error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .core.paths import data_dir
from .core.validation import check_count

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedTokenizerBase

__all__ = ["Prompt", "TASKS", "REQUIRED_KEYS", "encode_prompts", "load_prompts", "prompts_dir"]

#: The prompt sets, in the order :func:`load_prompts` returns them.
TASKS: tuple[str, ...] = ("code", "prose", "grounded")

#: The keys every JSONL record must have (and the only keys it may have).
REQUIRED_KEYS: tuple[str, ...] = ("id", "task", "prompt", "note")


@dataclass(frozen=True)
class Prompt:
    """One prompt of a prompt set.

    Attributes:
        id: unique across all sets, ``"<task>-NNN"`` (e.g. ``"grounded-007"``).
        task: which set it belongs to, one of :data:`TASKS`.
        prompt: the text to continue, exactly as fed to the tokenizer
            (it may end with indentation, e.g. after a docstring).
        note: what a sensible continuation does; for ``grounded`` prompts,
            what it repeats from the prompt.
    """

    id: str
    task: str
    prompt: str
    note: str


def prompts_dir() -> Path:
    """Return the folder holding the ``<task>.jsonl`` prompt files: ``<data>/prompts``.

    The ``data/`` folder is found by :func:`specdec_lib.core.paths.data_dir`
    (``$SPECDEC_DATA_DIR`` if set, else the one in the repository), so that
    models and prompts always come from the same place.
    """
    return data_dir() / "prompts"


def _check_task(task: str) -> None:
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; expected one of {', '.join(TASKS)}")


def _read_task(task: str, seen: dict[str, str]) -> list[Prompt]:
    """Read and validate ``<task>.jsonl``; *seen* maps ids to 'file:line' across files."""
    path = prompts_dir() / f"{task}.jsonl"
    if not path.is_file():
        raise FileNotFoundError(
            f"prompt file {path} does not exist; "
            "set SPECDEC_DATA_DIR to a data/ folder containing "
            f"prompts/{task}.jsonl"
        )
    prompts: list[Prompt] = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue  # blank lines (e.g. a trailing one) are harmless
            where = f"{path}:{lineno}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(
                    f"{where}: not valid JSON ({exc.msg}); "
                    "each line must be one JSON object"
                ) from None
            if not isinstance(record, dict):
                raise ValueError(f"{where}: expected a JSON object, got {type(record).__name__}")
            missing = [k for k in REQUIRED_KEYS if k not in record]
            if missing:
                raise ValueError(
                    f"{where}: missing key(s) {', '.join(missing)}; "
                    f"every record needs {', '.join(REQUIRED_KEYS)}"
                )
            extra = sorted(set(record) - set(REQUIRED_KEYS))
            if extra:
                raise ValueError(
                    f"{where}: unknown key(s) {', '.join(extra)} (a typo?); "
                    f"allowed keys are {', '.join(REQUIRED_KEYS)}"
                )
            for key in REQUIRED_KEYS:
                if not isinstance(record[key], str):
                    raise ValueError(
                        f"{where}: {key!r} must be a string, "
                        f"got {type(record[key]).__name__}"
                    )
            if record["task"] != task:
                raise ValueError(
                    f"{where}: task is {record['task']!r} but the file is {task}.jsonl; "
                    f"set \"task\": \"{task}\" or move the record to {record['task']}.jsonl"
                )
            pid = record["id"]
            if not pid.startswith(f"{task}-") or pid == f"{task}-":
                raise ValueError(f"{where}: id {pid!r} must look like '{task}-NNN'")
            if pid in seen:
                raise ValueError(
                    f"{where}: duplicate id {pid!r} (first used at {seen[pid]}); "
                    "give this prompt the next free number"
                )
            if not record["prompt"].strip():
                raise ValueError(f"{where}: prompt of {pid!r} is empty; write the text to continue")
            seen[pid] = where
            prompts.append(Prompt(id=pid, task=task, prompt=record["prompt"], note=record["note"]))
    return prompts


def load_prompts(task: str | None = None, *, limit: int | None = None) -> list[Prompt]:
    """Load and validate a prompt set, or all of them.

    Args:
        task: one of :data:`TASKS`, or ``None`` for every set (in ``TASKS``
            order, ids unique across sets).
        limit: keep only the first *limit* prompts **of each set**, so that
            ``load_prompts(limit=4)`` stays balanced across tasks (handy for
            quick notebook runs and tests).  ``None`` keeps all.

    Returns:
        The prompts in file order.

    Raises:
        ValueError: unknown task, bad *limit*, or a malformed record (the
            message names the file and line and says what to fix).
        FileNotFoundError: the data folder or a prompt file is missing.
    """
    if task is not None:
        _check_task(task)
    if limit is not None:
        check_count("limit (prompts per set)", limit, minimum=0, hint="None: every prompt.")
    seen: dict[str, str] = {}
    result: list[Prompt] = []
    for name in TASKS if task is None else (task,):
        prompts = _read_task(name, seen)
        result.extend(prompts if limit is None else prompts[:limit])
    return result


def encode_prompts(tokenizer: PreTrainedTokenizerBase, texts: list[str], device: torch.device) -> list[torch.Tensor]:
    """Each text as LongTensor[1, T] on ``device``."""
    return [tokenizer(text, return_tensors="pt").input_ids.to(device) for text in texts]
