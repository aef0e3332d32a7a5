"""The installed layout: one ``kvconform`` package, the repository's folders under it.

pyproject.toml lists the packages by hand (setuptools cannot discover a folder
mapped under another name), so a new subfolder that nobody lists would silently
be missing from every wheel; these tests build the wheel and look inside it.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
import tomllib

from tests.wheel_build import build_wheel

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("conformance", "platforms", "pipelines", "reports")
DATA_SUFFIXES = (".yaml", ".yml", ".json", ".html", ".md")


def _setuptools_table() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def _source_packages() -> set[str]:
    """Every folder with an __init__.py, named as it is installed."""
    found = {"kvconform"}
    for folder in FOLDERS:
        for init in (ROOT / folder).rglob("__init__.py"):
            parts = init.parent.relative_to(ROOT).parts
            found.add(".".join(("kvconform", *parts)))
    return found


def test_every_package_folder_is_listed():
    assert set(_setuptools_table()["packages"]) == _source_packages()


def test_each_folder_maps_to_its_name_under_kvconform():
    mapping = _setuptools_table()["package-dir"]
    assert mapping == {"kvconform": "kvconform", **{f"kvconform.{f}": f for f in FOLDERS}}


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory) -> set[str]:
    wheel = build_wheel(tmp_path_factory)
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())


def test_wheel_has_no_generic_top_level_package(wheel_names):
    top = {name.split("/")[0] for name in wheel_names if not name.split("/")[0].endswith(".dist-info")}
    assert top == {"kvconform"}


def test_wheel_holds_every_module_and_data_file(wheel_names):
    missing = []
    for folder in FOLDERS:
        for path in (ROOT / folder).rglob("*"):
            rel = path.relative_to(ROOT)
            if "out" in rel.parts or "__pycache__" in rel.parts or not path.is_file():
                continue
            if path.suffix == ".py" or path.suffix in DATA_SUFFIXES:
                if f"kvconform/{rel.as_posix()}" not in wheel_names:
                    missing.append(rel.as_posix())
    assert not missing, f"files the wheel lacks: {missing}"
