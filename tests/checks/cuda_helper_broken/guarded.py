"""CleanHelperConnector's helper: it synchronizes the device only under a platform guard."""

from __future__ import annotations

import torch


def wait_for_saves() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
