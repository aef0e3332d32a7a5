"""Read run results: JUnit XML (any pytest run) and kvconform's own JSON, merged into one ``Results``.

JUnit is what every CI system keeps; the JSON (``--kvconform-json``) is richer
(run metadata, stale expectations). When both describe the same test, the JSON
wins. Any unreadable input is a ``ReportInputError`` naming the file and the problem.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path

from pydantic import ValidationError

from . import identity as ident
from .junit import JunitCase, JunitError, JunitSuite, parse_junit
from .model import (
    FORMAT,
    CaseResult,
    ConnectorCoverage,
    Expected,
    MissingLines,
    ModuleCoverage,
    Results,
    RunInfo,
    build,
    clip,
    failure_cause,
    first_line,
)


class ReportInputError(Exception):
    """An input that cannot be read as results; the message is one line."""


_JUNIT_COLLECT_ERROR = "collection failure"


def expected_from_properties(properties: dict[str, str]) -> Expected | None:
    """The expectation a test was decided by, from its ``kvconform.expect*`` properties."""
    values = {key: properties.get(name) for key, name in ident.EXPECT_PROPERTIES.items()}
    values["class"] = properties.get(ident.EXPECT_CLASS_PROPERTY)
    if not (values["expect"] and values["where"]):
        return None
    try:
        return Expected.model_validate(values)
    except ValidationError:
        return None


def junit_case_result(case: JunitCase, run: str = "", suite_platform: str | None = None) -> CaseResult:
    """One JUnit test case as a result: its identity (``kvconform.*`` properties, else its name), outcome, the
    first line of its message with its cause, and its details; the one reading of a case the report and the PR
    gate share."""
    identity = ident.from_test_name(case.name, case.properties, suite_platform)
    message, text = case.message, case.text
    collect_error = case.outcome == "error" and message == _JUNIT_COLLECT_ERROR
    cause, message = failure_cause(case.outcome, first_line(text if collect_error else message or text))
    return CaseResult(
        run=run, nodeid=case.nodeid,
        check="collection" if collect_error else identity.check, platform=identity.platform,
        backend=identity.backend, connector=identity.connector, variant=identity.variant, params=identity.params,
        outcome=case.outcome, duration=case.seconds,
        message=message, details=clip(text), expected=expected_from_properties(case.properties), cause=cause,
    )


def read_junit(path: Path, text: str) -> Results:
    try:
        document = parse_junit(text)
    except JunitError as exc:
        raise ReportInputError(f"{path}: {exc}") from None
    first = document.suites[0] if document.suites else JunitSuite({}, None, 0.0)
    recorded = {name: first.properties[ident.RUN_PROPERTY_PREFIX + name] for name in ident.RUN_FIELDS
                if ident.RUN_PROPERTY_PREFIX + name in first.properties}
    suite_platform = recorded.pop("platform", None)
    tests = [junit_case_result(case, "", suite_platform) for case in document.cases]
    known = Counter(t.platform for t in tests if t.platform != ident.UNKNOWN)
    platform = suite_platform or (known.most_common(1)[0][0] if known else ident.UNKNOWN)
    # A run is on one platform: a test whose id does not say (lint, collection errors) ran there too.
    tests = [t.model_copy(update={"platform": platform}) if t.platform == ident.UNKNOWN else t for t in tests]
    seconds = [suite.seconds for suite in document.suites]
    duration = None if None in seconds else sum(s for s in seconds if s is not None)
    run = RunInfo.model_validate({"id": "", "source": str(path), "platform": platform, "started": first.timestamp,
                                  "duration": duration, **recorded})
    return build([run], tests)


def read_json(path: Path, text: str) -> Results:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReportInputError(f"{path}: not valid JSON: {exc.msg} at line {exc.lineno}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ReportInputError(f"{path}: not kvconform results (expected a JSON object with "
                               f'"format": "{FORMAT}", as written by --kvconform-json)')
    try:
        results = Results.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(p) for p in first["loc"])
        raise ReportInputError(f"{path}: {key}: {first['msg']}") from None
    for run in results.runs:
        run.source = run.source or str(path)
    return results


def read(path: Path) -> tuple[Results, str]:
    """One input file and its kind (``junit`` or ``json``), told apart by content rather than by name."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ReportInputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ReportInputError(f"{path}: is a folder, expected a JUnit XML or kvconform JSON file") from None
    except UnicodeDecodeError:
        raise ReportInputError(f"{path}: not a text file (not UTF-8)") from None
    except OSError as exc:
        raise ReportInputError(f"{path}: cannot read: {exc.strerror}") from None
    start = text.lstrip()[:1]
    kinds = {"<": ("junit", read_junit), "{": ("json", read_json)}
    if start not in kinds:
        raise ReportInputError(f"{path}: empty file" if not start else
                               f"{path}: neither JUnit XML nor kvconform JSON (starts with {text.lstrip()[:20]!r})")
    kind, reader = kinds[start]
    return reader(path, text), kind


def _unique_id(platform: str, taken: set[str]) -> str:
    candidate, n = platform, 1
    while candidate in taken:
        n += 1
        candidate = f"{platform}#{n}"
    taken.add(candidate)
    return candidate


def _by_vllm_release(inputs: list[tuple[Results, str]]) -> list[tuple[Results, str]]:
    """Each platform run on several vLLM releases gets a column per release (``cpu (vLLM 0.33.0)``).

    Why: a 0.32.0 run and a 0.33.0 run of the same suite have the same node ids; keyed on
    platform alone they would share one column and the later would replace the earlier.
    A run that does not say its vLLM keeps the plain platform.
    """
    releases: dict[str, set[str]] = defaultdict(set)
    for results, _ in inputs:
        for run in results.runs:
            if run.vllm:
                releases[run.platform].add(run.vllm)
    split = {platform for platform, found in releases.items() if len(found) > 1}
    if not split:
        return inputs
    qualified = []
    for results, kind in inputs:
        column = {run.id: ident.platform_column(run.platform, run.vllm)
                  for run in results.runs if run.platform in split and run.vllm}
        last = column.get(results.runs[-1].id) if results.runs else None  # merge's fallback run for a stray id

        runs = [run.model_copy(update={"platform": column.get(run.id, run.platform)}) for run in results.runs]
        tests = [t.model_copy(update={"platform": _test_column(t, column, last)}) for t in results.tests]
        covered = [c.model_copy(update={"platform": _test_column(c, column, last)}) for c in results.coverage]
        qualified.append((results.model_copy(update={"runs": runs, "tests": tests, "coverage": covered}), kind))
    return qualified


def _test_column(test: CaseResult | ConnectorCoverage, column: dict[str, str], last: str | None) -> str:
    """A test's (or a connector's coverage's) column: its run's, or ``last`` for a stray id, unless that column is
    another platform's."""
    found = column.get(test.run, last)
    return found if found and ident.column_platform(found) == test.platform else test.platform


def merge(inputs: list[tuple[Results, str]]) -> Results:
    """One result per (platform, node id): JSON beats JUnit, and among equals the later input wins.

    A run all of whose tests were superseded (the JUnit twin of a JSON file) is dropped.
    A platform run on several vLLM releases counts as one platform per release (``_by_vllm_release``).
    """
    runs: list[RunInfo] = []
    chosen: dict[tuple[str, str], tuple[bool, CaseResult]] = {}
    covered: dict[tuple[str, str], ConnectorCoverage] = {}
    taken: set[str] = set()
    had_tests: set[str] = set()
    for results, kind in _by_vllm_release(inputs):
        renamed = {run.id: _unique_id(run.platform, taken) for run in results.runs}
        runs += [run.model_copy(update={"id": renamed[run.id]}) for run in results.runs]
        fallback = runs[-1].id if runs else ""
        for entry in results.coverage:
            entry = entry.model_copy(update={"run": renamed.get(entry.run, fallback)})
            key = (entry.platform, entry.connector)
            covered[key] = merge_coverage(covered[key], entry) if key in covered else entry
        preferred = kind == "json"
        for test in results.tests:
            test = test.model_copy(update={"run": renamed.get(test.run, fallback)})
            had_tests.add(test.run)
            key = (test.platform, test.nodeid)
            if key in chosen and chosen[key][0] and not preferred:
                continue
            chosen[key] = (preferred, test)
    tests = [test for _, test in chosen.values()]
    used = {t.run for t in tests}
    kept = [r for r in runs if r.id in used or r.id not in had_tests]
    # number the runs that remain, so a platform's only run is plain "cpu", not "cpu#2" after its JUnit twin went
    final: dict[str, str] = {}
    taken = set()
    for run in kept:
        final[run.id] = _unique_id(run.platform, taken)
    return build([r.model_copy(update={"id": final[r.id]}) for r in kept],
                 [t.model_copy(update={"run": final.get(t.run, t.run)}) for t in tests],
                 [c.model_copy(update={"run": final.get(c.run, c.run)}) for c in covered.values()])


def _merge_module(first: ModuleCoverage, second: ModuleCoverage) -> ModuleCoverage:
    """One module measured in two runs: a line or branch is missing where neither run ran it. Where the two
    disagree on the module's size (another version of the file), the later run's figures stand."""
    if (first.statements, first.branches) != (second.statements, second.branches):
        return second
    lines = first.missing_lines() & second.missing_lines()
    missing = [MissingLines(function=g.function, lines=[n for n in g.lines if n in lines]) for g in second.missing]
    branches = [arc for arc in second.missing_branches if arc in set(first.missing_branches)]
    return second.model_copy(update={
        "own": first.own or second.own, "covered_statements": second.statements - len(lines),
        "covered_branches": second.branches - len(branches), "missing": [g for g in missing if g.lines],
        "missing_branches": branches})


def merge_coverage(first: ConnectorCoverage, second: ConnectorCoverage) -> ConnectorCoverage:
    """A connector's coverage on one platform from two runs (two inputs, or a run split across machines)."""
    modules = {m.path: m for m in first.modules}
    for module in second.modules:
        modules[module.path] = _merge_module(modules[module.path], module) if module.path in modules else module
    return second.model_copy(update={"modules": sorted(modules.values(), key=lambda m: (not m.own, m.path))})


def read_all(paths: Iterable[str | Path]) -> Results:
    return merge([read(Path(p)) for p in paths])
