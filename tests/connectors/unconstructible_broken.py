"""Connectors that cannot be built on this machine, as a connector new in a vLLM release often cannot.

vLLM 0.34's UMBPStoreConnector raises ``RuntimeError: Embedded UMBP requires MORI built with
BUILD_UMBP=ON`` when its worker half is built without that library; with no profile to say so, every
check that built it failed with that one error. These copies of ExampleConnector raise the same way,
with no profile: the suite must report one failure naming the error, and its other checks not run
(tests/connectors/test_construction_catches.py proves it). Each construction is counted in the file
``$KVCONFORM_CONSTRUCTIONS`` names, one line per attempt, so the self-test sees how often it was tried.
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
