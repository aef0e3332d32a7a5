"""A P/D pair's scheduler shutdown, finished in the background, is still judged, and judged for its own test.

The suite lets a pair's scheduler shutdown finish while the next test runs
(conformance/engine/closing.py, reliability/held_reports.py). This proves nothing
is lost by that, serially and with two xdist workers: three broken NixlConnector
copies (tests/checks/nixl_broken.py) fail the round trip's teardown,
each for its own bug, and the tests run right after each of them (the next broken
copy, ExampleConnector last) are judged on their own: NixlConnector and
ExampleConnector pass. Serially, the reports come in the order the tests ran.
A fourth copy crashes the process in its background shutdown: under xdist the
crash fails its own tests, every test still has a result, and the other
connectors pass. Under xdist each runs twice: as it is, and with
``--kvconform-public-apis-only``, where a worker holds no report past its own
test (the public fallback of xdist's private test index, ``private_apis.py``).
"""

from __future__ import annotations

import importlib.util
import re

import pytest

from kvconform.reports.identity import connector_in_nodeid
from tests.suite_run import BROKEN as BROKEN_PACKAGE
from tests.suite_run import REPO, of_connector, run_suite

pytestmark = pytest.mark.skipif(importlib.util.find_spec("nixl") is None,
                                reason="NixlConnector needs package nixl, which is not installed here")

BROKEN_MODULE = f"{BROKEN_PACKAGE}.nixl_broken"
PROFILES = REPO / "tests" / "checks" / "nixl_broken.yaml"
SELECTION = "test_roundtrip_scenario and aligned-bs32 and not unaligned"  # one pair test per connector
# connector class -> words its one test's teardown failure must carry
BROKEN = {
    "ListenerLeftRunningConnector": ["ListenerLeftRunningConnector left 2 thread(s) running",  # each side serves one
                                     "'nixl_handshake_listener'"],
    "ShutdownRaisesConnector": ["ShutdownRaisesConnector's kv_producer scheduler shutdown() raised",
                                "RuntimeError: ShutdownRaisesConnector: the scheduler side failed to shut down"],
    "ShutdownHangsConnector": ["ShutdownHangsConnector's kv_producer scheduler shutdown() had not returned 5 s",
                               "kvconform-close: ShutdownHangsConnector's kv_producer scheduler shutdown()"],
}
WELL_BEHAVED = ["NixlConnector", "ExampleConnector"]
ORDER = ["NixlConnector", *BROKEN, "ExampleConnector"]  # --connector order: the run's order within a test


def run_in_order(tmp, selection: str, order: list[str], *extra: str):
    """One suite run of ``selection`` over ``order``'s connectors, in that order (the broken ones from nixl_broken)."""
    connectors = [name if name in WELL_BEHAVED else f"{BROKEN_MODULE}:{name}" for name in order]
    return run_suite(tmp, ["-k", selection, "--profiles", str(PROFILES), *extra,
                           *(arg for name in connectors for arg in ("--connector", name))])


PUBLIC_ONLY = "--kvconform-public-apis-only"
MODES = {"serial": (), "-n 2": ("-n", "2"), "-n 2, public APIs only": ("-n", "2", PUBLIC_ONLY)}


def _connector(nodeid: str) -> str | None:
    return connector_in_nodeid(nodeid, {*ORDER, *CRASH_ORDER})


@pytest.fixture(scope="module", params=list(MODES))
def shutdown_run(request, tmp_path_factory):
    run = run_in_order(tmp_path_factory.mktemp("shutdown-selftest"), SELECTION, ORDER, *MODES[request.param])
    return (request.param, *run)


def test_run_fails_and_reports_every_test(shutdown_run):
    _, returncode, outcomes, output = shutdown_run
    assert returncode == 1, output[-3000:]
    assert sorted(_connector(o.nodeid) for o in outcomes) == sorted(ORDER), [o.nodeid for o in outcomes]


@pytest.mark.parametrize("name", WELL_BEHAVED)
def test_well_behaved_pass_beside_the_broken(shutdown_run, name):
    _, _, outcomes, _ = shutdown_run
    mine = of_connector(outcomes, name)
    assert [o.outcome for o in mine] == ["passed"], [(o.nodeid, o.outcome, o.message[:800]) for o in mine]


@pytest.mark.parametrize("name", list(BROKEN))
def test_broken_shutdown_fails_its_own_test(shutdown_run, name):
    _, _, outcomes, _ = shutdown_run
    mine = of_connector(outcomes, name)
    assert [o.outcome for o in mine] == ["error"], [(o.nodeid, o.outcome, o.message[:800]) for o in mine]
    for word in BROKEN[name]:
        assert word in mine[0].message, (word, mine[0].message[:1500])
    others = [o for o in outcomes if o is not mine[0]]
    assert not any(name in o.message for o in others), [(o.nodeid, o.message[:300]) for o in others]


def test_serial_reports_come_in_run_order(shutdown_run):
    mode, _, outcomes, _ = shutdown_run
    if mode != "serial":
        pytest.skip("with -n 2 the two workers' reports interleave")
    assert [_connector(o.nodeid) for o in outcomes] == ORDER


CRASH_SELECTION = "test_roundtrip_scenario and (aligned-bs32 or multi-bs32) and not unaligned"  # two per connector
CRASH_ORDER = ["NixlConnector", "ShutdownCrashesConnector", "ExampleConnector"]
# what a ShutdownCrashesConnector test may say, depending on where the crash lands: while its own test still
# runs, during its next test (which names the earlier one), after it (its held result), or a later test not run
CRASH_WORDS = ("crashed the test process", "its result was never sent", "not run: ShutdownCrashesConnector")


KILLED_BY_SIGNAL = re.compile(r"killed by SIG[A-Z]+\b")
CRASH_MODES = {"-n 1": ("-n", "1"), "-n 1, public APIs only": ("-n", "1", PUBLIC_ONLY)}


@pytest.fixture(scope="module", params=list(CRASH_MODES))
def crash_run(request, tmp_path_factory):
    run = run_in_order(tmp_path_factory.mktemp("shutdown-crash-selftest"), CRASH_SELECTION, CRASH_ORDER,
                       *CRASH_MODES[request.param])
    return (request.param, *run)


def test_a_crash_in_a_background_shutdown_lands_on_its_own_connector(crash_run):
    mode, returncode, outcomes, output = crash_run
    assert returncode == 1, output[-3000:]
    assert sorted(_connector(o.nodeid) for o in outcomes) == sorted(2 * CRASH_ORDER), [o.nodeid for o in outcomes]
    for name in WELL_BEHAVED:
        mine = of_connector(outcomes, name)
        assert [o.outcome for o in mine] == ["passed", "passed"], [(o.nodeid, o.message[:800]) for o in mine]
    crashed = of_connector(outcomes, "ShutdownCrashesConnector")
    assert all(o.outcome in ("failed", "error") for o in crashed), [(o.nodeid, o.outcome) for o in crashed]
    # How the process ended is read from execnet's private process handle. The connector sends itself SIGSEGV, but
    # the signal the process dies of is the crash handlers' to decide (pytest's faulthandler, UCX's, which NIXL
    # installs): a CI run saw SIGABRT. What is promised is that the message names the signal, whichever it is.
    killed = [o for o in crashed if KILLED_BY_SIGNAL.search(o.message)]
    if PUBLIC_ONLY in CRASH_MODES[mode]:
        assert not killed, [o.message[:800] for o in killed]
    else:
        assert killed, [o.message[:800] for o in crashed]
    for o in crashed:
        assert "ShutdownCrashesConnector" in o.message and any(w in o.message for w in CRASH_WORDS), o.message[:800]
    if PUBLIC_ONLY in CRASH_MODES[mode]:  # no result held past its test: the crash lands while it still runs
        assert not any(CRASH_WORDS[1] in o.message for o in outcomes), [o.message[:800] for o in crashed]
