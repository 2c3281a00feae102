"""Tests for the shipped prompt sets and for specdec_lib.prompts.load_prompts."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from specdec_lib.prompts import TASKS, Prompt, load_prompts

MIN_PER_SET = 24
MIN_CHARS, MAX_CHARS = 80, 600


# --------------------------------------------------------------------------
# The shipped data
# --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def all_prompts() -> list[Prompt]:
    return load_prompts()


def test_tasks_constant() -> None:
    assert TASKS == ("code", "prose", "grounded")


@pytest.mark.parametrize("task", TASKS)
def test_each_set_is_large_enough(task: str) -> None:
    prompts = load_prompts(task)
    assert len(prompts) >= MIN_PER_SET
    assert all(p.task == task for p in prompts)


def test_ids_unique_across_sets(all_prompts: list[Prompt]) -> None:
    ids = [p.id for p in all_prompts]
    assert len(ids) == len(set(ids))


def test_ids_match_task(all_prompts: list[Prompt]) -> None:
    for p in all_prompts:
        prefix, _, number = p.id.partition("-")
        assert prefix == p.task, p.id
        assert number.isdigit() and len(number) == 3, p.id


def test_prompt_lengths_in_range(all_prompts: list[Prompt]) -> None:
    for p in all_prompts:
        assert MIN_CHARS <= len(p.prompt) <= MAX_CHARS, (p.id, len(p.prompt))


def test_last_line_has_no_trailing_spaces(all_prompts: list[Prompt]) -> None:
    """Trailing blanks are allowed only as pure indentation after a newline."""
    for p in all_prompts:
        last = p.prompt.split("\n")[-1]
        if last.strip():
            assert last == last.rstrip(), f"{p.id}: trailing whitespace on the last line"
        else:
            assert "\n" in p.prompt, f"{p.id}: whitespace-only prompt"
            assert len(last) % 4 == 0, f"{p.id}: trailing indentation is not a multiple of 4"


def test_whitespace_conventions(all_prompts: list[Prompt]) -> None:
    """4-space indentation and \\n newlines, as in the training corpus."""
    for p in all_prompts:
        assert "\t" not in p.prompt, f"{p.id}: literal tab (indent with 4 spaces)"
        assert "\r" not in p.prompt, f"{p.id}: use \\n newlines"
        for line in p.prompt.split("\n")[:-1]:  # the last line is checked above
            assert line == line.rstrip(), f"{p.id}: trailing whitespace inside the prompt"


def test_notes_present(all_prompts: list[Prompt]) -> None:
    for p in all_prompts:
        assert len(p.note.strip()) >= 10, f"{p.id}: note should say what the continuation does"


def test_non_ascii_prompts_are_few_and_marked(all_prompts: list[Prompt]) -> None:
    for task in TASKS:
        marked = [p for p in all_prompts if p.task == task and not p.prompt.isascii()]
        for p in marked:
            assert "non-ascii" in p.note.lower(), f"{p.id}: say 'Non-ASCII' in the note"
        assert len(marked) <= 4, f"{task}: keep the set mostly ASCII"
    assert any(not p.prompt.isascii() for p in all_prompts), "expected a few non-ASCII prompts"


def test_grounded_notes_say_what_is_repeated() -> None:
    for p in load_prompts("grounded"):
        assert "repeat" in p.note.lower(), f"{p.id}: the note must say what is repeated"


def test_limit_is_per_task() -> None:
    assert len(load_prompts("code", limit=3)) == 3
    prompts = load_prompts(limit=2)
    assert [p.task for p in prompts] == [t for t in TASKS for _ in range(2)]
    assert load_prompts("prose", limit=0) == []
    assert load_prompts("prose", limit=10_000) == load_prompts("prose")


def test_prompt_is_frozen() -> None:
    p = load_prompts("code", limit=1)[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.prompt = "x"  # type: ignore[misc]


# --------------------------------------------------------------------------
# Loader errors, on files written to a temporary data folder
# --------------------------------------------------------------------------

GOOD_PROMPT = 'def f(x):\n    """Return x doubled."""\n    '


def _record(kind: str, n: int, **overrides: object) -> dict:
    record = {"id": f"{kind}-{n:03d}", "task": kind, "prompt": GOOD_PROMPT, "note": "return x * 2"}
    record.update(overrides)
    return record


def _write(data_dir: Path, task: str, lines: list[object]) -> Path:
    folder = data_dir / "prompts"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{task}.jsonl"
    text = "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A data folder with a valid file for every task, selected via SPECDEC_DATA_DIR."""
    for task in TASKS:
        _write(tmp_path, task, [_record(task, 1), _record(task, 2)])
    monkeypatch.setenv("SPECDEC_DATA_DIR", str(tmp_path))
    return tmp_path


def test_env_var_selects_data_dir(data_dir: Path) -> None:
    prompts = load_prompts()
    assert [p.id for p in prompts] == [f"{t}-00{i}" for t in TASKS for i in (1, 2)]
    assert prompts[0] == Prompt(id="code-001", task="code", prompt=GOOD_PROMPT, note="return x * 2")


def test_blank_lines_are_skipped(data_dir: Path) -> None:
    _write(data_dir, "code", [_record("code", 1), "", "   ", _record("code", 2)])
    assert len(load_prompts("code")) == 2


def test_unknown_task(data_dir: Path) -> None:
    with pytest.raises(ValueError, match=r"unknown task 'poetry'.*code, prose, grounded"):
        load_prompts("poetry")


@pytest.mark.parametrize("limit", [-1, 1.5, True, "3"])
def test_bad_limit(data_dir: Path, limit: object) -> None:
    with pytest.raises(ValueError, match=r"limit \(prompts per set\) must be an integer >= 0"):
        load_prompts("code", limit=limit)  # type: ignore[arg-type]


def _load_error(task: str) -> str:
    """The message of the ValueError that loading ``task`` raises."""
    with pytest.raises(ValueError) as info:
        load_prompts(task)
    return str(info.value)


def test_missing_key(data_dir: Path) -> None:
    bad = _record("code", 2)
    del bad["note"]
    path = _write(data_dir, "code", [_record("code", 1), bad])
    msg = _load_error("code")
    assert f"{path}:2" in msg
    assert "missing key(s) note" in msg
    assert "id, task, prompt, note" in msg


def test_unknown_key(data_dir: Path) -> None:
    path = _write(data_dir, "prose", [_record("prose", 1, promt="typo")])
    with pytest.raises(ValueError, match=r"prose\.jsonl:1: unknown key\(s\) promt") as info:
        load_prompts("prose")
    assert str(path) in str(info.value)


def test_duplicate_id_within_file(data_dir: Path) -> None:
    path = _write(data_dir, "code", [_record("code", 1), _record("code", 2), _record("code", 1)])
    msg = _load_error("code")
    assert f"{path}:3" in msg
    assert "duplicate id 'code-001'" in msg
    assert f"{path}:1" in msg  # where it was first used


def test_wrong_task_field(data_dir: Path) -> None:
    path = _write(data_dir, "grounded", [_record("grounded", 1), _record("grounded", 2, task="code")])
    msg = _load_error("grounded")
    assert f"{path}:2" in msg
    assert "task is 'code' but the file is grounded.jsonl" in msg


def test_id_must_carry_task_prefix(data_dir: Path) -> None:
    _write(data_dir, "prose", [_record("prose", 1, id="code-001")])
    with pytest.raises(ValueError, match=r"prose\.jsonl:1: id 'code-001' must look like 'prose-NNN'"):
        load_prompts("prose")


@pytest.mark.parametrize("text", ["", "   \n  "])
def test_empty_prompt(data_dir: Path, text: str) -> None:
    path = _write(data_dir, "code", [_record("code", 1, prompt=text)])
    msg = _load_error("code")
    assert f"{path}:1" in msg
    assert "prompt of 'code-001' is empty" in msg


def test_non_string_field(data_dir: Path) -> None:
    _write(data_dir, "code", [_record("code", 1, note=None)])
    with pytest.raises(ValueError, match=r"code\.jsonl:1: 'note' must be a string, got NoneType"):
        load_prompts("code")


def test_invalid_json(data_dir: Path) -> None:
    _write(data_dir, "code", [_record("code", 1), '{"id": "code-002",'])
    with pytest.raises(ValueError, match=r"code\.jsonl:2: not valid JSON"):
        load_prompts("code")


def test_not_an_object(data_dir: Path) -> None:
    _write(data_dir, "code", ['["code-001", "code"]'])
    with pytest.raises(ValueError, match=r"code\.jsonl:1: expected a JSON object, got list"):
        load_prompts("code")


def test_missing_file(data_dir: Path) -> None:
    (data_dir / "prompts" / "prose.jsonl").unlink()
    assert len(load_prompts("code")) == 2  # other sets still load
    with pytest.raises(FileNotFoundError, match=r"prose\.jsonl.*SPECDEC_DATA_DIR"):
        load_prompts()
