"""The gate's run, test by test: each JUnit case read as ``kvconform report`` reads it, and the connector it ran.

The reports package reads the JUnit file (``reports/junit.py``) and turns each case
into a result (``readers.junit_case_result``: check, connector, outcome, the message's
first line and its cause). The gate adds what only it knows: which of the selected
connectors a test ran, and the test's id as the JUnit file spells it, which the
verdict lines print and the run over the change's base selects by.

A test's connector is the suite's own label (its ``kvconform.connector`` property,
the factory name, also for a profile variant); without one it is read off the test
id against the ids the selected connectors run under (``identity.connector_in_nodeid``),
so a variant's id holding a dash (``NixlConnector@device-buffer``) is read whole.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kvconform.errors import one_line
from kvconform.reports.identity import connector_in_nodeid
from kvconform.reports.junit import JunitError, read_junit_file
from kvconform.reports.model import CaseResult
from kvconform.reports.readers import junit_case_result

MESSAGE_LIMIT = 240  # a verdict line, not a traceback: the run's own output has the rest


@dataclass(frozen=True)
class GateCase:
    """One test of the gate's run: the report's result, its JUnit id, and the selected connector it ran."""

    junit_id: str  # ``classname::name``, as the JUnit file spells the test
    connector: str | None  # one of the selected connectors; None for a test of none of them
    result: CaseResult

    @property
    def outcome(self) -> str:
        return self.result.outcome

    @property
    def check(self) -> str:
        return self.result.check

    @property
    def message(self) -> str:
        """The message as a verdict line quotes it: the report's first line (led by its cause), as one line."""
        return one_line(self.result.shown_message, MESSAGE_LIMIT)


def connector_ids(connectors: Sequence[str], platform: str) -> dict[str, str]:
    """The id each selected connector's tests run under on ``platform`` -> that connector: its name, and each of
    its profile's variants there (``NixlConnector@device-buffer``), as the suite parametrizes them."""
    from kvconform.conformance.connectors.profiles import profile_for
    from kvconform.conformance.connectors.selection import ConnectorParam, with_variants

    params = with_variants([ConnectorParam(name, name, None, profile_for(name)) for name in connectors], platform)
    return {param.id: param.name for param in params}


def connector_of(name: str, result: CaseResult, ids: dict[str, str]) -> str | None:
    """The selected connector the test ``name`` ran (``ids``: ``connector_ids``), or None."""
    in_id = connector_in_nodeid(name, ids)
    if in_id is not None:
        return ids[in_id]
    return result.connector if result.connector in ids.values() else None


def read_cannot_drive(results_json: Path) -> list[str]:
    """What of the tested vLLM kvconform cannot drive, a line each, as the suite's session found it before any test
    (its results.json's ``runs[].vllm_mismatches``; empty when it has none or cannot be read)."""
    try:
        data = json.loads(results_json.read_text())
    except (OSError, ValueError):
        return []
    runs = data.get("runs", []) if isinstance(data, dict) else []
    lines = [line for run in runs if isinstance(run, dict) for line in run.get("vllm_mismatches", [])
             if isinstance(line, str)]
    return list(dict.fromkeys(lines))


def read_results(path: Path, connectors: Sequence[str], platform: str) -> list[GateCase] | None:
    """Each test of the run's JUnit file, in its order; None when the file is missing or unreadable."""
    try:
        document = read_junit_file(path)
    except (OSError, JunitError):
        return None
    ids = connector_ids(connectors, platform)
    cases = []
    for case in document.cases:
        result = junit_case_result(case)
        cases.append(GateCase(case.junit_id, connector_of(case.name, result, ids), result))
    return cases
