"""A module of the package that no connector imports: a connector's lint never reads its unguarded call."""

from __future__ import annotations

import torch


def drain() -> None:
    torch.cuda.synchronize()
