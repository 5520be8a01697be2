"""PyTorch's mixed precision as the backend's steps and its calibration kernels both run
it: the autocast dtype of each mixed precision, and the context a step's ops run in."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch

#: Mixed precisions: the autocast dtype; fp16 also scales the loss (GradScaler) so that
#: small gradients do not flush to zero in fp16.
AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}


def autocast_context(device: torch.device,
                     dtype: torch.dtype | None) -> Callable[[], contextlib.AbstractContextManager]:
    """What a step's ops run inside, made anew for each step: ``torch.autocast`` to
    ``dtype`` under mixed precision, else nothing."""
    return (lambda: torch.autocast(device.type, dtype=dtype)) if dtype else contextlib.nullcontext
