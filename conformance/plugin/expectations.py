"""Expected results as data: the conformance tests known to fail, or to be skipped, per platform.

Known findings live in ``conformance/expectations/*.yaml`` with a reason, a
specific link and a class (bug, policy, hazard), so a red cell is always news.
An xfail entry pins the exception and the message it expects: any other failure
(a harness regression, a setup error) fails the test and names the entry. The
xfails are strict: when a bug is fixed the test passes, the run fails, and the
message names the entry to remove. An entry that matches no test of the whole
suite's collection is stale and is reported, so the files cannot silently rot
(``--kvconform-strict`` makes that fail the run); a narrowed run judges nothing.
The format is described in ``conformance/expectations/README.md``.

Entries survive vLLM versions: a ``vllm:`` condition is a PEP 440 range
(``">=0.33"``), which the dev builds after a release meet, and a lint entry pins
its findings (rule, file, function, call), never their lines. On a vLLM that
kvconform's CI does not test (a dev build, a release candidate), a strict xfail
that passes may be a fix nobody has judged yet: it is reported as a note that
names the entry, and fails the run only under ``--kvconform-strict``.

Registered as a pytest plugin module; its state lives in ``config.stash``.
Under xdist the workers collect, so each sends the entries it used to the
controller through ``workeroutput``, and the controller reports what nobody used.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections import Counter
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest
import yaml
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from kvconform.reports import identity as ident

from ..connectors.profiles import load_yaml_model
from ..session.target import TARGET_KEY
from ..vllm_install.window import installed_status, installed_vllm

EXPECTATIONS_DIR = Path(__file__).resolve().parents[1] / "expectations"
SELECTORS = ("test", "connector", "check", "backend")
# What each finding is, so a reader knows whom it concerns (shown in every report).
FINDING_CLASSES = {
    "bug": "vLLM's documented contract, or its own behaviour, is broken",
    "policy": "kvconform asks more than vLLM documents (a stricter situation than vLLM's runner produces)",
    "hazard": "wrong in a situation the installed vLLM cannot produce (a latent bug)",
}
# What each kind of entry must say, so a known failure is never an unexplained one, and an expected
# failure is exactly that failure: the exception (``raises``) and its message (``match``) or, for the
# lint check, its findings (``findings``) are pinned. A tuple is alternatives: one of them at least.
REQUIRED = {"pass": (), "xfail": ("reason", "link", "class", "raises", ("match", "findings")), "skip": ("reason",)}
# Exception names too broad to pin one cause: any failure at all (or any check's) would match them.
TOO_BROAD = frozenset({"BaseException", "Exception", "builtins.BaseException", "builtins.Exception", "CheckFailure",
                       "kvconform.conformance.engine.check_failure.CheckFailure"})
_WORKER_KEY = "kvconform_expectations"

# A link points at one thing. On GitHub: an issue, a pull request, a commit, or source lines.
_GITHUB_SPECIFIC = re.compile(
    r"https://github\.com/[\w.-]+/[\w.-]+/(?:issues/\d+|pull/\d+|discussions/\d+|commit/[0-9a-f]{7,40}"
    r"|blob/[^/\s]+/\S+#L\d+(?:-L\d+)?)(?:[/?#]\S*)?")
_DOTTED_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


class ExpectationError(Exception):
    """A malformed expectations file; the message is ``file:line: key: message``."""


def vllm_specifiers(condition: str) -> SpecifierSet:
    """An entry's ``vllm:`` condition as PEP 440 specifiers; ValueError (one line) for anything else.

    A bare version (``"0.32.0"``) means that release (``==0.32.0``: its local builds such as
    ``0.32.0+cpu`` too); otherwise a specifier set (``">=0.33"``, ``">=0.31,<0.33"``, ``"==0.33.*"``).
    """
    text = condition.strip()
    try:
        return SpecifierSet(f"=={Version(text)}")
    except InvalidVersion:
        pass
    try:
        specifiers = SpecifierSet(text)
    except InvalidSpecifier:
        specifiers = SpecifierSet()
    if not specifiers:
        raise ValueError(f"{condition!r} is not a vLLM version or PEP 440 range: write an exact release "
                         f'("0.32.0") or a range (">=0.33", ">=0.31,<0.33", "==0.33.*")')
    return specifiers


def vllm_meets(condition: str, version: str) -> bool:
    """Whether the installed vLLM ``version`` meets a ``vllm:`` condition.

    Pre-releases and dev builds are admitted (pip refuses them unless asked): vLLM's CI
    builds every pull request as a dev build after the last release (``0.33.1.dev42+gabc1234``),
    and a bug present in 0.33.0 is expected there too, so ``">=0.33"`` holds on it. As PEP 440
    orders them, a release candidate comes before its release: 0.33.0rc1 is below ``">=0.33"``.
    """
    try:
        return vllm_specifiers(condition).contains(version, prereleases=True)
    except InvalidVersion:  # an unreadable installed version meets no condition
        return False


class LintFinding(BaseModel):
    """One finding a lint entry expects, by what it is (not where): the lint check's ``Finding.key()``."""

    model_config = ConfigDict(extra="forbid")
    rule: str  # KVC004
    file: str  # the file inside vLLM: vllm/v1/simple_kv_offload/worker.py
    function: str  # the enclosing definition, qualified: SimpleCPUOffloadWorker.register_kv_caches
    call: str  # what is called there, as source: torch.cuda.Stream
    count: int = Field(default=1, ge=1)  # how many such calls that function makes

    def key(self) -> tuple[str, str, str, str]:
        return self.rule, self.file, self.function, self.call


LINT_KEY = ("rule", "file", "function", "call")  # a lint finding's key, in LintFinding.key()'s order


def _finding_text(key: tuple[str, str, str, str], count: int) -> str:
    rule, file, function, call = key
    return f"{rule} {file} {function}: {call}" + (f" (x{count})" if count > 1 else "")


def findings_mismatch(expected: list[LintFinding], carried: Iterable[dict[str, str]] | None,
                      unfound: Callable[[dict[str, str]], str] | None = None) -> str | None:
    """Why the findings an error carries are not the entry's (as multisets); None when they are equal.

    ``unfound`` (the lint check's, carried with the findings) says of an expected finding not found
    whether the lint read its place and the code is gone, or the lint no longer reads it.
    """
    if carried is None:
        return "it carries no lint findings, and the entry expects findings"
    want = Counter({f.key(): f.count for f in expected})
    got = Counter((f["rule"], f["file"], f["function"], f["call"]) for f in carried)
    extra, missing = got - want, want - got
    if not extra and not missing:
        return None
    def why(key: tuple[str, str, str, str]) -> str:
        return f" ({unfound(dict(zip(LINT_KEY, key, strict=True)))})" if unfound and key in missing else ""

    parts = [f"{label}: {'; '.join(_finding_text(k, n) + why(k) for k, n in sorted(diff.items()))}"
             for label, diff in (("not in the entry", extra), ("expected but not found", missing)) if diff]
    return f"its lint findings differ from the entry's ({', '.join(parts)})"


def check_link(link: str) -> str:
    """``link`` when it names one issue, pull request or source line; ValueError for a listing page."""
    if not re.fullmatch(r"https?://[^\s/]+/\S+", link):
        raise ValueError("must be an http(s) URL of the issue, pull request or source line behind the finding")
    if re.match(r"https?://(www\.)?github\.com/", link) and not _GITHUB_SPECIFIC.fullmatch(link):
        raise ValueError(f"{link} is not specific: link one issue (.../issues/N), pull request (.../pull/N), "
                         f"commit or source line (.../blob/<ref>/<file>#L<n>), not a listing page")
    return link


def raised_as(error: BaseException, name: str) -> bool:
    """Whether ``error`` is an instance of the class called ``name`` (bare or module-qualified), as
    ``pytest.mark.xfail(raises=...)`` would say; by name, so an entry need not import the class."""
    return any(name in (cls.__name__, f"{cls.__module__}.{cls.__qualname__}") for cls in type(error).__mro__)


class Entry(BaseModel):
    """One expectation: which tests (all given selectors must match), and what to expect of them."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    test: str | None = None  # a node id or parametrize id, exact or with * and ? wildcards
    connector: str | None = None
    check: str | None = None
    backend: str | None = None
    expect: Literal["pass", "xfail", "skip"] = "pass"
    reason: str | None = None
    link: str | None = None
    finding_class: Literal["bug", "policy", "hazard"] | None = Field(default=None, alias="class")
    raises: str | None = None  # the exception class a failing test must raise (name or module.name)
    match: str | None = None  # a regex its message must contain (re.search), as pytest.raises(match=)
    # the lint check's findings, by rule, file, function and call: the set found must equal this one
    findings: list[LintFinding] | None = None
    # a condition, not a selector: the vLLM versions this entry holds on, a PEP 440 range (">=0.33",
    # ">=0.31,<0.33") or an exact release ("0.32.0"); absent: every version (vllm_meets).
    vllm: str | None = None

    def holds_on(self, vllm_version: str | None) -> bool:
        return self.vllm is None or (vllm_version is not None and vllm_meets(self.vllm, vllm_version))

    @field_validator("vllm")
    @classmethod
    def _is_vllm_condition(cls, condition: str | None) -> str | None:
        if condition is not None:
            vllm_specifiers(condition)
        return condition

    @field_validator("link")
    @classmethod
    def _is_specific_url(cls, link: str | None) -> str | None:
        return None if link is None else check_link(link)

    @field_validator("raises")
    @classmethod
    def _is_class_name(cls, name: str | None) -> str | None:
        if name is None:
            return None
        if not _DOTTED_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not an exception class name (e.g. KeyError, or module.ClassName)")
        if name in TOO_BROAD:
            raise ValueError(f"{name} matches any failure of its kind: name the exception class the finding raises")
        return name

    @field_validator("match")
    @classmethod
    def _is_regex(cls, pattern: str | None) -> str | None:
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"not a regular expression: {exc}") from None
        return pattern

    @model_validator(mode="after")
    def _complete(self) -> Entry:
        if not any(getattr(self, key) for key in SELECTORS):
            raise ValueError(f"an entry needs at least one of: {', '.join(SELECTORS)}")
        alternatives = (k if isinstance(k, tuple) else (k,) for k in REQUIRED[self.expect])
        missing = [keys[0] + "".join(f" (or {key})" for key in keys[1:]) for keys in alternatives
                   if not any(getattr(self, _FIELD_OF.get(key, key)) for key in keys)]
        if missing:
            raise ValueError(f"expect: {self.expect} needs {' and '.join(missing)}")
        return self

    def mismatch(self, when: str, error: BaseException) -> str | None:
        """Why ``error``, raised in test phase ``when``, is not the failure this entry expects; None if it is."""
        message = str(error)
        first = message.strip().splitlines()[0] if message.strip() else ""
        got = f"{type(error).__name__}: {first}" if first else type(error).__name__
        wanted = (f"{self.raises}" + (f" matching {self.match!r}" if self.match is not None else "")
                  + (f" with {sum(f.count for f in self.findings)} lint findings" if self.findings else ""))
        if when != "call":
            return f"it failed in {when}, not in the test itself ({got}); the entry expects {wanted} from the test"
        if self.raises is None or not raised_as(error, self.raises):  # an xfail entry always names one
            return f"it raised {got}; the entry expects {wanted}"
        if self.match is not None and not re.search(self.match, message):
            return f"its {type(error).__name__} message does not match {self.match!r}: {first!r}"
        if self.findings is not None:
            return findings_mismatch(self.findings, getattr(error, "findings", None), getattr(error, "unfound", None))
        return None


_FIELD_OF = {"class": "finding_class"}  # YAML key -> Entry field, where they differ


# Entries in a file for this "platform" hold on every platform (e.g. static lint findings).
ANY_PLATFORM = "any"


class ExpectationsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    platform: str
    expectations: list[dict[str, Any]] | None = None  # entries are validated one by one, for exact lines

    @field_validator("platform")
    @classmethod
    def _known_platform(cls, name: str) -> str:
        from kvconform.platforms import PLATFORMS

        if name not in PLATFORMS and name != ANY_PLATFORM:
            raise ValueError(f"unknown platform {name!r}; choose one of: {', '.join([*PLATFORMS, ANY_PLATFORM])}")
        return name


@dataclass(frozen=True)
class Expectation:
    """An entry where it was written: ``where`` is ``file:line``, what messages point the reader to."""

    entry: Entry
    platform: str
    where: str

    def matches(self, identity: ident.Identity, nodeid: str) -> bool:
        e = self.entry
        if e.test and not (ident.glob_match(nodeid, e.test) or ident.glob_match(identity.param_id, e.test)):
            return False
        fields = {"connector": identity.connector, "check": identity.check, "backend": identity.backend}
        return all(ident.glob_match(value, getattr(e, key)) for key, value in fields.items() if getattr(e, key))

    def selector(self) -> str:
        return " ".join(f"{key}={getattr(self.entry, key)}" for key in SELECTORS if getattr(self.entry, key))

    def mark(self) -> pytest.MarkDecorator | None:
        """pytest's strict xfail or skip; which failure an xfail accepts is checked in ``pytest_runtest_makereport``."""
        e = self.entry
        if e.expect == "xfail":
            return pytest.mark.xfail(reason=f"{e.finding_class}: {e.reason} ({e.link}; {self.where})", strict=True)
        if e.expect == "skip":
            return pytest.mark.skip(reason=f"{e.reason} ({self.where})")
        return None

    def properties(self) -> list[tuple[str, str]]:
        values: dict[str, str | None] = {"expect": self.entry.expect, "where": self.where,
                                         "reason": self.entry.reason, "link": self.entry.link}
        pairs = [(name, value) for key, name in ident.EXPECT_PROPERTIES.items() if (value := values[key])]
        if self.entry.finding_class:
            pairs.append((ident.EXPECT_CLASS_PROPERTY, self.entry.finding_class))
        return pairs


# ---------------------------------------------------------------- loading


def _display(path: Path) -> str:
    """The path as messages show it: relative to the working directory when inside it."""
    try:
        return os.path.relpath(path) if path.resolve().is_relative_to(Path.cwd().resolve()) else str(path)
    except (OSError, ValueError):
        return str(path)


def _entry_nodes(text: str) -> list[yaml.Node]:
    root = yaml.compose(text)
    if isinstance(root, yaml.MappingNode):
        for key, value in root.value:
            if key.value == "expectations" and isinstance(value, yaml.SequenceNode):
                nodes: list[yaml.Node] = value.value
                return nodes
    return []


def _line_of_key(node: yaml.Node, key: object) -> int:
    if isinstance(node, yaml.MappingNode):
        for k, _ in node.value:
            if k.value == key:
                line: int = k.start_mark.line + 1
                return line
    line = node.start_mark.line + 1
    return line


def load_file(path: Path) -> list[Expectation]:
    """The entries of one file; any problem is an ExpectationError naming file, line and key."""
    shown = Path(_display(path))
    data = load_yaml_model(shown, ExpectationsFile, ExpectationError)
    raw_entries = data.expectations or []
    nodes = _entry_nodes(shown.read_text())
    out = []
    for index, (raw, node) in enumerate(zip(raw_entries, nodes, strict=True)):  # one node per entry
        try:
            entry = Entry.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            key = ".".join(["expectations", str(index), *(str(p) for p in first["loc"])])
            line = _line_of_key(node, first["loc"][0]) if first["loc"] else node.start_mark.line + 1
            message = first["msg"].removeprefix("Value error, ")
            raise ExpectationError(f"{shown}:{line}: {key}: {message}") from None
        out.append(Expectation(entry, data.platform, f"{shown}:{node.start_mark.line + 1}"))
    return out


def load_expectations(paths: Iterable[str | Path]) -> list[Expectation]:
    """Entries of every file named, a folder meaning its ``*.yaml`` files, in the order given."""
    out: list[Expectation] = []
    for path in map(Path, paths):
        if path.is_dir():
            files = sorted([*path.glob("*.yaml"), *path.glob("*.yml")])
        elif path.is_file():
            files = [path]
        else:
            raise ExpectationError(f"{path}: no such expectations file or folder")
        for file in files:
            out.extend(load_file(file))
    return out


def decide(expectations: list[Expectation], identity: ident.Identity, nodeid: str) -> Expectation | None:
    """The first entry that matches decides a test: a ``pass`` entry above a broad xfail exempts tests."""
    return next((e for e in expectations if e.matches(identity, nodeid)), None)


# ---------------------------------------------------------------- pytest plugin


@dataclass
class _State:
    expectations: list[Expectation]
    strict: bool
    whole_suite: bool  # the run collects everything it would unfiltered: only then can an entry be stale
    untested_vllm: str | None = None  # the installed vLLM's label when kvconform's CI does not test it
    decided: set[str] = field(default_factory=set)  # ``where`` of each entry that decided a test
    saw_conformance_tests: bool = False
    passing: dict[str, set[str]] = field(default_factory=dict)  # where -> tests its strict xfail let pass


def passing_note(expectation: Expectation) -> str:
    """On a vLLM kvconform's CI does not test, a strict xfail that passes is this note, not a failure."""
    return f"passes on this vLLM: the finding may be fixed; remove or narrow {expectation.where}"


_STATE = pytest.StashKey[_State]()
_ENTRY = pytest.StashKey[Expectation]()


def _run_platform(config: pytest.Config) -> str | None:
    target = config.stash.get(TARGET_KEY, None)
    return target.platform.name if target is not None else None


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


# Options that collect fewer tests than the full suite for the platform. (``-k``, ``-m`` and
# ``--deselect`` act after this plugin matched the entries, so they narrow nothing here.)
NARROWING_OPTIONS = {"connector": "--connector", "attn_backend": "--attn-backend", "lf": "--last-failed"}


def _narrowing_arg(config: pytest.Config, arg: str) -> bool:
    """Whether a positional argument collects part of a folder: a node id, a file, a module."""
    if "::" in arg:
        return True
    path = Path(config.invocation_params.dir, arg)
    if path.exists():
        return path.is_file()
    if config.getoption("pyargs", default=False):
        try:
            spec = importlib.util.find_spec(arg)
        except (ImportError, ValueError):
            return False
        return spec is not None and spec.submodule_search_locations is None  # a module, not a package
    return False


def collects_whole_suite(config: pytest.Config) -> bool:
    """Whether this run collects every test it would unfiltered, so an unused entry is really stale.

    A run narrowed by ``--connector``, ``--attn-backend``, a file or a node id collects
    fewer tests, and an entry for the others is not stale there (CI group steps, the gate).
    """
    if any(config.getoption(name, default=None) for name in NARROWING_OPTIONS):
        return False
    return not any(_narrowing_arg(config, arg) for arg in config.args)


def holding_here(loaded: list[Expectation], platform: str | None) -> list[Expectation]:
    """The entries for ``platform`` (or any platform) whose ``vllm:`` condition the installed vLLM meets.

    The suite and ``kvconform bench`` both decide with these, so a finding pinned per vLLM release
    is the same finding in both.
    """
    vllm = installed_vllm()
    return [e for e in loaded if e.platform in (platform, ANY_PLATFORM) and e.entry.holds_on(vllm[0] if vllm else None)]


@pytest.hookimpl(trylast=True)  # after conformance.plugin has resolved the run's platform
def pytest_configure(config: pytest.Config) -> None:
    paths = config.getoption("kvconform_expectations", default=[]) or [EXPECTATIONS_DIR]
    try:
        loaded = load_expectations(paths)
    except ExpectationError as exc:
        raise pytest.UsageError(str(exc)) from None
    status = installed_status()
    config.stash[_STATE] = _State(holding_here(loaded, _run_platform(config)),
                                  bool(config.getoption("kvconform_strict", default=False)),
                                  collects_whole_suite(config), untested_vllm=status.note if status else None)


@pytest.hookimpl(tryfirst=True)  # before -k/-m deselect: an entry for a deselected test is not stale
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    state = config.stash.get(_STATE, None)
    platform = _run_platform(config)
    if state is None or platform is None:
        return
    for item in items:
        if item.get_closest_marker("check") is None:  # only conformance tests carry a check marker
            continue
        state.saw_conformance_tests = True
        expectation = decide(state.expectations, ident.from_item(item, platform), item.nodeid)
        if expectation is None:
            continue
        state.decided.add(expectation.where)
        item.stash[_ENTRY] = expectation
        item.user_properties.extend(expectation.properties())
        mark = expectation.mark()
        if mark is not None:
            item.add_marker(mark)


@pytest.hookimpl(wrapper=True, tryfirst=True)  # outermost: sees the report after pytest's xfail handling
def pytest_runtest_makereport(item: pytest.Item,
                              call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """An xfail entry accepts only its own failure; a strict xfail that passes names the entry to remove.

    pytest's xfail turns any failure (setup errors too) into "xfailed". An entry pins the
    exception and message it expects, as ``xfail(raises=...)`` plus ``match``; another
    failure is reported as a failure that names the entry it did not match. On a vLLM
    kvconform's CI does not test, a pass is an XPASS carrying the note (``_note_passing``).
    """
    report = yield
    expectation = item.stash.get(_ENTRY, None)
    if expectation is None or expectation.entry.expect != "xfail":
        return report
    state = item.config.stash[_STATE]
    if hasattr(report, "wasxfail") and call.excinfo is not None:
        why = expectation.entry.mismatch(call.when, call.excinfo.value)
        if why is not None:
            del report.wasxfail
            report.outcome = "failed"
            report.longrepr = (f"not the expected failure of {expectation.where} "
                               f"({expectation.entry.finding_class}: {expectation.entry.reason}): {why}\n\n"
                               f"{report.longrepr}")
    elif (report.when == "call" and report.failed and isinstance(report.longrepr, str)
            and report.longrepr.startswith("[XPASS(strict)]")):
        if state.untested_vllm and not state.strict:
            _note_passing(state, expectation, item.nodeid, report)
        else:
            report.longrepr = (f"unexpectedly passing: remove the entry {expectation.where} "
                               f"(it expected: {expectation.entry.reason})")
    return report


def _note_passing(state: _State, expectation: Expectation, nodeid: str, report: pytest.TestReport) -> None:
    """Turn a strict XPASS into pytest's plain XPASS (a pass), its reason the note, and record it.

    A dev build or a release candidate may carry a fix of the finding, or the entry's range may
    be too wide: a person judges it, so the run says which entry to look at and stays green.
    """
    report.outcome = "passed"
    report.longrepr = None
    report.wasxfail = (f"{passing_note(expectation)} "
                       f"({state.untested_vllm}; it expected: {expectation.entry.reason})")
    state.passing.setdefault(expectation.where, set()).add(nodeid)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:  # node: xdist's WorkerController (no types)
    """xdist controller: merge what a worker's collection used."""
    state = node.config.stash.get(_STATE, None)
    sent = getattr(node, "workeroutput", {}).get(_WORKER_KEY)
    if state is not None and sent:
        state.decided.update(sent["decided"])
        state.saw_conformance_tests |= sent["saw_conformance_tests"]
        for where, nodeids in sent["passing"].items():
            state.passing.setdefault(where, set()).update(nodeids)


def stale(config: pytest.Config) -> list[Expectation]:
    """Entries for this run's platform that decided no collected conformance test."""
    state = config.stash.get(_STATE, None)
    if state is None or not state.saw_conformance_tests or not state.whole_suite:
        return []
    return [e for e in state.expectations if e.where not in state.decided]


def stale_as_dicts(config: pytest.Config) -> list[dict[str, str]]:
    return [{"where": e.where, "expect": e.entry.expect, "selector": e.selector()} for e in stale(config)]


def passing(config: pytest.Config) -> list[tuple[Expectation, list[str]]]:
    """Strict xfail entries whose tests passed on an untested vLLM (each with those tests), in file order."""
    state = config.stash.get(_STATE, None)
    if state is None:
        return []
    return [(e, sorted(state.passing[e.where])) for e in state.expectations if e.where in state.passing]


def passing_as_dicts(config: pytest.Config) -> list[dict[str, Any]]:
    """``passing`` for results.json (``RunInfo.passing_expectations``)."""
    return [{"where": e.where, "selector": e.selector(), "note": passing_note(e), "tests": tests}
            for e, tests in passing(config)]


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    state = config.stash.get(_STATE, None)
    if state is None:
        return
    if _is_worker(config):
        config.workeroutput[_WORKER_KEY] = {"decided": sorted(state.decided),  # type: ignore[attr-defined]  # xdist's
                                            "saw_conformance_tests": state.saw_conformance_tests,
                                            "passing": {where: sorted(ids) for where, ids in state.passing.items()}}
    elif state.strict and stale(config) and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    if _is_worker(config):
        return
    _summarize_passing(terminalreporter, config)
    _summarize_stale(terminalreporter, config)


def _summarize_passing(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    entries = passing(config)
    if not entries:
        return
    plural = "s" if len(entries) > 1 else ""
    terminalreporter.write_sep("=", f"kvconform: {len(entries)} expected failure{plural} passed on "
                                    f"{config.stash[_STATE].untested_vllm}", yellow=True)
    for e, tests in entries:
        terminalreporter.write_line(f"{passing_note(e)} ({e.selector()}; {len(tests)} test(s))")
    terminalreporter.write_line("--kvconform-strict makes such a pass fail the run, as on the releases CI tests")


def _summarize_stale(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    entries = stale(config)
    if not entries:
        return
    strict = config.stash[_STATE].strict
    plural = "s" if len(entries) > 1 else ""
    terminalreporter.write_sep("=", f"kvconform: {len(entries)} stale expectation{plural}",
                               red=strict, yellow=not strict)
    for e in entries:
        terminalreporter.write_line(f"{e.where}: {e.entry.expect} {e.selector()} matches no collected test; "
                                    f"remove the entry or fix its selectors")
    if strict:
        terminalreporter.write_line("--kvconform-strict: stale expectations fail this run")
