"""An assertion vLLM raised is found by its frame's file even where vLLM's environment is reached through a link.

A venv may be a symlink (kvconform's own CI links each clone's ``.venv`` to a cached environment): the frames then
name vLLM's files by the link, while ``vllm_assertions`` resolves vLLM's package folder. A stand-in package file,
compiled under the link's name, raises the assertion; vLLM itself is not needed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvconform.conformance.engine import vllm_assertions

SOURCE = "def claim(num_external_tokens):\n    assert num_external_tokens >= 0\n"


@pytest.fixture
def linked_package(tmp_path: Path) -> tuple[Path, Path]:
    """(the package folder, resolved; the same folder reached through a linked environment)."""
    package = tmp_path / "cache" / "venv-0123" / "vllm"
    package.mkdir(parents=True)
    (package / "scheduler.py").write_text(SOURCE)
    (tmp_path / "clone").mkdir()
    (tmp_path / "clone" / ".venv").symlink_to(tmp_path / "cache" / "venv-0123", target_is_directory=True)
    return package.resolve(), tmp_path / "clone" / ".venv" / "vllm"


def raised_from(file: Path) -> AssertionError:
    namespace: dict[str, object] = {}
    exec(compile(file.read_text(), str(file), "exec"), namespace)
    try:
        namespace["claim"](-1)  # type: ignore[operator]
    except AssertionError as error:
        return error
    raise AssertionError("the stand-in did not assert")


@pytest.mark.parametrize("named_by", ["link", "resolved path"])
def test_a_frame_in_vllm_is_found_by_the_link_or_the_resolved_path(linked_package, monkeypatch, named_by):
    resolved, through_link = linked_package
    monkeypatch.setattr(vllm_assertions, "_vllm_root", lambda: resolved)
    file = (through_link if named_by == "link" else resolved) / "scheduler.py"
    found = vllm_assertions.tripped(raised_from(file))
    assert found is not None, f"the frame named by the {named_by} was not taken for vLLM's"
    assert found.site == "scheduler.py:2"
    assert found.expression == "num_external_tokens >= 0"
    assert found.variables == {"num_external_tokens": -1}


def test_a_frame_outside_vllm_is_not_taken_for_vllms(linked_package, tmp_path, monkeypatch):
    resolved, _ = linked_package
    monkeypatch.setattr(vllm_assertions, "_vllm_root", lambda: resolved)
    elsewhere = tmp_path / "connector.py"
    elsewhere.write_text(SOURCE)
    assert vllm_assertions.tripped(raised_from(elsewhere)) is None
