"""Why a connector cannot run a check here, in words that name the cause.

Unmet needs are skips with the exact reason (the missing package, the platform
the connector does not claim, the connector's own refusal quoted). Anything else
a connector raises is a failure: this module never turns a crash into a skip.
A connector that no profile names and that cannot be built here fails once, in the
contract check's scheduler test; its other checks are not run (``construction.py``).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import pytest

from kvconform.check_table import STATIC_CHECKS

if TYPE_CHECKING:
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1

    from kvconform.platforms.spec import PlatformSpec

    from .selection import ConnectorParam



def unmet_need(connector: ConnectorParam, platform: PlatformSpec, check: str) -> str | None:
    if not connector.registered:
        from ..vllm_install.api import vllm_version

        return (f"{connector.name}: the installed vLLM {vllm_version()} does not register it (kvconform's profile "
                f"names it for the vLLM releases that do)")
    profile = connector.profile
    if not profile.runs(check):
        why = f" ({profile.reason})" if profile.reason else ""
        return f"{connector.name}: the {check} check does not apply to it per its connector profile{why}"
    if check in STATIC_CHECKS:  # it reads source: it needs neither the connector's packages nor its platforms
        return None
    claimed = profile.requires.platforms
    if claimed is not None and platform.name not in claimed:
        return f"{connector.name} claims only {', '.join(claimed)}; this run is on {platform.name}"
    missing = [p for p in profile.requires.packages if importlib.util.find_spec(p) is None]
    if missing:
        return f"{connector.name} needs package {', '.join(missing)}, which is not installed here"
    return None


def children_unmet_need(connector: ConnectorParam, platform: PlatformSpec) -> str | None:
    """Why a wrapper's children cannot run here (a child needs a package its own profile names, not installed), or
    None: a wrapper over NixlConnector needs NIXL as NixlConnector does."""
    from .profiles import has_profile, profile_for

    children = connector.profile.extra_config.get("connectors") or []
    for child in children:
        name = child.get("kv_connector") if isinstance(child, dict) else None
        if not name or not has_profile(name):
            continue
        missing = [p for p in profile_for(name).requires.packages if importlib.util.find_spec(p) is None]
        if missing:
            return (f"{connector.name}: its child {name} needs package {', '.join(missing)}, which is not "
                    f"installed here")
    return None


def declared_package(connector: ConnectorParam, module: str | None) -> str | None:
    """The package of the connector's profile (``requires.packages``) that ``module`` belongs to, if any."""
    for package in connector.profile.requires.packages:
        if module and (module == package or module.startswith(package + ".")):
            return package
    return None


def missing_module_failure(connector: ConnectorParam, exc: ModuleNotFoundError) -> str:
    """Why a missing module is the connector's failure: vLLM lacks a module it imports, or it needs an
    undeclared package (a skip would hide either: a vLLM refactor would turn the connector grey)."""
    if exc.name and (exc.name == "vllm" or exc.name.startswith("vllm.")):
        return (f"{connector.name}: importing it failed: it imports {exc.name}, which the installed vLLM "
                f"does not have ({exc})")
    return (f"{connector.name}: importing it failed: module {exc.name!r} is missing, and it is not a package "
            f"the connector's profile declares (requires.packages: "
            f"{', '.join(connector.profile.requires.packages) or 'none'}) ({exc})")


def load_or_skip(connector: ConnectorParam) -> type[KVConnectorBase_V1]:
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


def require(connector: ConnectorParam, platform: PlatformSpec, check: str,
            reports_construction: bool = False) -> type[KVConnectorBase_V1]:
    """The connector class, or a skip naming the unmet need. For a connector that no profile names, a runtime
    check first asks whether it can be built here at all (``construction.py``, once per process): where it
    cannot, the one test that ``reports_construction`` fails with the connector's error, and every other reads
    ``not run: the connector could not be constructed here (...)``."""
    reason = unmet_need(connector, platform, check)
    if reason:
        pytest.skip(reason)
    cls = load_or_skip(connector)
    if check not in STATIC_CHECKS and not connector.profile.named:
        from .construction import construction_failure

        failure = construction_failure(connector, platform)
        if failure is not None and reports_construction:
            pytest.fail(failure.failure(), pytrace=False)
        if failure is not None:
            pytest.skip(failure.not_run())
    return cls


def pair_mismatch(connector: ConnectorParam, marker: pytest.Mark | None) -> str | None:
    """Why a test whose ``producer_consumer(required, because)`` marker says it is for producer/consumer pairs only
    (``required=True``) or never for them (``False``) does not apply to ``connector``; None where it does."""
    if marker is None or marker.kwargs["required"] == connector.profile.is_pair():
        return None
    if marker.kwargs["required"]:
        return f"{connector.name} is not a producer/consumer pair (its profile's roles): {marker.kwargs['because']}"
    return f"{connector.name} is a producer/consumer pair: {marker.kwargs['because']}"


def run_only_its_scenarios(connector: ConnectorParam, scenario: str | None, known: Collection[str],
                           what: str) -> None:
    """A profile naming its scenarios (``scenarios``: settings that serve one situation, such as a tier small enough
    to evict) runs those alone: a skip for ``what`` (any other scenario or situation, ``scenario`` None: a test that
    is neither), a failure for a name ``known`` (``workload/profile_scenarios.py``) does not hold."""
    named = connector.profile.scenarios
    if named is None:
        return
    unknown = [name for name in named if name not in known]
    if unknown:
        pytest.fail(f"{connector.id}: its profile's scenarios name {', '.join(unknown)}, no workload scenario or "
                    f"sliding-window hit situation; known: {', '.join(known)}", pytrace=False)
    if scenario not in named:
        pytest.skip(f"{connector.id}: its profile's settings serve the {', '.join(named)} scenario(s) only: "
                    f"{what} not run")


@contextmanager
def refusals_skip() -> Iterator[None]:
    """A connector's own refusal of the platform (see ``refusal`` in its profile) is a skip, quoted."""
    from ..engine.rig import ConnectorRefused

    try:
        yield
    except ConnectorRefused as exc:
        pytest.skip(str(exc))
