"""The gate's overlay reuses the installed bytecode of what the change leaves alone, and only that.

A small package stands in for the installed vLLM (the mechanism is Python's own
import system; ``test_gate_run.py`` runs the whole overlay). Each check imports in
a fresh interpreter with ``-v``, which says where each module's code came from.
"""

from __future__ import annotations

import os
import py_compile
import subprocess
import sys
from importlib.util import cache_from_source
from pathlib import Path

import pytest

from kvconform.pipelines.gate import overlay
from tests.gate.vllm_checkout import CONNECTORS


@pytest.fixture
def installed(tmp_path):
    """An installed package with compiled bytecode: ``same`` (unchanged by the change) and ``edited``."""
    package = tmp_path / "site" / "pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    for name in ("same", "edited"):
        (package / f"{name}.py").write_text(f"WHERE = 'installed {name}'\n")
        py_compile.compile(str(package / f"{name}.py"), doraise=True)
    return package


def overlay_of(installed: Path, root: Path) -> Path:
    """What ``build_overlay`` makes of the package: unchanged files linked with their bytecode, ``edited`` written."""
    package = root / "pkg"
    package.mkdir(parents=True)
    for name in ("__init__", "same"):
        (package / f"{name}.py").symlink_to(installed / f"{name}.py")
        overlay._link_bytecode(installed / f"{name}.py", package / f"{name}.py")
    (package / "edited.py").write_text("WHERE = 'the change'\n")
    return package


def import_verbosely(root: Path, module: str, write_bytecode: bool = False) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if not write_bytecode:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return subprocess.run([sys.executable, "-v", "-c", f"import {module}; print({module}.WHERE)"], cwd=root,
                          env={**env, "PYTHONPATH": str(root)}, capture_output=True, text=True, check=True)


def test_an_unchanged_module_runs_the_installed_bytecode(installed, tmp_path):
    package = overlay_of(installed, tmp_path / "overlay")
    linked = Path(cache_from_source(str(package / "same.py")))
    assert linked.is_symlink() and linked.resolve() == Path(cache_from_source(str(installed / "same.py")))
    done = import_verbosely(tmp_path / "overlay", "pkg.same")
    assert done.stdout.strip() == "installed same"
    assert f"# code object from '{linked}'" in done.stderr  # read, not compiled from the source


def test_a_changed_module_gets_no_bytecode_and_runs_the_change(installed, tmp_path):
    package = overlay_of(installed, tmp_path / "overlay")
    assert not Path(cache_from_source(str(package / "edited.py"))).exists()
    done = import_verbosely(tmp_path / "overlay", "pkg.edited")
    assert done.stdout.strip() == "the change"
    assert f"# code object from {package / 'edited.py'}" in done.stderr


def test_rewritten_bytecode_replaces_the_link_never_the_installed_file(installed, tmp_path):
    """The installed source changed after it was compiled: Python compiles again and writes the overlay's own."""
    package = overlay_of(installed, tmp_path / "overlay")
    installed_pyc = Path(cache_from_source(str(installed / "same.py")))
    before = installed_pyc.read_bytes()
    (installed / "same.py").write_text("WHERE = 'installed same, edited in place'\n")
    done = import_verbosely(tmp_path / "overlay", "pkg.same", write_bytecode=True)
    assert done.stdout.strip() == "installed same, edited in place"
    linked = Path(cache_from_source(str(package / "same.py")))
    assert linked.is_file() and not linked.is_symlink()
    assert installed_pyc.read_bytes() == before


def test_no_link_where_bytecode_lives_outside_the_package(installed, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "pycache_prefix", str(tmp_path / "prefix"))
    package = tmp_path / "overlay" / "pkg"
    package.mkdir(parents=True)
    (package / "same.py").symlink_to(installed / "same.py")
    overlay._link_bytecode(installed / "same.py", package / "same.py")
    assert not (tmp_path / "prefix").exists() and not (package / "__pycache__").exists()


def test_the_overlay_of_a_checkout_links_bytecode_only_for_files_the_change_left_alone(vllm_repo, tmp_path):
    example = f"{CONNECTORS}/v1/example_connector.py"
    head = vllm_repo.commit({example: vllm_repo.text(example) + "\n# changed\n"})
    build = overlay.installed_build()
    package = overlay.build_overlay(vllm_repo.path, head, build, tmp_path / "overlay")
    unchanged = Path(cache_from_source(str(package / "__init__.py")))
    installed = Path(cache_from_source(str(build.package_dir / "__init__.py")))
    # both resolved: the installed build may sit in a venv reached through a link (a clone's cached .venv)
    assert unchanged.is_symlink() and unchanged.resolve() == installed.resolve()
    changed = package.parent / example
    assert not changed.is_symlink() and not Path(cache_from_source(str(changed))).exists()
