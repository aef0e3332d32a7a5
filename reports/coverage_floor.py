"""The coverage floor: what the suite reaches of each CPU connector today, so that it cannot silently fall.

``kvconform report RESULTS --coverage-floor FILE`` compares a run's coverage (``--kvconform-coverage``)
with FILE (``conformance/coverage/floor.yaml``): per connector and own module, coverage.py's percentage
with branches, less ``tolerance`` points for the runs' nondeterminism (a background thread's last lines
can land in the next test's connector). Lines no CPU run can reach (CUDA-only branches, GPU kernels) are
listed in ``unreachable_on_cpu`` with their reason and left out of the count, statements and branches
from or into them alike; lines a CPU run could reach but the suite does not drive are listed in
``not_reached`` with why, and counted as missed; a listed range a run ran all of fails the check (its
explanation is out of date). ``goal`` names the modules held to a percentage of what a
CPU run can reach (a project test checks their floors). A floor is measured on one vLLM release: another
release's files differ line for line, so there the check says so and passes. ``--update-coverage-floor``
rewrites FILE's figures from the run, keeping its tolerance, goal and explained lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from . import identity as ident
from .model import ConnectorCoverage, ModuleCoverage, Results, percent

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


class FloorError(Exception):
    """A floor file that cannot be read; the message is one line that names the file."""


class ExplainedLines(BaseModel):
    """Lines of a module, and why no run of the suite on this platform reaches them."""

    model_config = ConfigDict(extra="forbid")

    lines: str  # "120-140" or "97"
    reason: str = Field(min_length=1)

    @field_validator("lines", mode="before")
    @classmethod
    def _range(cls, value: object) -> str:
        text = str(value).replace(" ", "")
        found = _RANGE.match(text)
        if not found or (found.group(2) and int(found.group(2)) < int(found.group(1))):
            raise ValueError(f"{value!r} is not a line or a range of lines (120 or 120-140)")
        return text

    def span(self) -> range:
        first, _, last = self.lines.partition("-")
        return range(int(first), int(last or first) + 1)


class Goal(BaseModel):
    """The modules held to ``percent`` of what a run on the floor's platform can reach."""

    model_config = ConfigDict(extra="forbid")

    percent: float = Field(ge=0, le=100)
    connectors: dict[str, list[str]] = Field(default_factory=dict)  # connector -> its own module paths


class Floor(BaseModel):
    """``floor.yaml``: connector -> own module path -> the lowest percentage a run may show."""

    model_config = ConfigDict(extra="forbid")

    platform: str = "cpu"
    vllm: str  # the release the figures were measured on
    tolerance: float = Field(default=1.0, ge=0)  # percentage points a run may fall short by
    connectors: dict[str, dict[str, float]] = Field(default_factory=dict)
    goal: Goal | None = None
    unreachable_on_cpu: dict[str, list[ExplainedLines]] = Field(default_factory=dict)  # module path -> its lines
    not_reached: dict[str, list[ExplainedLines]] = Field(default_factory=dict)  # reachable, not driven: counted

    def unreachable_lines(self, path: str) -> set[int]:
        return {line for entry in self.unreachable_on_cpu.get(path, []) for line in entry.span()}

    def explanations(self, path: str) -> list[tuple[str, ExplainedLines]]:
        """``path``'s explained lines, each with what it is ("unreachable on cpu" or "not reached"), in line
        order."""
        found = [(f"unreachable on {self.platform}", e) for e in self.unreachable_on_cpu.get(path, [])]
        found += [("not reached", e) for e in self.not_reached.get(path, [])]
        return sorted(found, key=lambda pair: pair[1].span().start)

    def explained(self, path: str) -> list[tuple[str, str, str]]:
        """What ``kvconform report --uncovered`` prints under ``path``: (what, lines, why) per explained range."""
        return [(kind, entry.lines, entry.reason) for kind, entry in self.explanations(path)]


def load_floor(path: Path) -> Floor:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FloorError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise FloorError(f"{path}: cannot read: {exc}") from None
    except yaml.YAMLError as exc:
        raise FloorError(f"{path}: not valid YAML: {str(exc).splitlines()[0]}") from None
    try:
        return Floor.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(p) for p in first["loc"]) or "(top)"
        raise FloorError(f"{path}: {key}: {first['msg']}") from None


def counted_percent(module: ModuleCoverage, unreachable: set[int]) -> float:
    """``module``'s percentage without the ``unreachable`` lines: their statements, and the branches from or into
    them, leave both the count and the total (those that ran, if any did, stay counted as run)."""
    left_out = module.missing_lines() & unreachable
    branches_out = [arc for arc in module.missing_branches if arc[0] in unreachable or arc[1] in unreachable]
    return percent(module.covered_statements + module.covered_branches,
                   module.statements - len(left_out) + module.branches - len(branches_out))


def ran_entirely(module: ModuleCoverage, span: range) -> bool:
    """Whether ``module``'s run missed nothing in ``span``: no statement there, no branch from or into it."""
    if module.missing_lines() & set(span):
        return False
    return not any(arc[0] in span or arc[1] in span for arc in module.missing_branches)


@dataclass
class FloorCheck:
    """What a run's coverage says against a floor: one line per module below it, one per explained range a
    connector's tests ran all of (its explanation is out of date), and notes."""

    below: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def exit_status(self) -> int:
        return 1 if self.below or self.stale else 0


def _on_platform(results: Results, platform: str) -> dict[str, ConnectorCoverage]:
    return {c.connector: c for c in results.coverage if ident.column_platform(c.platform) == platform}


def _releases(results: Results, platform: str) -> set[str]:
    return {run.vllm for run in results.runs if ident.column_platform(run.platform) == platform and run.vllm}


def check_floor(results: Results, floor: Floor, source: str = "the floor") -> FloorCheck:
    """Every module of the floor whose coverage in ``results`` fell more than the tolerance below it."""
    check = FloorCheck()
    releases = _releases(results, floor.platform)
    if floor.vllm not in releases:
        check.notes.append(f"{source} was measured on vLLM {floor.vllm}; these results are from "
                           f"{', '.join(sorted(releases)) or 'an unknown vLLM'} on {floor.platform}: not checked")
        return check
    measured = _on_platform(results, floor.platform)
    if not measured:
        check.below.append(f"no coverage for {floor.platform} in these results: run the suite with "
                           f"--kvconform-coverage and --kvconform-json PATH")
        return check
    for connector, modules in floor.connectors.items():
        entry = measured.get(connector)
        if entry is None:
            check.below.append(f"{connector}: no coverage in these results (none of its tests ran measured code); "
                               f"{source} expects {len(modules)} module(s)")
            continue
        found = {m.path: m for m in entry.modules}
        for path, lowest in modules.items():
            module = found.get(path)
            now = counted_percent(module, floor.unreachable_lines(path)) if module is not None else 0.0
            if now < lowest - floor.tolerance:
                check.below.append(f"{connector}: {path}: {now:.1f}%, below its floor {lowest:.1f}% "
                                   f"(tolerance {floor.tolerance:g} points; {source})")
    check.stale = _stale_explanations(measured, floor, source)
    return check


def _stale_explanations(measured: dict[str, ConnectorCoverage], floor: Floor, source: str) -> list[str]:
    """One line per explained range that some connector's tests ran all of: an explanation of lines the suite
    does reach, which would hide a fall there (``unreachable_on_cpu``) or mislead a reader (``not_reached``)."""
    stale = []
    for path in sorted(set(floor.unreachable_on_cpu) | set(floor.not_reached)):
        runs = {name: m for name, entry in sorted(measured.items()) for m in entry.modules if m.path == path}
        for kind, entry in floor.explanations(path):
            ran = [name for name, module in runs.items() if ran_entirely(module, entry.span())]
            if ran:
                what = f"lines {entry.lines} are" if "-" in entry.lines else f"line {entry.lines} is"
                stale.append(f"{path}: {what} listed as {kind}, but {ran[0]}'s tests ran all of it (statements "
                             f"and branches): correct or remove the entry ({source})")
    return stale


FLOOR_HEADER = """\
# The connector coverage floor (docs/coverage.md): per in-tree connector the CPU suite runs, and per own module,
# the percentage of statements and branches the strict suite ran (coverage.py, branch measurement) when this
# file was last written, without the unreachable_on_cpu lines. make test fails when a run falls more than
# `tolerance` points below a figure (kvconform report RESULTS --coverage-floor FILE); after raising coverage,
# rewrite the figures with --update-coverage-floor. Modules the suite never reaches (0%) are left out, and so are
# connectors whose only tests that ran were lint. `goal` holds modules to a percentage of what a CPU run can
# reach (tests/coverage/test_floor_file.py); `not_reached` says why the suite misses the lines it misses there.
"""


def _exercised(results: Results, platform: str) -> set[str]:
    """Connectors with a test beyond lint that ran on ``platform``: the others' figures are what importing their
    modules ran, which lands in whichever connector's test imported them first."""
    return {t.connector for t in results.tests if ident.column_platform(t.platform) == platform
            and t.check != "lint" and t.outcome != "skipped"}


def updated_floor(results: Results, floor: Floor) -> Floor:
    """``floor`` with this run's figures: every own module of every connector exercised on its platform, from the
    run's vLLM; its tolerance, goal and explained lines kept."""
    releases = sorted(_releases(results, floor.platform))
    exercised = _exercised(results, floor.platform)
    connectors: dict[str, dict[str, float]] = {}
    for name, entry in sorted(_on_platform(results, floor.platform).items()):
        if name not in exercised:
            continue
        figures = {m.path: round(counted_percent(m, floor.unreachable_lines(m.path)), 1) for m in entry.own
                   if m.statements}
        figures = {path: value for path, value in figures.items() if value > 0}
        if figures:
            connectors[name] = figures
    return floor.model_copy(update={"vllm": releases[-1] if releases else floor.vllm, "connectors": connectors})


def floor_text(floor: Floor) -> str:
    body = floor.model_dump(mode="json")
    text: str = yaml.safe_dump(body, sort_keys=False, width=120)
    return FLOOR_HEADER + text
