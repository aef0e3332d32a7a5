"""Whether a connector that no profile names can be built here at all, asked once per test process.

Nothing says what such a connector (a third party's, or one a new vLLM registers before
``connectors.yaml`` has its row) needs, and when building it raises, every check that builds it fails
with that one error: fifty red cells that say one thing. So before its first check both halves are built
for each kv_role through vLLM's ``KVConnectorFactory``, and the outcome is kept per connector and
platform: the contract check's scheduler test reports a failure as the connector's, and every other
check that builds it reads ``not run: the connector could not be constructed here (...)``. The attempt's
inputs are its own (fresh storage, the tiny model, the first backend vLLM loads, its preferred block
size), so its outcome does not depend on which test asked first. A connector with a profile is never
gated here (its profile says what it needs), nor is the lint. docs/connectors.md shows the output.

Whatever the build raises is the connector's failure, ``BaseException`` included: a native core behind pyo3
panics with ``pyo3_runtime.PanicException``, which is no ``Exception``, and an outcome that escaped here would
be tried again, and fail, in every test. Only the run's own stops pass (``PASSED_THROUGH``). The failure names
the exception, its message and the line of the connector's own code that raised it (``raised_at.py``).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from kvconform.errors import one_line

from ..engine import kvcache
from ..engine.affinity import restore_harness_affinity
from ..engine.device_guard import worker_device_index
from ..engine.distributed import single_rank_parallel_state
from ..engine.kvcache import CacheShape
from ..engine.model import write_tiny_model
from ..engine.rig import ConnectorRefused, Rig, refusal_as
from ..vllm_install.api import VllmApiError
from .raised_at import raised_at, top_package

if TYPE_CHECKING:
    from kvconform.platforms.spec import PlatformSpec

    from .selection import ConnectorParam

NOT_RUN = "not run: the connector could not be constructed here"
MESSAGE_LIMIT = 240  # the connector's error, in one line: it is quoted in every not-run reason
# The order vLLM's engine builds them in: EngineCore.__init__ (vllm/v1/engine/core.py) creates the executor, then
# _initialize_kv_caches calls its initialize_from_config, where each worker builds the WORKER half
# (Worker.initialize_from_config -> ensure_kv_transfer_initialized, vllm/v1/worker/gpu_worker.py); only then it
# creates the Scheduler, which builds the SCHEDULER half (vllm/v1/core/sched/scheduler.py). A connector whose
# halves both fail thus fails here as in a deployment: with its worker half's error.
SIDES = ("worker", "scheduler")
# What the build may raise that is not the connector's failure: the run's own stops (Ctrl-C, sys.exit, pytest.exit)
# and pytest's outcomes (skip, fail, xfail: pytest's control flow, whoever raised it, is the asking test's result).
PASSED_THROUGH: tuple[type[BaseException], ...] = (KeyboardInterrupt, SystemExit, pytest.exit.Exception,
                                                   pytest.skip.Exception, pytest.fail.Exception)


@dataclass(frozen=True)
class ConstructionFailure:
    """The first construction of a connector that raised: which half, at which stage, and what it raised."""

    connector: str
    where: str  # "kv_both, worker side, in vLLM's KVConnectorFactory"
    error: str  # "RuntimeError: Embedded UMBP requires MORI built with BUILD_UMBP=ON"
    raised_at: str = ""  # "my_pkg/core.py:42", in the connector's own code where a frame is (raised_at.py)

    def failure(self) -> str:
        """The construction test's failure: the connector's error and where it raised, then what it means."""
        at = f" (raised at {self.raised_at})" if self.raised_at else ""
        return (f"{self.connector} could not be constructed here ({self.where}): {self.error}{at}; no profile names "
                f"it, so its other checks are not run (a profile, --profiles FILE, says what it needs: "
                f"requires.packages, requires.platforms, refusal)")

    def not_run(self) -> str:
        """The skip reason of each of its other checks."""
        return f"{NOT_RUN} ({self.error})"


def describe(exc: BaseException, connector_module: str) -> tuple[str, str]:
    """(``Type: message``, where it raised) of a construction's exception. A bare ``assert`` has no message, so
    its line's source is quoted with the place: ``my_pkg/core.py:42: assert lib.ready()``."""
    said = one_line(str(exc), MESSAGE_LIMIT)
    error = f"{type(exc).__name__}: {said}" if said else type(exc).__name__
    frame = raised_at(exc, top_package(connector_module))
    if frame is None:
        return error, ""
    source = f": {one_line(frame.source, MESSAGE_LIMIT)}" if frame.source and not said else ""
    return error, f"{frame}{source}"


def first_failure(rig: Rig) -> ConstructionFailure | None:
    """Build the worker and the scheduler half of the rig's connector (``SIDES``' order) for each kv_role its
    profile lists, each from a fresh ``VllmConfig`` and ``KVCacheConfig`` through vLLM's ``KVConnectorFactory``,
    and shut each down; the first that raised, or None. A refusal its profile words (``ConnectorRefused``),
    kvconform's own misfit with this vLLM (``VllmApiError``) and ``PASSED_THROUGH`` are raised, never counted as
    the connector's failure."""
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole

    for kv_role in dict.fromkeys(rig.connector.profile.roles or ["kv_both"]):
        for side in SIDES:
            stage = "vLLM's config refused it"
            try:
                with refusal_as(ConnectorRefused, rig.connector), restore_harness_affinity():
                    config = rig.vllm_config(kv_role)
                    groups = [(rig.layer_names(), rig.attention_spec())]
                    kv_cache_config = kvcache.build_kv_cache_config(config, groups, rig.num_blocks)
                    stage = "in vLLM's KVConnectorFactory"
                    built = KVConnectorFactory.create_connector(config, KVConnectorRole[side.upper()],
                                                                kv_cache_config)
            except (ConnectorRefused, VllmApiError):
                raise
            except PASSED_THROUGH:
                raise
            except BaseException as exc:  # noqa: BLE001 - a pyo3 panic is the connector's failure too
                error, where = describe(exc, rig.connector.load_class().__module__)
                return ConstructionFailure(rig.connector.name, f"{kv_role}, {side} side, {stage}", error, where)
            _shut_down(built)
    return None


def _shut_down(connector: object) -> None:
    """End what building it started; how it shuts down is judged by the checks that drive it, not here."""
    try:
        connector.shutdown()  # type: ignore[attr-defined]
    except PASSED_THROUGH:
        raise
    except BaseException:  # noqa: BLE001 - the checks' own shutdowns judge this; the attempt only frees what it built
        pass


def _backend(platform: PlatformSpec) -> str:
    """The platform's first connector backend vLLM can load here (every check's default axis starts there)."""
    from kvconform.platforms.vllm_backends import confirm

    usable = [backend for backend in platform.backends if confirm(backend).confirmed is not False]
    return (usable or list(platform.backends))[0]


def _attempt(connector: ConnectorParam, platform: PlatformSpec) -> ConstructionFailure | None:
    """``first_failure`` on a rig of its own: the same inputs whichever test asks first. The one place the probe
    builds connectors: what must hold around every construction (a lock across test processes) wraps this."""
    from vllm.config import VllmConfig

    from kvconform.platforms import probe

    rank = worker_device_index(probe(platform.name).device_count)  # the device the checks' caches go on
    with tempfile.TemporaryDirectory(prefix="kvconform-construction-") as folder:
        root = Path(folder)
        storage = root / "kv-storage"
        storage.mkdir()
        rig = Rig(connector, platform, _backend(platform), CacheShape(), write_tiny_model(root / "tiny-model"),
                  storage, platform.device(rank))
        # the test process's world of one (conformance/conftest.py's worker_process); a world of its own elsewhere
        with single_rank_parallel_state(VllmConfig(), local_rank=rank):
            return first_failure(rig)


# (module path, name, variant, platform) -> its first construction failure, or None: one attempt per process
_OUTCOMES: dict[tuple[str | None, str, str | None, str], ConstructionFailure | None] = {}


def construction_failure(connector: ConnectorParam, platform: PlatformSpec) -> ConstructionFailure | None:
    """Why ``connector`` (one no profile names) could not be built on ``platform``, or None; asked once per
    test process. An attempt that raised (kvconform cannot drive this vLLM) is not kept: it is each test's error."""
    key = (connector.module_path, connector.name, connector.variant, platform.name)
    if key not in _OUTCOMES:
        _OUTCOMES[key] = _attempt(connector, platform)
    return _OUTCOMES[key]
