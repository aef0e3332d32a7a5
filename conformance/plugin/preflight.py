"""Before any test: can the installed vLLM run here at all, and can kvconform drive it?

Neither is a connector's question, so neither answer may be a connector's red cell. Where vLLM refuses to
build the first test's ``VllmConfig`` for the platform, the run stops in one line with status 4, naming the
vLLM, the platform and vLLM's message. Where kvconform no longer fits vLLM's internals (``engine/shapes.py``:
a name of ``vllm_install/api.py``'s table this vLLM keeps in none of its places, or a shape), each mismatch is
named once in the header and the verdict, and the tests that need it are reported as not run for that reason.
Both are asked where tests run (the only process, or each xdist worker); a controller imports no vLLM, and ends
the run with the line its workers send. A waiver the environment applies (``KVCONFORM_WAIVERS``) is printed in
the header and carried into every report.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

import pytest

from ..session.target import TARGET_KEY, run_target

if TYPE_CHECKING:
    from ..engine.shapes import Mismatch

MISMATCHES_KEY = pytest.StashKey[list["Mismatch"]]()  # where the tests run
MISMATCH_LINES_KEY = pytest.StashKey[list[str]]()  # each mismatch's line, also in an xdist controller
CONFIGURE_ERROR_KEY = pytest.StashKey[str]()
_WORKER_OUTPUT = "kvconform_preflight"
WAIVERS_VARIABLE = "KVCONFORM_WAIVERS"  # one line per waiver an environment applies to vLLM
NOT_RUN = "not run: kvconform cannot drive this vLLM"  # how a skipped test's reason begins (reports/model.py)


def waivers() -> list[str]:
    """What this environment waives of vLLM's own checks, one line each (empty where nothing is)."""
    return [line for line in os.environ.get(WAIVERS_VARIABLE, "").splitlines() if line.strip()]


def _applies(config: pytest.Config) -> bool:
    from ..session.target import targets_conformance

    return TARGET_KEY in config.stash and targets_conformance(config) and not config.getoption("collectonly")


def _configure_error(config: pytest.Config) -> str | None:
    """vLLM's own words when it cannot build the first test's config on this platform; None when it can."""
    from ..vllm_install.api import vllm_version

    platform = run_target(config).platform.name
    try:
        from vllm.config import VllmConfig

        VllmConfig()
    except Exception as exc:  # whatever vLLM raises is its refusal, quoted
        message = " ".join(str(exc).split()).rstrip(".") or "(no message)"
        return (f"kvconform: vLLM {vllm_version()} cannot configure the {platform} platform here: "
                f"{type(exc).__name__}: {message}; no connector was tested")
    return None


def _controls_workers(config: pytest.Config) -> bool:
    """An xdist controller, which runs no test itself (xdist registers its ``dsession`` plugin only then)."""
    return not hasattr(config, "workerinput") and config.pluginmanager.has_plugin("dsession")


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    config = session.config
    if not _applies(config) or _controls_workers(config):
        return
    from ..engine.shapes import mismatches

    error = _configure_error(config)
    if error and not hasattr(config, "workerinput"):
        raise pytest.UsageError(error)
    found = [] if error else mismatches()
    config.stash[MISMATCHES_KEY] = found
    config.stash[MISMATCH_LINES_KEY] = [m.line() for m in found]
    if hasattr(config, "workerinput"):
        if error:
            config.stash[CONFIGURE_ERROR_KEY] = error
        config.workeroutput[_WORKER_OUTPUT] = {  # type: ignore[attr-defined]  # set by xdist
            "error": error, "mismatches": config.stash[MISMATCH_LINES_KEY]}


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:  # node: xdist's WorkerController
    """xdist controller: what a worker's vLLM answered (every worker's answers the same)."""
    found = getattr(node, "workeroutput", {}).get(_WORKER_OUTPUT)
    if not found:
        return
    stash = node.config.stash
    if found["error"]:
        stash[CONFIGURE_ERROR_KEY] = found["error"]
    stash[MISMATCH_LINES_KEY] = list(dict.fromkeys([*stash.get(MISMATCH_LINES_KEY, []), *found["mismatches"]]))


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """xdist controller: a worker's refusing vLLM ends the run as it ends a serial one, status 4 and one line."""
    error = session.config.stash.get(CONFIGURE_ERROR_KEY, None)
    if error and _controls_workers(session.config):
        session.exitstatus = pytest.ExitCode.USAGE_ERROR
        print(f"ERROR: {error}", file=sys.stderr)


def mismatch_lines(config: pytest.Config) -> list[str]:
    """What of this run's vLLM kvconform cannot drive, a line each."""
    return config.stash.get(MISMATCH_LINES_KEY, [])


def header_lines(config: pytest.Config) -> list[str]:
    """The header's lines for what this run's vLLM waives and what of it kvconform cannot drive."""
    return [f"kvconform: {waiver}" for waiver in waivers()] + _mismatch_header_lines(config)


def _mismatch_header_lines(config: pytest.Config) -> list[str]:
    from ..vllm_install.api import vllm_version

    return [f"kvconform: cannot drive vLLM {vllm_version()}: {line}; the checks that need it are not run"
            for line in mismatch_lines(config)]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    """A quiet run (``-q``) prints no header, and an xdist controller's header comes before any worker has
    asked: their lines close the run instead, so no run hides them."""
    quiet = config.get_verbosity() < 0
    lines = header_lines(config) if quiet else _mismatch_header_lines(config) if _controls_workers(config) else []
    for line in lines:
        terminalreporter.write_line(line)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test whose module needs what this vLLM no longer fits is not run, and says why; where vLLM
    refused the platform (an xdist worker), none is."""
    if CONFIGURE_ERROR_KEY in config.stash:
        config.hook.pytest_deselected(items=items[:])
        items[:] = []
        return
    found = config.stash.get(MISMATCHES_KEY, [])
    if not found:
        return
    for item in items:
        module = item.module.__name__.rpartition(".")[2] if isinstance(item, pytest.Function) else ""
        blocking = [m for m in found if module.startswith("test_") and m.blocks(module)]
        if blocking:
            # first, so this reason is the one shown whatever else rules the test out
            item.add_marker(pytest.mark.skip(reason=f"{NOT_RUN}: {'; '.join(m.line() for m in blocking)}"),
                            append=False)
