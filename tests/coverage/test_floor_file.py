"""The committed coverage floor (``conformance/coverage/floor.yaml``) reads and holds its goal: each module it
names for the goal (ExampleConnector's, MultiConnector's, DecodeBenchConnector's, NIXL's pull and push schedulers
and workers) has a floor of at least the goal's percentage of what a CPU run can reach, and every range the file
explains belongs to a module of the floor."""

from __future__ import annotations

from pathlib import Path

from kvconform.reports.coverage_floor import load_floor

FLOOR = Path(__file__).resolve().parents[2] / "conformance" / "coverage" / "floor.yaml"
NIXL = "vllm/distributed/kv_transfer/kv_connector/v1/nixl/"
HELD = {"ExampleConnector", "MultiConnector", "DecodeBenchConnector", "NixlConnector", "NixlPushConnector"}


def test_the_goal_names_the_connectors_it_must_and_each_module_has_a_floor_at_the_goal():
    floor = load_floor(FLOOR)
    assert floor.goal is not None and floor.goal.percent >= 90
    assert set(floor.goal.connectors) == HELD
    held = {path for modules in floor.goal.connectors.values() for path in modules}
    assert {f"{NIXL}{side}_{half}.py" for side in ("pull", "push") for half in ("scheduler", "worker")} <= held
    short = [f"{name}: {path}: {floor.connectors.get(name, {}).get(path, 0.0)}%"
             for name, paths in floor.goal.connectors.items() for path in paths
             if floor.connectors.get(name, {}).get(path, 0.0) < floor.goal.percent]
    assert short == [], short


def test_every_explained_range_names_a_module_of_a_connector_in_the_floor():
    floor = load_floor(FLOOR)
    measured = {path for modules in floor.connectors.values() for path in modules}
    stray = sorted((set(floor.unreachable_on_cpu) | set(floor.not_reached)) - measured)
    assert stray == [], stray
