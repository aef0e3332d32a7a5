"""Connector coverage measured for real with coverage.py, on a small connector package of the test's own.

No vLLM: the package stands for a third-party connector (``Scope``'s ``module:Class`` path), measured in
one process and combined in another Coverage object as the xdist controller does.
"""

from __future__ import annotations

import importlib
import sys
import textwrap
import uuid

import pytest

from kvconform.conformance.coverage import measure
from kvconform.conformance.coverage.scope import Scope
from kvconform.reports.model import MODULE_LEVEL

CONNECTOR = '''\
LIMIT = 4


class ToyConnector:
    def save(self, blocks):
        if blocks > LIMIT:
            return "too many"
        return "saved"

    def load(self, blocks):
        total = 0
        for block in range(blocks):
            total += block
        return total
'''
HELPERS = "def unused():\n    return 1\n"


@pytest.fixture
def forget_modules():
    """Drop the toy packages' modules from ``sys.modules`` after the test (each test's package has its own name)."""
    names: list[str] = []
    yield names
    for module in [m for m in sys.modules if m.split(".")[0] in names]:
        del sys.modules[module]


def _package(tmp_path, monkeypatch, forget):
    name = f"toyconn_{uuid.uuid4().hex[:8]}"
    package = tmp_path / name
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "connector.py").write_text(textwrap.dedent(CONNECTOR))
    (package / "helpers.py").write_text(HELPERS)
    monkeypatch.syspath_prepend(str(tmp_path))
    forget.append(name)
    return name, package.resolve()


def _measured(scope, steps):
    """Run ``steps`` (context, callable) under a fresh measurement; the data as the controller combines it."""
    measuring = measure.start(scope)
    try:
        for context, step in steps:
            measuring.switch_context(context)
            step()
        measuring.switch_context(measure.NO_CONNECTOR)
    finally:
        measuring.stop()
    controller = measure.new(scope)
    measure.combine(controller, [measuring.get_data().dumps()])
    return controller


def test_a_connectors_package_is_its_own_and_its_unrun_lines_grouped_by_function(tmp_path, monkeypatch,
                                                                                forget_modules):
    name, package = _package(tmp_path, monkeypatch, forget_modules)
    scope = Scope({"ToyConnector": f"{name}.connector"})
    assert scope.include_patterns()[-1] == f"{package}/**/*.py"  # after vLLM's folders, where vLLM is installed

    def exercise():
        importlib.import_module(f"{name}.connector").ToyConnector().save(1)

    [entry] = measure.summarize(_measured(scope, [("ToyConnector", exercise)]), scope, "cpu", "cpu")
    assert (entry.connector, entry.platform) == ("ToyConnector", "cpu")
    modules = {m.path: m for m in entry.modules}
    assert set(modules) == {f"{name}/connector.py", f"{name}/helpers.py"}  # helpers: own, never imported
    assert all(m.own for m in modules.values())
    connector = modules[f"{name}/connector.py"]
    assert {g.function: g.lines for g in connector.missing} == {"ToyConnector.save": [7],
                                                               "ToyConnector.load": [11, 12, 13, 14]}
    assert connector.missing_branches == [(6, 7), (12, 13), (12, 14)]
    assert (connector.statements, connector.covered_statements) == (11, 6)
    assert (connector.branches, connector.covered_branches) == (4, 1)
    assert modules[f"{name}/helpers.py"].covered_statements == 0
    assert 0 < entry.percent < 100


def test_import_time_lines_count_for_every_connector_whichever_test_imported_it(tmp_path, monkeypatch,
                                                                               forget_modules):
    name, _ = _package(tmp_path, monkeypatch, forget_modules)
    scope = Scope({"ToyConnector": f"{name}.connector", "Other": f"{name}.helpers"})
    module = {}

    def first_import():  # another connector's test imports the module first
        module["m"] = importlib.import_module(f"{name}.connector")

    def calls():
        module["m"].ToyConnector().load(2)

    summary = measure.summarize(_measured(scope, [("Other", first_import), ("ToyConnector", calls)]), scope,
                                "cpu", "cpu")
    toy = next(c for c in summary if c.connector == "ToyConnector")
    connector = next(m for m in toy.modules if m.path == f"{name}/connector.py")
    missing = {g.function: g.lines for g in connector.missing}
    assert MODULE_LEVEL not in missing  # LIMIT, the class and def lines ran when the module was imported
    assert missing == {"ToyConnector.save": [6, 7, 8]}


def test_a_connector_whose_tests_ran_no_measured_code_has_no_entry(tmp_path, monkeypatch, forget_modules):
    name, _ = _package(tmp_path, monkeypatch, forget_modules)
    scope = Scope({"ToyConnector": f"{name}.connector"})
    assert measure.summarize(_measured(scope, [("ToyConnector", lambda: None)]), scope, "cpu", "cpu") == []


def test_missing_lines_group_by_the_innermost_function(tmp_path):
    source = tmp_path / "nested.py"
    source.write_text("X = 1\n\nclass A:\n    @staticmethod\n    def f():\n        def g():\n            return 1\n"
                      "        return g\n")
    groups = measure.group_by_function(source, [1, 4, 6, 7, 8])
    assert [(g.function, g.lines) for g in groups] == [(MODULE_LEVEL, [1]), ("A.f", [4, 6, 8]), ("A.f.g", [7])]
    assert measure.import_time(source, [1, 4, 5, 6, 7, 8]) == {1, 4, 5}


def test_display_path_starts_at_the_top_package(tmp_path):
    (tmp_path / "top" / "sub").mkdir(parents=True)
    for init in (tmp_path / "top" / "__init__.py", tmp_path / "top" / "sub" / "__init__.py"):
        init.write_text("")
    assert measure.display_path(tmp_path / "top" / "sub" / "mod.py") == "top/sub/mod.py"
    assert measure.display_path(tmp_path / "alone.py") == "alone.py"
