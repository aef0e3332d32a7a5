"""The lint check: each connector's source has no hard-coded device assumption.

Static, so it runs the same on every platform and needs none of the connector's
optional packages: a connector written for CUDA is checked on a CPU runner.
Error-severity findings fail the test; warnings and info are listed only when it fails.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.lint import lint_files, python_files

pytestmark = pytest.mark.check("lint")


def lint_target(source: Path) -> Path:
    """What to lint for a connector module: a package connector is its whole package."""
    return source.parent if source.name == "__init__.py" else source


def test_lint(platform, connector):
    if not connector.profile.runs("lint"):
        pytest.skip(f"{connector.name}: the lint check does not apply ({connector.profile.reason})")
    source = connector.source_file()
    if source is None:
        pytest.fail(f"{connector.name}: the source of its module cannot be found, so it cannot be linted")
    findings = lint_files(python_files([lint_target(source)]))
    errors = [f for f in findings if f.severity == "error"]
    if errors:
        listing = "\n".join(f.render() for f in findings)
        pytest.fail(f"{connector.name}: {len(errors)} lint error(s) in {lint_target(source)}:\n{listing}",
                    pytrace=False)
