"""The worker helper of CudaHelperConnector: records an event after the saves and waits on it, unguarded."""

from __future__ import annotations

import torch


def record_saves() -> torch.cuda.Event:
    """An event on the current CUDA stream, after the queued layer saves."""
    event = torch.cuda.Event()
    event.record(torch.cuda.current_stream())
    return event


def wait_for_saves() -> None:
    """Blocks until the saves queued so far are done."""
    from tests.checks.cuda_helper_broken.sync import wait_for  # an absolute import, inside a function

    wait_for(record_saves())
