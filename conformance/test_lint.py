"""The lint check: nothing a connector runs inside vLLM hard-codes a device.

Static, so it runs the same on every platform and needs none of the connector's
optional packages: a connector written for CUDA is checked on a CPU runner. It
reads every file of vLLM that loading the connector executes (its own module or
package, and the helpers it imports: ``conformance/lint/closure.py``), because a
connector's device assumption often sits in a helper (SimpleCPUOffload's CUDA
stream call is in ``vllm/v1/simple_kv_offload/worker.py``). A connector named by
module path is read the same way within its own top-level package: its module and
every module of that package it reaches by import (``conformance/lint/connector_package.py``).
Error-severity findings fail the test, each named by file and line for the reader;
warnings and info are listed only when it fails. The failure also carries each
error's rule, file, enclosing function and call, without its line (``lint_failure``):
what an expectation pins (``findings:``), so an edit above a finding, or the same
code at other lines in another vLLM release, is the same finding.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml

from kvconform.conformance.lint import python_files
from kvconform.conformance.lint.closure import Closure
from kvconform.conformance.lint.connector_package import closure_words, module_closure
from kvconform.conformance.lint.findings import Finding

if TYPE_CHECKING:
    from collections.abc import Callable

    from kvconform.conformance.connectors.selection import ConnectorParam
    from kvconform.platforms.spec import PlatformSpec

pytestmark = pytest.mark.check("lint")


def lint_failure(message: str, errors: list[Finding],
                 unfound: Callable[[dict[str, str]], str] | None = None) -> BaseException:
    """pytest's ``Failed`` for ``message`` (shown as ``pytest.fail`` shows it), carrying ``findings``: each
    error's ``Finding.key()``, what an expectation's ``findings:`` is compared with; and ``unfound``
    (``Closure.unfound``), which says of an expected finding not found why it is not."""
    failure = pytest.fail.Exception(message, pytrace=False)
    failure.findings = tuple(f.key() for f in errors)  # type: ignore[attr-defined]
    failure.unfound = unfound  # type: ignore[attr-defined]
    return failure


def findings_yaml(errors: list[Finding]) -> list[str]:
    """The errors as an expectation's ``findings:`` list, one flow mapping a line, ready to paste."""
    counts = Counter(tuple(f.key().items()) for f in errors)
    entries = [dict(key, **({"count": n} if n > 1 else {})) for key, n in sorted(counts.items())]
    return [f"  - {yaml.safe_dump(e, default_flow_style=True, sort_keys=False, width=1 << 16).strip()}"
            for e in entries]


def lint_target(source: Path) -> Path:
    """What to lint for a connector module outside vLLM: a package connector is its whole package."""
    return source.parent if source.name == "__init__.py" else source


def connector_findings(connector: ConnectorParam) -> tuple[str, Closure]:
    """(what was read, in words; the code read) for a connector: what its module runs in vLLM (a registered
    connector) or in its own package (one named by module path), else its own source."""
    from kvconform.conformance.connectors.selection import registry_modules

    module = connector.module_path or registry_modules()[connector.name][0]
    closure = module_closure(module)
    if closure is not None:
        return closure_words(module, closure), closure
    source = connector.source_file()
    if source is None:
        pytest.fail(f"{connector.name}: the source of its module cannot be found, so it cannot be linted")
    return str(lint_target(source)), Closure(Path(), tuple(map(str, python_files([lint_target(source)]))))


def test_lint(platform: PlatformSpec, connector: ConnectorParam) -> None:
    if not connector.profile.runs("lint"):
        pytest.skip(f"{connector.name}: the lint check does not apply ({connector.profile.reason})")
    where, closure = connector_findings(connector)
    findings = closure.lint()
    errors = [f for f in findings if f.severity == "error"]
    if errors:
        # the first line (a report cell's message) names each error's file and line
        places = ", ".join(f"{f.path}:{f.line} {f.rule}" for f in errors)
        listing = "\n".join(f.render() for f in findings)
        pinned = "\n".join(findings_yaml(errors))
        raise lint_failure(f"{connector.name}: {len(errors)} lint error(s) in {where}: {places}\n{listing}\n"
                         f"what an expectation pins (findings:, no lines):\n{pinned}", errors, closure.unfound)
