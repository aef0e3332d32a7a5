"""Device pinning for xdist workers, with the environment faked (no GPU needed)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

from kvconform import platforms
from kvconform.conformance.session import devices as xdist_devices
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
    assert xdist_devices.auto_workers(platforms.get("cuda"), 0) is None  # xdist counts


@pytest.mark.parametrize(("cores", "workers"), [(1, 1), (2, 2), (3, 3), (16, 16)])
def test_auto_workers_on_the_cpu_platform_follow_the_usable_cores(cores, workers):
    assert xdist_devices.auto_workers(platforms.get("cpu"), 1, cores=cores) == workers


def test_multi_device_skip_names_the_count():
    with pytest.raises(pytest.skip.Exception, match="needs 2 cpu devices; 1 visible here"):
        xdist_devices.require_devices(platforms.get("cpu"), 2)


CONDITIONS_PROBE = (  # a conftest: each worker, once every plugin is configured, writes its slot, where its threads
    # run and at which priority; the controller, once its test loop is over, the priority of each of its threads
    "import os\n"
    "def _priorities():\n"
    "    return sorted({(os.getpriority(os.PRIO_PROCESS, int(tid)), os.sched_getscheduler(int(tid)))\n"
    "                   for tid in os.listdir('/proc/self/task')})\n"
    "def pytest_sessionstart(session):\n"
    "    if hasattr(session.config, 'workerinput'):  # the environment may be an outer run's worker's\n"
    "        worker = session.config.workerinput['workerid']\n"
    "        cpus = {tuple(sorted(os.sched_getaffinity(int(tid)))) for tid in os.listdir('/proc/self/task')}\n"
    "        with open(f'{worker}.conditions', 'w') as out:\n"
    "            out.write(repr((session.config.workerinput.get('kvconform_slot'), sorted(cpus), _priorities(),\n"
    "                            os.environ.get('OMP_NUM_THREADS'), os.environ.get('UCX_USE_MT_MUTEX'))))\n"
    "def pytest_sessionfinish(session):\n"
    "    if not hasattr(session.config, 'workerinput'):  # the controller (its environment may be a worker's)\n"
    "        with open('controller.priorities', 'w') as out:\n"
    "            out.write(repr(_priorities()))\n")


def _two_workers(tmp_path, test_module: str, copies: int = 1) -> subprocess.CompletedProcess:
    for copy in range(copies):  # xdist hands out a module's tests to one worker
        (tmp_path / f"test_w{copy}.py").write_text(test_module)
    (tmp_path / "conftest.py").write_text(CONDITIONS_PROBE)
    env = {k: v for k, v in os.environ.items() if k not in ("UCX_USE_MT_MUTEX", "OMP_NUM_THREADS")}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--platform=cpu",
                           str(tmp_path)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=stretched(120))


def _conditions(tmp_path, worker: str) -> tuple:
    return ast.literal_eval((tmp_path / f"{worker}.conditions").read_text())


def test_workers_see_their_platform_and_keep_the_processs_cpus_priority_and_environment(tmp_path):
    """Under real xdist the controller hands the platform and a slot to each worker, which pins its device from
    them; nothing else changes: every thread of every worker runs on all the cores the run has, at the priority
    the run started with, and the controller's threads keep theirs; no UCX or OpenMP variable is set."""
    out = _two_workers(tmp_path, "import os\n"
                                 "def test_w(platform):\n"
                                 "    assert platform.name == 'cpu'\n"
                                 "    assert os.environ['PYTEST_XDIST_WORKER'].startswith('gw')\n")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    own = [(os.getpriority(os.PRIO_PROCESS, 0), os.sched_getscheduler(0))]
    cpus = [tuple(sorted(os.sched_getaffinity(0)))]
    assert [_conditions(tmp_path, f"gw{slot}") for slot in (0, 1)] == [(0, cpus, own, None, None),
                                                                         (1, cpus, own, None, None)]
    assert (tmp_path / "controller.priorities").read_text() == repr(own)


def test_the_worker_replacing_a_crashed_one_takes_its_slot(tmp_path):
    """gw1 dies; xdist names its replacement gw2, which must take gw1's slot, and so its device (gw2 % 2 is
    gw0's). gw0 stays alive (its test waits for gw2 to start): a worker that has ended frees its slot too."""
    out = _two_workers(tmp_path, "import os, time, pytest\n"
                                 "@pytest.mark.parametrize('n', range(3))\n"
                                 "def test_w(platform, n):\n"
                                 "    worker = os.environ['PYTEST_XDIST_WORKER']\n"
                                 "    if worker == 'gw1' and not os.path.exists('crashed'):\n"
                                 "        open('crashed', 'w').close()\n"
                                 "        os._exit(3)\n"
                                 "    deadline = time.monotonic() + 60\n"
                                 "    while worker == 'gw0' and not os.path.exists('gw2.conditions'):\n"
                                 "        assert time.monotonic() < deadline, 'no replacement for gw1 started'\n"
                                 "        time.sleep(0.05)\n", copies=4)
    assert out.returncode == 1 and "replacing crashed worker gw1" in out.stdout, out.stdout[-2000:]
    assert _conditions(tmp_path, "gw2")[0] == 1


def test_each_worker_takes_its_share_of_the_cores_for_torch(monkeypatch):
    import torch

    set_to: list[int] = []
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 8)
    monkeypatch.setattr(torch, "set_num_threads", set_to.append)
    assert xdist_devices.share_cpu_threads(2, cores=8) == 4
    assert xdist_devices.share_cpu_threads(3, cores=2) == 1  # never below one thread
    assert set_to == [4, 1]
    assert xdist_devices.share_cpu_threads(1, cores=8) is None  # a lone worker keeps torch's default
    assert xdist_devices.share_cpu_threads(2, cores=32) is None  # a share above torch's pool changes nothing
    monkeypatch.setenv("OMP_NUM_THREADS", "8")
    assert xdist_devices.share_cpu_threads(2, cores=8) is None  # the user's choice stands
    assert set_to == [4, 1]
