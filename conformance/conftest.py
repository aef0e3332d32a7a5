"""Fixtures the conformance checks share: the tiny model and per-test rigs.

Expensive, stateless things (the tiny model directory) are built once per
session; anything a connector can change (configs, caches, storage) is fresh
per test, so no state leaks from one test into the next.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, cast

import pytest

from kvconform.conformance.engine.model import write_tiny_model

if TYPE_CHECKING:
    from kvconform.conformance.connectors.selection import ConnectorParam
    from kvconform.conformance.connectors.services import UseServices
    from kvconform.conformance.engine.kvcache import CacheShape
    from kvconform.conformance.engine.rig import MakeRig, Rig
    from kvconform.platforms.spec import PlatformSpec


@pytest.fixture(autouse=True)
def prompts_of_this_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every prompt the test draws is its own (engine/prompts.py): what an earlier test stored in a connector
    that keeps one store for the whole process is never a hit here, so the outcome does not depend on the order."""
    from kvconform.conformance.engine.prompts import prompts_of

    with prompts_of(request.node.nodeid):
        yield


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture
def storage(tmp_path: Path) -> Path:
    """The connector's own storage folder for this test (ExampleConnector's default is /tmp)."""
    path = tmp_path / "kv-storage"
    path.mkdir()
    return path


def _device_count(platform: PlatformSpec) -> int:
    from kvconform.platforms import probe

    return probe(platform.name).device_count


@pytest.fixture(scope="session")
def worker_rank(platform: PlatformSpec) -> int:
    """The local rank this test process plays: the index of its cache device (see ``worker_device_index``)."""
    from kvconform.conformance.engine.device_guard import worker_device_index

    return worker_device_index(_device_count(platform))


@pytest.fixture(scope="session")
def worker_process(platform: PlatformSpec, worker_rank: int) -> Iterator[None]:
    """A faithful vLLM worker of rank k, once per test process: device k current, local rank k, a TP group of one."""
    from vllm.config import VllmConfig

    from kvconform.conformance.engine.device_guard import make_current
    from kvconform.conformance.engine.distributed import single_rank_parallel_state

    make_current(platform.device(worker_rank))
    with single_rank_parallel_state(VllmConfig(), local_rank=worker_rank):
        yield


@pytest.fixture
def device(platform: PlatformSpec, worker_rank: int, worker_process: None) -> str:
    """The device the caches go on: the worker's current device, as in vLLM (device 1 when two or more are visible)."""
    return platform.device(worker_rank)


@pytest.fixture
def off_current_device(platform: PlatformSpec, worker_rank: int, worker_process: None) -> str:
    """A device that is not the current one (kvconform's stricter policy case); needs two visible devices."""
    from kvconform.conformance.session.devices import require_devices

    require_devices(platform, 2)
    return platform.device((worker_rank + 1) % _device_count(platform))


@pytest.fixture
def subject(request: pytest.FixtureRequest, platform: PlatformSpec, connector: ConnectorParam) -> ConnectorParam:
    """The connector this test checks, once it may check it here: the profile key the test's check needs (the check
    table's, ``identity.needed_check``) met on this platform, else a skip naming what is not; and the test's
    ``producer_consumer`` marker kept, else a skip saying why the test is for producer/consumer pairs only, or
    never for them (the marker's name holds no "pair", so ``-k pair`` selects what it always did)."""
    from kvconform.conformance.connectors.requirements import pair_mismatch, require
    from kvconform.reports.identity import needed_check

    check = needed_check(request.node)
    if check is None:
        raise TypeError(f"{request.node.nodeid} asks for the checked subject but carries no check marker")
    require(connector, platform, check)
    if reason := pair_mismatch(connector, request.node.get_closest_marker("producer_consumer")):
        pytest.skip(reason)
    return connector


@pytest.fixture
def make_rig(platform: PlatformSpec, attn_backend: str, connector: ConnectorParam, tiny_model: Path, storage: Path,
             device: str, worker_process: None, connector_services: UseServices,
             pytestconfig: pytest.Config) -> Iterator[MakeRig]:
    from kvconform.conformance.engine.rig import Rig

    rigs: list[Rig] = []

    def make(shape: CacheShape, rig_class: type[Rig] = Rig) -> Rig:
        rigs.append(rig_class(connector, platform, attn_backend, shape, tiny_model, storage, device,
                              services=connector_services(connector),
                              wait_scale=pytestconfig.getoption("kvconform_wait_scale")))
        return rigs[-1]

    yield cast("MakeRig", make)  # MakeRig's overloads say make(shape, SomeRig) returns a SomeRig
    for rig in rigs:  # what a failed check left open, shut down while the connector's servers still run
        rig.close_engines()
