"""A wrapper's engine-lifecycle hooks reach every child, asked by vLLM's own callers (checks/wrapper_lifecycle.py).

For connectors whose profile runs the ``lifecycle`` check (MultiConnector and its variants): the KV cache
layout, memory pool, host copy op, handshake metadata, finished count, Prometheus metrics and cache reset;
shutdown with one child failing to shut down; and what the children report (worker metadata, transfer stats, KV
events, failed loads) carried to vLLM's scheduler, event publisher and stats loggers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from kvconform.conformance.checks.wrapper_lifecycle import (
    NoChildren,
    NothingReported,
    ReportsRig,
    run_engine_hooks,
    run_reports,
    run_shutdown,
)
from kvconform.conformance.connectors.requirements import children_unmet_need, refusals_skip
from kvconform.conformance.engine.kvcache import CacheShape
from kvconform.conformance.engine.prompts import request_prompt

if TYPE_CHECKING:
    from kvconform.conformance.connectors.selection import ConnectorParam
    from kvconform.conformance.engine.rig import MakeRig
    from kvconform.platforms.spec import PlatformSpec

pytestmark = pytest.mark.check("lifecycle")


def _require_wrapper(connector: ConnectorParam, platform: PlatformSpec) -> None:
    if reason := children_unmet_need(connector, platform):
        pytest.skip(reason)


def test_wrapper_engine_hooks(platform: PlatformSpec, attn_backend: str, subject: ConnectorParam,
                              make_rig: MakeRig) -> None:
    """Layout, pool, copy op, handshake, aggregator, metrics and reset: each as its vLLM caller relies on it."""
    _require_wrapper(subject, platform)
    with refusals_skip():
        try:
            run_engine_hooks(make_rig(CacheShape()))
        except NoChildren as exc:
            pytest.skip(str(exc))


def test_wrapper_shutdown(platform: PlatformSpec, attn_backend: str, subject: ConnectorParam,
                          make_rig: MakeRig) -> None:
    """Both sides' shutdown reaches every child though the first child's raises, and the caller sees the error."""
    _require_wrapper(subject, platform)
    with refusals_skip():
        try:
            run_shutdown(make_rig(CacheShape()))
        except NoChildren as exc:
            pytest.skip(str(exc))


def test_wrapper_reports(platform: PlatformSpec, attn_backend: str, subject: ConnectorParam,
                         make_rig: MakeRig) -> None:
    """What the children report (worker metadata, transfer stats, metrics, KV events, failed loads) reaches vLLM's
    callers through it, each child's own, merged, exported and published as the children would have it; and vLLM
    recomputes what a child failed to load."""
    _require_wrapper(subject, platform)
    rig = make_rig(CacheShape(), ReportsRig)
    with refusals_skip():
        try:
            run_reports(rig, request_prompt(0, 3 * rig.block_size + 5))
        except (NoChildren, NothingReported) as exc:
            pytest.skip(str(exc))
