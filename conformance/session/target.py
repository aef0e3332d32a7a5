"""What this run tests (platform, probe, backends, connectors), kept in ``config.stash``.

A leaf below the plugin: the plugin resolves the target at configure time and
stores it here; the expectations, results and connector-selection modules read it
from here, so none of them imports the plugin (which loads them) and the import
graph has no cycle through it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from kvconform.platforms.spec import PlatformSpec, Probe

from .options import DEFAULTS


@dataclass(frozen=True)
class RunTarget:
    """What this run tests: resolved once per session from the command line."""

    platform: PlatformSpec
    probe: Probe
    backends: tuple[str, ...]
    connectors: tuple[str, ...]  # names or module:Class specs the user asked for; empty means all
    profiles: tuple[Path, ...] = ()  # the user's own connector profile files, searched first
    mla_backends: tuple[str, ...] = ()  # what the MLA checks run on (an ``mla`` marker): the platform's MLA backends


TARGET_KEY = pytest.StashKey[RunTarget]()

CONFORMANCE_DIR = Path(__file__).resolve().parents[1]
PACKAGE = (__spec__.parent or "").rpartition(".")[0]  # "kvconform.conformance": the name `pytest --pyargs` takes


def run_target(config: pytest.Config) -> RunTarget:
    """The target ``pytest_configure`` resolved (a KeyError in a run that is not kvconform's)."""
    return config.stash[TARGET_KEY]


def run_platform(config: pytest.Config) -> str | None:
    """The name of the platform the run targets; None where configure resolved none (a run that is not kvconform's)."""
    target = config.stash.get(TARGET_KEY, None)
    return target.platform.name if target is not None else None


def is_active(config: pytest.Config) -> bool:
    """Whether this pytest run is kvconform's: it collects the conformance checks or sets one of our options.

    Installed by entry point, the plugin loads in every pytest run of the environment
    (vLLM's own test suite beside it, say). Elsewhere it must do nothing: no device
    probe (on ROCm that initialises HIP before fork-based tests), no torch import,
    no parametrizing of another project's ``platform`` or ``connector`` fixtures.
    """
    if targets_conformance(config):
        return True
    return any(config.getoption(dest, default=default) != default for dest, default in DEFAULTS.items())


def targets_conformance(config: pytest.Config) -> bool:
    """Whether the run collects the conformance package (by path, or by name under ``--pyargs``)."""
    for arg in config.args:
        target = arg.split("::")[0]
        if target == PACKAGE or target.startswith(f"{PACKAGE}."):
            return True
        path = Path(config.invocation_params.dir, target).resolve()
        if path == CONFORMANCE_DIR or CONFORMANCE_DIR in path.parents:
            return True
    return False
