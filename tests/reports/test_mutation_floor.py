"""reports/mutation_floor.py: a run of the floor's row is held to it mutant by mutant, scores side by side; another
sample, release or connector is not compared, and says why."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvconform.reports.mutants import Mutant, MutationRun
from kvconform.reports.mutation_floor import (
    UNEXPLAINED,
    ConnectorFloor,
    MutationFloor,
    MutationFloorError,
    comparable,
    floor_entry,
    floor_problems,
    load_floor,
    score_changes,
)

MODULE = "vllm/distributed/kv_transfer/kv_connector/v1/example_connector.py"


def _mutant(ident: str, fate: str, line: int = 10) -> Mutant:
    return Mutant(id=ident, module=MODULE, function="ExampleConnector.start_load_kv", line=line,
                  operator="core/NumberReplacer", diff="-x\n+y\n", fate=fate)  # type: ignore[arg-type]


def _run(*mutants: Mutant, sample: int | None = 4, vllm: str = "0.32.0") -> MutationRun:
    return MutationRun(connector="ExampleConnector", platform="cpu", vllm=vllm, modules=[MODULE],
                       mutants=list(mutants), sample=sample, seed=0)


FLOOR = MutationFloor(platform="cpu", vllm="0.32.0", connectors={"ExampleConnector": ConnectorFloor(
    sample=4, seed=0, scores={MODULE: 0.667}, detected=["a", "b"], survivors={"c": "equivalent: a log level"})})


def test_the_floor_s_own_run_holds():
    assert floor_problems(_run(_mutant("a", "killed"), _mutant("b", "timed_out"), _mutant("c", "survived"),
                               _mutant("d", "not_reached")), FLOOR) == []


def test_a_detected_mutant_that_survives_is_a_regression_naming_its_place():
    [problem] = floor_problems(_run(_mutant("a", "survived", line=42), _mutant("b", "killed"),
                                    _mutant("c", "survived")), FLOOR)
    assert problem.startswith(f"a ({MODULE}:42, ExampleConnector.start_load_kv, core/NumberReplacer) survived; "
                              f"the floor says a test detected it")


def test_a_detected_mutant_no_test_reaches_now_or_one_the_source_lost_is_a_problem():
    problems = floor_problems(_run(_mutant("a", "not_reached"), _mutant("c", "survived")), FLOOR)
    assert problems[0].startswith("b is the floor's, and this source has no such mutant: rewrite the row")
    assert problems[1].startswith(f"a ({MODULE}:10, ExampleConnector.start_load_kv, core/NumberReplacer) not "
                                  f"reached; the floor says a test detected it")
    assert len(problems) == 2


def test_the_row_lists_its_mutants_and_scores_compare_with_the_run_s():
    assert FLOOR.connectors["ExampleConnector"].listed() == {"a", "b", "c"}
    better = _run(_mutant("a", "killed"), _mutant("b", "killed"), _mutant("c", "killed"))
    assert score_changes(better, FLOOR) == [f"{MODULE}: 0.667 in the floor, 1.000 now"]
    assert score_changes(_run(sample=8), FLOOR) == []


def test_an_unexplained_survivor_and_an_out_of_date_explanation_fail():
    problems = floor_problems(_run(_mutant("a", "killed"), _mutant("b", "killed"), _mutant("c", "killed"),
                                   _mutant("e", "survived")), FLOOR)
    assert [p.split(" ", 1)[0] for p in problems] == ["c", "e"]
    assert "is detected now; the floor still lists it as a survivor (equivalent: a log level)" in problems[0]
    assert "the floor does not explain it" in problems[1]


@pytest.mark.parametrize(("run", "why"), [
    (_run(sample=8), "this run's sample is 8, the floor's 4: not compared"),
    (_run(vllm="0.34.0"), "this run's vLLM is 0.34.0, the floor's 0.32.0: not compared"),
    (MutationRun(connector="Other", platform="cpu", vllm="0.32.0", modules=[], mutants=[]),
     "the mutation floor has no row for Other"),
])
def test_a_run_of_another_sample_release_or_connector_is_not_compared(run, why):
    assert comparable(run, FLOOR) == why
    assert floor_problems(run, FLOOR) == []


def test_an_entry_written_from_a_run_holds_that_run():
    run = _run(_mutant("a", "killed"), _mutant("b", "survived"), _mutant("c", "not_reached"))
    entry = floor_entry(run, {"b": "equivalent"})
    assert entry.scores == {MODULE: 0.5}
    assert entry.detected == ["a"] and entry.survivors == {"b": "equivalent"}
    assert floor_problems(run, MutationFloor(platform="cpu", vllm="0.32.0",
                                             connectors={"ExampleConnector": entry})) == []
    assert floor_entry(run, {}).survivors == {"b": UNEXPLAINED}


def test_a_malformed_floor_names_the_file_and_key(tmp_path):
    path = tmp_path / "floor.yaml"
    path.write_text("platform: cpu\nvllm: 0.32.0\nconnectors:\n  X:\n    sampel: 3\n")
    with pytest.raises(MutationFloorError, match=r"floor.yaml: connectors.X.sampel: Extra inputs are not permitted"):
        load_floor(path)


COMMITTED = Path(__file__).resolve().parents[2] / "conformance" / "mutation" / "floor.yaml"
FLOOR_CONNECTORS = {"ExampleConnector", "MultiConnector", "DecodeBenchConnector", "NixlConnector", "NixlPushConnector",
                    "OffloadingConnector", "SimpleCPUOffloadConnector"}


def test_the_committed_floor_has_every_cpu_connector_and_explains_every_survivor():
    floor = load_floor(COMMITTED)
    assert set(floor.connectors) == FLOOR_CONNECTORS
    for name, entry in floor.connectors.items():
        unexplained = [ident for ident, why in entry.survivors.items() if why == UNEXPLAINED or not why.strip()]
        assert not unexplained, f"{name}: survivors without a reason in {COMMITTED.name}: {unexplained}"
        assert not set(entry.detected) & set(entry.survivors), name
        assert all(0.0 <= score <= 1.0 for score in entry.scores.values()), name
