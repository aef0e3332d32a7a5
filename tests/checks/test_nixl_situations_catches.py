"""The NIXL situations the suite did not reach before fail each broken copy made for them, and pass the real connectors.

A shared run covers the push round-trip (test_roundtrip on NixlPushConnector), the consumers that read nothing
(conformance/test_pair_notify.py) and the failed handshakes (conformance/test_pair_handshake.py) for the
unmodified NixlConnector and NixlPushConnector (all pass) and for the broken copies in tests/checks/nixl_broken.py.
Each copy fails the situation made for it, with words that name its mistake, and passes the others selected for it,
among them the pair check that existed before (the pull round-trip, a read fault): it is broken one way, in code only
the new situation runs (WrongBlockPushConnector had no round-trip before at all; the others' edits sit in the
notification-only branches and the handshake's failure path, which ``kvconform report --uncovered NixlConnector``
listed as never run by the earlier suite).
"""

from __future__ import annotations

import pytest

from tests.checks.cases import NEEDS_NIXL, ROUNDTRIP, Case, assert_meets_its_cases, selection
from tests.shared_run.plan import SelfTestRun, results_of
from tests.suite_run import REPO

pytestmark = NEEDS_NIXL

PROFILES = REPO / "tests" / "checks" / "nixl_broken.yaml"


NOTIFY_NO_REMOTE = Case("no-remote-blocks", "no-remote-blocks]")
# test_pair_notify_only's, not test_pair_orders' consumer-aborted-unscheduled (push mode's own)
NOTIFY_ABORTED = Case("(test_pair_notify_only and aborted-unscheduled)", "Connector-aborted-unscheduled]")
UNKNOWN_ENGINE = Case("unknown-engine-fail", "unknown-engine-fail]")
LEASE_EXPIRED = ["when its lease expired", "num_kv_expired_reqs"]

CASES: dict[str, list[Case]] = {
    "NixlConnector": [Case("test_pair_notify_only", "test_pair_notify_only["),
                      Case("test_pair_handshake_failure", "test_pair_handshake_failure[")],
    "NixlPushConnector": [ROUNDTRIP, UNKNOWN_ENGINE],
    "WrongBlockPushConnector": [
        Case(ROUNDTRIP.select, ROUNDTRIP.nodeid_part, "failed",
             ["WrongBlockPushConnector", "loaded wrong bytes", "loaded one block late"]),
        UNKNOWN_ENGINE],
    "SilentAbortConnector": [
        Case(NOTIFY_ABORTED.select, NOTIFY_ABORTED.nodeid_part, "failed", ["SilentAbortConnector", *LEASE_EXPIRED]),
        NOTIFY_NO_REMOTE, ROUNDTRIP],
    "ZeroLoadNoNotifyConnector": [
        Case(NOTIFY_NO_REMOTE.select, NOTIFY_NO_REMOTE.nodeid_part, "failed",
             ["ZeroLoadNoNotifyConnector", *LEASE_EXPIRED]),
        NOTIFY_ABORTED, ROUNDTRIP],
    "SwallowedHandshakeFailureConnector": [
        Case(UNKNOWN_ENGINE.select, UNKNOWN_ENGINE.nodeid_part, "failed",
             ["SwallowedHandshakeFailureConnector", "handshake was refused",
              "the consumer neither failed nor finished its request within"]),
        Case("read-error-fail", "read-error-fail]"), ROUNDTRIP],
}
SELECTION = selection(CASES)
BROKEN = [name for name in CASES if name not in ("NixlConnector", "NixlPushConnector")]


RUN = SelfTestRun.of_broken(SELECTION, "NixlConnector", "tests.checks.nixl_broken", BROKEN, profiles=[PROFILES],
                           also=["NixlPushConnector"])


situations_run = results_of(RUN)


@pytest.mark.parametrize("name", list(CASES))
def test_each_connector_meets_its_cases(situations_run, name):
    _, outcomes, output = situations_run
    assert_meets_its_cases(outcomes, output, name, CASES[name])
