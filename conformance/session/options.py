"""Every command-line option and ini setting kvconform adds to pytest, in one table.

The plugin registers them from here (``register``), ``pytest --help`` lists them in one group,
and ``target.is_active`` reads the same table to tell a kvconform run from
another project's pytest run (one that sets any of them is kvconform's): a new
option added here is counted there without a second list to keep in step. The
modules that act on an option read it by its ``dest`` with ``config.getoption``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest

from kvconform import platforms

GROUP = "kvconform"
GROUP_TITLE = "kvconform: vLLM KV connector conformance"
DEFAULT_TIMEOUT_S = 300.0  # a conformance test's limit where neither --kvconform-timeout nor pytest-timeout's is set
NORMAL_EXAMPLES = 4  # generated workloads per connector and prefill mode in a normal run (seeded by the test's id)


@dataclass(frozen=True)
class Option:
    """One ``parser.addoption``: its flag, its default, and the rest of argparse's keywords."""

    flag: str
    help: str
    default: Any = None
    action: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # type, choices, metavar

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")

    def register(self, group: pytest.OptionGroup) -> None:
        keywords = {"action": self.action} if self.action else {}
        group.addoption(self.flag, default=self.default, dest=self.dest, help=self.help, **keywords, **self.extra)


def _flag(flag: str, help: str) -> Option:
    return Option(flag, help, default=False, action="store_true")


def _repeated(flag: str, metavar: str, help: str) -> Option:
    return Option(flag, help, default=[], action="append", extra={"metavar": metavar})


OPTIONS: tuple[Option, ...] = (
    # what the run tests
    Option("--platform", "platform to test on (default: auto, the first accelerator found, else cpu)",
           default="auto", extra={"choices": platforms.CHOICES, "type": platforms.choice}),
    _repeated("--attn-backend", "NAME",
              "attention backend to test (repeatable; default: every backend the platform can use)"),
    _repeated("--connector", "NAME|module:Class",
              "connector to test: a name from vLLM's KVConnectorFactory or a third-party package.module:ClassName "
              "(repeatable; default: every registered connector)"),
    _repeated("--profiles", "FILE",
              "extra connector profiles (same schema as conformance/connectors.yaml), searched first"),
    _flag("--kvconform-tested-vllm-only",
          "refuse a vLLM that kvconform's CI does not test (dev builds, release candidates, other releases); "
          "by default they run, labelled untested"),
    # how results are judged and written
    _repeated("--kvconform-expectations", "PATH",
              "expectations file or folder to use instead of conformance/expectations/ (repeatable)"),
    _flag("--kvconform-strict",
          "fail the run when an expectation entry matches no collected test, or when an expected failure passes "
          "on a vLLM kvconform's CI does not test"),
    Option("--kvconform-json", "write the run's results as JSON (the format of kvconform report's results.json)",
           extra={"metavar": "PATH"}),
    _flag("--kvconform-details",
          "list each known finding and every skip reason (grouped by connector x check) in the run's summary; "
          "by default it counts them"),
    _flag("--kvconform-coverage",
          "measure which lines and branches of each connector's modules its tests ran (coverage.py); the JSON "
          "results and kvconform report show it per connector (docs/coverage.md)"),
    # a misbehaving connector
    Option("--kvconform-timeout",
           f"per-test timeout for conformance tests (default {DEFAULT_TIMEOUT_S:g} s, or pytest-timeout's "
           "--timeout when given; 0 disables)", extra={"type": float, "metavar": "SECONDS"}),
    Option("--kvconform-wait-scale",
           "scale the bounds the P/D pair checks wait for a connector's own threads to finish a transfer, send a "
           "notification or meet a situation (default 1: 30 s for a pair to drain, 15 s for a notification; a "
           "connector that never does it fails at the bound, so a broken or pinned one waits it out); above 1 on a "
           "loaded machine, below 1 to fail such connectors sooner (never below 5 s)",
           default=1.0, extra={"type": float, "metavar": "FACTOR"}),
    _flag("--kvconform-keep-going",
          "keep running a connector's tests of a check after one of them crashed its process or timed out "
          "(default: report them as not run)"),
    _flag("--kvconform-public-apis-only",
          "use only pytest's and pytest-xdist's public APIs, as where the private names kvconform feature-tests "
          "are missing: slower under xdist, and no run properties in JUnit"),
    # vLLM's side of the path (plugin/scheduler_option.py)
    Option("--kvconform-scheduler-cls",
           "run every engine with this scheduler class instead of vLLM's own, set where vLLM's --scheduler-cls "
           "sets it (SchedulerConfig.scheduler_cls): judges a scheduler's handling of what connectors return",
           extra={"metavar": "module:Class"}),
    # the workload check
    Option("--kvconform-replay",
           "run test_workload_replay on this workload spec (the JSON line a workload failure prints)",
           extra={"metavar": "SPEC"}),
    Option("--kvconform-explore",
           "generated workloads: search N random workloads per connector with Hypothesis and shrink a failure "
           f"(default: {NORMAL_EXAMPLES} fixed ones seeded by the test's id, the first anchored to a hit, "
           "no shrinking)",
           default=0, extra={"type": int, "metavar": "N"}),
)

STORAGE_INI = "kvconform_default_storage"
IniType = Literal["string", "paths", "pathlist", "args", "linelist", "bool", "int", "float"]  # Parser.addini's
INI: dict[str, tuple[IniType, str]] = {  # name -> (type, help)
    STORAGE_INI: ("linelist", "more default storage locations to watch, one per line: CONNECTOR FOLDER REGEX"),
}

DEFAULTS: dict[str, Any] = {option.dest: option.default for option in OPTIONS}


def effective_timeout(config: pytest.Config) -> float | None:
    """The conformance tests' limit: ours when given, none when pytest-timeout was given one, else the default."""
    if not config.pluginmanager.hasplugin("timeout"):
        return None
    ours: float | None = config.getoption("kvconform_timeout")
    if ours is not None:
        return ours
    theirs = config.getoption("timeout", None) or os.environ.get("PYTEST_TIMEOUT") or config.getini("timeout")
    return None if theirs else DEFAULT_TIMEOUT_S


def register(parser: pytest.Parser) -> None:
    """Add the table's options and ini settings to pytest's (the plugin's ``pytest_addoption``)."""
    group = parser.getgroup(GROUP, GROUP_TITLE)
    for option in OPTIONS:
        option.register(group)
    for name, (kind, text) in INI.items():
        parser.addini(name, type=kind, default=[], help=text)
