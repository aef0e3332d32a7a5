"""vLLM's distributed state for a one-process world, as a model runner would have it.

Every vLLM worker initialises its tensor-parallel group before it builds the KV
connector, and some connectors ask it (NIXL: ``get_tensor_model_parallel_rank()``).
The suite sets up a world of one (gloo) once per test process and keeps it, as a
worker process does; a context already inside a group leaves it as it is. The local
rank is the index of the device the worker's caches sit on, which is its current
device, as in vLLM's worker of that rank (vLLM's groups take their device from it).
"""

from __future__ import annotations

import shutil
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from ..vllm_install import api as vllm_api

if TYPE_CHECKING:
    from vllm.config import VllmConfig


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def single_rank_parallel_state(vllm_config: VllmConfig, local_rank: int = 0) -> Iterator[None]:
    """vLLM's tensor-parallel group for a one-process world (gloo) while the context is open.

    Inside an existing group (the test session's, see conformance/conftest.py) it changes nothing.
    """
    from vllm.config import set_current_vllm_config

    model_parallel_is_initialized = vllm_api.find("model_parallel_is_initialized")
    init_distributed_environment = vllm_api.find("init_distributed_environment")
    ensure_model_parallel_initialized = vllm_api.find("ensure_model_parallel_initialized")
    destroy_model_parallel = vllm_api.find("destroy_model_parallel")
    destroy_distributed_environment = vllm_api.find("destroy_distributed_environment")

    if model_parallel_is_initialized():
        yield
        return
    # A file store, not a TCP one: no port to probe for and release, so no race with another process
    # (xdist workers, a service) for it between the probe and the bind.
    rendezvous = tempfile.mkdtemp(prefix="kvconform-world-")
    try:
        with set_current_vllm_config(vllm_config):
            init_distributed_environment(world_size=1, rank=0, local_rank=local_rank, backend="gloo",
                                         distributed_init_method=f"file://{rendezvous}/store")
            ensure_model_parallel_initialized(1, 1)
        try:
            yield
        finally:
            destroy_model_parallel()
            destroy_distributed_environment()
    finally:
        shutil.rmtree(rendezvous, ignore_errors=True)
