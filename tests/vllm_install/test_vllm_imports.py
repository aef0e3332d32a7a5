"""Every vLLM internal kvconform drives goes through its table (conformance/vllm_install/api.py).

A vLLM release that moves, adds or drops an internal name should cost one edit to ``PLACES`` and,
until then, fail the checks that need it as "kvconform cannot drive this vLLM". An import of a
vLLM internal written around the table would instead fail as a bare ImportError wherever it
stands (read as a connector's failure, or caught as a missing optional package and skipped). So
this reads every module of conformance/ with ``ast`` (nothing is imported) and names, file:line,
each import of a vLLM module outside ``vllm_api.CONNECTOR_API``. platforms/ sits below conformance/
in kvconform's layers (tests/install/test_import_graph.py) and keeps its one probe of vLLM
(``vllm_backends.confirm``), where any import failure already means "unconfirmed: kvconform's table speaks".

Imports under ``if TYPE_CHECKING:`` are exempt: they are never run, so they cannot fail on a vLLM
that moved the name; they only give annotations.
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvconform.conformance.vllm_install import api as vllm_api

REPO = Path(__file__).resolve().parents[2]
TABLE = REPO / "conformance" / "harness" / "vllm_api.py"


def _vllm_submodules() -> set[str]:
    """The names of vLLM's top-level submodules, read off the installed package's folder (not imported)."""
    spec = importlib.util.find_spec("vllm")
    folders = [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    return {p.stem for folder in folders for p in folder.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _run_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node that may run: the bodies of ``if TYPE_CHECKING:`` are left out (their ``else`` is kept)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for other in node.orelse:
                yield other
                yield from _run_nodes(other)
            continue
        yield node
        yield from _run_nodes(node)


def _is_vllm(module: str) -> bool:
    return module == "vllm" or module.startswith("vllm.")


def imported_vllm_modules(tree: ast.AST, submodules: set[str]) -> Iterator[tuple[int, str]]:
    """(line, module) for each vLLM module the code imports: ``import``, ``from ... import`` (a submodule
    named in ``from vllm import x`` counts as ``vllm.x``) and ``importlib.import_module("vllm...")``."""
    for node in _run_nodes(tree):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names if _is_vllm(a.name))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and _is_vllm(node.module):
            yield node.lineno, node.module
            if node.module == "vllm":
                yield from ((node.lineno, f"vllm.{a.name}") for a in node.names if a.name in submodules)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name)
              and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and _is_vllm(node.args[0].value)):
            yield node.lineno, node.args[0].value


def around_the_table(source: str, submodules: set[str]) -> list[tuple[int, str]]:
    return [(line, module) for line, module in imported_vllm_modules(ast.parse(source), submodules)
            if not vllm_api.in_connector_api(module)]


def test_no_vllm_internal_is_imported_around_the_table():
    submodules = _vllm_submodules()
    found = []
    for path in sorted((REPO / "conformance").rglob("*.py")):
        if path == TABLE:
            continue
        for line, module in around_the_table(path.read_text(encoding="utf-8"), submodules):
            found.append(f"{path.relative_to(REPO)}:{line}: imports {module}")
    assert not found, ("vLLM internals imported directly; look them up with vllm_api.find / optional / has_field "
                       "(conformance/vllm_install/api.py's PLACES), or extend CONNECTOR_API if they are the "
                       "connectors' public surface:\n" + "\n".join(found))


@pytest.mark.parametrize(("source", "expected"), [
    ("from vllm.v1.request import Request", [(1, "vllm.v1.request")]),
    ("import vllm.logger", [(1, "vllm.logger")]),
    ("def f():\n    from vllm.v1.core import kv_cache_utils", [(2, "vllm.v1.core")]),
    ("from vllm import envs", [(1, "vllm.envs")]),  # a submodule, by way of the root package
    ("import importlib\nimportlib.import_module('vllm.v1.outputs')", [(2, "vllm.v1.outputs")]),
    ("if TYPE_CHECKING:\n    from vllm.v1.request import Request\nelse:\n    import vllm.v1.outputs",
     [(4, "vllm.v1.outputs")]),
    # the connector API: direct imports are fine
    ("from vllm import LLM, SamplingParams\nimport vllm", []),
    ("from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole", []),
    ("from vllm.config import VllmConfig\nfrom vllm.forward_context import set_forward_context", []),
    ("from vllm.platforms import current_platform\nfrom vllm.inputs import TokensPrompt", []),
    ("if typing.TYPE_CHECKING:\n    from vllm.v1.kv_cache_interface import KVCacheConfig", []),
    ("from vllmx import y\nfrom kvconform.conformance.harness import vllm_api", []),
])
def test_the_reader_finds_what_an_import_brings_in(source, expected):
    assert around_the_table(source, submodules={"envs", "v1", "logger"}) == expected
