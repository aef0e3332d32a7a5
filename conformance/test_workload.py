"""Workloads like a busy server's, through vLLM's real Scheduler, invariants checked every step.

Three kinds of test, one check (``workload`` in a connector's profile):

* ``test_workload_scenario``: one hand-written workload per lifecycle feature
  (shared prefixes, occupied pools, chunked prefill, decode after a hit, memory
  pressure, aborts);
* ``test_workload_generated``: workloads generated from all features
  (``workload/strategies.py``): in normal runs a fixed budget seeded by the
  test's id, the first anchored to a verified load whenever the connector loads
  at all, the same however kvconform is installed; ``--kvconform-explore N``
  for a deep Hypothesis search that also shrinks a failure to a minimal workload;
* ``test_workload_replay``: the workload ``--kvconform-replay SPEC`` gives, exactly
  (a failure message prints the spec and this command).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

import pytest

from kvconform.conformance.connectors.requirements import refusals_skip, run_only_its_scenarios
from kvconform.conformance.engine.kvcache import CacheShape
from kvconform.conformance.workload.profile_scenarios import profile_scenarios
from kvconform.conformance.workload.scenarios import EXERCISES, WORKLOAD_SCENARIOS

if TYPE_CHECKING:
    from pathlib import Path

    from kvconform.conformance.connectors.selection import ConnectorParam
    from kvconform.conformance.workload.run import WorkloadReport, WorkloadRig
    from kvconform.conformance.workload.spec import WorkloadSpec
    from kvconform.platforms.spec import PlatformSpec

# the workload_rig fixture: a spec -> a rig of its own for it, and the spec with its prompts' owner
MakeWorkloadRig = Callable[["WorkloadSpec"], "tuple[WorkloadRig, WorkloadSpec]"]

pytestmark = pytest.mark.check("workload")


@pytest.fixture
def workload_rig(platform: PlatformSpec, attn_backend: str, connector: ConnectorParam, tiny_model: Path,
                 tmp_path: Path, device: str, worker_process: None, request: pytest.FixtureRequest) -> MakeWorkloadRig:
    """A rig per workload, each with a fresh storage folder and prompts of its own (a generated run builds many:
    none is a hit for another, even in a connector with one store for the whole process)."""
    from kvconform.conformance.workload.run import WorkloadRig

    count = iter(range(1_000_000))

    def make(spec: WorkloadSpec) -> tuple[WorkloadRig, WorkloadSpec]:
        number = next(count)
        storage = tmp_path / f"kv-storage-{number}"
        storage.mkdir()
        if not spec.prompts:  # a replayed spec keeps the owner its failure printed
            spec = replace(spec, prompts=f"{request.node.name}#{number}")  # no path: the same from any install
        rig = WorkloadRig(connector, platform, attn_backend, CacheShape(block_size=spec.block_size), tiny_model,
                          storage, device, workload=spec)
        if reason := rig.block_size_refusal():
            pytest.skip(reason)
        return rig, spec

    return make


def _run(workload_rig: MakeWorkloadRig, spec: WorkloadSpec) -> WorkloadReport:
    from kvconform.conformance.workload.run import run_workload

    with refusals_skip():
        return run_workload(*workload_rig(spec))


@pytest.mark.parametrize("scenario", list(WORKLOAD_SCENARIOS))
def test_workload_scenario(platform: PlatformSpec, attn_backend: str, subject: ConnectorParam, scenario: str,
                           workload_rig: MakeWorkloadRig) -> None:
    run_only_its_scenarios(subject, scenario, profile_scenarios(), f"the {scenario} scenario")
    spec = WORKLOAD_SCENARIOS[scenario]
    report = _run(workload_rig, spec)
    assert report.verified_loaded_tokens > 0, (
        f"{subject.name}: the {scenario} workload gave the consumer no verified load "
        f"({report.claimed_tokens} external tokens claimed): nothing was checked\n  workload: {spec.to_text()}")
    if scenario in EXERCISES:
        assert getattr(report, EXERCISES[scenario]) > 0, (
            f"{subject.name}: the {scenario} workload ran without {EXERCISES[scenario].replace('_', ' ')}: "
            f"its feature was not exercised ({report})\n  workload: {spec.to_text()}")


@pytest.mark.parametrize("prefill", ["whole", "chunked"])
def test_workload_generated(platform: PlatformSpec, attn_backend: str, subject: ConnectorParam, prefill: str,
                            workload_rig: MakeWorkloadRig, request: pytest.FixtureRequest) -> None:
    """Generated workloads, the first anchored to a verified load; a failure prints its spec and the replay command."""
    run_only_its_scenarios(subject, None, profile_scenarios(), "generated workloads")
    from kvconform.conformance.session.options import NORMAL_EXAMPLES
    from kvconform.conformance.workload.strategies import seeded_workloads

    chunked = prefill == "chunked"
    seed = request.node.name  # the test's id without its path: the same from a wheel, an editable install or a folder
    explore = request.config.getoption("kvconform_explore")
    if explore:
        verified = _explored(workload_rig, seed, chunked, explore)
    else:
        verified = [_run(workload_rig, spec).verified_loaded_tokens
                    for spec in seeded_workloads(seed, NORMAL_EXAMPLES, chunked)]
    assert sum(verified) > 0, (f"{subject.name}: none of the {len(verified)} generated workloads gave the "
                               f"consumer a verified load, the anchored one included (a prompt stored in full, "
                               f"then asked for first on a fresh consumer): nothing was checked, the connector "
                               f"never loaded")


def _explored(workload_rig: MakeWorkloadRig, seed: str, chunked: bool, examples: int) -> list[int]:
    """``--kvconform-explore``: the anchored workload, then a Hypothesis search of ``examples`` workloads that
    shrinks a failure; the verified load of each run."""
    from hypothesis import HealthCheck, Phase, example, given, settings

    from kvconform.conformance.workload.strategies import seeded_workload, workload_specs

    verified: list[int] = []

    @settings(max_examples=examples, database=None, deadline=None,  # type: ignore[untyped-decorator]  # hypothesis
              phases=(Phase.explicit, Phase.generate, Phase.shrink),
              suppress_health_check=list(HealthCheck), print_blob=False)
    @given(spec=workload_specs(chunked=chunked))  # type: ignore[untyped-decorator]  # is not followed:
    @example(spec=seeded_workload(seed, 0, chunked))  # type: ignore[untyped-decorator]  # its types are Any
    def workloads(spec: WorkloadSpec) -> None:
        verified.append(_run(workload_rig, spec).verified_loaded_tokens)

    workloads()
    return verified


def test_workload_replay(platform: PlatformSpec, attn_backend: str, subject: ConnectorParam,
                         workload_rig: MakeWorkloadRig, request: pytest.FixtureRequest) -> None:
    """The workload ``--kvconform-replay SPEC`` names, exactly as a failure printed it."""
    text = request.config.getoption("kvconform_replay")
    if text is None:
        pytest.skip("no workload to replay: pass --kvconform-replay SPEC (the line a workload failure prints)")
    from kvconform.conformance.workload.spec import WorkloadSpec

    _run(workload_rig, WorkloadSpec.from_text(text))
