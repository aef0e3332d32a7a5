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


def declared_package(connector, module: str | None) -> str | None:
    """The package of the connector's profile (``requires.packages``) that ``module`` belongs to, if any."""
    for package in connector.profile.requires.packages:
        if module and (module == package or module.startswith(package + ".")):
            return package
    return None


def missing_module_failure(connector, exc: ModuleNotFoundError) -> str:
    """Why a missing module is the connector's failure: vLLM lacks a module it imports, or it needs an
    undeclared package (a skip would hide either: a vLLM refactor would turn the connector grey)."""
    if exc.name and (exc.name == "vllm" or exc.name.startswith("vllm.")):
        return (f"{connector.name}: importing it failed: it imports {exc.name}, which the installed vLLM "
                f"does not have ({exc})")
    return (f"{connector.name}: importing it failed: module {exc.name!r} is missing, and it is not a package "
            f"the connector's profile declares (requires.packages: "
            f"{', '.join(connector.profile.requires.packages) or 'none'}) ({exc})")


def load_or_skip(connector):
    """The connector class. A missing module is a skip only when it is a package the connector's
    profile declares (its optional dependency, quoted); any other missing module, and anything
    else, is a failure."""
    try:
        return connector.load_class()
    except ModuleNotFoundError as exc:
        package = declared_package(connector, exc.name)
        if package is None:
            pytest.fail(missing_module_failure(connector, exc), pytrace=False)
        pytest.skip(f"{connector.name}: importing it failed for its missing package {package}: {exc}")


def require(connector, platform, check: str):
    reason = unmet_need(connector, platform, check)
    if reason:
        pytest.skip(reason)
    return load_or_skip(connector)


@contextmanager
def refusals_skip():
    """A connector's own refusal of the platform (see ``refusal`` in its profile) is a skip, quoted."""
    from ..engine.rig import ConnectorRefused

    try:
        yield
    except ConnectorRefused as exc:
        pytest.skip(str(exc))
