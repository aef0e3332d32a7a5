"""docs/self-tests.md names every broken connector module, so a reader finds what each breaks and what catches it."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "self-tests.md"


def unnamed_modules(doc: str, modules: list[str]) -> list[str]:
    """The modules the doc does not name as ``module:`` (a row's ``module:Class``) or ``module.py``."""
    return [module for module in modules if f"{module}:" not in doc and f"{module}.py" not in doc]


def test_every_broken_connector_module_is_in_the_doc():
    modules = sorted(path.stem for path in (ROOT / "tests").rglob("*_broken.py"))
    assert {"dict_broken", "workload_broken", "misbehaving_broken", "unconstructible_broken"} <= set(modules)
    assert unnamed_modules(DOC.read_text(), modules) == []


def test_a_module_left_out_is_named():
    doc = "| bug | `example_broken:OffByOne` | roundtrip |\nsee `tests/bench/silent_connector.py`\n"
    assert unnamed_modules(doc, ["example_broken", "silent_connector", "multi_broken"]) == ["multi_broken"]
