"""Fixtures the conformance checks share: the tiny model and per-test rigs.

Expensive, stateless things (the tiny model directory) are built once per
session; anything a connector can change (configs, caches, storage) is fresh
per test, so no state leaks from one test into the next.
"""

from __future__ import annotations

import pytest

from conformance.harness.model import write_tiny_model


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture
def storage(tmp_path):
    """The connector's own storage folder for this test (ExampleConnector's default is /tmp)."""
    path = tmp_path / "kv-storage"
    path.mkdir()
    return path


@pytest.fixture
def device(platform):
    """The device the caches go on: not the default one when two or more are visible."""
    return platform.device(1 if _device_count(platform) >= 2 else 0)


def _device_count(platform) -> int:
    from platforms import probe

    return probe(platform.name).device_count


@pytest.fixture(scope="session")
def worker_process():
    """vLLM's tensor-parallel group of one, set up once per test process as a vLLM worker has it."""
    from vllm.config import VllmConfig

    from conformance.harness.distributed import single_rank_parallel_state

    with single_rank_parallel_state(VllmConfig()):
        yield


@pytest.fixture
def make_rig(platform, attn_backend, connector, tiny_model, storage, device, worker_process, connector_services):
    from conformance.harness.rig import Rig

    def make(shape):
        return Rig(connector, platform, attn_backend, shape, tiny_model, storage, device,
                   services=connector_services(connector))

    return make
