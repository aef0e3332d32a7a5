"""Connectors that cannot be built on this machine, as a connector new in a vLLM release often cannot.

vLLM 0.34's UMBPStoreConnector raises ``RuntimeError: Embedded UMBP requires MORI built with
BUILD_UMBP=ON`` when its worker half is built without that library; with no profile to say so, every
check that built it failed with that one error. These copies of ExampleConnector raise the same way,
with no profile: the suite must report one failure naming the error, and its other checks not run
(tests/connectors/test_construction_catches.py proves it). Each construction is counted in the file
``$KVCONFORM_CONSTRUCTIONS`` names, one line per attempt, so the self-test sees how often it was tried.

Two fail as out-of-tree connectors do: a native core behind pyo3 panics with ``pyo3_runtime.PanicException``,
a ``BaseException`` that ``except Exception`` lets pass (``PanicException`` here is defined as pyo3 defines it),
and a bare ``assert`` in a helper of the connector's own code leaves a message-less ``AssertionError``: the
failure must still name the type, the message and the line that raised.
"""

from __future__ import annotations

import os

from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
from vllm.distributed.kv_transfer.kv_connector.v1.example_connector import ExampleConnector

CONSTRUCTIONS_VAR = "KVCONFORM_CONSTRUCTIONS"
MISSING_LIBRARY = "the unconstructible connector requires libkvstore built with KV_STORE=ON"


def _count(cls: type, role: KVConnectorRole) -> None:
    path = os.environ.get(CONSTRUCTIONS_VAR)
    if path:
        with open(path, "a") as constructions:
            constructions.write(f"{cls.__name__} {role.name}\n")


class UnconstructibleConnector(ExampleConnector):
    """Raises in ``__init__`` for both roles: a library it needs is missing here."""

    def __init__(self, vllm_config, role, kv_cache_config):
        _count(type(self), role)
        raise RuntimeError(MISSING_LIBRARY)


class WorkerUnconstructibleConnector(ExampleConnector):
    """Builds its scheduler half; its worker half raises, as UMBPStoreConnector's does."""

    def __init__(self, vllm_config, role, kv_cache_config):
        _count(type(self), role)
        if role == KVConnectorRole.WORKER:
            raise RuntimeError(MISSING_LIBRARY)
        super().__init__(vllm_config, role, kv_cache_config)


PANIC_MESSAGE = "called `Option::unwrap()` on a `None` value"


class PanicException(BaseException):
    """pyo3_runtime.PanicException: what a Rust panic in a pyo3 core raises into Python (not an ``Exception``)."""


def _native_core_new(role: KVConnectorRole) -> None:
    """The connector's native core, as a pyo3 binding that panics when its config lacks a key."""
    raise PanicException(PANIC_MESSAGE)


class PanickingConnector(ExampleConnector):
    """Its native core panics for either role."""

    def __init__(self, vllm_config, role, kv_cache_config):
        _count(type(self), role)
        _native_core_new(role)
        super().__init__(vllm_config, role, kv_cache_config)


def _check_store_reachable(role: KVConnectorRole) -> None:
    """A helper of the connector's own code with a bare assert: an AssertionError without a message."""
    reachable = False
    assert reachable


class AssertingConnector(ExampleConnector):
    """Its worker half builds; its scheduler half, built after it as vLLM's engine does, fails an ``assert`` in a
    helper function."""

    def __init__(self, vllm_config, role, kv_cache_config):
        _count(type(self), role)
        if role == KVConnectorRole.SCHEDULER:
            _check_store_reachable(role)
        super().__init__(vllm_config, role, kv_cache_config)
