"""A test process is a faithful vLLM worker of rank k on an accelerator.

No accelerator here: ``torch.cuda`` is replaced by a fake that keeps a current
device and per-device RNG states, so what the harness asks of it is observable.
"""

from __future__ import annotations

import pytest
import torch

from kvconform.conformance.engine import device_guard as devices
from kvconform.conformance.engine.device_guard import DeviceGuard


class FakeCuda:
    """``torch.cuda`` as far as the harness uses it: device count, current device, RNG state per device."""

    def __init__(self, count: int):
        self.count = count
        self.current = 0
        self.rng = {index: torch.tensor([index], dtype=torch.uint8) for index in range(count)}

    def device_count(self) -> int:
        return self.count

    def is_available(self) -> bool:
        return self.count > 0

    def set_device(self, index) -> None:
        self.current = torch.device(index).index if not isinstance(index, int) else index

    def current_device(self) -> int:
        return self.current

    def get_rng_state(self, device: int = 0) -> torch.Tensor:
        return self.rng[device].clone()

    def set_rng_state(self, state, device: int = 0) -> None:
        self.rng[device] = state.clone()

    def _is_in_bad_fork(self) -> bool:
        return False

    def manual_seed_all(self, seed: int) -> None:  # what torch.manual_seed calls
        for index in self.rng:
            self.rng[index] = torch.tensor([seed % 256], dtype=torch.uint8)


@pytest.fixture
def fake_cuda(monkeypatch):
    def install(count: int) -> FakeCuda:
        fake = FakeCuda(count)
        monkeypatch.setattr(torch, "cuda", fake)
        return fake

    return install


@pytest.mark.parametrize("count,rank", [(0, 0), (1, 0), (2, 1), (8, 1)])
def test_worker_rank_is_device_1_when_two_are_visible(count, rank):
    assert devices.worker_device_index(count) == rank


def test_cache_device_is_made_current(fake_cuda):
    cuda = fake_cuda(2)
    devices.make_current("cuda:1")
    assert cuda.current == 1
    assert devices.current_device("cuda") == torch.device("cuda", 1)
    devices.make_current("cpu")  # nothing to make current on the CPU
    assert cuda.current == 1


def test_unindexed_device_is_the_cache_device_in_a_faithful_worker(fake_cuda):
    """``"cuda"`` names the current device: right when it is the cache's, as in vLLM's worker."""
    cuda = fake_cuda(2)
    guard = DeviceGuard("SomeConnector", {}, torch.device("cuda:1"))
    cuda.current = 1
    assert not guard._wrong(torch.device("cuda"))
    assert guard._wrong(torch.device("cuda:0"))
    cuda.current = 0  # the strict case (kvconform policy): caches off the current device
    assert guard._wrong(torch.device("cuda"))


def test_fill_rng_fork_restores_the_accelerator_generators(fake_cuda):
    """``torch.manual_seed`` inside the fork reseeds every device; leaving it must restore them."""
    cuda = fake_cuda(2)
    before = {i: s.clone() for i, s in cuda.rng.items()}
    with devices.forked_rng("cuda:1"):
        torch.manual_seed(99)
        assert cuda.rng[0].tolist() == [99]
    assert {i: s.tolist() for i, s in cuda.rng.items()} == {i: s.tolist() for i, s in before.items()}


def test_cpu_rng_fork_touches_no_accelerator(fake_cuda):
    cuda = fake_cuda(0)
    state = torch.random.get_rng_state()
    with devices.forked_rng("cpu"):
        torch.manual_seed(1234)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert cuda.rng == {}


def test_process_group_local_rank_is_the_worker_rank():
    """vLLM's groups take their device from the local rank: it must be the cache device's index."""
    pytest.importorskip("vllm")
    from vllm.config import VllmConfig
    from vllm.distributed.parallel_state import get_world_group, model_parallel_is_initialized

    from kvconform.conformance.engine.distributed import single_rank_parallel_state

    if model_parallel_is_initialized():
        pytest.skip("this test process already holds vLLM's process groups; the case needs a fresh one")
    with single_rank_parallel_state(VllmConfig(), local_rank=1):
        assert get_world_group().local_rank == 1
