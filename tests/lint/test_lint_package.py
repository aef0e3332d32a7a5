"""The lint reads what a connector named by module path runs in its own package, not its module alone.

kvconform issue 56: a third-party connector whose module only delegated got a clean lint while its worker
helper called ``torch.cuda`` unguarded. Packages written to a temporary folder pin the rules (which imports are
followed, which modules are not read); tests/checks/cuda_helper_broken/ is the issue's shape, linted through the
API and through ``kvconform lint --connector``. Nothing here imports vLLM or the packages linted.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from kvconform.conformance.cli import main
from kvconform.conformance.lint.connector_package import closure_words, module_closure, package_closure

REPO = Path(__file__).resolve().parents[2]
BROKEN = "tests.checks.cuda_helper_broken"
HELPERS = Path("tests", "checks", "cuda_helper_broken")
UNGUARDED = "torch.cuda.synchronize()\n"


def _write(root: Path, files: dict[str, str]) -> None:
    for name, source in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))


@pytest.fixture
def on_path(tmp_path, monkeypatch):
    """``on_path({path: source})``: those files under a folder on ``sys.path``; returns the folder."""

    def write(files: dict[str, str]) -> Path:
        _write(tmp_path, files)
        monkeypatch.syspath_prepend(str(tmp_path))
        return tmp_path

    return write


def _errors(closure) -> set[tuple[str, str]]:
    return {(f.path, f.call) for f in closure.lint() if f.severity == "error"}


def test_imports_are_followed_relative_absolute_in_functions_and_transitively(on_path):
    on_path({
        "kvc_delegating/__init__.py": "",
        "kvc_delegating/connector.py": """\
            import torch
            from kvc_otherdist import helper as other
            from .worker import start

            try:
                from . import native_core
            except ImportError:
                native_core = None

            def wait():
                import kvc_delegating.sync.events
            """,
        "kvc_delegating/worker.py": "from . import deep\nimport torch\n\ndef start():\n    torch.cuda.Event()\n",
        "kvc_delegating/deep.py": "import torch\ntorch.cuda.current_stream()\n",
        "kvc_delegating/sync/__init__.py": "",
        "kvc_delegating/sync/events.py": "import torch\n" + UNGUARDED,
        "kvc_delegating/unused.py": "import torch\n" + UNGUARDED,
        "kvc_otherdist/__init__.py": "",
        "kvc_otherdist/helper.py": "import torch\n" + UNGUARDED,
    })
    closure = module_closure("kvc_delegating.connector")
    assert closure is not None
    assert closure.files[0] == "kvc_delegating/connector.py"
    assert set(closure.files) == {"kvc_delegating/connector.py", "kvc_delegating/__init__.py",
                                  "kvc_delegating/worker.py", "kvc_delegating/deep.py",
                                  "kvc_delegating/sync/__init__.py", "kvc_delegating/sync/events.py"}
    assert _errors(closure) == {("kvc_delegating/worker.py", "torch.cuda.Event"),
                                ("kvc_delegating/deep.py", "torch.cuda.current_stream"),
                                ("kvc_delegating/sync/events.py", "torch.cuda.synchronize")}
    assert closure_words("kvc_delegating.connector", closure) == "the 6 file(s) of its package kvc_delegating it runs"


def test_a_package_connector_is_read_whole(on_path):
    on_path({"kvc_pkgconn/__init__.py": "", "kvc_pkgconn/conn/__init__.py": "from .impl import Connector\n",
             "kvc_pkgconn/conn/impl.py": "class Connector:\n    pass\n", "kvc_pkgconn/conn/spare.py": UNGUARDED,
             "kvc_pkgconn/other.py": UNGUARDED})
    closure = package_closure("kvc_pkgconn.conn")
    assert closure is not None
    assert set(closure.files) == {"kvc_pkgconn/__init__.py", "kvc_pkgconn/conn/__init__.py",
                                  "kvc_pkgconn/conn/impl.py", "kvc_pkgconn/conn/spare.py"}


def test_a_top_level_module_and_a_namespace_package_are_found(on_path):
    root = on_path({"kvc_single.py": "import torch\n" + UNGUARDED, "kvc_namespace/conn.py": "from . import helper\n",
                    "kvc_namespace/helper.py": "import torch\n" + UNGUARDED})
    single = package_closure("kvc_single")
    assert single is not None and single.root == root and _errors(single) == {("kvc_single.py",
                                                                                "torch.cuda.synchronize")}
    spaced = package_closure("kvc_namespace.conn")
    assert spaced is not None and _errors(spaced) == {("kvc_namespace/helper.py", "torch.cuda.synchronize")}


def test_a_module_that_cannot_be_found_is_none(on_path):
    on_path({"kvc_present/__init__.py": ""})
    assert package_closure("kvc_absent_package.connector") is None
    assert package_closure("kvc_present.missing") is None


def test_an_unparseable_helper_is_a_finding_not_a_crash(on_path):
    on_path({"kvc_unparseable/__init__.py": "", "kvc_unparseable/conn.py": "from . import bad\n",
             "kvc_unparseable/bad.py": "def f(:\n"})
    closure = package_closure("kvc_unparseable.conn")
    assert closure is not None
    assert [(f.path, f.rule) for f in closure.lint()] == [("kvc_unparseable/bad.py", "KVC000")]


def test_a_working_directory_package_is_found_by_the_cli_only(tmp_path, monkeypatch, capsys):
    _write(tmp_path, {"kvc_here/__init__.py": "", "kvc_here/conn.py": "from .helper import go\n",
                      "kvc_here/helper.py": "import torch\n\ndef go():\n    " + UNGUARDED})
    monkeypatch.chdir(tmp_path)
    assert package_closure("kvc_here.conn") is None  # not on this Python's path
    assert main(["lint", "--connector", "kvc_here.conn:Conn"]) == 1
    assert capsys.readouterr().out.startswith("kvc_here/helper.py:4:5: KVC004 error: ")


# --- the shape: tests/checks/cuda_helper_broken/ ---------------------------------------------------------


def _line_of(module: str, text: str) -> int:
    lines = (REPO / HELPERS / module).read_text().splitlines()
    return next(n for n, line in enumerate(lines, 1) if text in line)


HELPER_ERRORS = [("worker.py", "torch.cuda.Event()", "torch.cuda.Event"),
                 ("worker.py", "torch.cuda.current_stream()", "torch.cuda.current_stream"),
                 ("sync.py", "torch.cuda.synchronize()", "torch.cuda.synchronize")]


def expected_places() -> set[tuple[str, int, str]]:
    """(path, line, call) of each KVC004 error in the broken package's helpers, found by their text."""
    return {((HELPERS / module).as_posix(), _line_of(module, text), call) for module, text, call in HELPER_ERRORS}


def test_the_api_finds_the_helpers_errors_with_path_and_line():
    closure = module_closure(f"{BROKEN}.connector")
    assert closure is not None and closure.root == REPO
    found = {(f.path, f.line, f.call) for f in closure.lint() if f.rule == "KVC004"}
    assert found == expected_places()  # unused.py's identical call is not read
    assert not [f for f in closure.lint() if f.path == (HELPERS / "connector.py").as_posix()]


def test_the_clean_control_in_the_same_package_has_no_error():
    closure = module_closure(f"{BROKEN}.clean_connector")
    assert closure is not None and (HELPERS / "guarded.py").as_posix() in closure.files
    assert [f for f in closure.lint() if f.severity == "error"] == []


def test_the_cli_names_the_helpers_file_and_line(monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    assert main(["lint", "--json", "--connector", f"{BROKEN}.connector:CudaHelperConnector"]) == 1
    found = {(f["path"], f["line"], f["call"]) for f in json.loads(capsys.readouterr().out)}
    assert found == expected_places()
    assert main(["lint", "--connector", f"{BROKEN}.clean_connector:CleanHelperConnector"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "5 files checked, 0 findings: 0 errors, 0 warnings, 0 info"


@pytest.mark.parametrize(("spec", "message"), [
    ("not a module", "--connector not a module: not a connector; give package.module[:Class]"),
    ("kvc_nowhere.conn:Conn", "--connector kvc_nowhere.conn:Conn: no Python file of module kvc_nowhere.conn on "),
    ("pkg.mod:Class:Extra", "--connector pkg.mod:Class:Extra: not a connector"),
])
def test_a_connector_that_is_not_there_is_one_line_and_exit_2(capsys, spec, message):
    assert main(["lint", "--connector", spec]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith(f"kvconform lint: error: {message}")
