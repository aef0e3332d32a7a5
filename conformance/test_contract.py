"""API contract: both halves of every connector answer vLLM's calls with the types base.py documents.

vLLM trusts these answers blindly (the scheduler unpacks the claim, the runner unions the finished ids),
so a wrong type fails far from its cause. Each check builds real vLLM inputs from a ``Rig`` and constructs
the connector as ``cls(vllm_config, role, kv_cache_config)`` per kv_role of its profile; a violation
names the connector, the call, the documented type and the answer. The degenerate paths are calls vLLM
really makes: nothing to load, aborted while waiting, unknown ids, and ``register_kv_caches({})``, which
conforms by returning or by a ``ValueError`` that says why (any other exception fails). Skips follow the
round-trip's rules (``require``, the profile's ``refusal``); a connector with no profile that cannot be
built here fails once, in ``test_contract_scheduler``, and its other checks are not run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from kvconform.conformance.checks.contract import (
    ContractConnector,
    ContractRig,
    ContractViolation,
    ContractWorker,
    FinishedIds,
    check_answer,
    check_reported_ids,
    count_calls,
    make_request,
    no_blocks,
    scheduler_output,
    supports_hma,
)
from kvconform.conformance.connectors.requirements import refusals_skip, require
from kvconform.conformance.engine.kvcache import CacheShape
from kvconform.conformance.engine.prompts import request_prompt
from kvconform.conformance.engine.rig import ConnectorRefused, refusal_as

if TYPE_CHECKING:
    from kvconform.conformance.connectors.selection import ConnectorParam
    from kvconform.conformance.engine.rig import EngineStandIn, MakeRig
    from kvconform.platforms.spec import PlatformSpec

pytestmark = pytest.mark.check("contract")

SHAPE = CacheShape()  # the backend's preferred block size
PROMPT_UNIT = 32  # prompts are sized in units of 32 tokens: several blocks at any preferred block size
UNKNOWN_ID = "no-such-request"


def _prompt(block_size: int, index: int = 0) -> list[int]:
    """Three full blocks and a partial one: long enough for any connector to claim a hit."""
    return request_prompt(index, 3 * block_size + 5)


@pytest.fixture
def contract(subject: ConnectorParam, make_rig: MakeRig) -> ContractRig:
    """The connector under test in the contract check's rig."""
    return ContractRig(make_rig(SHAPE), subject.load_class())


def test_contract_scheduler(platform: PlatformSpec, attn_backend: str, connector: ConnectorParam,
                            make_rig: MakeRig) -> None:
    """Constructible with the SCHEDULER role; the claim, metadata, finish hooks and events are typed.

    For a connector that no profile names it is the construction test too: both halves of it, built through
    vLLM's factory once per process (connectors/construction.py); where one raises, this test fails with
    the connector's error and its other checks are not run."""
    subject = ContractRig(make_rig(SHAPE), require(connector, platform, "contract", reports_construction=True))
    with refusals_skip():
        for kv_role in subject.kv_roles():
            with subject.scheduler(kv_role) as half:
                request = half.new_request("contract-claimed", _prompt(PROMPT_UNIT))
                half.ask("get_num_new_matched_tokens", request, 0, shown_args="request, 0")
                half.ask("build_connector_meta", scheduler_output(), shown_args="an empty SchedulerOutput")
                half.ask("request_finished", request, [], shown_args="request, []")
                if supports_hma(half.connector):
                    other = half.new_request("contract-claimed-hma", _prompt(PROMPT_UNIT, 1))
                    half.ask("get_num_new_matched_tokens", other, 0, shown_args="request, 0")
                    half.ask("request_finished_all_groups", other, half.no_block_ids(),
                             shown_args=f"request, {half.no_block_ids()}")
                half.ask("take_events", shown_args="")


def test_contract_worker(platform: PlatformSpec, attn_backend: str, contract: ContractRig) -> None:
    """Constructible with the WORKER role; registers vLLM's caches; a step's reports are typed."""
    with refusals_skip():
        for kv_role in contract.kv_roles():
            with contract.scheduler(kv_role) as scheduler, contract.worker(kv_role) as worker:
                metadata = scheduler.ask("build_connector_meta", scheduler_output(),
                                         shown_args="an empty SchedulerOutput")
                worker.idle_step(metadata)


def test_contract_driven(platform: PlatformSpec, attn_backend: str, contract: ContractRig) -> None:
    """Answers given to vLLM's own Scheduler and to the runner's call order, end to end.

    A producer side runs a request, then a fresh consumer side over the same storage
    runs the same prompt, so a storing connector answers on its save path and its load path.
    """
    with refusals_skip():
        for index, kv_role in enumerate(contract.rig.roles()):
            side = contract.rig.engine(kv_role)
            try:
                _drive_one_request(contract, side, f"{kv_role}, {('producer', 'consumer')[index]}", index)
            finally:
                side.close()


def _drive_one_request(subject: ContractRig, side: EngineStandIn, role: str, index: int) -> None:
    label = f"{subject.name} ({role} side, driven by vLLM's Scheduler)"
    scheduler_connector = side.scheduler.connector
    scheduler_calls = count_calls(scheduler_connector)
    worker_calls = count_calls(side.runner.connector)
    check_reported_ids(side.runner.connector, label, lambda: side.scheduler.scheduler.requests)
    request_id = f"contract-driven-{index}"
    side.scheduler.add(request_id, _prompt(PROMPT_UNIT))
    # vLLM asks again for every request still waiting, so one question before the first step is a legal
    # call; asking the class's method keeps the harness's claim recorder from unpacking a malformed answer.
    request = side.scheduler.scheduler.requests[request_id]
    check_answer(label, "get_num_new_matched_tokens", "get_num_new_matched_tokens(request, 0)",
                 type(scheduler_connector).get_num_new_matched_tokens(scheduler_connector, request, 0))
    side.scheduler.run(side.runner)

    finish_hook = "request_finished_all_groups" if supports_hma(scheduler_connector) else "request_finished"
    needed = {"get_num_new_matched_tokens": scheduler_calls, "build_connector_meta": scheduler_calls,
              finish_hook: scheduler_calls, "take_events": scheduler_calls,
              "get_block_ids_with_load_errors": worker_calls}
    missed = [method for method, calls in needed.items() if not calls[method]]
    # the runner asks for finished transfers through get_transfer_results, which wrappers override
    if not (worker_calls["get_finished"] or worker_calls["get_transfer_results"]):
        missed.append("get_finished/get_transfer_results")
    assert not missed, f"{label}: vLLM never called {', '.join(missed)}, so its answers went unchecked"
    assert side.scheduler.claims.get(request_id), f"{label}: no claim was recorded for {request_id}"


def test_contract_no_load(platform: PlatformSpec, attn_backend: str, contract: ContractRig) -> None:
    """A request with nothing to load: the claim, an allocation of 0 external tokens and no blocks, a step."""
    with refusals_skip():
        for kv_role in contract.kv_roles():
            with contract.scheduler(kv_role) as scheduler, contract.worker(kv_role) as worker:
                # One token: vLLM always computes the last token itself, so there is nothing to load.
                request = scheduler.new_request("contract-no-load", request_prompt(0, 1))
                scheduler.ask("get_num_new_matched_tokens", request, 0, shown_args="a 1-token request, 0")
                scheduler.connector.update_state_after_alloc(request, no_blocks(scheduler.kv_cache_config), 0)
                metadata = scheduler.ask("build_connector_meta", scheduler_output(),
                                         shown_args="an empty SchedulerOutput")
                worker.idle_step(metadata)
                scheduler.finish(request, scheduler.no_block_ids(), "the 1-token request")


def _step_finishing(scheduler: ContractConnector, worker: ContractWorker, request_id: str) -> FinishedIds:
    """A step whose SchedulerOutput finishes ``request_id``: its metadata, then the worker's (sending, loading)."""
    metadata = scheduler.ask("build_connector_meta", scheduler_output([request_id]),
                             shown_args=f"a SchedulerOutput finishing {request_id!r}")
    return worker.idle_step(metadata, [request_id])


def test_contract_finished_before_load(platform: PlatformSpec, attn_backend: str, contract: ContractRig) -> None:
    """A request aborted while waiting: claimed, finished with no blocks, never reported as loaded."""
    with refusals_skip():
        for kv_role in contract.kv_roles():
            with contract.scheduler(kv_role) as scheduler, contract.worker(kv_role) as worker:
                request_id = "contract-aborted"
                request = scheduler.new_request(request_id, _prompt(PROMPT_UNIT))
                scheduler.ask("get_num_new_matched_tokens", request, 0, shown_args="request, 0")
                delay_free, _ = scheduler.finish(request, scheduler.no_block_ids(), "request")
                sending, recving = _step_finishing(scheduler, worker, request_id)
                if request_id in (recving or ()):
                    raise ContractViolation(f"{worker.label}: get_finished reported {request_id!r} as finished "
                                            f"loading, but it was finished before any load was allocated")
                if not delay_free and request_id in (sending or ()):
                    raise ContractViolation(
                        f"{worker.label}: get_finished reported {request_id!r} as finished sending, but the "
                        f"scheduler side's finish hook returned False (no delayed free), so vLLM no longer holds "
                        f"it (its scheduler asserts every reported id is a request it holds)")


def test_contract_unknown_requests(platform: PlatformSpec, attn_backend: str, contract: ContractRig) -> None:
    """Ids a connector never saw: a finish hook for an unseen request, finished ids it never handled."""
    with refusals_skip():
        for kv_role in contract.kv_roles():
            with contract.scheduler(kv_role) as scheduler, contract.worker(kv_role) as worker:
                unseen = make_request(scheduler.vllm_config, "contract-unseen", _prompt(PROMPT_UNIT))
                scheduler.finish(unseen, scheduler.no_block_ids(), "a request it never saw")
                reported = _step_finishing(scheduler, worker, UNKNOWN_ID)
                for direction, ids in zip(("sending", "loading"), reported, strict=True):
                    if UNKNOWN_ID in (ids or ()):
                        raise ContractViolation(
                            f"{worker.label}: get_finished({{{UNKNOWN_ID!r}}}) reported {UNKNOWN_ID!r} as finished "
                            f"{direction}, a request it never handled (vLLM's scheduler asserts every reported "
                            f"id is a request it holds)")


def test_contract_empty_registration(platform: PlatformSpec, attn_backend: str, contract: ContractRig) -> None:
    """``register_kv_caches({})`` on a fresh worker returns, or refuses with a ValueError that says why."""
    with refusals_skip():
        for kv_role in contract.kv_roles():
            with contract.worker(kv_role, register=False) as worker:
                try:
                    with refusal_as(ConnectorRefused, contract.rig.connector):
                        worker.connector.register_kv_caches({})
                except ConnectorRefused:
                    raise
                except ValueError as refusal:
                    if not str(refusal).strip():
                        raise ContractViolation(f"{worker.label}: register_kv_caches({{}}) raised a ValueError "
                                                f"with no message; a refusal must say why") from refusal
                except Exception as crash:
                    said = f": {crash}" if str(crash) else ""
                    raise ContractViolation(
                        f"{worker.label}: register_kv_caches({{}}) crashed with {type(crash).__name__}{said}; "
                        f"expected it to return, or to refuse with a ValueError that says why") from crash
