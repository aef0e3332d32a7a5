"""The service fixtures' own machinery (conformance/connectors/services.py), with small real servers; and the two
reliability parts Mooncake's run needed (zmq_contexts, finalizers).

Python's http.server stands in for LMCache's and Mooncake's servers: it binds a
loopback port, answers HTTP, and refuses POST (501), which is what a reset call
that does not work looks like.
"""

from __future__ import annotations

import gc
import signal
import sys
import threading
import time
from types import SimpleNamespace

import pytest

from kvconform.conformance.connectors.profiles import ConnectorProfile, ProfileError, load_profiles
from kvconform.conformance.connectors.services import (
    ServicePool,
    ServiceSpec,
    ServiceTimeout,
    ServiceUnavailable,
    Watchdog,
    service_timeout,
    start,
)
from kvconform.conformance.reliability import finalizers, zmq_contexts

HTTP_SERVER = ["{python}", "-m", "http.server", "--bind", "127.0.0.1", "{port:main}"]


def _spec(**fields) -> ServiceSpec:
    return ServiceSpec(command=HTTP_SERVER, start_timeout_s=60, **fields)


def test_a_server_starts_on_a_loopback_port_and_names_it(tmp_path):
    service = start("web", _spec(files={"config.json": '{"port": {port:main}}'}), tmp_path / "web")
    try:
        port = service.ports["main"]
        assert service.placeholders() == {"web.port:main": str(port), "web.dir": str(tmp_path / "web")}
        assert (tmp_path / "web" / "config.json").read_text() == f'{{"port": {port}}}'
        assert service.process.poll() is None
    finally:
        service.stop()
    assert service.process.poll() is not None


def test_a_server_that_exits_is_unavailable_quoting_its_log(tmp_path):
    spec = ServiceSpec(command=[sys.executable, "-c", "print('cannot open the segment'); raise SystemExit(3)"],
                       start_timeout_s=30)
    with pytest.raises(ServiceUnavailable, match=r"exited with status 3 .*\n.*cannot open the segment"):
        start("broken", spec, tmp_path / "broken")


def test_a_server_that_never_listens_times_out_and_is_stopped(tmp_path):
    spec = ServiceSpec(command=[sys.executable, "-c", "import time; print('waiting'); time.sleep(60)"],
                       start_timeout_s=1)
    with pytest.raises(ServiceUnavailable, match=r"did not accept connections .* within 1 s"):
        start("silent", spec, tmp_path / "silent")


def test_the_pool_remembers_a_failed_start(tmp_path):
    pool = ServicePool(tmp_path)
    spec = ServiceSpec(command=[sys.executable, "-c", "raise SystemExit(2)"], start_timeout_s=30)
    with pytest.raises(ServiceUnavailable) as first:
        pool.acquire("Conn", "svc", spec)
    with pytest.raises(ServiceUnavailable) as again:  # decided once: no second attempt
        pool.acquire("Conn", "svc", spec)
    assert str(again.value) == str(first.value)


@pytest.mark.parametrize(("per_test", "same_process"), [("shared", True), ("restart", False),
                                                        ("reset", False)])  # http.server refuses the POST
def test_per_test_isolation(tmp_path, per_test, same_process):
    reset = {"port": "main", "path": "/clear"} if per_test == "reset" else None
    spec = _spec(per_test=per_test, reset=reset)
    pool = ServicePool(tmp_path)
    try:
        first = pool.acquire("Conn", "web", spec)
        second = pool.acquire("Conn", "web", spec)
        assert (second.process.pid == first.process.pid) is same_process
        assert first.process.poll() is None if same_process else first.process.poll() is not None
    finally:
        pool.close()


def test_a_failed_reset_says_why(tmp_path):
    service = start("web", _spec(per_test="reset", reset={"port": "main", "path": "/clear"}), tmp_path / "web")
    try:
        assert "failed" in service.reset() and "/clear" in service.reset()
    finally:
        service.stop()


@pytest.mark.parametrize(("limits", "per_test", "expected"), [
    ([120.0], 300.0, 120.0), ([120.0, 60.0], 300.0, 60.0), ([600.0], 300.0, None), ([120.0], None, None),
    ([], 300.0, None),
])
def test_service_timeout_only_shortens(limits, per_test, expected):
    services = {f"s{i}": _spec(timeout_s=limit) for i, limit in enumerate(limits)}
    connector = SimpleNamespace(profile=ConnectorProfile(services=services))
    assert service_timeout(connector, per_test) == expected


def test_profiles_render_service_placeholders(tmp_path):
    profile = ConnectorProfile(extra_config={"url": "tcp://127.0.0.1:{lm.port:main}", "path": "{storage}/x"})
    assert profile.render_extra_config(tmp_path, {"lm.port:main": "5555"}) == {
        "url": "tcp://127.0.0.1:5555", "path": f"{tmp_path}/x"}


def test_a_typo_in_a_service_is_a_profile_error(tmp_path):
    path = tmp_path / "profiles.yaml"
    path.write_text("connectors:\n  X:\n    services:\n      s:\n        command: [a]\n        per_tset: reset\n")
    with pytest.raises(ProfileError, match=r"per_tset: Extra inputs are not permitted"):
        load_profiles(path)


def test_the_shipped_services_are_loopback_only():
    """Every port of the shipped servers is bound on 127.0.0.1: nothing a test starts listens elsewhere."""
    for name, profile in load_profiles().connectors.items():
        for service in profile.services.values():
            command = " ".join(service.command)
            assert "0.0.0.0" not in command, name
            assert "127.0.0.1" in command, f"{name}: its server must be told to bind loopback"


def _connector_code_that_swallows_errors(wait):
    """Stands in for a connector's own wait on its server, wrapped in ``except Exception`` as
    MooncakeStore's lookup is (it answers "no hit" on any error)."""
    try:
        wait()
    except Exception:  # noqa: BLE001 - the point: a bound must pass through this
        return "swallowed"
    return "answered"


def test_the_watchdog_fails_a_wait_in_python_naming_where_and_passes_except_exception():
    watchdog = Watchdog("SlowConnector", 0.3)
    never = threading.Event()
    watchdog.arm()
    try:
        with pytest.raises(ServiceTimeout, match=r"SlowConnector: no answer within 0\.3 s .* waiting in "
                                                 r"tests/connectors/test_services\.py:\d+ \(wait_on_the_server\)"):
            def wait_on_the_server():  # the innermost frame outside the standard library (Event.wait's)
                never.wait(10)
            _connector_code_that_swallows_errors(wait_on_the_server)
    finally:
        watchdog.disarm()
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_a_disarmed_watchdog_never_fires():
    watchdog = Watchdog("QuickConnector", 0.2)
    watchdog.arm()
    watchdog.disarm()
    assert _connector_code_that_swallows_errors(lambda: time.sleep(0.4)) == "answered"


def test_a_zmq_context_left_open_by_a_test_is_kept_referenced():
    zmq = pytest.importorskip("zmq")
    zmq_contexts.pytest_configure(None)  # idempotent: the plugin has patched Context already in this run
    zmq_contexts._watching = created = []
    try:
        left_open, closed = zmq.Context(), zmq.Context()
        closed.term()
    finally:
        zmq_contexts._watching = None
    assert created == [left_open, closed]
    left_open.term()


def test_no_garbage_collection_runs_inside_a_wrapped_parse():
    """A finalizer inside CPython 3.11's ast.parse breaks the parser (SystemError): collection pauses there."""
    seen = []
    parse = finalizers._without_collection(lambda source: seen.append(gc.isenabled()) or source)
    assert gc.isenabled()
    assert parse("x = 1") == "x = 1"
    assert seen == [False] and gc.isenabled()
