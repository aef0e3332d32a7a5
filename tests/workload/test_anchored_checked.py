"""The anchored workload makes a generated workload test check something, whatever the other draws give.

One suite run (``tests/suite_run.py``) of ``test_workload_generated``
with prefill in one step, its generator forced to draw consumer requests that
cannot load (``fresh_consumers.py``: every one a prompt of its own), for
ExampleConnector and for a connector that never claims a hit
(``never_loads.py``): ExampleConnector passes on its anchored workload alone
(the record shows the other workloads claimed nothing), and the connector that
never loads fails, saying nothing was checked.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvconform.conformance.session.options import NORMAL_EXAMPLES
from kvconform.conformance.workload.strategies import ANCHOR_LABEL
from tests.suite_run import of_connector, run_suite
from tests.workload.fresh_consumers import RECORD_ENV

PROFILES = Path(__file__).with_name("never_loads.yaml")
NEVER_LOADS = "NeverLoadsConnector"


@pytest.fixture(scope="module")
def fresh_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("anchored-checked")
    record = tmp / "workloads.jsonl"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(RECORD_ENV, str(record))
        status, outcomes, output = run_suite(tmp, [
            "-p", "tests.workload.fresh_consumers", "-k", "test_workload_generated and whole",
            "--connector", "ExampleConnector", "--connector", f"tests.workload.never_loads:{NEVER_LOADS}",
            "--profiles", str(PROFILES)])
    records = [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []
    return status, outcomes, output, records


def _shown(outcomes, output: str):
    return [(o.nodeid, o.outcome, o.message[:1500]) for o in outcomes] or output[-3000:]


def _records(records: list[dict], name: str) -> list[dict]:
    return [r for r in records if r["connector"] == name]


def test_a_loading_connector_passes_on_the_anchored_workload_alone(fresh_run):
    _, outcomes, output, records = fresh_run
    mine = of_connector(outcomes, "ExampleConnector")
    assert [o.outcome for o in mine] == ["passed"], _shown(mine, output)
    workloads = _records(records, "ExampleConnector")
    assert len(workloads) == NORMAL_EXAMPLES, workloads
    anchored, *others = workloads
    assert anchored["label"] == ANCHOR_LABEL and anchored["verified"] > 0, anchored
    # the forced draws gave no load: without the anchored workload, this test would have checked nothing
    assert all(w["label"] != ANCHOR_LABEL and w["claimed"] == 0 and w["verified"] == 0 for w in others), others


def test_a_connector_that_never_loads_fails_with_nothing_checked(fresh_run):
    status, outcomes, output, records = fresh_run
    mine = of_connector(outcomes, NEVER_LOADS)
    assert [o.outcome for o in mine] == ["failed"], _shown(mine, output)
    assert status == 1
    message = mine[0].message
    for words in (f"{NEVER_LOADS}: none of the {NORMAL_EXAMPLES} generated workloads gave the consumer a verified load",
                  "the anchored one included", "nothing was checked, the connector never loaded"):
        assert words in message, (words, message[:2000])
    workloads = _records(records, NEVER_LOADS)
    assert [w["label"] for w in workloads][:1] == [ANCHOR_LABEL] and len(workloads) == NORMAL_EXAMPLES, workloads
    assert all(w["claimed"] == 0 and w["verified"] == 0 for w in workloads), workloads
