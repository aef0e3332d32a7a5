"""The harness of ``kvconform bench``: timing a connector's save and load, and the platform's floor for the same bytes.

The bench drives the connector as the round-trip does (vLLM's real Scheduler, a ``ModelRunnerStandIn``)
on a rig sized for long requests, and times only the worker steps that move a request's KV: from the
prefill step's ``save_kv_layer``/``wait_for_save`` to the step that reports the save finished, and from
``start_load_kv`` to the step that reports the load finished. Every load is checked byte for byte, so a
connector that loads nothing cannot look fast. The baselines move the same blocks with only torch and the
file system, so "connector GB/s / baseline GB/s" is the share of the platform's bandwidth it uses.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch

from ..engine import kvcache
from ..engine.model import HEAD_SIZE, NUM_KV_HEADS, NUM_LAYERS, TINY_LLAMA, attention_layer_names
from ..engine.prompts import seeded_prompt
from ..engine.rig import EngineStandIn, Rig
from ..engine.runner import ModelRunnerStandIn
from ..engine.scheduler import SchedulerDriver
from ..engine.slots import leading_blocks
from ..vllm_install import api as vllm_api

if TYPE_CHECKING:
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import AttentionSpec
    from vllm.v1.outputs import KVConnectorOutput

    from ..connectors.profiles import ConnectorProfile

# Blocks beyond the longest request: the null block, the decode token's block, and slack.
SPARE_BLOCKS = 8
# Scheduler steps a request may take to drain (asynchronous connectors report completion later).
MAX_STEPS = 64


# ----------------------------------------------------------------------------- the KV geometry


@dataclass(frozen=True)
class KVGeometry:
    """The attention KV shape of a model: what decides the bytes per token."""

    name: str
    layers: int
    kv_heads: int
    head_size: int
    doc: str

    def bytes_per_token(self, dtype: torch.dtype) -> int:
        element: int = torch.empty(0, dtype=dtype).element_size()
        return 2 * self.layers * self.kv_heads * self.head_size * element  # K and V

    def model_config(self, max_model_len: int) -> dict[str, Any]:
        """A Llama ``config.json`` with this KV geometry (no weights are ever loaded)."""
        heads = self.kv_heads * 2
        return {**TINY_LLAMA, "num_hidden_layers": self.layers, "num_key_value_heads": self.kv_heads,
                "num_attention_heads": heads, "hidden_size": heads * self.head_size,
                "intermediate_size": heads * self.head_size * 2, "max_position_embeddings": max_model_len}


GEOMETRIES: dict[str, KVGeometry] = {g.name: g for g in (
    KVGeometry("tiny", NUM_LAYERS, NUM_KV_HEADS, HEAD_SIZE, "the conformance suite's tiny Llama"),
    KVGeometry("small", 8, 8, 64, "a small model: large enough that bytes, not call overhead, dominate"),
    KVGeometry("llama3-8b", 32, 8, 128, "Llama 3 8B's KV cache (128 KiB per token in 16-bit)"),
)}


def write_model(directory: Path, geometry: KVGeometry, max_model_len: int) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(geometry.model_config(max_model_len), indent=2))
    return directory


def prompt_length(size: int, block_size: int) -> int:
    """The prompt that makes a whole-block connector move exactly ``size`` tokens.

    The engine always computes the last prompt token itself, and ExampleConnector
    stores ``(n - 1) // block`` blocks but claims ``(n - 2) // block`` of them: half a
    block past ``size`` makes both exactly ``size``.
    """
    return size + max(2, block_size // 2)


# ----------------------------------------------------------------------------- timing


def synchronize(device: str) -> None:
    """Wait for the device's queued work, so a timer reads work done, not work queued."""
    if torch.device(device).type != "cpu":
        torch.accelerator.synchronize(torch.device(device))


def timed(device: str, action: Callable[..., object], *args: object) -> float:
    synchronize(device)
    start = time.perf_counter()
    action(*args)
    synchronize(device)
    return time.perf_counter() - start


@dataclass(frozen=True)
class StepTiming:
    seconds: float
    scheduled: frozenset[str]
    finished_sending: frozenset[str]
    finished_recving: frozenset[str]


class _Unguarded:
    """Stands in for the harness's ``DeviceGuard``: the conformance suite checks device
    placement; a benchmark must not pay a Python hook on every torch call the connector makes."""

    def __enter__(self) -> _Unguarded:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def enter_layer(self, name: str) -> None:
        return None


@dataclass
class TimedModelRunner(ModelRunnerStandIn):
    """The model runner stand-in with every step timed (device synchronised before and after)."""

    timings: list[StepTiming] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.guard = _Unguarded()

    def step(self, scheduler_output: SchedulerOutput) -> KVConnectorOutput:
        synchronize(self.device)
        start = time.perf_counter()
        output = super().step(scheduler_output)
        synchronize(self.device)
        self.timings.append(StepTiming(time.perf_counter() - start, frozenset(scheduler_output.num_scheduled_tokens),
                                       frozenset(output.finished_sending or ()),
                                       frozenset(output.finished_recving or ())))
        return output


def _first(timings: list[StepTiming], start: int, hit: Callable[[StepTiming], bool]) -> int | None:
    return next((i for i in range(start, len(timings)) if hit(timings[i])), None)


def save_seconds(timings: list[StepTiming], rid: str, since: int) -> float:
    """The step that prefilled ``rid`` (where it was saved), through an async save's completion."""
    start = _first(timings, since, lambda t: rid in t.scheduled)
    if start is None:
        raise BenchFailure(f"request {rid} was never scheduled")
    done = _first(timings, start, lambda t: rid in t.finished_sending)
    return sum(t.seconds for t in timings[start:(done if done is not None else start) + 1])


def load_seconds(timings: list[StepTiming], rid: str, since: int) -> float:
    """From the first step after ``rid`` arrived (its ``start_load_kv``) to the load's end:
    the step that computes it (synchronous loads) or that reports it received (asynchronous)."""
    done = _first(timings, since, lambda t: rid in t.finished_recving)
    if done is None:
        done = _first(timings, since, lambda t: rid in t.scheduled)
    if done is None:
        raise BenchFailure(f"request {rid} was never scheduled")
    return sum(t.seconds for t in timings[since:done + 1])


# ----------------------------------------------------------------------------- the rig


class BenchFailure(Exception):
    """The connector could not be measured; the message says why."""


@dataclass
class BenchRig(Rig):
    """A ``Rig`` sized for long requests, with a chosen KV geometry and timed workers.

    ``Rig`` fixes the tiny model's layers, heads and 512-token context; the bench
    needs thousands of tokens and a realistic bytes-per-token, so this builds the
    same objects the same way with those three numbers as parameters.
    """

    geometry: KVGeometry = GEOMETRIES["small"]
    runner_class = TimedModelRunner

    @property
    def num_blocks(self) -> int:
        return -(-self.max_model_len // self.block_size) + SPARE_BLOCKS

    def layer_names(self) -> list[str]:
        return attention_layer_names(count=self.geometry.layers)

    def attention_spec(self) -> AttentionSpec:
        FullAttentionSpec = vllm_api.find("FullAttentionSpec")

        return FullAttentionSpec(block_size=self.block_size, num_kv_heads=self.geometry.kv_heads,
                                 head_size=self.geometry.head_size, dtype=self.shape.torch_dtype)

    def scheduler_limits(self) -> tuple[int, int]:
        # one request per step and its whole prompt in one step: one save step per request
        return 4, self.max_model_len


# ----------------------------------------------------------------------------- the baselines


def physical_order(view: torch.Tensor) -> torch.Tensor:
    """The per-layer view with its in-block dimensions in memory order (blocks stay first), so
    copying a block reads one run of bytes instead of transposing it."""
    inner = sorted(range(1, view.dim()), key=lambda d: -view.stride(d))
    return view.permute([0, *inner])


def gathered_shape(view: torch.Tensor, blocks: torch.Tensor) -> tuple[int, ...]:
    return (len(blocks), *physical_order(view).shape[1:])


def block_bytes(caches: dict[str, torch.Tensor]) -> int:
    """KV bytes of one block, summed over the layers."""
    return sum(view[0].numel() * view.element_size() for view in caches.values())


class DeviceCopyBaseline:
    """Gather the request's blocks from the paged cache into host memory, and scatter them back.

    The least any connector that takes KV off the device must do; on the CPU the
    gather itself is the copy. Host buffers (pinned on accelerators) are allocated
    and touched before the clock starts, as a connector would keep them.
    """

    name = "device-copy"

    def __init__(self, folder: Path):
        self.host: dict[str, dict[str, torch.Tensor]] = {}

    def prepare(self, caches: dict[str, torch.Tensor], blocks: torch.Tensor, key: str) -> None:
        pin = blocks.device.type != "cpu"
        self.host[key] = {layer: torch.zeros(gathered_shape(view, blocks), dtype=view.dtype, pin_memory=pin)
                          for layer, view in caches.items()}

    def save(self, caches: dict[str, torch.Tensor], blocks: torch.Tensor, key: str) -> None:
        for layer, view in caches.items():
            out = self.host[key][layer]
            if blocks.device.type == "cpu":
                torch.index_select(physical_order(view), 0, blocks, out=out)
            else:
                out.copy_(physical_order(view).index_select(0, blocks), non_blocking=True)

    def load(self, caches: dict[str, torch.Tensor], blocks: torch.Tensor, key: str) -> None:
        for layer, view in caches.items():
            physical_order(view).index_copy_(0, blocks, self.host[key][layer].to(view.device, non_blocking=True))

    def discard(self, key: str) -> None:
        self.host.pop(key, None)


class StorageBaseline:
    """Plain files in the connector's own storage folder: one per layer, raw bytes.

    Save: gather the blocks, bring them to the host, ``open().write`` (no fsync: a
    storage connector's writes land in the page cache too). Load: map the file
    (``torch.from_file``, as safetensors maps its files) and scatter from the
    mapping into the blocks: one copy out of the page cache. Raw bytes, not
    safetensors, so the ratio shows the connector's whole overhead, format
    included, against what the folder's file system allows; one file per layer
    because ``save_kv_layer`` hands a connector one layer at a time.
    """

    name = "storage"

    def __init__(self, folder: Path):
        self.folder = folder / "kvconform-baseline"
        self.shapes: dict[str, dict[str, tuple[tuple[int, ...], torch.dtype]]] = {}

    def _file(self, key: str, layer: str) -> Path:
        return self.folder / key / f"{layer}.bin"

    def prepare(self, caches: dict[str, torch.Tensor], blocks: torch.Tensor, key: str) -> None:
        (self.folder / key).mkdir(parents=True, exist_ok=True)
        self.shapes[key] = {layer: (gathered_shape(view, blocks), view.dtype) for layer, view in caches.items()}

    def save(self, caches: dict[str, torch.Tensor], blocks: torch.Tensor, key: str) -> None:
        for layer, view in caches.items():
            gathered = physical_order(view).index_select(0, blocks).cpu()
            with open(self._file(key, layer), "wb") as file:
                file.write(gathered.view(torch.uint8).numpy())

    def load(self, caches: dict[str, torch.Tensor], blocks: torch.Tensor, key: str) -> None:
        for layer, view in caches.items():
            shape, dtype = self.shapes[key][layer]
            count = math.prod(shape)
            mapped = torch.from_file(str(self._file(key, layer)), shared=True, size=count, dtype=dtype).view(shape)
            physical_order(view).index_copy_(0, blocks, mapped.to(view.device, non_blocking=True))

    def discard(self, key: str) -> None:
        self.shapes.pop(key, None)
        for path in (self.folder / key).glob("*.bin"):
            path.unlink()


Baseline = DeviceCopyBaseline | StorageBaseline
BASELINES: dict[str, type[Baseline]] = {b.name: b for b in (StorageBaseline, DeviceCopyBaseline)}


def baseline_for(profile: ConnectorProfile) -> str:
    """Storage connectors (their extra config names the ``{storage}`` folder) against files;
    the rest against a device/host copy."""
    return StorageBaseline.name if "{storage}" in json.dumps(profile.extra_config) else DeviceCopyBaseline.name


# ----------------------------------------------------------------------------- one connector


@dataclass
class SizeSamples:
    """Seconds per repeat for one request size: the connector's and the baseline's."""

    size: int
    bytes: int
    save: list[float] = field(default_factory=list)
    load: list[float] = field(default_factory=list)
    baseline_save: list[float] = field(default_factory=list)
    baseline_load: list[float] = field(default_factory=list)


def _zero(caches: dict[str, torch.Tensor]) -> None:
    for flat in kvcache.backing_bytes(caches):
        flat.zero_()


def _same_blocks(producer: dict[str, torch.Tensor], p_blocks: torch.Tensor, consumer: dict[str, torch.Tensor],
                 c_blocks: torch.Tensor) -> str | None:
    """The first layer whose consumer blocks differ from the producer's, or None."""
    for layer, view in producer.items():
        saved = physical_order(view).index_select(0, p_blocks.to(view.device)).contiguous().view(torch.uint8)
        other = consumer[layer]
        loaded = physical_order(other).index_select(0, c_blocks.to(other.device)).contiguous().view(torch.uint8)
        if not torch.equal(saved.cpu(), loaded.cpu()):
            return layer
    return None


def _blocks(scheduler: SchedulerDriver, rid: str, count: int, device: str) -> torch.Tensor:
    return leading_blocks(scheduler.block_ids[rid][0], count, device)


def _check_load(rig: BenchRig, producer: EngineStandIn, consumer: EngineStandIn, rid: str, prompt: list[int],
                size: int) -> None:
    """The consumer claimed exactly the stored tokens and holds the producer's bytes in them."""
    name = rig.connector.name
    claimed = consumer.scheduler.external_tokens(rid)
    if claimed != size:
        raise BenchFailure(f"{name} claimed {claimed} external tokens for {rid}, a {len(prompt)}-token prompt "
                           f"whose first {size} tokens the producer stored; the bench times whole stored requests")
    count = size // rig.block_size
    wrong = _same_blocks(producer.caches, _blocks(producer.scheduler, rid, count, "cpu"),
                         consumer.caches, _blocks(consumer.scheduler, rid, count, "cpu"))
    if wrong:
        raise BenchFailure(f"{name}: {rid}: after the load, layer {wrong} does not hold the bytes the producer "
                           f"saved; a load that moves nothing cannot be timed")


def _baseline_once(rig: BenchRig, baseline: Baseline, producer: EngineStandIn, consumer: EngineStandIn, rid: str,
                   size: int) -> tuple[float, float]:
    """The baseline's (save, load) seconds for the blocks the connector moved for ``rid``."""
    count = size // rig.block_size
    p_blocks = _blocks(producer.scheduler, rid, count, rig.device)
    c_blocks = _blocks(consumer.scheduler, rid, count, rig.device)
    baseline.prepare(producer.caches, p_blocks, rid)
    _zero(consumer.caches)
    try:
        save = timed(rig.device, baseline.save, producer.caches, p_blocks, rid)
        load = timed(rig.device, baseline.load, consumer.caches, c_blocks, rid)
    finally:
        baseline.discard(rid)
    wrong = _same_blocks(producer.caches, p_blocks, consumer.caches, c_blocks)
    if wrong:
        raise BenchFailure(f"the {baseline.name} baseline did not restore layer {wrong} (a harness bug)")
    return save, load


def _timed(engine: EngineStandIn) -> TimedModelRunner:
    """The engine's runner, which a ``BenchRig`` builds as a ``TimedModelRunner`` (its ``runner_class``)."""
    return cast(TimedModelRunner, engine.runner)


def measure(rig: BenchRig, sizes: list[int], repeat: int) -> tuple[str, list[SizeSamples]]:
    """Time ``repeat`` saves and loads per size, each load followed by the baseline on the same blocks.

    All saves run first (a fresh producer), then a fresh consumer loads each
    request; the baseline runs right after each load so both see the same
    machine. Returns the baseline's name and the samples per size. Each size
    starts with a warm-up request that is not timed: first calls pay imports,
    and the first buffers of a new size pay the allocator's growth (page faults,
    glibc's mmap threshold), which a serving engine paid long before.
    """
    block_size = rig.block_size
    producer_role, consumer_role = rig.roles()
    size_of: dict[str, int] = {}
    for size in sizes:  # each size's warm-up request just before its timed ones
        size_of[f"warmup-s{size}"] = size
        size_of.update({f"s{size}-r{r}": size for r in range(repeat)})
    prompts = {rid: seeded_prompt(rid, prompt_length(size, block_size)) for rid, size in size_of.items()}
    samples = {size: SizeSamples(size, 0) for size in sizes}
    baseline = BASELINES[baseline_for(rig.connector.profile)](rig.storage)

    producer = rig.engine(producer_role, fill_seed=1234)
    try:
        for rid, prompt in prompts.items():
            since = len(_timed(producer).timings)
            producer.scheduler.add(rid, prompt)
            producer.scheduler.run(producer.runner, MAX_STEPS)
            seconds = save_seconds(_timed(producer).timings, rid, since)
            if not rid.startswith("warmup"):
                samples[size_of[rid]].save.append(seconds)
    finally:
        producer.close()

    consumer = rig.engine(consumer_role)
    try:
        for rid, prompt in prompts.items():
            size = size_of[rid]
            _zero(consumer.caches)
            since = len(_timed(consumer).timings)
            consumer.scheduler.add(rid, prompt)
            consumer.scheduler.run(consumer.runner, MAX_STEPS)
            _check_load(rig, producer, consumer, rid, prompt, size)
            load = load_seconds(_timed(consumer).timings, rid, since)
            base_save, base_load = _baseline_once(rig, baseline, producer, consumer, rid, size)
            if rid.startswith("warmup"):
                continue
            sample = samples[size]
            sample.load.append(load)
            sample.baseline_save.append(base_save)
            sample.baseline_load.append(base_load)
            sample.bytes = size // block_size * block_bytes(consumer.caches)
    finally:
        consumer.close()
    return baseline.name, [samples[size] for size in sizes]
