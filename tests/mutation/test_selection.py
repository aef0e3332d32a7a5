"""Which mutants a run keeps: the lines a diff touches, and a seeded sample that draws the same every time."""

from __future__ import annotations

from kvconform.conformance.mutation.generate import Candidate, Edit
from kvconform.conformance.mutation.selection import on_changed_lines, same_file, sample


def _candidate(module: str, line: int) -> Candidate:
    return Candidate(module, line, "core/NumberReplacer", 0, Edit(0, 1, "2"))


def test_the_same_seed_draws_the_same_sample_and_another_seed_another() -> None:
    items = [f"m.py:{n}" for n in range(200)]
    first = sample(items, 20, seed=0)
    assert first == sample(items, 20, seed=0) and len(first) == 20
    assert first == sorted(first, key=items.index)  # in the items' order
    assert sample(items, 20, seed=1) != first
    assert sample(items, 500, seed=0) == items and sample(items, None, seed=3) == items


def test_a_diffs_path_matches_a_module_by_whole_folder_names_at_its_end() -> None:
    module = "vllm/distributed/kv_transfer/kv_connector/v1/example_connector.py"
    assert same_file(module, "vllm/distributed/kv_transfer/kv_connector/v1/example_connector.py")
    assert same_file(module, "v1/example_connector.py")
    assert same_file("mypkg/connector.py", "src/mypkg/connector.py")
    assert not same_file(module, "other_example_connector.py")
    assert not same_file(module, "v2/example_connector.py")


def test_only_candidates_on_changed_lines_of_touched_files_are_kept() -> None:
    made = [_candidate("pkg/a.py", 3), _candidate("pkg/a.py", 4), _candidate("pkg/b.py", 3)]
    kept = on_changed_lines(made, {"src/pkg/a.py": {3, 9}, "docs/x.md": {3}})
    assert kept == [made[0]]
    assert on_changed_lines(made, {}) == []
