"""Why a connector cannot run a check here, in words that name the cause.

Unmet needs are skips with the exact reason (the missing package, the platform
the connector does not claim, the connector's own refusal quoted). Anything else
a connector raises is a failure: this module never turns a crash into a skip.
"""

from __future__ import annotations

import importlib.util
from contextlib import contextmanager

import pytest


# Checks that read source, not a device: they need neither the connector's packages nor its platforms.
STATIC_CHECKS = frozenset({"lint"})


def unmet_need(connector, platform, check: str) -> str | None:
    profile = connector.profile
    if not profile.runs(check):
        why = f" ({profile.reason})" if profile.reason else ""
        return f"{connector.name}: the {check} check does not apply to it per its connector profile{why}"
    if check in STATIC_CHECKS:
        return None
    claimed = profile.requires.platforms
    if claimed is not None and platform.name not in claimed:
        return f"{connector.name} claims only {', '.join(claimed)}; this run is on {platform.name}"
    missing = [p for p in profile.requires.packages if importlib.util.find_spec(p) is None]
    if missing:
        return f"{connector.name} needs package {', '.join(missing)}, which is not installed here"
    return None


def load_or_skip(connector):
    """The connector class; a missing import dependency is a skip that quotes it, anything else fails."""
    try:
        return connector.load_class()
    except ModuleNotFoundError as exc:
        pytest.skip(f"{connector.name}: importing it failed for a missing package: {exc}")


def require(connector, platform, check: str):
    reason = unmet_need(connector, platform, check)
    if reason:
        pytest.skip(reason)
    return load_or_skip(connector)


@contextmanager
def refusals_skip():
    """A connector's own refusal of the platform (see ``refusal`` in its profile) is a skip, quoted."""
    from conformance.harness.rig import ConnectorRefused

    try:
        yield
    except ConnectorRefused as exc:
        pytest.skip(str(exc))
