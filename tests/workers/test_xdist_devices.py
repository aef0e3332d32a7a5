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


def test_pin_sets_env_from_the_slot(monkeypatch):
    monkeypatch.delenv("ZE_AFFINITY_MASK", raising=False)
    env = xdist_devices.pin_worker_device(platforms.get("xpu"), 2, 3)
    assert env == {"ZE_AFFINITY_MASK": "1"}
    assert os.environ["ZE_AFFINITY_MASK"] == "1"


def test_pin_respects_a_user_choice(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    assert xdist_devices.pin_worker_device(platforms.get("cuda"), 4, 1) == {}


def test_a_replacement_worker_takes_the_dead_workers_slot():
    slots: dict[str, int] = {}
    assert [xdist_devices.take_slot(slots, worker) for worker in ("gw0", "gw1", "gw2")] == [0, 1, 2]
    del slots["gw1"]  # gw1 crashed: pytest_testnodedown freed its slot
    assert xdist_devices.take_slot(slots, "gw3") == 1
    assert xdist_devices.take_slot(slots, "gw4") == 3


def test_auto_workers_uses_device_count_on_gpu_platforms():
    assert xdist_devices.auto_workers(platforms.get("cuda"), 4) == 4
    assert xdist_devices.auto_workers(platforms.get("cpu"), 1) is None


def test_multi_device_skip_names_the_count():
    with pytest.raises(pytest.skip.Exception, match="needs 2 cpu devices; 1 visible here"):
        xdist_devices.require_devices(platforms.get("cpu"), 2)


CORES_PROBE = (  # a conftest: each worker, once every plugin is configured, writes where its threads run and
    # at which priority; the controller, once its test loop is over, the priority of each of its threads
    "import os\n"
    "def _priorities():\n"
    "    return sorted({(os.getpriority(os.PRIO_PROCESS, int(tid)), os.sched_getscheduler(int(tid)))\n"
    "                   for tid in os.listdir('/proc/self/task')})\n"
    "def pytest_sessionstart(session):\n"
    "    worker = os.environ.get('PYTEST_XDIST_WORKER')\n"
    "    if worker:\n"
    "        own = os.sched_getaffinity(0)\n"
    "        alike = all(os.sched_getaffinity(int(tid)) == own for tid in os.listdir('/proc/self/task'))\n"
    "        with open(f'{worker}.cores', 'w') as out:\n"
    "            out.write(' '.join(map(str, sorted(own))) + f' all-threads={alike}')\n"
    "        with open(f'{worker}.priorities', 'w') as out:\n"
    "            out.write(repr(_priorities()))\n"
    "def pytest_sessionfinish(session):\n"
    "    if not hasattr(session.config, 'workerinput'):  # the controller (its environment may be a worker's)\n"
    "        with open('controller.priorities', 'w') as out:\n"
    "            out.write(repr(_priorities()))\n")


def _two_workers(tmp_path, test_module: str, copies: int = 1) -> subprocess.CompletedProcess:
    for copy in range(copies):  # xdist hands out a module's tests to one worker
        (tmp_path / f"test_w{copy}.py").write_text(test_module)
    (tmp_path / "conftest.py").write_text(CORES_PROBE)
    env = {k: v for k, v in os.environ.items() if k != "UCX_USE_MT_MUTEX"}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--platform=cpu",
                           str(tmp_path)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=stretched(120))


def _cores_of(slot: int) -> str:
    return " ".join(map(str, sorted(xdist_devices.core_share(os.sched_getaffinity(0), 2, slot))))


def test_workers_each_see_their_own_platform_and_run_on_their_own_cores(tmp_path):
    """Under real xdist the controller hands the platform to its workers, which pin from it; the UCX setting
    the run starts with (harness/affinity.py) reaches them too, and each worker's threads run on its slice of
    the cores."""
    out = _two_workers(tmp_path, "import os\n"
                                 "def test_w(platform):\n"
                                 "    assert platform.name == 'cpu'\n"
                                 "    assert os.environ['PYTEST_XDIST_WORKER'].startswith('gw')\n"
                                 "    assert os.environ['UCX_USE_MT_MUTEX'] == 'y'\n")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    for slot in (0, 1):
        assert (tmp_path / f"gw{slot}.cores").read_text() == f"{_cores_of(slot)} all-threads=True"
    # the workers keep the priority they started with; the controller's threads yield the cores to them
    own = (os.getpriority(os.PRIO_PROCESS, 0), os.sched_getscheduler(0))
    assert [(tmp_path / f"gw{slot}.priorities").read_text() for slot in (0, 1)] == [repr([own])] * 2
    assert (tmp_path / "controller.priorities").read_text() == repr([(19, own[1])])


def test_the_worker_replacing_a_crashed_one_takes_its_cores(tmp_path):
    """gw1 dies; xdist names its replacement gw2, which must run where gw1 ran (gw2 % 2 is gw0's slot).
    gw0 stays alive (its test waits for gw2 to start): a worker that has ended frees its slot too."""
    out = _two_workers(tmp_path, "import os, time, pytest\n"
                                 "@pytest.mark.parametrize('n', range(3))\n"
                                 "def test_w(platform, n):\n"
                                 "    worker = os.environ['PYTEST_XDIST_WORKER']\n"
                                 "    if worker == 'gw1' and not os.path.exists('crashed'):\n"
                                 "        open('crashed', 'w').close()\n"
                                 "        os._exit(3)\n"
                                 "    deadline = time.monotonic() + 60\n"
                                 "    while worker == 'gw0' and not os.path.exists('gw2.cores'):\n"
                                 "        assert time.monotonic() < deadline, 'no replacement for gw1 started'\n"
                                 "        time.sleep(0.05)\n", copies=4)
    assert out.returncode == 1 and "replacing crashed worker gw1" in out.stdout, out.stdout[-2000:]
    assert (tmp_path / "gw2.cores").read_text() == f"{_cores_of(1)} all-threads=True"


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


def _fake_worker(monkeypatch, cpus: int) -> list[tuple[int, set[int]]]:
    """A worker on ``cpus`` cores with two threads; returns where each thread is pinned."""
    pinned: list[tuple[int, set[int]]] = []
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cpus)), raising=False)
    monkeypatch.setattr(os, "sched_setaffinity", lambda tid, cores: pinned.append((tid, set(cores))), raising=False)
    monkeypatch.setattr(os, "listdir", lambda path: ["100", "101"] if path == "/proc/self/task" else [])
    return pinned


@pytest.mark.parametrize(("cpus", "workers", "index", "share"), [(2, 2, 1, "1"), (8, 2, 0, "4"), (2, 4, 3, "1"),
                                                                 (16, 3, 0, "5")])
def test_each_worker_takes_its_share_of_the_cpus(monkeypatch, cpus, workers, index, share):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    pinned = _fake_worker(monkeypatch, cpus)
    monkeypatch.setitem(sys.modules, "torch", None)  # not imported yet: the variable alone sizes its pool
    assert xdist_devices.share_cpus(workers, index) == {"OMP_NUM_THREADS": share}
    assert os.environ["OMP_NUM_THREADS"] == share
    cores = xdist_devices.core_share(set(range(cpus)), workers, index)
    assert sorted(pinned) == [(100, cores), (101, cores)]  # every thread the worker has, xdist's own too


def test_a_users_thread_count_is_left_alone_and_the_worker_still_takes_its_cores(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    pinned = _fake_worker(monkeypatch, 2)
    assert xdist_devices.share_cpus(2, 1) == {}
    assert os.environ["OMP_NUM_THREADS"] == "7"
    assert sorted(pinned) == [(100, {1}), (101, {1})]


def test_an_imported_torch_is_resized(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    _fake_worker(monkeypatch, 4)
    sized = []
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(set_num_threads=sized.append))
    xdist_devices.share_cpus(2, 0)
    assert sized == [2]
