"""Fixtures for the pipeline generator's tests; the helpers live in ``pipeline_testkit``."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from pipeline_testkit import FakeBin

from kvconform.pipelines.lanes import LANES_FILE


@pytest.fixture
def fake_bin(tmp_path: Path) -> FakeBin:
    return FakeBin(tmp_path)


@pytest.fixture(scope="session")
def shipped_lanes() -> dict:
    return yaml.safe_load(LANES_FILE.read_text())


@pytest.fixture
def write_lanes(tmp_path: Path, shipped_lanes: dict):
    """Write the shipped lanes file, changed by ``edit(data)``, to a temporary file."""

    def write(edit=None, name: str = "lanes.yaml") -> Path:
        data = copy.deepcopy(shipped_lanes)
        if edit is not None:
            edit(data)
        path = tmp_path / name
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    return write
