"""Load failures: the stored KV disappears or is damaged after the scheduler counted on it.

vLLM's scheduler has already promised the request those tokens (the connector's
``get_num_new_matched_tokens``) when the worker's ``start_load_kv`` finds the data
gone. The connector then has two honest answers: raise (the engine stops), or
report the blocks it could not fill through ``get_block_ids_with_load_errors()``.
vLLM's scheduler truncates each request's computed tokens at its first reported
block and, per ``KVTransferConfig.kv_load_failure_policy``, fails the request
(``fail``, the default; later blocks are evicted from the prefix cache) or
recomputes from there (``recompute``). Either way every block *before* the first
reported one stays in use as loaded, so each of those slots must hold exactly
what the producer saved. A connector that swallows the failure leaves vLLM
computing on garbage: that is the bug this check exists for.

Sabotages are data: what happens to every file in the per-test storage folder
between the consumer's scheduling step and its worker step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path

import torch

from conformance.harness.devices import DeviceMismatch
from conformance.harness.rig import Rig, Side
from conformance.harness.roundtrip import prompt_tokens

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


class LoadFailureViolation(AssertionError):
    """The consumer's cache holds wrong bytes where vLLM believes the load succeeded."""


@dataclass
class PolicyRig(Rig):
    """A ``Rig`` whose configs carry a ``kv_load_failure_policy``."""

    policy: str = "fail"

    @classmethod
    def of(cls, rig: Rig, policy: str) -> "PolicyRig":
        return cls(**{f.name: getattr(rig, f.name) for f in fields(Rig)}, policy=policy)

    def vllm_config(self, role: str):
        config = super().vllm_config(role)
        config.kv_transfer_config.kv_load_failure_policy = self.policy
        return config


@dataclass
class SabotagingWorker:
    """Stands between the scheduler and the worker: damages the storage right before the first load step."""

    worker: object  # WorkerStandIn
    scheduler: object  # SchedulerDriver
    storage: Path
    sabotage: Sabotage
    damaged: list[Path] = field(default_factory=list)
    raised: BaseException | None = None
    resumed_from: dict[str, int] = field(default_factory=dict)  # tokens vLLM kept, when it rescheduled a request

    def _loads_now(self, scheduler_output) -> bool:
        return any(self.scheduler.external_tokens(r.req_id) > 0 for r in scheduler_output.scheduled_new_reqs)

    def _note_resumes(self, scheduler_output) -> None:
        """Where vLLM restarts a request after the load step: its computed tokens when next scheduled."""
        cached = scheduler_output.scheduled_cached_reqs
        for req_id, computed in zip(cached.req_ids, cached.num_computed_tokens):
            self.resumed_from.setdefault(req_id, computed)

    def step(self, scheduler_output):
        if self.damaged:
            self._note_resumes(scheduler_output)
        if not self.damaged and self._loads_now(scheduler_output):
            self.damaged = stored_files(self.storage)
            for path in self.damaged:
                self.sabotage.damage(path)
        try:
            return self.worker.step(scheduler_output)
        except DeviceMismatch:
            raise
        except Exception as exc:
            self.raised = exc
            raise


def stored_files(storage: Path) -> list[Path]:
    return sorted(p for p in storage.rglob("*") if p.is_file())


@dataclass
class LoadFailureAnswer:
    """What the connector did about the failure, and what vLLM therefore treats as loaded."""

    raised: BaseException | None
    reported: set[int]
    believed_tokens: dict[str, int]  # per request: tokens vLLM keeps as loaded
    claimed: dict[str, int]

    def describe(self) -> str:
        if self.raised is not None:
            return f"raised {type(self.raised).__name__}: {str(self.raised).splitlines()[0] if str(self.raised) else ''}"
        if self.reported:
            return f"reported block(s) {sorted(self.reported)} through get_block_ids_with_load_errors()"
        return "neither raised nor reported a load error"


def _kept_tokens(block_ids: list[int], claimed: int, reported: set[int], block_size: int) -> int:
    """vLLM's truncation: computed tokens end at the request's first reported block."""
    claimed_blocks = (claimed + block_size - 1) // block_size
    first_bad = next((i for i, b in enumerate(block_ids[:claimed_blocks]) if b in reported), None)
    return claimed if first_bad is None else min(claimed, first_bad * block_size)


def _token_slots(view: torch.Tensor, block_ids: list[int], tokens: int, block_size: int) -> torch.Tensor:
    """The bytes of a request's first ``tokens`` token slots in a standard ``[B, H, N, C]`` view."""
    positions = torch.arange(tokens)
    blocks = torch.tensor(block_ids, dtype=torch.long)[positions // block_size].to(view.device)
    offsets = (positions % block_size).to(view.device)
    return view[blocks, :, offsets].contiguous().view(torch.uint8).flatten(1)


def run_load_failure(rig: Rig, sabotage: Sabotage, policy: str) -> LoadFailureAnswer:
    """Producer stores; storage is damaged between the consumer's schedule and its load; the answer is judged."""
    rig = PolicyRig.of(rig, policy)
    block_size = rig.shape.block_size
    producer_role, consumer_role = rig.roles()
    stored = {"req-0": prompt_tokens(0, 4 * block_size + 5)}

    producer = rig.side(producer_role, fill_seed=1234)
    producer.run(stored)
    producer.close()
    if not stored_files(rig.storage):
        raise NothingStored(f"{rig.connector.name} left no file in its storage folder after the producer ran "
                            "(it keeps KV elsewhere): there is no stored data to delete or damage")

    consumer = rig.side(consumer_role)
    driver = consumer.scheduler
    saboteur = SabotagingWorker(consumer.worker, driver, rig.storage, sabotage)
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
    reported = set().union(*(set(r.load_errors or ()) for r in consumer.worker.records))
    answer = LoadFailureAnswer(saboteur.raised, reported, {}, claimed)
    if answer.raised is not None:
        return answer
    own_blocks = {rid: list(driver.block_ids[rid][0]) for rid in stored}
    stray = reported - set().union(*map(set, own_blocks.values()))
    if stray:
        raise LoadFailureViolation(f"{rig.connector.name} reported block(s) {sorted(stray)} as failed loads, but no "
                                   f"loading request holds them (its requests hold {own_blocks})")
    for rid in stored:
        answer.believed_tokens[rid] = _kept_tokens(own_blocks[rid], claimed[rid], reported, block_size)
        if reported and rid in saboteur.resumed_from and saboteur.resumed_from[rid] != answer.believed_tokens[rid]:
            raise AssertionError(
                f"harness: vLLM's scheduler resumed {rid} from token {saboteur.resumed_from[rid]} after the reported "
                f"block(s) {sorted(reported)}, but this check assumed {answer.believed_tokens[rid]}: its model of "
                f"vLLM's truncation is out of date")
    _check_kept_slots(rig, producer, consumer, answer, sabotage)
    return answer


def _check_kept_slots(rig: Rig, producer: Side, consumer: Side, answer: LoadFailureAnswer,
                      sabotage: Sabotage) -> None:
    block_size = rig.shape.block_size
    for rid, tokens in answer.believed_tokens.items():
        if tokens == 0:
            continue
        for name, view_b in consumer.caches.items():
            saved = _token_slots(producer.caches[name], producer.scheduler.block_ids[rid][0], tokens, block_size)
            kept = _token_slots(view_b, consumer.scheduler.block_ids[rid][0], tokens, block_size)
            same = (saved.to(kept.device) == kept).all(dim=1)
            if not bool(same.all()):
                first = int((~same).nonzero()[0])
                raise LoadFailureViolation(
                    f"{rig.connector.name}: after the consumer was scheduled, {sabotage.doc}; the connector "
                    f"{answer.describe()}, so vLLM ({rig.policy} policy) keeps {tokens} of the {answer.claimed[rid]} "
                    f"claimed tokens of {rid} as loaded, but token {first} (layer {name}) holds bytes the producer "
                    f"never saved ({int((~same).sum())} wrong token slot(s) in that layer)")
