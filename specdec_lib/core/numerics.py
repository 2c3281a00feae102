"""The dtype the models compute in, and how far apart two logits may be before rounding could explain the gap.

Greedy speculative decoding is token-identical to the target alone *in exact arithmetic*. In floating point, the
verification forward over ``k + 1`` tokens is another shape of computation than a one-token step: its matrix
products sum in another order and round differently. Where the target's top two logits are within that rounding of
each other (a **near-tie**) the two computations may choose different tokens, and both choices are the target's
greedy choice up to rounding. How wide that band is depends on the dtype:

    spacing(dtype, z)  = eps(dtype) * 2^floor(log2 |z|)       the gap between two neighbouring numbers near z
                         (float32: 2^-23 relative, bfloat16: 2^-7, float16: 2^-10)
    tolerance(dtype, z) = max(NEAR_TIE_STEPS * spacing(dtype, z), ACCUMULATION_STEPS * eps(float32) * |z|)

Why these two terms. A logit stored in a low-precision dtype is rounded to that dtype's grid at the end, so two
computations of it can land one or two grid steps apart, and the *gap* between two logits moves by the sum of both
logits' moves: ``NEAR_TIE_STEPS = 4`` steps. Under that final rounding, every layer's float32 accumulation adds its
own small error, relative to the logit's size; in float32 that is the whole story (the output grid is so fine that
the accumulated error spans dozens of its steps): ``ACCUMULATION_STEPS = 64`` float32 epsilons of ``|z|``. The
numerics bench (``python -m specdec_lib bench numerics``) measures the largest drift between a verification forward
and one-token steps in every dtype and reports it in steps of the dtype, beside this tolerance.

``SPECDEC_DTYPE`` (``float32``, ``bfloat16`` or ``float16``) chooses the dtype every notebook loads its models in
(`get_dtype`, read by `specdec_lib.course_setup` and `specdec_lib.load_pair`); float32 is the default, the one
in which the course asserts identity strictly.
"""

from __future__ import annotations

import math
import os

import torch

from .errors import ConfigError

DTYPE_ENV_VAR = "SPECDEC_DTYPE"
DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16"}
NEAR_TIE_STEPS = 4
ACCUMULATION_STEPS = 64


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``."""
    return str(dtype).removeprefix("torch.")


def _resolve_dtype(request: torch.dtype | str, source: str) -> torch.dtype:
    if isinstance(request, torch.dtype) and request in DTYPES.values():
        return request
    name = request.strip().lower().removeprefix("torch.") if isinstance(request, str) else None
    name = ALIASES.get(name, name)
    if name not in DTYPES:
        raise ConfigError(f"{source} asks for dtype {request!r}; the course runs in one of: {', '.join(DTYPES)} "
                          "(float32, the exact default; bfloat16 or float16, what GPUs usually run).")
    return DTYPES[name]


def get_dtype(prefer: torch.dtype | str | None = None) -> torch.dtype:
    """The dtype to load models in: the ``prefer`` argument, else ``SPECDEC_DTYPE``, else float32.

    A name that is not one of `DTYPES` raises `ConfigError` naming the choices, rather than falling back."""
    if prefer is not None:
        return _resolve_dtype(prefer, "get_dtype(prefer=...)")
    from_env = os.environ.get(DTYPE_ENV_VAR, "").strip()
    if from_env:
        return _resolve_dtype(from_env, f"The environment variable {DTYPE_ENV_VAR}")
    return torch.float32


def is_exact_dtype(dtype: torch.dtype) -> bool:
    """float32 (or wider): the dtype in which the course asserts greedy identity strictly."""
    return torch.finfo(dtype).bits >= 32


def spacing(dtype: torch.dtype, value: float) -> float:
    """The gap between ``value`` and its neighbour in ``dtype`` (one rounding step, "one ulp"):
    ``eps(dtype) * 2^floor(log2 |value|)`` (the smallest normal number's spacing near zero)."""
    info = torch.finfo(dtype)
    magnitude = max(abs(float(value)), info.tiny)
    return info.eps * 2.0 ** math.floor(math.log2(magnitude))


def near_tie_tolerance(dtype: torch.dtype, value: float) -> float:
    """How far below the top logit ``value`` another logit may be and still count as tied with it in ``dtype``
    (module docstring): ``max(NEAR_TIE_STEPS * spacing(dtype, value), ACCUMULATION_STEPS * eps(float32) * |value|)``."""
    return max(NEAR_TIE_STEPS * spacing(dtype, value), ACCUMULATION_STEPS * torch.finfo(torch.float32).eps * abs(value))


def relative_tolerance(dtype: torch.dtype) -> float:
    """How far two computations of one tensor in ``dtype`` may drift apart, relative to the tensor's largest
    magnitude: ``max(NEAR_TIE_STEPS * eps(dtype), ACCUMULATION_STEPS * eps(float32))`` (module docstring)."""
    return max(NEAR_TIE_STEPS * torch.finfo(dtype).eps, ACCUMULATION_STEPS * torch.finfo(torch.float32).eps)


def same_up_to_rounding(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype | None = None) -> bool:
    """``a`` and ``b`` (same shape) are one tensor computed twice in ``dtype`` (default: ``a``'s): every element
    within ``relative_tolerance(dtype) * max|b|`` of the other. A rolled-back KV cache against a fresh prefill, or
    a verification forward's logits against one-token steps: exact in math, apart by rounding in floats."""
    if a.shape != b.shape:
        return False
    dtype = a.dtype if dtype is None else dtype
    scale = float(b.detach().abs().max()) if b.numel() else 0.0
    return bool(((a.detach().float() - b.detach().float()).abs() <= relative_tolerance(dtype) * scale).all())
