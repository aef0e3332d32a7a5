"""Catch a connector moving KV to a device other than the cache's.

A ``TorchFunctionMode`` watches every torch call a connector makes while the
harness drives it: a move to an accelerator device that is not the cache's
(``.cuda()``, ``.to("cuda")``, ``device="cuda"``, the default device when the
cache sits on another one) or a write into the cache of a tensor from another
device stops the call with a ``DeviceMismatch`` naming the connector, the
layer, the expected device and the device it tried. Moves to the CPU are
staging and allowed. This observes the real connector; it replaces nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from .check_failure import CheckFailure

# in-place writes -> position of the written value among the positional args
_CACHE_WRITES = {torch.Tensor.__setitem__: 2, torch.Tensor.copy_: 1, torch.Tensor.index_put_: 2,
                 torch.Tensor.index_copy_: 3, torch.Tensor.masked_scatter_: 2}
_DEVICE_ARG_TYPES = (str, torch.device, int)


class DeviceMismatch(CheckFailure):
    """A connector put KV on a device other than the cache's."""


def worker_device_index(device_count: int) -> int:
    """The device (and local rank) a test process plays vLLM's worker on.

    Device 1 when two or more are visible, so a connector that names device 0
    (``"cuda:0"``, ``.cuda(0)``) shows; it is made current, as vLLM's worker makes its own.
    Under xdist each worker sees one device (``session/devices.py``): index 0.
    """
    return 1 if device_count >= 2 else 0


def make_current(device: str | torch.device) -> None:
    """Make ``device`` the current device of its type, as vLLM's worker does before it builds a connector."""
    device = torch.device(device)
    if device.type in ("cpu", "meta"):
        return
    getattr(torch, device.type).set_device(device.index or 0)


@contextmanager
def forked_rng(device: str | torch.device) -> Iterator[None]:
    """Like ``torch.random.fork_rng``, over the CPU and every generator of the cache device's type.

    ``torch.manual_seed`` reseeds every device, so a check that seeds inside
    ``fork_rng(devices=[])`` leaves an accelerator's generators reseeded for the
    tests after it; this restores them too. (The accelerator's states are saved
    through ``torch.<type>`` itself: ``fork_rng`` caches the device module it finds.)
    """
    device = torch.device(device)
    module = None if device.type in ("cpu", "meta") else getattr(torch, device.type)
    with torch.random.fork_rng(devices=[]):
        saved = [module.get_rng_state(index) for index in range(module.device_count())] if module else []
        try:
            yield
        finally:
            for index, state in enumerate(saved):  # empty without a module
                if module is not None:
                    module.set_rng_state(state, index)


def current_device(device_type: str) -> torch.device | None:
    """The current device of ``device_type`` (None on the CPU, or when torch cannot say)."""
    index = _current_index(device_type)
    return None if index is None or device_type == "cpu" else torch.device(device_type, index)


def _current_index(device_type: str) -> int | None:
    module = getattr(torch, device_type, None)
    try:
        return module.current_device() if module is not None and module.is_available() else None
    except Exception:
        return None


def _moves_to(func: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any]) -> torch.device | None:
    """The device a call moves or creates a tensor on, if it names one."""
    if func is torch.Tensor.cuda:
        index = args[1] if len(args) > 1 else kwargs.get("device")
        if index is None:
            return torch.device("cuda")
        return torch.device(f"cuda:{index if isinstance(index, int) else torch.device(index).index}")
    target = kwargs.get("device")
    if target is None and func is torch.Tensor.to and len(args) > 1:
        first = args[1]
        if isinstance(first, torch.Tensor):
            target = first.device
        elif isinstance(first, _DEVICE_ARG_TYPES) and not isinstance(first, bool):
            target = first
    if target is None:
        return None
    try:
        return torch.device(target)
    except (RuntimeError, TypeError):
        return None


class DeviceGuard(TorchFunctionMode):
    """Active while one connector's worker side runs against one set of caches."""

    def __init__(self, connector: str, caches: dict[str, object], expected: torch.device):
        super().__init__()
        self.connector = connector
        self.expected = expected
        self.layer = "(before any layer)"
        self._layer_of_ptr: dict[int, str] = {}
        self._storages: set[int] = set()
        for name, cache in caches.items():
            for tensor in cache if isinstance(cache, (list, tuple)) else (cache,):
                if isinstance(tensor, torch.Tensor):
                    self._layer_of_ptr[tensor.data_ptr()] = name
                    self._storages.add(tensor.untyped_storage().data_ptr())

    def enter_layer(self, name: str) -> None:
        self.layer = name

    def _wrong(self, target: torch.device) -> bool:
        if target.type == "cpu" or target.type == "meta":
            return False
        if target.type != self.expected.type:
            return True
        index = target.index if target.index is not None else _current_index(target.type)
        return index != (self.expected.index or 0)

    def _fail(self, tried: torch.device | str, how: str) -> None:
        raise DeviceMismatch(
            f"device mismatch: connector {self.connector}, layer {self.layer}: the KV cache is on "
            f"{self.expected} but the connector {how} {tried}"
        )

    def __torch_function__(self, func: Callable[..., Any], types: Collection[type], args: Sequence[Any] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        for arg in args:
            if isinstance(arg, torch.Tensor) and arg.data_ptr() in self._layer_of_ptr:
                self.layer = self._layer_of_ptr[arg.data_ptr()]
                break
        target = _moves_to(func, args, kwargs)
        if target is not None and self._wrong(target):
            self._fail(target, "moved or created a tensor on")
        if func in _CACHE_WRITES and args and isinstance(args[0], torch.Tensor):
            dst = args[0]
            if dst.untyped_storage().data_ptr() in self._storages:
                position = _CACHE_WRITES[func]
                value = args[position] if len(args) > position else None
                # 0-dim CPU scalars may be written anywhere; anything else must be on the cache's device
                if isinstance(value, torch.Tensor) and value.dim() > 0 and value.device != dst.device:
                    self._fail(value.device, "wrote into the cache a tensor on")
        return func(*args, **kwargs)
