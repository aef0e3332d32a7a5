"""Device pinning for xdist workers, with the environment faked (no GPU needed)."""

from __future__ import annotations

import os
import subprocess
import sys
import types

import pytest

from kvconform import platforms
from kvconform.conformance import xdist_devices
from tests.load import stretched


@pytest.mark.parametrize("name,count,index,expected", [
    ("cuda", 4, 1, {"CUDA_VISIBLE_DEVICES": "1"}),
    ("cuda", 2, 3, {"CUDA_VISIBLE_DEVICES": "1"}),
    ("rocm", 8, 5, {"HIP_VISIBLE_DEVICES": "5", "CUDA_VISIBLE_DEVICES": "5"}),
    ("xpu", 2, 0, {"ZE_AFFINITY_MASK": "0"}),
    ("cpu", 1, 3, {}),
    ("cuda", 0, 1, {}),
])
def test_visibility_env(name, count, index, expected):
    spec = platforms.get(name)
    assert xdist_devices.visibility_env(spec.visibility_vars, count, index) == expected


def test_pin_sets_env_from_worker_id(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    monkeypatch.delenv("ZE_AFFINITY_MASK", raising=False)
    env = xdist_devices.pin_worker_device(platforms.get("xpu"), 2)
    assert env == {"ZE_AFFINITY_MASK": "1"}
    import os

    assert os.environ["ZE_AFFINITY_MASK"] == "1"


def test_pin_respects_a_user_choice(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    assert xdist_devices.pin_worker_device(platforms.get("cuda"), 4) == {}


def test_no_pin_outside_xdist(monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    assert xdist_devices.pin_worker_device(platforms.get("cuda"), 4) == {}


def test_auto_workers_uses_device_count_on_gpu_platforms():
    assert xdist_devices.auto_workers(platforms.get("cuda"), 4) == 4
    assert xdist_devices.auto_workers(platforms.get("cpu"), 1) is None


def test_multi_device_skip_names_the_count():
    with pytest.raises(pytest.skip.Exception, match="needs 2 cpu devices; 1 visible here"):
        xdist_devices.require_devices(platforms.get("cpu"), 2)


def test_workers_each_see_their_own_platform_and_run_on_their_own_cores(tmp_path):
    """Under real xdist the controller hands the platform to its workers, which pin from it; the UCX setting
    the run starts with (harness/affinity.py) reaches them too, and each worker's threads run on its slice of
    the cores."""
    (tmp_path / "test_w.py").write_text(
        "import os\n"
        "def test_w(platform):\n"
        "    assert platform.name == 'cpu'\n"
        "    assert os.environ['PYTEST_XDIST_WORKER'].startswith('gw')\n"
        "    assert os.environ['UCX_USE_MT_MUTEX'] == 'y'\n")
    (tmp_path / "conftest.py").write_text(  # each worker, once every plugin is configured: where it runs
        "import os, threading\n"
        "def pytest_sessionstart(session):\n"
        "    worker = os.environ.get('PYTEST_XDIST_WORKER')\n"
        "    if worker:\n"
        "        own = os.sched_getaffinity(0)\n"
        "        alike = all(os.sched_getaffinity(int(tid)) == own for tid in os.listdir('/proc/self/task'))\n"
        "        with open(f'{worker}.cores', 'w') as out:\n"
        "            out.write(' '.join(map(str, sorted(own))) + f' all-threads={alike}')\n")
    env = {k: v for k, v in os.environ.items() if k != "UCX_USE_MT_MUTEX"}
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--platform=cpu",
                          str(tmp_path)], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=stretched(120))
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    usable = os.sched_getaffinity(0)
    for index in (0, 1):
        share = " ".join(map(str, sorted(xdist_devices.core_share(usable, 2, index))))
        assert (tmp_path / f"gw{index}.cores").read_text() == f"{share} all-threads=True"


@pytest.mark.parametrize(("usable", "workers", "index", "share"), [
    ({0, 1}, 2, 0, {0}),
    ({0, 1}, 2, 1, {1}),
    (set(range(8)), 2, 1, {4, 5, 6, 7}),
    ({0, 1}, 4, 3, {1}),  # more workers than cores: round robin
    (set(range(16)), 3, 0, {0, 1, 2, 3, 4}),
    (set(range(16)), 3, 2, set(range(10, 16))),  # the last worker takes the remainder
    ({2, 5, 9}, 3, 1, {5}),  # a slice of what the run may use (taskset), not of the machine
])
def test_each_worker_gets_its_own_slice_of_the_cores(usable, workers, index, share):
    assert xdist_devices.core_share(usable, workers, index) == share


def _fake_worker(monkeypatch, index: int, cpus: int) -> list[tuple[int, set[int]]]:
    """A worker ``gw<index>`` on ``cpus`` cores with two threads; returns where each thread is pinned."""
    pinned: list[tuple[int, set[int]]] = []
    monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{index}")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cpus)), raising=False)
    monkeypatch.setattr(os, "sched_setaffinity", lambda tid, cores: pinned.append((tid, set(cores))), raising=False)
    monkeypatch.setattr(os, "listdir", lambda path: ["100", "101"] if path == "/proc/self/task" else [])
    return pinned


@pytest.mark.parametrize(("cpus", "workers", "index", "share"), [(2, 2, 1, "1"), (8, 2, 0, "4"), (2, 4, 3, "1"),
                                                                 (16, 3, 0, "5")])
def test_each_worker_takes_its_share_of_the_cpus(monkeypatch, cpus, workers, index, share):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    pinned = _fake_worker(monkeypatch, index, cpus)
    monkeypatch.setitem(sys.modules, "torch", None)  # not imported yet: the variable alone sizes its pool
    assert xdist_devices.share_cpus(workers) == {"OMP_NUM_THREADS": share}
    assert os.environ["OMP_NUM_THREADS"] == share
    cores = xdist_devices.core_share(set(range(cpus)), workers, index)
    assert pinned == [(100, cores), (101, cores)]  # every thread the worker has, xdist's own too


def test_a_users_thread_count_is_left_alone_and_the_worker_still_takes_its_cores(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    pinned = _fake_worker(monkeypatch, 1, 2)
    assert xdist_devices.share_cpus(2) == {}
    assert os.environ["OMP_NUM_THREADS"] == "7"
    assert pinned == [(100, {1}), (101, {1})]


def test_outside_xdist_nothing_is_shared(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    pinned = _fake_worker(monkeypatch, 0, 2)
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    assert xdist_devices.share_cpus(2) == {}
    assert pinned == [] and "OMP_NUM_THREADS" not in os.environ


def test_an_imported_torch_is_resized(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    _fake_worker(monkeypatch, 0, 4)
    sized = []
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(set_num_threads=sized.append))
    xdist_devices.share_cpus(2)
    assert sized == [2]
