"""kvconform's pytest plugin, registered through the ``pytest11`` entry point.

Options are declared in ``options.py`` (one table) and markers here; the run's target (platform,
probe, backends, connectors) is resolved at configure time, before collection,
and kept in ``config.stash`` so every fixture and hook reads the same answer.
Bad input stops the run with ``pytest.UsageError`` (one line, non-zero exit).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from kvconform import platforms

from ..session import options
from ..session.target import TARGET_KEY, RunTarget, is_active, run_target, targets_conformance
from ..vllm_install import source as vllm_source
from ..vllm_install.versions import installed
from ..vllm_install.window import VLLM_DISTRIBUTIONS, installed_status
from .hook_modules import HOOK_MODULES

if TYPE_CHECKING:
    from kvconform.platforms.vllm_backends import BackendVerdict

# Sibling plugin modules, each with one concern, loaded with this one (options.py registers every option);
# hook_modules.py lists them, and marks them for assertion rewriting before any is imported.
pytest_plugins = list(HOOK_MODULES)


MARKERS = {
    "engine": "end-to-end runs of vLLM's LLM engine (slow; part of make test)",
    "check(name)": "the conformance check a test performs: a row of kvconform's check table (roundtrip, fill, "
    "contract, lint, ...), which also says the profile key that gates it",
    "producer_consumer(required, because)": "the test is for producer/consumer pairs only (required=True) or never "
    "for them (False); because: why, which the skip of a connector it does not apply to quotes",
    "mla": "the test's attn_backend axis is the platform's MLA backends, not its standard ones",
    "policy(text)": "the test checks a rule stricter than vLLM's own worker (kvconform's policy), said in text",
}


_AVAILABILITY_KEY: pytest.StashKey[dict[str, BackendVerdict]] = pytest.StashKey()
_SLOTS_KEY = pytest.StashKey[dict[str, int]]()  # xdist controller: live worker id -> its slot (its device)


def pytest_addoption(parser: pytest.Parser) -> None:
    options.register(parser)


def pytest_configure(config: pytest.Config) -> None:
    for marker, text in MARKERS.items():
        config.addinivalue_line("markers", f"{marker}: {text}")
    if not is_active(config):
        return
    worker = getattr(config, "workerinput", None)
    if worker and "kvconform_platform" in worker:
        # an xdist worker: take its own device before anything probes or initialises it
        from ..session.devices import pin_worker_device, share_cpu_threads

        slot = worker["kvconform_slot"]
        pin_worker_device(platforms.get(worker["kvconform_platform"]), worker["kvconform_device_count"], slot)
        share_cpu_threads(worker.get("workercount", 1))
    try:
        spec, found = platforms.resolve(config.getoption("platform"))
        backends = platforms.check_backends(spec, config.getoption("attn_backend"))
        mla_backends = platforms.check_mla_backends(spec, config.getoption("attn_backend"))
    except platforms.PlatformError as exc:
        raise pytest.UsageError(str(exc)) from None
    if targets_conformance(config):  # the harness drives vLLM internals that move between series
        from ..reliability import VllmVersionError, vllm_status

        try:
            vllm_status(tested_only=config.getoption("kvconform_tested_vllm_only"))
        except VllmVersionError as exc:
            raise pytest.UsageError(str(exc)) from None
    requested = tuple(config.getoption("connector"))
    profiles = tuple(Path(p) for p in config.getoption("profiles"))
    config.stash[TARGET_KEY] = RunTarget(spec, found, backends, requested, profiles, mla_backends)
    if requested or profiles:  # validate before collection, so a typo is one line, not N errors
        from ..connectors.profiles import ProfileError, load_profiles
        from ..connectors.selection import ConnectorSpecError, connector_params

        try:
            for path in profiles:
                load_profiles(path)
            connector_params(config)
        except (ConnectorSpecError, ProfileError) as exc:
            raise pytest.UsageError(str(exc)) from None


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:  # node: xdist's WorkerController (no types)
    """Controller side of xdist: tell each worker the platform and device count it pins from, and its slot."""
    if TARGET_KEY not in node.config.stash:
        return
    from ..session.devices import take_slot

    target = run_target(node.config)
    node.workerinput["kvconform_platform"] = target.platform.name
    node.workerinput["kvconform_device_count"] = target.probe.device_count
    node.workerinput["kvconform_slot"] = take_slot(node.config.stash.setdefault(_SLOTS_KEY, {}), node.gateway.id)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:  # node: xdist's WorkerController
    """A worker that ended frees its slot, for the worker that replaces it (called before xdist starts that one)."""
    node.config.stash.get(_SLOTS_KEY, {}).pop(node.gateway.id, None)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Callable[..., None]) -> object | None:
    """``--dist load`` (xdist's default) runs a connector's tests of one module together on one worker
    (plugin/scheduling.py)."""
    if TARGET_KEY not in config.stash or config.getoption("dist") != "load":
        return None
    from ..connectors.selection import connector_params
    from .scheduling import ConnectorScheduling

    return ConnectorScheduling(config, [p.id for p in connector_params(config)], log)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto``: xdist asks before ``pytest_configure``, so the platform is resolved here too."""
    from ..session.devices import auto_workers

    if not is_active(config):
        return None
    try:
        spec, found = platforms.resolve(config.getoption("platform"))
    except platforms.PlatformError:
        return None  # pytest_configure reports the error in its own words
    return auto_workers(spec, found.device_count)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Needs a profile already rules out are skipped here, with the reason, before any fixture runs.

    The test still calls ``require`` (which also loads the class); this only spares
    the fixtures of the hundreds of tests a profile or a missing package rules out.
    The check table names the profile key each check needs (``identity.needed_check``).
    """
    from kvconform.reports.identity import connector_of, needed_check

    from ..connectors.requirements import unmet_need

    if TARGET_KEY not in config.stash:
        return
    platform = run_target(config).platform
    for item in items:
        connector = connector_of(item)
        need = needed_check(item)
        if connector is None or need is None:
            continue
        reason = unmet_need(connector, platform, need)
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))


def _installed_version(*dists: str) -> str:
    found = installed(*dists)
    return f"{found[0]} ({found[1]})" if found else "not installed"


def pytest_report_header(config: pytest.Config) -> list[str]:
    from .preflight import header_lines

    if TARGET_KEY not in config.stash:
        return []
    target = run_target(config)
    spec = target.platform
    status = installed_status()
    try:
        device = spec.device_name(0)
    except Exception as exc:
        device = f"unknown ({type(exc).__name__})"
    return [
        f"kvconform: platform {spec.name} ({target.probe.reason})",
        f"kvconform: device {device} x{target.probe.device_count}, torch type {spec.torch_device_type}",
        f"kvconform: torch {_installed_version('torch')}, vLLM {_installed_version(*VLLM_DISTRIBUTIONS)}",
        *([f"kvconform: {status.note} (results are labelled so)"] if status and status.note else []),
        vllm_source.header_line(),
        *_plugin_lines(),
        *header_lines(config),
        f"kvconform: attention backends {', '.join(target.backends)}; MLA {', '.join(target.mla_backends) or 'none'}",
        *_no_profile_lines(target),
    ]


def _plugin_lines() -> list[str]:
    """Which vLLM plugin registers each connector beyond vLLM's factory, and what of them could not be read."""
    from ..connectors.selection import ConnectorSpecError, plugin_registry

    try:
        return plugin_registry().header_lines()
    except (ConnectorSpecError, ImportError):  # no vLLM factory to read: the run stops elsewhere, in its own words
        return []


def _no_profile_lines(target: RunTarget) -> list[str]:
    """A line for each third-party connector that no profile names: what it runs, and how to say more; then one
    naming the connectors the installed vLLM registers that no profile names (new in a release, most often)."""
    from ..connectors.profiles import has_profile, profile_for
    from ..connectors.selection import unprofiled_registered

    names = [spec.rpartition(":")[2] for spec in target.connectors if ":" in spec]
    unprofiled = unprofiled_registered(target.profiles)
    return [*(f"kvconform: {name} has no profile: it runs {', '.join(profile_for(name).checks or [])} with its own "
              f"storage folder as shared_storage_path, and never on two workers at once (it may bind fixed ports); "
              f"a profile (--profiles FILE) names its checks, extra config, promised hit and host: shared "
              f"(docs/testing-your-connector.md)"
              for name in names if not has_profile(name, target.profiles)),
            *([f"kvconform: registered by this vLLM with no profile: {', '.join(unprofiled)} (each is built once "
               f"before its checks; where that fails, one failure and its other checks not run; each runs on "
               f"one worker at a time; "
               f"docs/connectors.md#a-connector-with-no-profile)"] if unprofiled else [])]


@pytest.hookimpl(tryfirst=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize the device axes first so ids read ``[cpu-CPU_ATTN-<connector>-...]``.

    A backend vLLM cannot load here is still a parameter, skipped with vLLM's own error quoted,
    so the report shows it was not tested rather than leaving it out.
    """
    if TARGET_KEY not in metafunc.config.stash:
        return
    target = run_target(metafunc.config)
    if "platform" in metafunc.fixturenames:
        metafunc.parametrize("platform", [target.platform], ids=[target.platform.name], scope="session")
    if "attn_backend" in metafunc.fixturenames:
        mla = metafunc.definition.get_closest_marker("mla") is not None
        backends = target.mla_backends if mla else target.backends
        metafunc.parametrize("attn_backend", [_backend_param(metafunc.config, b) for b in backends],
                             scope="session")
    if "connector" in metafunc.fixturenames:
        from ..connectors.selection import connector_params

        params = connector_params(metafunc.config, metafunc.definition)
        metafunc.parametrize("connector", params, ids=[p.id for p in params], scope="session")


def _backend_param(config: pytest.Config, backend: str) -> object:  # a pytest.param
    """One backend as a parameter, skipped with vLLM's words when vLLM cannot load it here.

    ``--collect-only`` lists backends without asking vLLM (its import costs seconds, and no test runs).
    """
    if config.getoption("collectonly", default=False):
        return pytest.param(backend, id=backend)
    if _AVAILABILITY_KEY not in config.stash:
        config.stash[_AVAILABILITY_KEY] = {}
    verdicts = config.stash[_AVAILABILITY_KEY]
    if backend not in verdicts:
        from kvconform.platforms.vllm_backends import confirm

        verdicts[backend] = confirm(backend)
    verdict = verdicts[backend]
    if verdict.confirmed is False:
        return pytest.param(backend, id=backend,
                            marks=pytest.mark.skip(reason=f"{backend} is not usable here: vLLM says {verdict.detail}"))
    return pytest.param(backend, id=backend)
