"""The order a model-runner step calls the worker side of a connector: written down once.

vLLM's ``KVConnectorModelRunnerMixin._get_kv_connector_output`` wraps every step,
with a forward (``execute_model``) or without one (``kv_connector_no_forward``):
bind the step's metadata; ``start_load_kv`` before the forward when the step has
synchronous loads, after it otherwise; ``wait_for_save``; the connector's reports
(finished transfers, blocks that failed to load, transfer stats, worker metadata); clear the metadata.
The runner stand-in (a step with a forward, every layer saved) and the contract
checks (a step with nothing to run, each answer checked) both step through this
function, so when vLLM reorders those calls it is one edit here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

Report = TypeVar("Report")

# call(method, *args): the caller's way of calling ``connector.method(*args)`` (plain, or checked).
Call = Callable[..., Any]


def connector_step(call: Call, metadata: object, forward_context: Callable[[], object], *, sync_loads: bool,
                   report: Callable[[], Report], forward: Callable[[], None] | None = None) -> Report:
    """One step's worker-side calls in vLLM's order; returns what ``report`` asked the connector.

    Run it inside vLLM's ``set_forward_context``: ``forward_context`` reads that context
    when ``start_load_kv`` is called, as vLLM's runner passes ``get_forward_context()``.
    """
    call("bind_connector_metadata", metadata)
    if sync_loads:  # this step's forward reads the loads: they start first
        call("start_load_kv", forward_context())
    if forward is not None:
        forward()
    if not sync_loads:  # asynchronous loads start after the forward launch, off its critical path
        call("start_load_kv", forward_context())
    call("wait_for_save")
    answers = report()
    call("clear_connector_metadata")
    return answers
