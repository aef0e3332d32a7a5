"""The shape of a platform entry, and of what probing one found.

Each platform module declares one ``PlatformSpec`` as data; nothing here knows
about any particular platform, so adding one is a new module and one line in
``platforms/__init__.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Probe:
    """What probing a platform found, said in words a user can act on."""

    detected: bool
    reason: str
    device_count: int = 0


@dataclass(frozen=True)
class PlatformSpec:
    """One hardware platform, as data.

    ``probe`` must never initialise a device (no CUDA context, no XPU queue):
    it runs at pytest configure time and in xdist controllers, before a
    worker's device-visibility variable is set.
    """

    name: str
    torch_device_type: str
    visibility_vars: tuple[str, ...]
    backends: tuple[str, ...]
    probe: Callable[[], Probe]
    device_name: Callable[[int], str]
    emoji: str = ""
    # MLA layers run on their own backends; the MLA checks run once per backend here, not per ``backends``.
    mla_backends: tuple[str, ...] = ()

    def device(self, index: int = 0) -> str:
        """The torch device string for device ``index`` of this platform."""
        if self.torch_device_type == "cpu":
            return "cpu"
        return f"{self.torch_device_type}:{index}"
