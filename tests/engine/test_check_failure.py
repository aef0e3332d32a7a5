"""Every check's failure class is a CheckFailure, and nothing else in the suite derives from AssertionError."""

from __future__ import annotations

import ast
from pathlib import Path

from kvconform.conformance.engine.check_failure import CheckFailure

CONFORMANCE = Path(__file__).resolve().parents[2] / "conformance"


def _classes_on_assertion_error() -> dict[str, str]:
    """class name -> file, for every class in conformance/ whose base is written ``AssertionError``."""
    found = {}
    for path in CONFORMANCE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(getattr(b, "id", None) == "AssertionError" for b in node.bases):
                found[node.name] = str(path.relative_to(CONFORMANCE))
    return found


def test_only_the_base_derives_from_assertion_error():
    assert _classes_on_assertion_error() == {"CheckFailure": "engine/check_failure.py"}


def test_the_check_failures_are_check_failures():
    from kvconform.conformance.checks.contract import ContractViolation
    from kvconform.conformance.checks.fill import FillFailure
    from kvconform.conformance.checks.roundtrip import RoundTripFailure
    from kvconform.conformance.engine.device_guard import DeviceMismatch
    from kvconform.conformance.workload.invariants import WorkloadFailure

    for cls in (ContractViolation, FillFailure, RoundTripFailure, DeviceMismatch, WorkloadFailure):
        assert issubclass(cls, CheckFailure) and issubclass(cls, AssertionError), cls
