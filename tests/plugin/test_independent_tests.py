"""A test's outcome does not depend on which tests ran before it, even for a connector with one store per process.

examples/dict_connector.py keeps KV in a dictionary for the whole process, as in-memory and server
stores do; ConfigBlindDictConnector (tests/checks/dict_broken.py) also keys it by tokens
alone. Both are correct within one configuration. Before each test's prompts were its own
(engine/prompts.py), the same prompts came back in the next test of another dtype: the config-blind
copy then loaded an earlier test's KV, and 6 of its round-trips failed with "Index put requires the
source and destination dtypes match", different ones in each order. Here the suite runs both in one
process, in collection order and reversed: the same tests run, every one passes.
"""

from __future__ import annotations

import pytest

from tests.suite_run import BROKEN, REPO, run_suite

SELECTION = "test_roundtrip and not layout and not scenario"  # each dtype, MLA too: where the order showed
CONNECTORS = ["examples.dict_connector:DictConnector", f"{BROKEN}.dict_broken:ConfigBlindDictConnector"]
PROFILES = [REPO / "examples" / "dict_connector.yaml", REPO / "tests" / "checks" / "dict_broken.yaml"]
ORDERS = {"collection order": (), "reversed": ("-p", "tests.reverse_order")}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    args = ["-k", SELECTION, *(a for c in CONNECTORS for a in ("--connector", c)),
            *(a for p in PROFILES for a in ("--profiles", str(p)))]
    return {order: run_suite(tmp_path_factory.mktemp("order"), [*args, *extra]) for order, extra in ORDERS.items()}


@pytest.mark.parametrize("order", list(ORDERS))
def test_every_test_passes(runs, order):
    returncode, outcomes, output = runs[order]
    assert returncode == 0, output[-3000:]
    ran = [o for o in outcomes if o.outcome != "skipped"]
    assert ran and all(o.outcome == "passed" for o in ran), [(o.nodeid, o.message[:500]) for o in ran]
    for name in ("-DictConnector-", "-ConfigBlindDictConnector-"):
        assert any(name in o.nodeid for o in ran), f"no test of {name.strip('-')} ran"


def test_the_orders_differ_and_the_outcomes_do_not(runs):
    (_, first, _), (_, second, _) = runs.values()
    assert [o.nodeid for o in first] != [o.nodeid for o in second]
    assert sorted((o.nodeid, o.outcome) for o in first) == sorted((o.nodeid, o.outcome) for o in second)
