"""The fill check: a connector that synthesises KV fills exactly what a request needs.

The contract is vLLM's DecodeBenchConnector's (as vLLM PR #45080 fixed it): it claims every prompt token but
the last beyond any local prefix hit and fills those tokens' blocks, group by group (not the null block, not
blocks outside a sliding window); nothing else in the shared buffer changes; tensors that own their storage
(state with no block dimension) are filled whole; values follow ``fill_mean`` and the check's ``fill_std``
(constant fills exact in the cache dtype, random ones judged by ``check_statistics``, raw byte pages only
written); circular-buffer groups are zeroed whole; an entry of an unknown type, or a layer missing from the
registered dict, is skipped with a warning. With ``startup_fill`` ``register_kv_caches`` fills whole the
groups vLLM does not zero before use (nor circular buffers), and requests fill only the others. Each phase
writes fresh random bytes into every cache (so a refill of cached blocks shows), snapshots them, runs its
requests through vLLM's Scheduler and compares. docs/checks.md lists the caches and axes.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from ..engine import kvcache
from ..engine.block_sizes import group_block_sizes
from ..engine.check_failure import CheckFailure
from ..engine.device_guard import forked_rng
from ..engine.hybrid_cache import REGISTRATIONS, HybridCaches, hybrid_engine
from ..engine.kvcache import LayerCache
from ..engine.prompts import seeded_prompt
from ..engine.rig import EngineStandIn, Rig
from ..vllm_install import api as vllm_api

if TYPE_CHECKING:
    from vllm.v1.kv_cache_interface import KVCacheSpec

    from ..engine.scheduler import SchedulerDriver

RANDOM_STD = 0.5
SIGMAS = 6.0  # statistical tolerance in standard errors (see check_statistics)


class FillFailure(CheckFailure):
    """The connector broke the fill contract; the message names the layer, block and request."""


@dataclass(frozen=True)
class Prompt:
    request_id: str
    blocks: int  # full blocks of new tokens
    extra: int  # tokens past the last full block
    extends: str | None = None  # a request of an earlier phase whose prompt this one starts with


@dataclass(frozen=True)
class Phase:
    prompts: tuple[Prompt, ...]
    prefix_hit: bool = False  # the scheduler must find a local prefix hit for every prompt


@dataclass(frozen=True)
class FillScenario:
    name: str
    phases: tuple[Phase, ...]
    doc: str = ""
    pool_blocks: int = kvcache.NUM_BLOCKS  # blocks in the cache


FILL_SCENARIOS: dict[str, FillScenario] = {s.name: s for s in (
    FillScenario("two-requests", (Phase((Prompt("a", 5, 1), Prompt("b", 2, 13))),),
             doc="two requests in one step, one ending on a block boundary, one mid-block"),
    # The first prompt fills exactly 5 blocks so Mamba's "align" mode checkpoints its state there:
    # only then can a hybrid model get a prefix hit.
    FillScenario("prefix-hit", (Phase((Prompt("a", 5, 1),)), Phase((Prompt("b", 2, 8, extends="a"),), prefix_hit=True)),
             doc="a second request reuses the first one's prefix from the local prefix cache"),
    # Groups of b- and 2b-token blocks (prompts count b-token blocks): hits land on 2b-token boundaries (the
    # groups' LCM), and the first prompt's 4b tokens end a block of every group, so a sliding window keeps
    # the block just before the hit (after 5b + 1 tokens, as above, it would have dropped it: no hit).
    FillScenario("prefix-hit-block-sizes",
                 (Phase((Prompt("a", 4, 1),)), Phase((Prompt("b", 3, 8, extends="a"),), prefix_hit=True)),
                 doc="a prefix hit on a cache whose groups have different block sizes"),
    # vLLM hands out block ids from 1 up, so the other scenarios' 48 blocks stay below 64, the largest dimension of
    # the suite's cache tensors but the first (K|V channels on CPU); five prompts of 16 blocks in one step reach
    # ids a real engine's pool gives at once: past 64 (to 79 on full attention alone, 111 on the hybrid cache)
    FillScenario("high-block-ids", (Phase(tuple(Prompt(f"r{i}", 15, 1) for i in range(5))),), pool_blocks=160,
                 doc="block ids past the size of every dimension of a cache tensor but the first"),
)}


@dataclass(frozen=True)
class FillMode:
    std: float | None  # None: constant fill (fill_std 0)
    startup: bool = False  # startup_fill: the whole cache once in register_kv_caches, per request only what it skips

    def extra_config(self) -> dict[str, Any]:
        return {"fill_std": self.std or 0.0, **({"startup_fill": True} if self.startup else {})}


FILL_MODES = {"constant": FillMode(None), "random": FillMode(RANDOM_STD),
              "startup": FillMode(None, startup=True), "startup-random": FillMode(RANDOM_STD, startup=True)}


# ---------------------------------------------------------------- warnings


@contextmanager
def captured_warnings() -> Iterator[list[logging.LogRecord]]:
    """WARNING records from vLLM's loggers (which do not propagate to the root) and from any other.

    vLLM's ``warning_once`` remembers what it printed for the whole process, so a
    second test would see nothing: its memo is cleared on entry.
    """
    memo = vllm_api.optional("_print_warning_once")
    if memo is not None and hasattr(memo, "cache_clear"):
        memo.cache_clear()
    records: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if not any(seen is record for seen in records):  # vLLM's loggers may propagate to the root too
                records.append(record)

    handler = Collect(level=logging.WARNING)
    loggers = [logging.getLogger("vllm"), logging.getLogger()]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield records
    finally:
        for logger in loggers:
            logger.removeHandler(handler)


# ---------------------------------------------------------------- what should change


@dataclass
class Expected:
    """Per request: the blocks each group must fill, and the blocks of its local prefix hit."""

    fill: dict[int, set[int]] = field(default_factory=dict)  # group -> block ids to fill
    hit: dict[int, list[int]] = field(default_factory=dict)  # group -> block ids of the local hit
    # group -> every block the requests were allocated (for messages: a stray block may be a request's own)
    allocated: dict[int, set[int]] = field(default_factory=dict)


def _is_circular(spec: KVCacheSpec) -> bool:
    CircularBufferSpec = vllm_api.find("CircularBufferSpec")

    return all(isinstance(s, CircularBufferSpec) for s in vllm_api.find("iter_layer_specs")(spec))


def startup_groups(caches: HybridCaches) -> set[int]:
    """The groups a startup fill covers, as DecodeBenchConnector documents ``startup_fill``: every group but
    circular buffers (zeroed per request) and, where vLLM's engine zeroes new blocks before use
    (``KVCacheConfig.needs_kv_cache_zeroing``: Mamba layers, mixed precisions), attention groups (filled per
    request, since the zeroing would wipe a fill made at startup)."""
    AttentionSpec = vllm_api.find("AttentionSpec")
    iter_layer_specs = vllm_api.find("iter_layer_specs")

    config = caches.kv_cache_config
    zeroed = bool(config.needs_kv_cache_zeroing)
    return {group for group, spec_group in enumerate(config.kv_cache_groups)
            if not _is_circular(spec_group.kv_cache_spec)
            and not (zeroed and all(isinstance(s, AttentionSpec) for s in iter_layer_specs(spec_group.kv_cache_spec)))}


def expected_blocks(caches: HybridCaches, block_ids: tuple[list[int], ...], local: int, external: int) -> Expected:
    """The blocks holding tokens [local, local + external) in each group; circular buffers: the whole ring."""
    out = Expected()
    for group, (spec_group, ids) in enumerate(zip(caches.kv_cache_config.kv_cache_groups, block_ids, strict=True)):
        size = spec_group.kv_cache_spec.block_size
        if _is_circular(spec_group.kv_cache_spec):
            chosen = ids
        else:
            chosen = ids[local // size: math.ceil((local + external) / size)]
            out.hit[group] = [b for b in ids[: local // size] if b != 0]
        out.fill[group] = {b for b in chosen if b != 0}  # block 0 is vLLM's null block
        out.allocated[group] = {b for b in ids if b != 0}
    return out


# ---------------------------------------------------------------- byte-level bookkeeping


def _key(tensor: torch.Tensor) -> int:
    pointer: int = tensor.untyped_storage().data_ptr()
    return pointer


def _strided_like(flat: torch.Tensor, tensor: torch.Tensor) -> torch.Tensor:
    """``flat`` (one entry per byte of ``tensor``'s storage) viewed the way ``tensor``'s bytes are laid out."""
    raw = tensor.view(torch.uint8)
    return torch.as_strided(flat, raw.shape, raw.stride(), raw.storage_offset())


def _entry_tensors(entry: object) -> list[torch.Tensor]:
    if isinstance(entry, torch.Tensor):
        return [entry]
    if isinstance(entry, (list, tuple)):
        return [t for t in entry if isinstance(t, torch.Tensor)]
    if isinstance(entry, dict):
        return [t for t in entry.values() if isinstance(t, torch.Tensor)]
    return []


class Snapshot:
    """Every storage behind the caches, copied, with a mask of the bytes allowed to change.

    ``settle()`` compares once after the run; the per-tensor questions read that.
    """

    def __init__(self, caches: HybridCaches):
        self.storages: dict[int, torch.Tensor] = {}
        for entry in [*caches.pages.values(), *caches.registered.values()]:
            for tensor in _entry_tensors(entry):
                if _key(tensor) not in self.storages:
                    storage = tensor.untyped_storage()
                    self.storages[_key(tensor)] = torch.empty(0, dtype=torch.uint8, device=tensor.device).set_(storage)
        self.before = {k: flat.clone() for k, flat in self.storages.items()}
        self.allowed = {k: torch.zeros_like(flat, dtype=torch.bool) for k, flat in self.storages.items()}
        self.diff: dict[int, torch.Tensor] = {}

    def allow(self, tensor: torch.Tensor, blocks: list[int] | None) -> None:
        """Let ``tensor``'s bytes in ``blocks`` (all of it when None) change."""
        mask = _strided_like(self.allowed[_key(tensor)], tensor)
        if blocks is None:
            mask.fill_(True)
        elif blocks:
            mask[torch.tensor(blocks, dtype=torch.long, device=mask.device)] = True

    def settle(self) -> None:
        self.diff = {k: flat != self.before[k] for k, flat in self.storages.items()}

    def changed(self, tensor: torch.Tensor) -> torch.Tensor:
        """Per byte of ``tensor`` (in its shape, bytes last): did it change?"""
        return _strided_like(self.diff[_key(tensor)], tensor)

    def stray(self, tensor: torch.Tensor) -> torch.Tensor:
        key = _key(tensor)
        return _strided_like(self.diff[key] & ~self.allowed[key], tensor)

    def stray_bytes(self) -> int:
        return sum(int((diff & ~self.allowed[k]).sum()) for k, diff in self.diff.items())


# ---------------------------------------------------------------- values


# vLLM's fp8 cache dtypes (pages of uint8) -> the dtype their values are encoded in; None: the platform's fp8
FP8_ENCODINGS: dict[str, torch.dtype | None] = {"fp8": None, "fp8_e4m3": None, "fp8_e5m2": torch.float8_e5m2}


def _decode_dtype(caches: HybridCaches, layer: str, tensor: torch.Tensor) -> torch.dtype | None:
    """The dtype the fill values are encoded in: for fp8 attention caches (uint8) the encoding the cache dtype
    names (FP8_ENCODINGS)."""
    from vllm.platforms import current_platform

    spec = caches.own_spec(layer)
    if (isinstance(spec, vllm_api.find("AttentionSpec")) and tensor.dtype == torch.uint8
            and spec.kv_quant_mode == vllm_api.find("KVQuantMode").FP8_PER_TENSOR):
        cache_dtype = getattr(spec, "cache_dtype_str", None) or caches.cache_dtype
        if cache_dtype not in FP8_ENCODINGS:
            raise FillFailure(f"layer {layer}: the fill check does not know how kv cache dtype {cache_dtype!r} "
                              f"encodes its values (it knows {sorted(FP8_ENCODINGS)})")
        return FP8_ENCODINGS[cache_dtype] or current_platform.fp8_dtype()
    return tensor.dtype if tensor.dtype.is_floating_point else None


@dataclass
class Region:
    """One place the fill must have written: a tensor's blocks, or a whole state tensor."""

    layer: str
    part: str  # "" or "state i"
    tensor: torch.Tensor
    blocks: list[int] | None  # None: the whole tensor
    target: float  # the constant it must hold (random fills: the mean)
    decode: torch.dtype | None  # None: raw bytes, which only have to be written
    random: bool
    # its bytes are also another region's (layers of several groups over one page, filled whole at startup):
    # whichever is written last holds them, so the region only has to be written
    shared: bool = False


def _whole_states(caches: HybridCaches, layer: str, entry: LayerCache) -> bool:
    """A list/tuple of state tensors that own their storage: each one is a whole state, no block dimension."""
    return (isinstance(entry, (list, tuple)) and caches.is_state(layer)
            and not REGISTRATIONS[caches.registration].block_indexed)


def _regions(caches: HybridCaches, fill: dict[int, set[int]], mean: float, random_fill: bool,
             skip_groups: Iterable[int] = ()) -> list[Region]:
    out = []
    for layer, entry in caches.registered.items():
        if layer in caches.unexpected or caches.group_of(layer) in skip_groups:
            continue
        group = caches.group_of(layer)
        circular = _is_circular(caches.spec_of(layer))
        blocks = sorted(fill.get(group, ()))
        target, is_random = (0.0, False) if circular else (mean, random_fill)
        parts: list[tuple[str, torch.Tensor, list[int] | None]]
        if isinstance(entry, torch.Tensor):
            parts = [("", entry, blocks)]
        else:
            whole = _whole_states(caches, layer, entry)
            parts = [(f"state {i}", t, None if whole else blocks) for i, t in enumerate(entry)]
        for part, tensor, part_blocks in parts:
            if part_blocks is not None and not part_blocks:
                continue
            out.append(Region(layer, part, tensor, part_blocks, target,
                              _decode_dtype(caches, layer, tensor), is_random))
    return out


def _startup_regions(caches: HybridCaches, groups: set[int], mean: float, random_fill: bool) -> list[Region]:
    """Every registered tensor of the startup-filled groups, whole; those whose bytes another one overlays are
    marked shared."""
    out = []
    for layer, entry in caches.registered.items():
        if layer in caches.unexpected or caches.group_of(layer) not in groups:
            continue
        tensors = _entry_tensors(entry)
        for i, tensor in enumerate(tensors):
            part = f"state {i}" if isinstance(entry, (list, tuple)) else ""
            out.append(Region(layer, part, tensor, None, mean, _decode_dtype(caches, layer, tensor), random_fill))
    cover: dict[int, torch.Tensor] = {}  # storage -> how many regions hold each of its bytes
    for region in out:
        key = _key(region.tensor)
        if key not in cover:
            cover[key] = torch.zeros(region.tensor.untyped_storage().nbytes(), dtype=torch.uint8,
                                     device=region.tensor.device)
        _strided_like(cover[key], region.tensor).add_(1)
    for region in out:
        region.shared = bool((_strided_like(cover[_key(region.tensor)], region.tensor) > 1).any())
    return out


def _values(region: Region) -> torch.Tensor:
    data = region.tensor if region.blocks is None else region.tensor[region.blocks]
    return data.view(region.decode) if region.decode != data.dtype else data


def _where(connector: str, region: Region, caches: HybridCaches) -> str:
    part = f" {region.part}" if region.part else ""
    scope = "the whole tensor" if region.blocks is None else f"blocks {region.blocks}"
    return (f"{connector}: layer {region.layer}{part} ({type(caches.spec_of(region.layer)).__name__}, "
            f"group {caches.group_of(region.layer)}, registered as {caches.registration!r}), {scope}")


def _unwritten(region: Region, snapshot: Snapshot) -> list[int | str]:
    """Blocks of the region (or ``["(whole tensor)"]``) none of whose bytes changed."""
    changed = snapshot.changed(region.tensor)
    if region.blocks is None:
        return [] if bool(changed.any()) else ["(whole tensor)"]
    per_block = changed[region.blocks].flatten(1).any(dim=1).tolist()
    return [block for block, written in zip(region.blocks, per_block, strict=True) if not written]


def check_written(connector: str, caches: HybridCaches, regions: list[Region], snapshot: Snapshot) -> None:
    """Every region holds the fill: exactly the constant; random and raw-byte regions: written (and finite).

    "Written" is judged per block (or whole tensor), not per value: a fresh random
    value equals the old bytes by chance (1 in 256 for fp8), a whole block never does.
    """
    for region in regions:
        if region.decode is None or region.random or region.shared:
            unwritten = _unwritten(region, snapshot)
            if unwritten:
                raise FillFailure(f"{_where(connector, region, caches)}: block(s) {unwritten} were not written "
                                  f"(their bytes are unchanged)")
            if region.decode is not None and not bool(torch.isfinite(_values(region).float()).all()):
                raise FillFailure(f"{_where(connector, region, caches)}: the random fill left non-finite values")
            continue
        values = _values(region).float()
        expected = torch.tensor(region.target, dtype=region.decode).float()
        wrong = values != expected
        if bool(wrong.any()):
            index = tuple(int(i) for i in wrong.nonzero()[0])
            scope = "not filled whole" if region.blocks is None else "not filled in the blocks the request needs"
            block = "" if region.blocks is None else f" (block {region.blocks[index[0]]})"
            raise FillFailure(
                f"{_where(connector, region, caches)}: holds {values[index].item()!r} at index {index}{block} "
                f"({int(wrong.sum())} of {values.numel()} values wrong), expected the constant fill "
                f"{region.target} in {region.decode} (the tensor was {scope})")


def check_statistics(connector: str, regions: list[Region], mean: float, std: float) -> dict[str, int]:
    """Random fills: the sample mean and std of everything filled, against the requested ones.

    For n values drawn from N(mean, std), the sample mean has standard error
    std/sqrt(n) and the sample std about std/sqrt(2n); SIGMAS (6) standard errors
    leave a false-failure chance below 1e-8 per check (the run is also seeded).
    Rounding into the cache dtype moves each value by at most eps/2 of its
    magnitude, hence both statistics by at most eps/2 * sqrt(mean^2 + std^2): that
    is added, with eps of the coarsest dtype in the pool (fp8 e4m3: 2^-3).
    Attention blocks and state tensors are judged separately (states are few).
    """
    pools: dict[str, list[Region]] = {"attention blocks": [], "state tensors": []}
    for region in regions:
        if region.random and region.decode is not None and not region.shared:
            pools["state tensors" if region.part else "attention blocks"].append(region)
    found = {}
    for name, members in pools.items():
        if not members:
            continue
        values = torch.cat([_values(region).double().flatten() for region in members])
        rounding = max(torch.finfo(region.decode).eps for region in members) / 2 * math.hypot(mean, std)
        n = values.numel()
        got_mean, got_std = values.mean().item(), values.std().item()
        mean_tol = SIGMAS * std / math.sqrt(n) + rounding
        std_tol = SIGMAS * std / math.sqrt(2 * n) + rounding
        if abs(got_mean - mean) > mean_tol or abs(got_std - std) > std_tol:
            raise FillFailure(
                f"{connector}: random fill of {name} ({n} values): mean {got_mean:.4f}, std {got_std:.4f}; "
                f"requested mean {mean} (tolerance {mean_tol:.4f}) and std {std} (tolerance {std_tol:.4f})")
        found[name] = n
    if not found:
        raise FillFailure(f"{connector}: the random fill wrote no floating-point values to judge")
    return found


def _stray_blocks(caches: HybridCaches, snapshot: Snapshot,
                  entries: Iterable[tuple[str, LayerCache]]) -> dict[int, list[str]]:
    """Block id -> the layers (of ``entries``) through whose block-indexed views stray bytes show.

    Whole state tensors are allowed to change entirely, so they never hold stray bytes.
    """
    found: dict[int, list[str]] = {}
    for layer, entry in entries:
        if _whole_states(caches, layer, entry):
            continue
        for i, tensor in enumerate(_entry_tensors(entry)):
            name = layer if isinstance(entry, torch.Tensor) else f"{layer} state {i}"
            for block in snapshot.stray(tensor).flatten(1).any(dim=1).nonzero().flatten().tolist():
                found.setdefault(block, []).append(name)
    return found


def _owner(block: int, expected: Expected) -> str:
    if not expected.allocated:  # the startup fill: no request yet
        return "a block of a group startup_fill leaves to the requests: vLLM zeroes it before use, or a circular buffer"
    for group, blocks in expected.fill.items():
        if block in blocks:
            return f"group {group} fills it, but these bytes lie outside that group's layers"
    for group, hit in expected.hit.items():
        if block in hit:
            return f"it holds group {group}'s local prefix hit, which must not be refilled"
    for group, blocks in expected.allocated.items():
        if block in blocks:
            return (f"a request's block in group {group}, but past the tokens to fill: it holds only tokens "
                    f"the engine computes")
    return "the null block, which no request owns" if block == 0 else "no request of this phase owns it"


def check_no_stray(connector: str, caches: HybridCaches, snapshot: Snapshot, expected: Expected,
                   what: str) -> None:
    """Nothing changed outside the allowed bytes.

    Groups overlay one buffer, so a block's page shows in one layer of every group;
    the message names the lowest stray block, who owns it, and the registered
    layers it shows through.
    """
    total = snapshot.stray_bytes()
    if not total:
        return
    by_block = (_stray_blocks(caches, snapshot, caches.registered.items())
                or _stray_blocks(caches, snapshot, caches.pages.items()))
    whole = [f"{layer} state {i}" for layer, entry in caches.registered.items() if _whole_states(caches, layer, entry)
             for i, tensor in enumerate(_entry_tensors(entry)) if bool(snapshot.stray(tensor).any())]
    if not by_block and whole:
        where = f"the whole state tensor(s) {', '.join(whole[:3])}, which no request of this phase fills"
    elif not by_block:
        where = "bytes outside every layer's view (page padding)"
    else:
        block = min(by_block)
        layers = by_block[block]
        shown = ", ".join(layers[:3]) + (f" and {len(layers) - 3} more" if len(layers) > 3 else "")
        where = f"block {block} ({_owner(block, expected)}), seen through layer(s) {shown}"
    raise FillFailure(f"{connector}: {what}: the fill changed bytes the requests do not own: {where}; "
                      f"{len(by_block)} block(s), {total} byte(s) in all outside the blocks to fill "
                      f"{ {g: sorted(b) for g, b in expected.fill.items()} } (group: blocks); "
                      f"registered as {caches.registration!r}")


# ---------------------------------------------------------------- the scenario


@dataclass
class FillResult:
    claims: dict[str, tuple[int, int]] = field(default_factory=dict)  # request -> (local hit, external)
    statistics: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    regions: int = 0
    block_sizes: list[int] = field(default_factory=list)  # tokens per block of each cache group
    past_dimensions: int = 0  # regions filled in a block whose id is past the size of every other dimension


def _past_other_dimensions(region: Region) -> bool:
    """Whether the region's blocks include one whose id is at or past the size of each of its tensor's dimensions
    but the first (the blocks'), so that an id bounded by any other dimension would be left out."""
    blocks = region.blocks or []
    return bool(blocks) and max(blocks) >= max(region.tensor.shape[1:], default=0)


def _prompt(prompt: Prompt, block_size: int, earlier: dict[str, list[int]]) -> list[int]:
    start = earlier[prompt.extends] if prompt.extends else []
    return start + seeded_prompt(f"{prompt.request_id}-{len(start)}", prompt.blocks * block_size + prompt.extra)


@dataclass
class _FillRun:
    """One connector's side over one hybrid cache, stepped phase by phase."""

    name: str
    side: EngineStandIn
    caches: HybridCaches
    mean: float
    mode: FillMode
    prompts: dict[str, list[int]] = field(default_factory=dict)

    startup: set[int] = field(default_factory=set)  # groups filled once at startup: no request fills them

    def phase(self, phase: Phase, what: str, result: FillResult, seed: int) -> None:
        scheduler = self.side.scheduler
        scramble(self.caches, seed)
        snapshot = Snapshot(self.caches)
        for prompt in phase.prompts:
            self.prompts[prompt.request_id] = _prompt(prompt, self.side.vllm_config.cache_config.block_size,
                                                      self.prompts)
            scheduler.add(prompt.request_id, self.prompts[prompt.request_id])
        first = scheduler.step(self.side.runner)  # the step that schedules the requests is the one that fills
        block_ids = {rid: tuple(list(ids) for ids in scheduler.block_ids[rid]) for rid in first.num_scheduled_tokens}
        scheduler.run(self.side.runner)
        expected = Expected()
        for prompt in phase.prompts:
            rid = prompt.request_id
            if rid not in block_ids:
                raise FillFailure(f"{self.name}: {what}: request {rid} was not scheduled in the first step")
            local, external = _claim(self.name, scheduler, rid, len(self.prompts[rid]), phase.prefix_hit, what)
            result.claims[rid] = (local, external)
            mine = expected_blocks(self.caches, block_ids[rid], local, external)
            for group, blocks in mine.fill.items():
                expected.fill.setdefault(group, set()).update(blocks)
            for group, hit in mine.hit.items():
                expected.hit.setdefault(group, []).extend(hit)
            for group, blocks in mine.allocated.items():
                expected.allocated.setdefault(group, set()).update(blocks)
        expected.fill = {group: blocks for group, blocks in expected.fill.items() if group not in self.startup}
        regions = _regions(self.caches, expected.fill, self.mean, self.mode.std is not None, self.startup)
        snapshot.settle()
        for region in regions:
            snapshot.allow(region.tensor, region.blocks)
        check_no_stray(self.name, self.caches, snapshot, expected, what)
        check_written(self.name, self.caches, regions, snapshot)
        result.past_dimensions += sum(1 for region in regions if _past_other_dimensions(region))
        if self.mode.std is not None and regions:  # none: every group was filled at startup
            result.statistics = check_statistics(self.name, regions, self.mean, self.mode.std)
        result.regions += len(regions)


def scramble(caches: HybridCaches, seed: int) -> None:
    """Fresh random bytes everywhere, as if the model had run: a fill (or a refill) cannot hide."""
    everything = [*caches.pages.values(), *caches.registered.values()]
    kvcache.fill_random({str(i): entry for i, entry in enumerate(everything)
                         if isinstance(entry, (torch.Tensor, list, tuple))}, seed)


def check_startup_fill(connector: str, caches: HybridCaches, snapshot: Snapshot, mean: float, mode: FillMode,
                       result: FillResult) -> None:
    """``register_kv_caches`` filled every tensor of the startup groups whole, and nothing else."""
    groups = startup_groups(caches)
    regions = _startup_regions(caches, groups, mean, mode.std is not None)
    if not regions and not caches.unexpected:
        raise FillFailure(f"{connector}: no cache group is filled at startup (groups {sorted(groups)}), so "
                          f"startup_fill cannot be checked (harness: the layer kinds {set(caches.kinds.values())})")
    snapshot.settle()
    for region in regions:
        snapshot.allow(region.tensor, None)
    what = "at startup (startup_fill: true, in register_kv_caches)"
    check_no_stray(connector, caches, snapshot, Expected(), what)
    check_written(f"{connector}, {what}", caches, regions, snapshot)
    if mode.std is not None:
        result.statistics = check_statistics(f"{connector}, {what}", regions, mean, mode.std)
    result.regions += len(regions)


def run_fill(rig: Rig, kinds: tuple[str, ...], registration: str, mode: str = "constant",
             scenario: str = "two-requests", unexpected: dict[str, str] | None = None, seed: int = 0) -> FillResult:
    """Drive the connector through ``scenario`` on a cache of ``kinds``; raise FillFailure on any breach."""
    name = rig.connector.name
    profile_config = rig.connector.profile.extra_config
    if "fill_mean" not in profile_config:
        raise FillFailure(f"{name}: the fill check reads fill_mean from the profile's extra_config; "
                          f"its profile gives none")
    fill_mode = FILL_MODES[mode]
    mean = float(profile_config["fill_mean"])
    before: list[Snapshot] = []  # the caches, scrambled, as register_kv_caches gets them

    def scrambled(caches: HybridCaches) -> None:
        scramble(caches, seed)
        before.append(Snapshot(caches))

    result = FillResult()
    with captured_warnings() as records, forked_rng(rig.device):  # the accelerator's generators too
        torch.manual_seed(seed)  # random fills draw from the default generators: reproducible runs
        side, caches = hybrid_engine(rig, kinds, registration, fill_mode.extra_config(), unexpected,
                                     before_register=scrambled if fill_mode.startup else None,
                                     num_blocks=FILL_SCENARIOS[scenario].pool_blocks)
        run = _FillRun(name, side, caches, mean, fill_mode)
        result.block_sizes = group_block_sizes(caches.kv_cache_config)
        try:
            if fill_mode.startup:
                check_startup_fill(name, caches, before[0], mean, fill_mode, result)
                run.startup = startup_groups(caches)
            for number, phase in enumerate(FILL_SCENARIOS[scenario].phases, 1):
                run.phase(phase, f"phase {number} of {scenario!r}", result, seed + number)
        finally:
            side.close()
    result.warnings = [record.getMessage() for record in records]
    for layer, kind in (unexpected or {}).items():
        if not any(layer in message for message in result.warnings):
            raise FillFailure(f"{name}: layer {layer} was registered as a {kind} entry, which it cannot fill; "
                              f"it must skip it with a warning naming the layer, but logged none "
                              f"(warnings: {result.warnings or 'none'})")
    return result


def _claim(name: str, scheduler: SchedulerDriver, rid: str, length: int, prefix_hit: bool,
           what: str) -> tuple[int, int]:
    if not scheduler.claims.get(rid):
        raise FillFailure(f"{name}: {what}: the scheduler never asked it about request {rid}")
    claim = scheduler.answered_claim(rid)
    if claim is None:
        raise FillFailure(f"{name}: {what}: request {rid} was only ever answered None (ask again), never a claim")
    local, external = claim.num_computed_tokens, claim.num_external_tokens
    if prefix_hit and local <= 0:
        raise FillFailure(f"{name}: {what}: request {rid} found no local prefix hit, so the check that only "
                          f"missing blocks are filled cannot run (harness: the prompt does not reuse a cached prefix)")
    if external != length - local - 1:
        raise FillFailure(f"{name}: {what}: request {rid} ({length} tokens, {local} from the local prefix cache) "
                          f"claimed {external} tokens to fill; the fill covers every prompt token but the last, "
                          f"so it should claim {length - local - 1}")
    return local, external
