"""The shared-store check (conformance/checks/shared_store.py) on the worked example and its config-blind copy.

examples/dict_connector.py keys each block by the model, the layers and the KV spec as well as the tokens:
an engine of another configuration finds nothing, and each finds its own. ConfigBlindDictConnector
(tests/checks/dict_broken.py) keys by the tokens alone: another model, or another KV dtype,
is offered the first engine's KV. A model with one more layer claims nothing at first (the copy claims a
block only when every layer of it was saved), but its own saves then replace the first engine's layers.
"""

from __future__ import annotations

from kvconform.reports.identity import from_test_name
from tests.shared_run.plan import SelfTestRun, results_of
from tests.suite_run import BROKEN, REPO, of_connector

PROFILES = [REPO / "examples" / "dict_connector.yaml", REPO / "tests" / "checks" / "dict_broken.yaml"]
CONNECTORS = {"DictConnector": "examples.dict_connector:DictConnector",
              "ConfigBlindDictConnector": f"{BROKEN}.dict_broken:ConfigBlindDictConnector"}
# variant -> words the config-blind copy's failure carries
LEAKS = {"model": "its keys ignore what differs", "kv-dtype": "its keys ignore what differs",
         "layers": "no longer gets its own KV back (the other configuration's saves replaced it)"}


RUN = SelfTestRun("test_shared_store", tuple(CONNECTORS.values()), tuple(PROFILES))


run = results_of(RUN)


def _variant(nodeid: str) -> str:
    return from_test_name(nodeid.split("::")[-1], {}).variant


def test_the_example_passes_every_variant(run):
    _, outcomes, output = run
    mine = of_connector(outcomes, "DictConnector")
    assert {_variant(o.nodeid) for o in mine} == {"model", "kv-dtype", "layers"}, output[-2000:]
    assert all(o.outcome == "passed" for o in mine), [(o.nodeid, o.message[:800]) for o in mine]


def test_the_config_blind_copy_is_offered_another_configurations_kv(run):
    _, outcomes, output = run
    mine = {_variant(o.nodeid): o for o in of_connector(outcomes, "ConfigBlindDictConnector")}
    assert set(mine) == {"model", "kv-dtype", "layers"}, output[-2000:]
    for variant, outcome in mine.items():
        assert outcome.outcome == "failed", (outcome.nodeid, outcome.message[:800])
        assert "SharedStoreLeak" in outcome.message and LEAKS[variant] in outcome.message, outcome.message[:800]
