"""Load failures: the stored KV disappears or is damaged after the scheduler counted on it.

By ``start_load_kv`` vLLM's scheduler has already promised the request those tokens, so the connector
has two honest answers: raise, or report what it could not fill (blocks through
``get_block_ids_with_load_errors()``, requests through ``get_transfer_results().failed_recving``). vLLM
then truncates the request at its first reported block and, per
``KVTransferConfig.kv_load_failure_policy``, fails it or recomputes from there; every block before that
stays in use as loaded and must hold the producer's bytes. A connector that swallows the failure leaves
vLLM computing on garbage: the bug this check exists for. Under ``recompute`` the check also compares its
model of the truncation with where vLLM resumed. Sabotages are data: what happens to each file of the
test's storage folder between the consumer's scheduling step and its worker step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..engine.check_failure import CheckFailure
from ..engine.device_guard import DeviceMismatch
from ..engine.prompts import request_prompt
from ..engine.rig import EngineStandIn, Rig
from ..engine.slots import token_slot_bytes
from ..vllm_install import api as vllm_api

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.outputs import KVConnectorOutput

    from ..engine.runner import ModelRunnerStandIn
    from ..engine.scheduler import SchedulerDriver

POLICIES = ("fail", "recompute")  # vLLM's KVTransferConfig.kv_load_failure_policy values


def _delete(path: Path) -> None:
    path.unlink()


def _truncate(path: Path) -> None:
    with path.open("r+b") as handle:
        handle.truncate(path.stat().st_size // 2)


def _garble_tail(path: Path) -> None:
    """Invert every byte of the second half: the file keeps its size and, for most formats, its header."""
    data = bytearray(path.read_bytes())
    half = len(data) // 2
    data[half:] = bytes(b ^ 0xFF for b in data[half:])
    path.write_bytes(bytes(data))


class Staged(Protocol):
    """What was done to the consumer's load (a ``Sabotage`` of the storage, pair_transport.py's ``PairFault``)."""

    @property
    def doc(self) -> str: ...  # what happened, in the words of a failure message


@dataclass(frozen=True)
class Sabotage:
    name: str
    damage: Callable[[Path], None]  # applied to every file in the storage folder
    doc: str


SABOTAGES: dict[str, Sabotage] = {s.name: s for s in (
    Sabotage("deleted", _delete, "every stored file was deleted"),
    Sabotage("truncated", _truncate, "every stored file was cut to half its length"),
    Sabotage("garbled", _garble_tail, "the second half of every stored file was inverted (sizes unchanged)"),
)}


class NothingStored(Exception):
    """The producer left no file in the storage folder: there is nothing to take away."""


class LoadFailureViolation(CheckFailure):
    """The consumer's cache holds wrong bytes where vLLM believes the load succeeded."""


@dataclass
class PolicyRig(Rig):
    """A ``Rig`` whose configs carry a ``kv_load_failure_policy``."""

    policy: str = "fail"

    @classmethod
    def of(cls, rig: Rig, policy: str) -> PolicyRig:
        return cls(**{f.name: getattr(rig, f.name) for f in fields(Rig)}, policy=policy)

    def vllm_config(self, role: str) -> VllmConfig:
        config = super().vllm_config(role)
        config.kv_transfer_config.kv_load_failure_policy = self.policy
        return config


@dataclass
class SabotagingWorker:
    """Stands between the scheduler and the worker: damages the storage right before the first load step.

    That is the worker step right after the scheduler took the connector's claim
    (synchronous loads run in it; asynchronous ones start in it). It keeps what the
    worker told vLLM's scheduler about failed loads, and where vLLM resumed a
    request afterwards (its computed tokens when next scheduled).
    """

    worker: ModelRunnerStandIn
    scheduler: SchedulerDriver
    storage: Path
    sabotage: Sabotage
    damaged: list[Path] = field(default_factory=list)
    raised: BaseException | None = None
    invalid_blocks: set[int] = field(default_factory=set)
    failed_requests: set[str] = field(default_factory=set)
    resumed_from: dict[str, int] = field(default_factory=dict)

    def _claimed_a_hit(self) -> bool:
        return any(self.scheduler.external_tokens(req_id) > 0 for req_id in self.scheduler.claims)

    def _note_resumes(self, scheduler_output: SchedulerOutput) -> None:
        cached = scheduler_output.scheduled_cached_reqs
        for req_id, computed in zip(cached.req_ids, cached.num_computed_tokens, strict=True):
            self.resumed_from.setdefault(req_id, computed)

    def step(self, scheduler_output: SchedulerOutput) -> KVConnectorOutput:
        if self.damaged:
            self._note_resumes(scheduler_output)
        elif self._claimed_a_hit():
            self.damaged = stored_files(self.storage)
            for path in self.damaged:
                self.sabotage.damage(path)
        try:
            output = self.worker.step(scheduler_output)
        except (DeviceMismatch, vllm_api.VllmApiError):  # the latter: kvconform cannot drive this vLLM
            raise
        except Exception as exc:
            self.raised = exc
            raise
        self.invalid_blocks |= set(output.invalid_block_ids or ())
        self.failed_requests |= set(getattr(output, "failed_recving", None) or ())
        return output


def stored_files(storage: Path) -> list[Path]:
    return sorted(p for p in storage.rglob("*") if p.is_file())


@dataclass
class LoadFailureAnswer:
    """What the connector did about the failure, and what vLLM therefore keeps as loaded."""

    raised: BaseException | None
    invalid_blocks: set[int]  # get_block_ids_with_load_errors()
    failed_requests: set[str]  # get_transfer_results().failed_recving: whole requests
    claimed: dict[str, int]
    kept_tokens: dict[str, int] = field(default_factory=dict)  # per request: tokens vLLM keeps as loaded

    def describe(self) -> str:
        if self.raised is not None:
            first_line = next(iter(str(self.raised).splitlines()), "")
            return f"raised {type(self.raised).__name__}: {first_line}"
        answers = []
        if self.invalid_blocks:
            answers.append(f"reported block(s) {sorted(self.invalid_blocks)} through get_block_ids_with_load_errors()")
        if self.failed_requests:
            answers.append(f"reported request(s) {sorted(self.failed_requests)} as failed receives")
        return " and ".join(answers) or "neither raised nor reported a load error"


def kept_tokens(block_ids: list[int], claimed: int, reported: set[int], block_size: int) -> int:
    """vLLM's truncation: a request's computed tokens end at its first reported block."""
    claimed_blocks = (claimed + block_size - 1) // block_size
    first_bad = next((i for i, b in enumerate(block_ids[:claimed_blocks]) if b in reported), None)
    return claimed if first_bad is None else min(claimed, first_bad * block_size)


def run_load_failure(rig: Rig, sabotage: Sabotage, policy: str) -> LoadFailureAnswer:
    """Producer stores; storage is damaged between the consumer's schedule and its load; the answer is judged."""
    rig = PolicyRig.of(rig, policy)
    block_size = rig.block_size
    producer_role, consumer_role = rig.roles()
    stored = {"req-0": request_prompt(0, 4 * block_size + 5)}

    producer = rig.engine(producer_role, fill_seed=1234)
    producer.run(stored)
    producer.close()
    if not stored_files(rig.storage):
        raise NothingStored(f"{rig.connector.name} left no file in its storage folder after the producer ran "
                            "(it keeps KV elsewhere): there is no stored data to delete or damage")

    consumer = rig.engine(consumer_role)
    driver = consumer.scheduler
    saboteur = SabotagingWorker(consumer.runner, driver, rig.storage, sabotage)
    for request_id, prompt in stored.items():
        driver.add(request_id, prompt)
    try:
        driver.run(saboteur)
    except Exception as exc:
        if exc is not saboteur.raised:
            raise
    finally:
        consumer.close()

    claimed = {rid: driver.external_tokens(rid) for rid in stored}
    if not saboteur.damaged:
        raise LoadFailureViolation(f"{rig.connector.name} claimed no external tokens for a stored prompt "
                                   f"(claims {claimed}): no load happened, so no load failure could be staged")
    answer = LoadFailureAnswer(saboteur.raised, saboteur.invalid_blocks, saboteur.failed_requests, claimed)
    if answer.raised is not None:
        return answer
    own_blocks = loading_blocks(rig.connector.name, driver, stored, answer)
    for rid in stored:
        kept = 0 if rid in answer.failed_requests else kept_tokens(own_blocks[rid], claimed[rid],
                                                                    answer.invalid_blocks, block_size)
        resumed = saboteur.resumed_from.get(rid)
        if answer.invalid_blocks and resumed is not None and resumed != kept:
            raise AssertionError(f"harness: vLLM's scheduler resumed {rid} from token {resumed} after the reported "
                                 f"block(s) {sorted(answer.invalid_blocks)}, but this check assumed {kept}: its "
                                 f"model of vLLM's truncation is out of date")
        answer.kept_tokens[rid] = kept
    check_kept_slots(rig, producer, consumer, answer, sabotage)
    return answer


def loading_blocks(name: str, driver: SchedulerDriver, stored: dict[str, list[int]],
                   answer: LoadFailureAnswer) -> dict[str, list[int]]:
    """Each loading request's blocks; a block reported as a failed load that none of them holds is a violation.

    Shared by the storage and the pair load-failure checks: vLLM invalidates exactly the reported
    blocks, so a report naming another request's block would make vLLM recompute the wrong request.
    """
    own_blocks = {rid: list(driver.block_ids[rid][0]) for rid in stored}
    stray = answer.invalid_blocks - set().union(*map(set, own_blocks.values()))
    if stray:
        raise LoadFailureViolation(f"{name} reported block(s) {sorted(stray)} as failed loads, but no "
                                   f"loading request holds them (its requests hold {own_blocks})")
    return own_blocks


def check_kept_slots(rig: PolicyRig, producer: EngineStandIn, consumer: EngineStandIn, answer: LoadFailureAnswer,
                     sabotage: Staged) -> None:
    block_size = rig.block_size
    for rid, tokens in answer.kept_tokens.items():
        if tokens == 0:
            continue
        for name, view_b in consumer.caches.items():
            saved = token_slot_bytes(producer.caches[name], producer.scheduler.block_ids[rid][0], tokens, block_size)
            kept = token_slot_bytes(view_b, consumer.scheduler.block_ids[rid][0], tokens, block_size)
            same = (saved.to(kept.device) == kept).all(dim=1)
            if not bool(same.all()):
                first = int((~same).nonzero()[0])
                raise LoadFailureViolation(
                    f"{rig.connector.name}: after the consumer was scheduled, {sabotage.doc}; the connector "
                    f"{answer.describe()}, so vLLM ({rig.policy} policy) keeps {tokens} of the {answer.claimed[rid]} "
                    f"claimed tokens of {rid} as loaded, but token {first} (layer {name}) holds bytes the producer "
                    f"never saved ({int((~same).sum())} wrong token slot(s) in that layer)")
