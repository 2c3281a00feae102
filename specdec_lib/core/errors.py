"""The exceptions specdec raises for problems a learner can fix.

Every message says *what* was wrong and *how to fix it*, so a notebook shows one readable line instead of a
traceback from deep inside torch. Each class also derives from the matching built-in exception
(``ValueError``, ``FileNotFoundError``, ...) so generic ``except`` clauses keep working.

    SpecdecError
    ├── ConfigError           a setting is invalid (sampling parameters, device name, preset, ...)
    ├── InputError            an input tensor is unusable (empty prompt, batch > 1, wrong dtype, ...)
    │   └── ContextOverflowError   prompt + new tokens do not fit the model's context window
    ├── ModelNotFoundError    an embedded model folder or file is missing
    └── HubUnavailableError   a hub preset could not be downloaded (no internet)
"""


class SpecdecError(Exception):
    """Base class of every error specdec raises on purpose."""


class ConfigError(SpecdecError, ValueError):
    """A setting (sampling parameter, device, preset or model name, ...) is invalid."""


class InputError(SpecdecError, ValueError):
    """An input tensor cannot be used (empty, batch > 1, wrong dtype or number of dimensions, ...)."""


class ContextOverflowError(InputError):
    """The prompt plus the tokens to generate exceed the model's context window."""


class ModelNotFoundError(SpecdecError, FileNotFoundError):
    """An embedded model (or the ``data/`` folder holding it) cannot be found."""


class HubUnavailableError(SpecdecError, RuntimeError):
    """A hub preset needs a download from the Hugging Face Hub that is not possible here."""
