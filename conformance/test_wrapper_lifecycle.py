"""A wrapper's engine-lifecycle hooks reach every child, asked by vLLM's own callers (checks/wrapper_lifecycle.py).

For connectors whose profile runs the ``lifecycle`` check (MultiConnector and its variants): the KV cache
layout, memory pool, host copy op, handshake metadata, finished count, Prometheus metrics and cache reset, then
shutdown with one child failing to shut down.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from kvconform.conformance.checks.wrapper_lifecycle import NoChildren, run_engine_hooks, run_shutdown
from kvconform.conformance.connectors.requirements import children_unmet_need, refusals_skip, require
from kvconform.conformance.engine.kvcache import CacheShape

if TYPE_CHECKING:
    from kvconform.conformance.connectors.selection import ConnectorParam
    from kvconform.conformance.engine.rig import MakeRig
    from kvconform.platforms.spec import PlatformSpec

pytestmark = pytest.mark.check("lifecycle")


def _require_wrapper(connector: ConnectorParam, platform: PlatformSpec) -> None:
    require(connector, platform, "lifecycle")
    if reason := children_unmet_need(connector, platform):
        pytest.skip(reason)


def test_wrapper_engine_hooks(platform: PlatformSpec, attn_backend: str, connector: ConnectorParam,
                              make_rig: MakeRig) -> None:
    """Layout, pool, copy op, handshake, aggregator, metrics and reset: each as its vLLM caller relies on it."""
    _require_wrapper(connector, platform)
    with refusals_skip():
        try:
            run_engine_hooks(make_rig(CacheShape()))
        except NoChildren as exc:
            pytest.skip(str(exc))


def test_wrapper_shutdown(platform: PlatformSpec, attn_backend: str, connector: ConnectorParam,
                          make_rig: MakeRig) -> None:
    """Both sides' shutdown reaches every child though the first child's raises, and the caller sees the error."""
    _require_wrapper(connector, platform)
    with refusals_skip():
        try:
            run_shutdown(make_rig(CacheShape()))
        except NoChildren as exc:
            pytest.skip(str(exc))
