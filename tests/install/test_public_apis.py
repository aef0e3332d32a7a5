"""kvconform imports no private pytest, pytest-xdist or pytest-timeout module but those ``PRIVATE_USES`` lists.

kvconform is installed beside whatever versions of these a CI image pins, so it
takes them as ranges; a private module may change in any release of them. Each
private name it keeps is in ``conformance/session/private_apis.py``, with the feature test
it is used behind and its public fallback. Read statically with ``ast`` (through
``vllm_install.import_graph``, as the import-graph test reads them): every import
statement counts, module level or inside a function, and so does an
``importlib.import_module("...")`` or ``__import__("...")`` of a constant name.
"""

from __future__ import annotations

import ast

import pytest

from kvconform.conformance.session.private_apis import PRIVATE_USES
from kvconform.conformance.vllm_install.import_graph import import_targets
from tests.install.test_import_graph import ROOT, source_modules

# top-level module -> why importing it (or below it) is private
PRIVATE_ROOTS = {
    "_pytest": "pytest's internals: use what the pytest package exports",
    "xdist": "pytest-xdist's modules: its hooks, options and the names the xdist package exports are public",
    "pytest_timeout": "pytest-timeout's module: its marker, options and hooks are its API",
}
# what ``from xdist import ...`` may take: the names the xdist package exports (its __all__ in 3.5 to 3.8)
PUBLIC_XDIST = ("__version__", "get_xdist_worker_id", "is_xdist_controller", "is_xdist_master", "is_xdist_worker")
ALLOWED = {(use.user, use.imports) for use in PRIVATE_USES if use.imports}


def _dynamic_imports(source: str) -> list[str]:
    """Constant module names given to ``importlib.import_module`` or ``__import__``."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args or not isinstance(node.args[0], ast.Constant):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
            found.append(node.args[0].value)
    return found


def private_imports(path: str, source: str) -> list[str]:
    """The private modules ``source`` imports (``from xdist import is_xdist_worker`` is public)."""
    found = []
    statements = [*import_targets(path, source), *((name, ()) for name in _dynamic_imports(source))]
    for module, names in statements:
        root = module.split(".")[0]
        if root not in PRIVATE_ROOTS:
            continue
        if module == "xdist" and all(name in PUBLIC_XDIST for name in names):
            continue  # ``import xdist`` or its exported names
        found.append(module)
    return found


def _sources() -> dict[str, tuple[str, str]]:
    """kvconform module -> (its path from the repository root, its source)."""
    return {module: (path.relative_to(ROOT).as_posix(), path.read_text())
            for module, path in source_modules().items()}


def test_kvconform_imports_only_public_or_listed_private_modules():
    offending = {(module, private) for module, (path, source) in _sources().items()
                 for private in private_imports(path, source) if (module, private) not in ALLOWED}
    assert not offending, "\n".join(
        f"{module} imports {private} ({PRIVATE_ROOTS[private.split('.')[0]]}); use a public API, or list it in "
        f"conformance/session/private_apis.py PRIVATE_USES with its feature test and public fallback"
        for module, private in sorted(offending))


def test_every_listed_private_import_is_still_made_and_says_its_fallback():
    sources = _sources()
    for use in PRIVATE_USES:
        assert use.user in sources, use
        assert use.feature_test.strip() and use.fallback.strip(), use
        if use.imports:
            path, source = sources[use.user]
            assert use.imports in private_imports(path, source), f"{use.name}: no longer imported, drop it"


@pytest.mark.parametrize(("source", "found"), [
    ("from _pytest.runner import runtestprotocol", ["_pytest.runner"]),
    ("def f():\n    import _pytest\n", ["_pytest"]),
    ("from xdist.scheduler import LoadScopeScheduling", ["xdist.scheduler"]),
    ("import xdist.remote", ["xdist.remote"]),
    ("from xdist import is_xdist_worker, scheduler", ["xdist"]),
    ("try:\n    from pytest_timeout import timeout_timer\nexcept ImportError:\n    pass\n", ["pytest_timeout"]),
    ("import importlib\nimportlib.import_module('_pytest.junitxml')", ["_pytest.junitxml"]),
    ("__import__('xdist.dsession')", ["xdist.dsession"]),
    ("import xdist\nfrom xdist import is_xdist_worker, get_xdist_worker_id\nimport pytest", []),
    ("from pytest import CallInfo, TestReport", []),
])
def test_the_check_finds_private_imports(source, found):
    assert private_imports("conformance/example.py", source) == found


def test_the_public_xdist_names_are_what_xdist_exports():
    xdist = pytest.importorskip("xdist", reason="pytest-xdist is not installed here")
    assert set(PUBLIC_XDIST) <= set(xdist.__all__), set(PUBLIC_XDIST) - set(xdist.__all__)
