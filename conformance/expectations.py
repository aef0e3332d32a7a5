"""Expected results as data: the conformance tests known to fail, or to be skipped, per platform.

Known bugs live in ``conformance/expectations/*.yaml`` with a reason and a
tracking link, so a red cell is always news. The xfails are strict: when a bug
is fixed the test passes, the run fails, and the message names the entry to
remove. An entry that matches no collected test is stale and is reported, so the
files cannot silently rot (``--kvconform-strict`` makes that fail the run).
The format is described in ``conformance/expectations/README.md``.

Registered as a pytest plugin module; its state lives in ``config.stash``.
Under xdist the workers collect, so each sends the entries it used to the
controller through ``workeroutput``, and the controller reports what nobody used.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest
import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from conformance.profiles import load_yaml_model
from reports import identity as ident

EXPECTATIONS_DIR = Path(__file__).with_name("expectations")
SELECTORS = ("test", "connector", "check", "backend")
# What each kind of entry must say, so a known failure is never an unexplained one.
REQUIRED = {"pass": (), "xfail": ("reason", "link"), "skip": ("reason",)}
_WORKER_KEY = "kvconform_expectations"


class ExpectationError(Exception):
    """A malformed expectations file; the message is ``file:line: key: message``."""


class Entry(BaseModel):
    """One expectation: which tests (all given selectors must match), and what to expect of them."""

    model_config = ConfigDict(extra="forbid")
    test: str | None = None  # a node id or parametrize id, exact or with * and ? wildcards
    connector: str | None = None
    check: str | None = None
    backend: str | None = None
    expect: Literal["pass", "xfail", "skip"] = "pass"
    reason: str | None = None
    link: str | None = None

    @field_validator("link")
    @classmethod
    def _is_url(cls, link: str | None) -> str | None:
        if link is not None and not re.fullmatch(r"https?://\S+", link):
            raise ValueError("must be an http(s) URL of the issue that tracks the failure")
        return link

    @model_validator(mode="after")
    def _complete(self) -> "Entry":
        if not any(getattr(self, key) for key in SELECTORS):
            raise ValueError(f"an entry needs at least one of: {', '.join(SELECTORS)}")
        missing = [key for key in REQUIRED[self.expect] if not getattr(self, key)]
        if missing:
            raise ValueError(f"expect: {self.expect} needs {' and '.join(missing)}")
        return self


# Entries in a file for this "platform" hold on every platform (e.g. static lint findings).
ANY_PLATFORM = "any"


class ExpectationsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    platform: str
    expectations: list[dict[str, Any]] | None = None  # entries are validated one by one, for exact lines

    @field_validator("platform")
    @classmethod
    def _known_platform(cls, name: str) -> str:
        from platforms import PLATFORMS

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
        e = self.entry
        if e.expect == "xfail":
            return pytest.mark.xfail(reason=f"{e.reason} ({e.link}; {self.where})", strict=True)
        if e.expect == "skip":
            return pytest.mark.skip(reason=f"{e.reason} ({self.where})")
        return None

    def properties(self) -> list[tuple[str, str]]:
        values = {"expect": self.entry.expect, "where": self.where,
                  "reason": self.entry.reason, "link": self.entry.link}
        return [(name, values[key]) for key, name in ident.EXPECT_PROPERTIES.items() if values[key]]


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
                return value.value
    return []


def _line_of_key(node: yaml.Node, key: object) -> int:
    if isinstance(node, yaml.MappingNode):
        for k, _ in node.value:
            if k.value == key:
                return k.start_mark.line + 1
    return node.start_mark.line + 1


def load_file(path: Path) -> list[Expectation]:
    """The entries of one file; any problem is an ExpectationError naming file, line and key."""
    shown = Path(_display(path))
    data = load_yaml_model(shown, ExpectationsFile, ExpectationError)
    raw_entries = data.expectations or []
    nodes = _entry_nodes(shown.read_text())
    out = []
    for index, (raw, node) in enumerate(zip(raw_entries, nodes)):
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


def load_expectations(paths) -> list[Expectation]:
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
    decided: set[str] = field(default_factory=set)  # ``where`` of each entry that decided a test
    saw_conformance_tests: bool = False


_STATE = pytest.StashKey[_State]()
_ENTRY = pytest.StashKey[Expectation]()


def _run_platform(config: pytest.Config) -> str | None:
    from conformance.plugin import TARGET_KEY

    target = config.stash.get(TARGET_KEY, None)
    return target.platform.name if target is not None else None


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kvconform")
    group.addoption("--kvconform-expectations", action="append", default=[], metavar="PATH",
                    help="expectations file or folder to use instead of conformance/expectations/ (repeatable)")
    group.addoption("--kvconform-strict", action="store_true", default=False,
                    help="fail the run when an expectation entry matches no collected test")


@pytest.hookimpl(trylast=True)  # after conformance.plugin has resolved the run's platform
def pytest_configure(config: pytest.Config) -> None:
    paths = config.getoption("kvconform_expectations", default=[]) or [EXPECTATIONS_DIR]
    try:
        loaded = load_expectations(paths)
    except ExpectationError as exc:
        raise pytest.UsageError(str(exc)) from None
    platform = _run_platform(config)
    config.stash[_STATE] = _State([e for e in loaded if e.platform in (platform, ANY_PLATFORM)],
                                  bool(config.getoption("kvconform_strict", default=False)))


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


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Say which entry to remove when a strict xfail from an expectations file passes."""
    report = yield
    expectation = item.stash.get(_ENTRY, None)
    if (expectation is not None and expectation.entry.expect == "xfail" and report.when == "call"
            and report.failed and isinstance(report.longrepr, str)
            and report.longrepr.startswith("[XPASS(strict)]")):
        report.longrepr = (f"unexpectedly passing: remove the entry {expectation.where} "
                           f"(it expected: {expectation.entry.reason})")
    return report


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """xdist controller: merge what a worker's collection used."""
    state = node.config.stash.get(_STATE, None)
    sent = getattr(node, "workeroutput", {}).get(_WORKER_KEY)
    if state is not None and sent:
        state.decided.update(sent["decided"])
        state.saw_conformance_tests |= sent["saw_conformance_tests"]


def stale(config: pytest.Config) -> list[Expectation]:
    """Entries for this run's platform that decided no collected conformance test."""
    state = config.stash.get(_STATE, None)
    if state is None or not state.saw_conformance_tests:
        return []
    return [e for e in state.expectations if e.where not in state.decided]


def stale_as_dicts(config: pytest.Config) -> list[dict[str, str]]:
    return [{"where": e.where, "expect": e.entry.expect, "selector": e.selector()} for e in stale(config)]


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    state = config.stash.get(_STATE, None)
    if state is None:
        return
    if _is_worker(config):
        config.workeroutput[_WORKER_KEY] = {"decided": sorted(state.decided),
                                            "saw_conformance_tests": state.saw_conformance_tests}
    elif state.strict and stale(config) and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    entries = stale(config)
    if not entries or _is_worker(config):
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
