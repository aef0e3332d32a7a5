"""Before any test: can the installed vLLM run here at all, and can kvconform drive it?

Two questions a connector cannot answer, asked once per session so their answers are
never a connector's red cell:

* **vLLM configures the platform.** The session builds the ``VllmConfig`` the first test
  would. Where vLLM refuses (vLLM 0.34 on an x86 CPU without triton-cpu, a missing kernel
  package, a platform it cannot select), the run stops in one line with pytest's usage-error
  status, 4, naming the vLLM, the platform and vLLM's own message: no connector was tested.
* **kvconform fits this vLLM's internals** (``engine/shapes.py``). Each mismatch is
  named once in the header and the report's verdict; the tests of the modules that need it
  are reported as not run for that reason (a skip whose reason says so, which the reports
  class as "kvconform cannot drive this vLLM"), never as a connector's failure.

What an environment waives to make vLLM configure (CI's Triton waiver: ``KVCONFORM_WAIVERS``,
set by the waiver itself) is printed in the header and carried into every report.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest

from .target import TARGET_KEY, run_target

if TYPE_CHECKING:
    from ..engine.shapes import Mismatch

MISMATCHES_KEY = pytest.StashKey[list["Mismatch"]]()
WAIVERS_VARIABLE = "KVCONFORM_WAIVERS"  # one line per waiver an environment applies to vLLM
NOT_RUN = "not run: kvconform cannot drive this vLLM"  # how a skipped test's reason begins (reports/model.py)


def waivers() -> list[str]:
    """What this environment waives of vLLM's own checks, one line each (empty where nothing is)."""
    return [line for line in os.environ.get(WAIVERS_VARIABLE, "").splitlines() if line.strip()]


def _applies(config: pytest.Config) -> bool:
    from .target import targets_conformance

    return TARGET_KEY in config.stash and targets_conformance(config) and not config.getoption("collectonly")


def _configure_error(config: pytest.Config) -> str | None:
    """vLLM's own words when it cannot build the first test's config on this platform; None when it can."""
    from ..vllm_build.api import vllm_version

    platform = run_target(config).platform.name
    try:
        from vllm.config import VllmConfig

        VllmConfig()
    except Exception as exc:  # whatever vLLM raises is its refusal, quoted
        message = " ".join(str(exc).split()).rstrip(".") or "(no message)"
        return (f"kvconform: vLLM {vllm_version()} cannot configure the {platform} platform here: "
                f"{type(exc).__name__}: {message}; no connector was tested")
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    config = session.config
    if not _applies(config):
        return
    from ..engine.shapes import mismatches

    if not hasattr(config, "workerinput"):  # the controller, or the only process: once per run
        error = _configure_error(config)
        if error:
            raise pytest.UsageError(error)
    config.stash[MISMATCHES_KEY] = mismatches()


def found_mismatches(config: pytest.Config) -> list[Mismatch]:
    return config.stash.get(MISMATCHES_KEY, [])


def header_lines(config: pytest.Config) -> list[str]:
    """The header's lines for what this run's vLLM waives and what of it kvconform cannot drive."""
    from ..vllm_build.api import vllm_version

    lines = [f"kvconform: {waiver}" for waiver in waivers()]
    lines += [f"kvconform: cannot drive vLLM {vllm_version()}: {m.line()}; the checks that need it are not run"
              for m in found_mismatches(config)]
    return lines


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    """A quiet run (``-q``) prints no header: its lines close the run instead, so no run hides them."""
    if config.get_verbosity() < 0:
        for line in header_lines(config):
            terminalreporter.write_line(line)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test whose module needs what this vLLM no longer fits is not run, and says why."""
    found = found_mismatches(config)
    if not found:
        return
    for item in items:
        module = item.module.__name__.rpartition(".")[2] if isinstance(item, pytest.Function) else ""
        blocking = [m for m in found if module.startswith("test_") and m.blocks(module)]
        if blocking:
            # first, so this reason is the one shown whatever else rules the test out
            item.add_marker(pytest.mark.skip(reason=f"{NOT_RUN}: {'; '.join(m.line() for m in blocking)}"),
                            append=False)
