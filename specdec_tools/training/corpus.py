"""The training corpus: the Python standard library of the interpreter running the training.

Why this corpus: it is on every machine that can run the course (no download), it is
real code written by many people, and code completion is the flagship use case of
speculative decoding (code is predictable, so drafts are often accepted).

The corpus itself is never committed; :func:`write_manifest` records what was used
(Python version, file counts, bytes, sha256) so a run can be compared with another.
"""
from __future__ import annotations

import hashlib
import json
import platform
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

#: Files larger than this are mostly data tables (e.g. unicode tables), not code.
MAX_FILE_BYTES = 300_000
#: Files whose share of non-ASCII characters is above this are test data, not code.
MAX_NON_ASCII_FRACTION = 0.02
#: One file in VALIDATION_EVERY (chosen by a hash of its path) is held out.
VALIDATION_EVERY = 50


@dataclass(frozen=True)
class SourceFile:
    """One standard-library source file: its path relative to the stdlib root and its text."""

    relative_path: str
    text: str

    @property
    def is_validation(self) -> bool:
        """Held out from training, chosen by path hash so the split never depends on order."""
        digest = hashlib.sha1(self.relative_path.encode()).digest()
        return int.from_bytes(digest[:4], "big") % VALIDATION_EVERY == 0


def stdlib_root() -> Path:
    """Folder holding the running interpreter's standard library (e.g. .../lib/python3.11)."""
    return Path(sysconfig.get_paths()["stdlib"])


def _is_code(text: str) -> bool:
    if not text.strip() or len(text.encode()) > MAX_FILE_BYTES:
        return False
    non_ascii = sum(1 for ch in text if ord(ch) > 127)
    return non_ascii <= MAX_NON_ASCII_FRACTION * len(text)


def collect_stdlib_sources(root: Path | None = None, max_files: int | None = None) -> list[SourceFile]:
    """Read every ``*.py`` file of the standard library (site-packages excluded), sorted by path.

    Files that are not valid UTF-8, very large or mostly non-ASCII are skipped (see the
    module constants). ``max_files`` keeps the first N files: used by the quick test of
    the training pipeline. Newlines are normalised to ``\\n``.
    """
    root = root or stdlib_root()
    files: list[SourceFile] = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if "site-packages" in rel or "dist-packages" in rel:
            continue
        try:
            text = path.read_text(encoding="utf-8").replace("\r\n", "\n")
        except (UnicodeDecodeError, OSError):
            continue
        if _is_code(text):
            files.append(SourceFile(rel, text))
        if max_files is not None and len(files) >= max_files:
            break
    if not files:
        raise RuntimeError(f"No Python source files found under {root}; is this a full Python install?")
    return files


def split_files(files: list[SourceFile]) -> tuple[list[SourceFile], list[SourceFile]]:
    """(train, validation) split by path hash; validation is never empty."""
    val = [f for f in files if f.is_validation]
    train = [f for f in files if not f.is_validation]
    if not val:  # tiny corpora (quick tests): hold out the last file
        train, val = files[:-1], files[-1:]
    return train, val


def corpus_manifest(train: list[SourceFile], val: list[SourceFile]) -> dict:
    """What the corpus was, precisely enough to tell whether two runs saw the same data."""
    sha = hashlib.sha256()
    for f in sorted(train + val, key=lambda f: f.relative_path):
        sha.update(f.relative_path.encode() + b"\0" + f.text.encode() + b"\0")
    return {
        "source": "Python standard library (*.py, site-packages excluded)",
        "python_version": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "platform": sys.platform,
        "filters": {
            "max_file_bytes": MAX_FILE_BYTES,
            "max_non_ascii_fraction": MAX_NON_ASCII_FRACTION,
            "validation": f"sha1(relative path) % {VALIDATION_EVERY} == 0",
        },
        "train_files": len(train),
        "validation_files": len(val),
        "train_bytes": sum(len(f.text.encode()) for f in train),
        "validation_bytes": sum(len(f.text.encode()) for f in val),
        "validation_paths": sorted(f.relative_path for f in val),
        "sha256": sha.hexdigest(),
    }


def write_manifest(manifest: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest, indent=2) + "\n")
