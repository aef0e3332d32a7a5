"""Waiting for an event, then for the whole CUDA device, unguarded: reached from connector.py only through worker.py."""

from __future__ import annotations

import torch


def wait_for(event: torch.cuda.Event) -> None:
    event.synchronize()
    torch.cuda.synchronize()
