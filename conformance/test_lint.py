"""The lint check: nothing a connector runs inside vLLM hard-codes a device.

Static, so it runs the same on every platform and needs none of the connector's
optional packages: a connector written for CUDA is checked on a CPU runner. It
reads every file of vLLM that loading the connector executes (its own module or
package, and the helpers it imports: ``conformance/lint/closure.py``), because a
connector's device assumption often sits in a helper (SimpleCPUOffload's CUDA
stream call is in ``vllm/v1/simple_kv_offload/worker.py``). A third-party
connector outside vLLM is read as its own module or package.
Error-severity findings fail the test, each named by file and line; warnings and
info are listed only when it fails.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvconform.conformance.lint import lint_files, python_files
from kvconform.conformance.lint.closure import connector_closure
from kvconform.conformance.lint.findings import Finding

pytestmark = pytest.mark.check("lint")


def lint_target(source: Path) -> Path:
    """What to lint for a connector module outside vLLM: a package connector is its whole package."""
    return source.parent if source.name == "__init__.py" else source


def connector_findings(connector) -> tuple[str, list[Finding]]:
    """(what was read, in words; the findings) for a connector: its closure in vLLM, else its own source."""
    if not connector.is_third_party:
        from kvconform.conformance.selection import registry_modules

        closure = connector_closure(registry_modules()[connector.name][0])
        if closure is not None:
            return f"the {len(closure.files)} file(s) of vLLM it runs", closure.lint()
    source = connector.source_file()
    if source is None:
        pytest.fail(f"{connector.name}: the source of its module cannot be found, so it cannot be linted")
    return str(lint_target(source)), lint_files(python_files([lint_target(source)]))


def test_lint(platform, connector):
    if not connector.profile.runs("lint"):
        pytest.skip(f"{connector.name}: the lint check does not apply ({connector.profile.reason})")
    where, findings = connector_findings(connector)
    errors = [f for f in findings if f.severity == "error"]
    if errors:
        # the first line (a report cell's message) names each error's file and line
        places = ", ".join(f"{f.path}:{f.line} {f.rule}" for f in errors)
        listing = "\n".join(f.render() for f in findings)
        pytest.fail(f"{connector.name}: {len(errors)} lint error(s) in {where}: {places}\n{listing}",
                    pytrace=False)
