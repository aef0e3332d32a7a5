"""The worked example of docs/testing-your-connector.md, run as its author would run it.

examples/dict_connector.py passes with its profile; each broken copy fails naming its bug class:
a load that hard-codes ``"cuda"`` (the round-trip's device guard and the lint), and a load into the
wrong block (the round-trip names the destination that differs). Copies in
tests/checks/dict_broken.py and dict_cuda_broken.py.
"""

from __future__ import annotations

import pytest

from tests.shared_run.plan import SelfTestRun, results_of
from tests.suite_run import BROKEN, REPO, of_connector

SELECTION = "(test_roundtrip and float32 and not mla and not layout and not scenario) or test_lint"
PROFILES = [REPO / "examples" / "dict_connector.yaml", REPO / "tests" / "checks" / "dict_broken.yaml"]
# connector -> (--connector spec, {test function: words its failure must carry}); no entry: it passes
CONNECTORS = {
    "DictConnector": ("examples.dict_connector:DictConnector", {}),
    "CudaLoadDictConnector": (f"{BROKEN}.dict_cuda_broken:CudaLoadDictConnector", {
        "test_roundtrip": "the KV cache is on cpu but the connector moved or created a tensor on cuda",
        "test_lint": 'KVC003 error: "cuda" passed to .to() hard-codes CUDA'}),
    "NextBlockDictConnector": (f"{BROKEN}.dict_broken:NextBlockDictConnector", {
        "test_roundtrip": "block 1 slot 0 of the consumer's cache differs from block 1 slot 0 the producer saved"}),
}


RUN = SelfTestRun(SELECTION, tuple(spec for spec, _ in CONNECTORS.values()), tuple(PROFILES))


run = results_of(RUN)


@pytest.mark.parametrize("name", list(CONNECTORS))
def test_each_copy_fails_naming_its_bug_and_only_there(run, name):
    _, outcomes, output = run
    mine = of_connector(outcomes, name)
    assert {o.nodeid.split("::")[1].split("[")[0] for o in mine} == {"test_roundtrip", "test_lint"}, output[-2000:]
    caught = CONNECTORS[name][1]
    for outcome in mine:
        test = outcome.nodeid.split("::")[1].split("[")[0]
        if test in caught:
            assert outcome.outcome == "failed" and caught[test] in outcome.message, (outcome.nodeid,
                                                                                     outcome.message[:1500])
        else:
            assert outcome.outcome == "passed", (outcome.nodeid, outcome.message[:1500])


def test_the_run_fails(run):
    returncode, _, output = run
    assert returncode == 1, output[-3000:]
