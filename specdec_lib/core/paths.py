"""Where the course's data lives: the ``data/`` folder (embedded models, prompt sets, manifests).

Kept free of torch and transformers imports so that light modules (prompts) can find the
data without paying for them.
"""
import os
from pathlib import Path

from .errors import ModelNotFoundError

DATA_DIR_ENV_VAR = "SPECDEC_DATA_DIR"
#: The embedded model family in ``data/models/<name>/`` (trained by ``python -m specdec_tools train``).
EMBEDDED_MODEL_NAMES = ("target", "draft", "draft_b")
#: The root of a clone (or editable install): the folder that holds the ``specdec_lib/`` package.
REPO_ROOT = Path(__file__).resolve().parents[2]
#: The ``data/`` folder of a clone: beside the ``specdec_lib/`` package.
REPO_DATA_DIR = REPO_ROOT / "data"
#: The tracked course notebooks, which nbval and the site read (learners work in a copy).
REPO_COURSE_DIR = REPO_ROOT / "course"


def data_dir() -> Path:
    """The ``data/`` folder: ``$SPECDEC_DATA_DIR`` if set, else the one beside ``specdec_lib/`` in a checkout."""
    from_env = os.environ.get(DATA_DIR_ENV_VAR, "").strip()
    if from_env:
        path = Path(from_env).expanduser()
        if not path.is_dir():
            raise ModelNotFoundError(
                f"{DATA_DIR_ENV_VAR} points to {path}, which is not a folder. "
                f"Set it to the data/ folder of a specdec clone, or unset it."
            )
        return path
    path = REPO_DATA_DIR
    if not path.is_dir():
        raise ModelNotFoundError(
            f"Cannot find specdec's data/ folder (looked in {path}). Run from a clone of the repository installed "
            f"with `pip install -e .`, or set {DATA_DIR_ENV_VAR} to the clone's data/ folder."
        )
    return path
