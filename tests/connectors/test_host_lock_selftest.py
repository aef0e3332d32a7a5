"""Under ``-n 2`` a connector that binds a fixed port, with no profile, never collides with itself across workers.

The suite runs on tests/connectors/fixed_port_broken.py's FixedPortConnector (its scheduler half listens on one
fixed loopback port until ``shutdown()``) with two xdist workers, on tests from two modules so that each worker
gets some of them at once (``plugin/scheduling.py`` hands a connector's tests of one module to one worker), each
starting with the construction probe. Without the host lock the two workers' first tests collide (``OSError:
[Errno 98] Address already in use``, seen with a profile that says ``host: shared``); with it every test passes,
both worker processes built the connector, and no bind found the port taken. Without it (the same run with
``-p no:kvconform.conformance.reliability.host_lock``) one worker's construction probe found the port taken and
its tests read "not run: the connector could not be constructed here (OSError: [Errno 98] Address already in
use)".
"""

from __future__ import annotations

import socket

import pytest

from tests.connectors.fixed_port_broken import LOG_VAR, PORT_VAR, STARTUP_VAR
from tests.suite_run import of_connector, run_suite

CONNECTOR = "tests.connectors.fixed_port_broken:FixedPortConnector"
# two of the contract check's tests and the float32 round trips: one module per worker, all passing serially
SELECT = "test_contract_scheduler or test_contract_worker or (test_roundtrip and float32)"
IN_USE = "Address already in use"
# the leader's start, port bound: long enough that the two workers' constructions overlap in time without the lock
# (a probe's collision then skips that worker's tests as "not run: ... Address already in use")
STARTUP_S = "1.0"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("host-lock-selftest")
    log = folder / "binds.txt"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(PORT_VAR, str(_free_port()))
        patch.setenv(LOG_VAR, str(log))
        patch.setenv(STARTUP_VAR, STARTUP_S)
        returncode, outcomes, output = run_suite(folder, ["-n", "2", "-k", SELECT, "--connector", CONNECTOR])
    binds = [line.rsplit(" ", 1)[0].split(" ", 1) for line in log.read_text().splitlines()] if log.exists() else []
    return returncode, of_connector(outcomes, "FixedPortConnector"), output, binds


def test_no_test_fails_with_address_in_use(run):
    returncode, outcomes, output, _ = run
    collided = [o.nodeid for o in outcomes if IN_USE in o.message]
    assert not collided, collided
    assert returncode == 0 and outcomes, output[-3000:]
    assert {o.nodeid.split("::")[0] for o in outcomes} == {"test_contract", "test_roundtrip"}, outcomes


def test_both_workers_built_it_and_no_bind_found_the_port_taken(run):
    _, _, output, binds = run
    assert binds and all(event in ("bound", "closed") for _, event in binds), binds
    assert len({pid for pid, event in binds if event == "bound"}) == 2, (binds, output[-3000:])
