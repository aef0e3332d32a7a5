"""The two tiers of the project's tests: which need vLLM, and the proof that the others need none.

tests/conftest.py names the tests that need no vLLM (they run once); make check runs them with vLLM made
unimportable by tests/no_vllm/sitecustomize.py. These tests check that the blocker refuses vLLM everywhere a
test could reach it, that a listed test which reaches vLLM fails there (also through a skip), that the table
names real tests, and that the make targets run each tier where it belongs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests import conftest as tiers

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[2]
BLOCKER = REPO / "tests" / "no_vllm"
MAKE = ["make", "--no-print-directory", "-n", "-C", str(REPO)]


def _blocked_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(BLOCKER)}


def test_the_blocker_refuses_vllm_in_a_process_and_in_the_processes_it_starts():
    script = textwrap.dedent("""
        import importlib, subprocess, sys
        import yaml  # any other package still imports
        for attempt in ("import vllm", "import vllm.config", "from vllm import LLM",
                        "importlib.import_module('vllm.distributed')", "importlib.util.find_spec('vllm')"):
            try:
                exec(attempt)
            except ModuleNotFoundError as error:
                print("refused:", attempt, "|", error)
            else:
                print("allowed:", attempt)
        child = subprocess.run([sys.executable, "-c", "import vllm"], capture_output=True, text=True)
        print("child exit", child.returncode, child.stderr.strip().splitlines()[-1])
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=_blocked_env(),
                         timeout=120)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert [line.split(" |")[0] for line in lines[:5]] == [
        "refused: import vllm", "refused: import vllm.config", "refused: from vllm import LLM",
        "refused: importlib.import_module('vllm.distributed')", "refused: importlib.util.find_spec('vllm')"]
    assert all("vLLM is blocked in this process" in line and "NO_VLLM" in line for line in lines[:5]), lines
    assert lines[5].startswith("child exit 1 ModuleNotFoundError: vLLM is blocked in this process"), lines[5]


LISTED = "test_listed.py"
INNER_CONFTEST = f"""
from pathlib import Path

from tests import conftest as tiers
from tests.conftest import (pytest_collection_finish, pytest_collection_modifyitems, pytest_ignore_collect,
                            pytest_make_collect_report, pytest_runtest_makereport)

tiers.TESTS = Path(__file__).parent
tiers.NO_VLLM = ({LISTED!r}, "test_listed_skips_at_import.py", "test_marked.py", "quiet/")
"""


def _write_suite(pytester):
    pytester.makeconftest(INNER_CONFTEST)
    pytester.makeini("[pytest]\nmarkers =\n    needs_vllm: as in pyproject.toml\n")
    pytester.makepyfile(**{
        LISTED[:-3]: """
            import pytest

            def test_needs_nothing():
                assert sum([1, 2]) == 3

            def test_imports_vllm():
                import vllm  # noqa: F401

            def test_skips_without_vllm():
                pytest.importorskip("vllm")
        """,
        "test_listed_skips_at_import": "import pytest\npytest.importorskip('vllm.config')\n"
                                       "def test_never_collected(): pass\n",
        "test_unlisted": "import vllm\ndef test_per_release(): pass\n",
        "test_marked": "import pytest\npytestmark = pytest.mark.needs_vllm\ndef test_marked(): pass\n",
    })
    quiet = pytester.mkdir("quiet")
    (quiet / "test_quiet.py").write_text("def test_in_a_listed_folder():\n    assert True\n")
    needing = pytester.mkdir("needing")
    (needing / "conftest.py").write_text("import vllm\n")
    (needing / "test_needing.py").write_text("def test_in_an_unlisted_folder(): pass\n")


def test_a_listed_test_that_reaches_vllm_fails_where_vllm_is_blocked(pytester, monkeypatch):
    _write_suite(pytester)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(BLOCKER), str(REPO)]))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-m", "not needs_vllm", "-rfE",
                                           "--continue-on-collection-errors")
    # the unlisted module and folder are not even imported (their import of vllm would fail)
    result.assert_outcomes(passed=2, failed=2, errors=1, deselected=1)
    out = result.stdout.str()
    assert "ModuleNotFoundError: vLLM is blocked in this process" in out
    result.stdout.fnmatch_lines([
        "skipped for want of vLLM in the tests that need none: Skipped: could not import 'vllm': vLLM is blocked*",
        "FAILED test_listed.py::test_imports_vllm - ModuleNotFoundError: vLLM is block*",
        "FAILED test_listed.py::test_skips_without_vllm - skipped for want of vLLM*",
        "ERROR test_listed_skips_at_import.py - skipped for want of vLLM*"])
    assert "test_unlisted" not in out and "needing" not in out


def test_a_blocked_run_that_selects_a_test_needing_vllm_is_refused_in_one_line(pytester, monkeypatch):
    _write_suite(pytester)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(BLOCKER), str(REPO)]))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "test_marked.py")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: vLLM is blocked (tests/no_vllm on PYTHONPATH) but 1 selected tests need "
                                 "it, test_marked.py::test_marked first: add -m 'not needs_vllm'"])


def test_this_run_of_the_tests_that_need_no_vllm_cannot_reach_it():
    """Every other test of this run passed without vLLM only if vLLM really was unimportable in it."""
    if tiers.vllm_blocked_note() is None:
        pytest.skip("vLLM is not blocked in this run: the tests that need none prove it only where "
                    "tests/no_vllm is on PYTHONPATH, as make check runs them")
    with pytest.raises(ModuleNotFoundError, match="vLLM is blocked in this process"):
        import vllm  # noqa: F401
    assert "vllm" not in sys.modules


@pytest.mark.parametrize("entry", tiers.NO_VLLM)
def test_every_entry_names_test_modules(entry):
    path = tiers.TESTS / entry
    if entry.endswith("/"):
        assert path.is_dir() and any(path.rglob("test_*.py")), f"{entry}: no such folder of tests"
    else:
        assert path.is_file() and path.name.startswith("test_"), f"{entry}: no such test module"


@pytest.mark.parametrize(("path", "expected"), [
    ("docs/test_docs_commands.py", False),  # in a listed folder
    ("docs/new/test_new.py", False),
    ("reports/test_junit.py", False),  # a listed module
    ("reports/test_report_real_pytest.py", True),  # its neighbour is not listed
    ("reports/test_junit.py.orig", True),
    ("checks/test_roundtrip_catches.py", True),
])
def test_a_module_needs_vllm_unless_the_table_names_it(path, expected):
    assert tiers.needs_vllm(tiers.TESTS / path) is expected


def test_a_folder_is_left_out_of_a_blocked_run_only_when_it_holds_no_listed_module():
    assert tiers.needs_vllm_throughout(tiers.TESTS / "examples")
    assert tiers.needs_vllm_throughout(tiers.TESTS / "gate")
    assert not tiers.needs_vllm_throughout(tiers.TESTS / "reports")  # some of its modules are listed
    assert not tiers.needs_vllm_throughout(tiers.TESTS / "docs")
    assert not tiers.needs_vllm_throughout(tiers.TESTS / "docs" / "sub")
    assert not tiers.needs_vllm_throughout(tiers.TESTS)
    assert tiers.needs_vllm(REPO / "conformance" / "test_roundtrip.py")  # outside tests/: never listed


def _pytest_lines(target: str) -> list[str]:
    dry = subprocess.run([*MAKE, target], capture_output=True, text=True, timeout=60)
    assert dry.returncode == 0, dry.stderr
    return [line for line in dry.stdout.splitlines() if "-m pytest tests" in line]


def test_make_check_runs_the_tests_that_need_no_vllm_with_vllm_blocked():
    (line,) = _pytest_lines("check")
    assert f"PYTHONPATH={BLOCKER}" in line and "-m 'not needs_vllm'" in line, line


def test_make_test_runs_each_project_test_once():
    blocked, needing = _pytest_lines("test")
    assert f"PYTHONPATH={BLOCKER}" in blocked and "-m 'not needs_vllm'" in blocked, blocked
    assert "PYTHONPATH" not in needing and "-m needs_vllm" in needing, needing


def test_the_newest_release_runs_the_tests_that_check_vllm_and_the_others_the_suite():
    (line,) = _pytest_lines("test-vllm034")
    assert "-m 'needs_vllm and not one_release'" in line and "no_vllm" not in line, line
    assert _pytest_lines("test-vllm033") == []
