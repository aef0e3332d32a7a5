"""Workloads like a busy server's, through vLLM's real Scheduler, invariants checked every step.

Three kinds of test, one check (``workload`` in a connector's profile):

* ``test_workload_scenario``: one hand-written workload per lifecycle feature
  (shared prefixes, occupied pools, chunked prefill, decode after a hit, memory
  pressure, aborts);
* ``test_workload_generated``: workloads Hypothesis generates from all features,
  a fixed derandomized budget in normal runs, ``--kvconform-explore N`` for a
  deep search that also shrinks a failure to a minimal workload;
* ``test_workload_replay``: the workload ``--kvconform-replay SPEC`` gives, exactly
  (a failure message prints the spec and this command).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvconform.conformance.connectors.requirements import refusals_skip, require
from kvconform.conformance.engine.kvcache import CacheShape
from kvconform.conformance.workload.scenarios import EXERCISES, WORKLOAD_SCENARIOS

pytestmark = pytest.mark.check("workload")


@pytest.fixture
def workload_rig(platform, attn_backend, connector, tiny_model, tmp_path, device, worker_process, request):
    """A rig per workload, each with a fresh storage folder and prompts of its own (a generated run builds many:
    none is a hit for another, even in a connector with one store for the whole process)."""
    from kvconform.conformance.workload.run import WorkloadRig

    count = iter(range(1_000_000))

    def make(spec):
        number = next(count)
        storage = tmp_path / f"kv-storage-{number}"
        storage.mkdir()
        if not spec.prompts:  # a replayed spec keeps the owner its failure printed
            spec = replace(spec, prompts=f"{request.node.nodeid}#{number}")
        rig = WorkloadRig(connector, platform, attn_backend, CacheShape(block_size=spec.block_size), tiny_model,
                          storage, device, workload=spec)
        if reason := rig.block_size_refusal():
            pytest.skip(reason)
        return rig, spec

    return make


def _run(workload_rig, spec):
    from kvconform.conformance.workload.run import run_workload

    with refusals_skip():
        return run_workload(*workload_rig(spec))


@pytest.mark.parametrize("scenario", list(WORKLOAD_SCENARIOS))
def test_workload_scenario(platform, attn_backend, connector, scenario, workload_rig):
    require(connector, platform, "workload")
    spec = WORKLOAD_SCENARIOS[scenario]
    report = _run(workload_rig, spec)
    assert report.verified_loaded_tokens > 0, (
        f"{connector.name}: the {scenario} workload gave the consumer no verified load "
        f"({report.claimed_tokens} external tokens claimed): nothing was checked\n  workload: {spec.to_text()}")
    if scenario in EXERCISES:
        assert getattr(report, EXERCISES[scenario]) > 0, (
            f"{connector.name}: the {scenario} workload ran without {EXERCISES[scenario].replace('_', ' ')}: "
            f"its feature was not exercised ({report})\n  workload: {spec.to_text()}")


@pytest.mark.parametrize("prefill", ["whole", "chunked"])
def test_workload_generated(platform, attn_backend, connector, prefill, workload_rig, request):
    """Hypothesis-generated workloads; a failure prints its spec and the command that replays it."""
    require(connector, platform, "workload")
    from hypothesis import HealthCheck, Phase, given, settings

    from kvconform.conformance.plugin.options import NORMAL_EXAMPLES
    from kvconform.conformance.workload.strategies import workload_specs

    explore = request.config.getoption("kvconform_explore")
    verified = []

    @settings(max_examples=explore or NORMAL_EXAMPLES, derandomize=not explore, database=None, deadline=None,
              phases=(Phase.explicit, Phase.generate, *((Phase.shrink,) if explore else ())),
              suppress_health_check=list(HealthCheck), print_blob=False)
    @given(spec=workload_specs(chunked=prefill == "chunked"))
    def workloads(spec):
        verified.append(_run(workload_rig, spec).verified_loaded_tokens)

    workloads()
    assert sum(verified) > 0, (f"{connector.name}: none of the {len(verified)} generated workloads gave the "
                               f"consumer a verified load: nothing was checked")


def test_workload_replay(platform, attn_backend, connector, workload_rig, request):
    """The workload ``--kvconform-replay SPEC`` names, exactly as a failure printed it."""
    text = request.config.getoption("kvconform_replay")
    if text is None:
        pytest.skip("no workload to replay: pass --kvconform-replay SPEC (the line a workload failure prints)")
    require(connector, platform, "workload")
    from kvconform.conformance.workload.spec import WorkloadSpec

    _run(workload_rig, WorkloadSpec.from_text(text))
