"""``--kvconform-scheduler-cls module:Class``: the run's engines use that scheduler class instead of vLLM's own.

Validated before collection (a malformed name, or one vLLM could not import, is one line and a non-zero exit),
then handed to the harness (``engine/scheduler_class.py``), which sets it in every vLLM config exactly where a
user's ``--scheduler-cls`` goes. A result obtained under another scheduler says so: the run's header names the
class, and the JSON results carry it as an environment note (which the verdict prints).
"""

from __future__ import annotations

import importlib
import importlib.util

import pytest

from ..engine import scheduler_class

OPTION = "kvconform_scheduler_cls"


def pytest_configure(config: pytest.Config) -> None:
    text = config.getoption(OPTION, default=None)
    if text is None:
        return
    try:
        qualname = scheduler_class.qualname_of(text)
    except scheduler_class.SchedulerClassError as exc:
        raise pytest.UsageError(str(exc)) from None
    _check_importable(text, qualname, _runs_tests(config))
    scheduler_class.choose(qualname)


def _runs_tests(config: pytest.Config) -> bool:
    """Whether this process runs tests (the only process, or an xdist worker), not an xdist controller."""
    return hasattr(config, "workerinput") or not config.getoption("numprocesses", default=None)


def _check_importable(text: str, qualname: str, import_it: bool) -> None:
    """The module must be found; where tests run, imported, and the name a class in it. An xdist controller
    only finds the module: it imports no vLLM (the class's base), its workers check the rest before collection."""
    module, _, name = qualname.rpartition(".")
    try:
        if not import_it:
            if importlib.util.find_spec(module) is None:
                raise ModuleNotFoundError(f"No module named {module!r}")
            return
        found = getattr(importlib.import_module(module), name)
    except Exception as exc:  # whatever importing the user's module raises is the reason, in one line
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise pytest.UsageError(f"--kvconform-scheduler-cls {text}: cannot import it: {reason}") from None
    if not isinstance(found, type):
        raise pytest.UsageError(f"--kvconform-scheduler-cls {text}: not a class ({type(found).__name__})")


def pytest_unconfigure(config: pytest.Config) -> None:
    if config.getoption(OPTION, default=None) is not None:
        scheduler_class.choose(None)


def notes(config: pytest.Config) -> list[str]:
    """The results' environment note for a run under another scheduler class (none for vLLM's own)."""
    text = config.getoption(OPTION, default=None)
    if text is None:
        return []
    return [f"scheduler: {text} instead of vLLM's own (--kvconform-scheduler-cls; SchedulerConfig.scheduler_cls)"]


def pytest_report_header(config: pytest.Config) -> list[str]:
    return [f"kvconform: {note}" for note in notes(config)]
