"""Stores shared between configurations: an engine never claims or loads KV another configuration saved.

Shared stores (LMCache's and Mooncake's servers, 3FS, a file system) serve engines of different models
and settings, and KV saved by one configuration is garbage to another, so a store's keys must carry what
gives KV its meaning. Two configurations share one store (storage folder, servers, process): A stores;
B must claim nothing and change nothing; B stores and hits its own; A still loads A's bytes. Block size
and layout are not varied: KV means the same per token across them, and a store may serve it so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace

from ..engine.check_failure import CheckFailure
from ..engine.kvcache import CacheShape
from ..engine.model import NUM_LAYERS, attention_layer_names, write_tiny_model
from ..engine.prompts import request_prompt
from ..engine.rig import EngineStandIn, Rig
from .roundtrip import ROUNDTRIP_SCENARIOS, RoundTripFailure, verify_roundtrip


class SharedStoreLeak(CheckFailure):
    """An engine claimed or loaded KV that only an engine of another configuration had saved."""


@dataclass
class _DeeperModelRig(Rig):
    """The rig over a model with one more layer: its config.json says so, and the caches follow."""

    def layer_names(self) -> list[str]:
        return attention_layer_names(count=NUM_LAYERS + 1)


def _as(rig_class: type[Rig], rig: Rig, **changes: object) -> Rig:
    """``rig`` as another ``Rig`` class, sharing its storage, services and engine list."""
    kept = {f.name: getattr(rig, f.name) for f in fields(rig) if f.init}
    return rig_class(**{**kept, **changes})


def _other_dtype(shape: CacheShape) -> CacheShape:
    return replace(shape, dtype="bfloat16" if shape.dtype != "bfloat16" else "float16")


@dataclass(frozen=True)
class OtherConfiguration:
    doc: str  # what the second engine changes, in words
    make: Callable[[Rig], Rig]  # the test's rig -> the second engine's rig over the same store


OTHER_CONFIGURATIONS: dict[str, OtherConfiguration] = {
    "model": OtherConfiguration(
        "another model of the same shapes (another model name)",
        lambda rig: replace(rig, model_dir=write_tiny_model(rig.storage.parent / "other-model"))),
    "kv-dtype": OtherConfiguration(
        "the same model with another KV dtype of the same size (float16 and bfloat16)",
        lambda rig: replace(rig, shape=_other_dtype(rig.shape))),
    "layers": OtherConfiguration(
        f"a model with {NUM_LAYERS + 1} layers where the first has {NUM_LAYERS} (the same layer names, and one more)",
        lambda rig: _as(_DeeperModelRig, rig, model_dir=write_tiny_model(
            rig.storage.parent / "deeper-model", num_hidden_layers=NUM_LAYERS + 1))),
}


def _describe(rig: Rig) -> str:
    return (f"model {rig.model_dir.name} ({len(rig.layer_names())} layers), KV dtype {rig.shape.dtype}, "
            f"block size {rig.block_size}")


def _store(rig: Rig, role: str, prompts: dict[str, list[int]], fill_seed: int) -> EngineStandIn:
    producer = rig.engine(role, fill_seed=fill_seed)
    producer.run(prompts)
    producer.close()
    return producer


def _ask(rig: Rig, role: str, prompts: dict[str, list[int]]) -> EngineStandIn:
    consumer = rig.engine(role)
    consumer.run(prompts)
    consumer.close()
    return consumer


def _expect_no_hit(rig: Rig, other: Rig, role: str, prompts: dict[str, list[int]]) -> None:
    """Step 2: the other configuration's consumer claims none of what only ``rig``'s producer stored."""
    consumer = other.engine(role)
    crash: Exception | None = None
    try:
        consumer.run(prompts)
        consumer.close()
    except Exception as exc:  # noqa: BLE001 - a crash after a claim is the leak going wrong; reported as it
        crash = exc
    claimed = {rid: consumer.scheduler.external_tokens(rid) for rid in prompts}
    leaked = {rid: tokens for rid, tokens in claimed.items() if tokens > 0}
    if leaked:
        rid, tokens = next(iter(leaked.items()))
        raise SharedStoreLeak(
            f"{rig.connector.name} claimed {tokens} external tokens of {rid} for an engine of {_describe(other)}, but "
            f"only an engine of {_describe(rig)} had stored that prompt: its keys ignore what differs, so one "
            f"configuration's KV is offered to another"
            + (f"; loading it then raised {type(crash).__name__}" + (f": {crash}" if str(crash) else " (no message)")
               if crash is not None else "")) from crash
    if crash is not None:
        raise crash
    for name, view in consumer.caches.items():
        if bool(view.view(-1).ne(0).any()):
            raise SharedStoreLeak(
                f"{rig.connector.name} claimed nothing for an engine of {_describe(other)}, yet layer {name} of its "
                f"cache changed: it loaded KV an engine of {_describe(rig)} had stored")


def run_shared_store(rig: Rig, other: Rig) -> None:
    """The four steps of the module docstring; raises ``SharedStoreLeak`` or the round-trip's failure."""
    producer_role, consumer_role = rig.roles()
    scenario = ROUNDTRIP_SCENARIOS["unaligned"]
    prompts = {f"req-{i}": request_prompt(i, n) for i, n in enumerate(scenario.lengths(rig.block_size))}

    first = _store(rig, producer_role, prompts, fill_seed=1234)
    _expect_no_hit(rig, other, consumer_role, prompts)
    second = _store(other, producer_role, prompts, fill_seed=4321)
    verify_roundtrip(other, second, _ask(other, consumer_role, prompts), prompts, prompts)
    try:
        verify_roundtrip(rig, first, _ask(rig, consumer_role, prompts), prompts, prompts)
    except RoundTripFailure as exc:
        raise SharedStoreLeak(
            f"after an engine of {_describe(other)} stored the same prompts, an engine of {_describe(rig)} no longer "
            f"gets its own KV back (the other configuration's saves replaced it): {exc}") from exc
