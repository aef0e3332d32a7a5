"""One connector, one platform, one cache shape: the objects a check drives.

A ``Rig`` builds a fresh ``VllmConfig`` (so no state leaks between producer and
consumer, or between tests), resolves the layout, builds the KVCacheConfig,
allocates caches on the platform's device and makes the scheduler and worker
sides. ``producer()`` and ``consumer()`` share only the storage folder.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar, overload

from ..vllm_install import api as vllm_api
from . import closing, kvcache, scheduler_class
from .backends import MLA_BACKENDS, backend_class, metadata_instance
from .kvcache import CacheShape, LayerCache
from .model import MAX_MODEL_LEN, attention_layer_names
from .published import PublishedBlocks
from .runner import ModelRunnerStandIn
from .scheduler import SchedulerDriver

if TYPE_CHECKING:  # types only: vLLM is imported when a config is built, never when the harness is imported
    from vllm.config import VllmConfig
    from vllm.v1.kv_cache_interface import AttentionSpec, KVCacheConfig

    from kvconform.platforms.spec import PlatformSpec



class ConnectorUnderTest(Protocol):
    """The connector a rig drives, as the connector model hands it in (connectors/selection.py's ConnectorParam):
    named here by what the engine uses, so the engine imports nothing of the connector model."""

    @property
    def name(self) -> str: ...

    @property
    def profile(self) -> Any: ...  # connectors/profiles.py's ConnectorProfile: extra_config, kv_buffer_device, ...

    def transfer_config_fields(self) -> dict[str, Any]: ...

    def load_class(self) -> type: ...

    def last_child(self) -> ConnectorUnderTest: ...


@contextmanager
def _shut_down_if_raised(runner: ModelRunnerStandIn) -> Iterator[None]:
    """The worker half shut down when building the scheduler half raises (NixlPushConnector's scheduler refuses
    bidirectional transfer after its worker started its NIXL agent): in vLLM the engine process ends then, and with
    it the worker's threads; here they would poll on through every later test. What the shutdown raises is noted on
    the construction error, which stays the test's outcome."""
    try:
        yield
    except BaseException as exc:
        try:
            runner.shutdown()
        except Exception as shutdown_error:  # noqa: BLE001 - reported on the construction error, not lost
            exc.add_note(f"kvconform: shutting down the worker half after this also failed: "
                         f"{type(shutdown_error).__name__}: {shutdown_error}")
        raise


P_D_ROLES = ("kv_producer", "kv_consumer")  # the two servers of a disaggregated pair, which stop independently
VLLM_DEFAULT_BLOCK_SIZE = 16  # CacheConfig's default, which backends adjust through get_preferred_block_size


class ConnectorRefused(Exception):
    """The connector declined this platform in its own words (matched by its profile's ``refusal``)."""


@contextmanager
def refusal_as(error: type[Exception], connector: ConnectorUnderTest) -> Iterator[None]:
    """Re-raise a construction error matching the profile's ``refusal`` pattern as ``error``."""
    pattern = connector.profile.refusal
    try:
        yield
    except vllm_api.VllmApiError:
        raise  # kvconform cannot drive this vLLM: never the connector's refusal, whatever the message says
    except Exception as exc:
        if pattern and re.search(pattern, str(exc)):
            raise error(f"{connector.name} refuses to run here: {type(exc).__name__}: {exc}") from exc
        raise


@dataclass
class EngineStandIn:
    """One engine's connector pair over one set of caches: vLLM's real scheduler (``SchedulerDriver``) and
    a ``ModelRunnerStandIn`` calling the worker-side connector; a check drives a producer and a consumer."""

    vllm_config: VllmConfig
    kv_cache_config: KVCacheConfig
    caches: dict[str, LayerCache]  # layer name -> what the connector registered (ModelRunnerStandIn.caches)
    scheduler: SchedulerDriver
    runner: ModelRunnerStandIn
    closed: bool = False

    def run(self, prompts: dict[str, list[int]], max_steps: int = 32) -> None:
        for request_id, prompt in prompts.items():
            self.scheduler.add(request_id, prompt)
        self.scheduler.run(self.runner, max_steps)

    def close(self) -> None:
        """Both halves shut down in vLLM's engine's order (``Scheduler.shutdown`` closes the scheduler side); once.

        A P/D engine's scheduler side may finish in the background (``closing``: NIXL's handshake listener
        takes up to a second to notice the stop); its end is still judged before the test's result."""
        if self.closed:
            return
        self.closed = True
        self.runner.shutdown()
        transfer = self.vllm_config.kv_transfer_config
        role = transfer.kv_role if transfer is not None else None
        if role in P_D_ROLES:
            closing.close(self.scheduler.scheduler.shutdown, f"{transfer.kv_connector}'s {role} scheduler shutdown()")
        else:
            self.scheduler.scheduler.shutdown()


@dataclass
class Rig:
    connector: ConnectorUnderTest
    platform: PlatformSpec
    backend: str
    shape: CacheShape
    model_dir: Path
    storage: Path
    device: str
    max_model_len: int = MAX_MODEL_LEN
    # the connector's servers' placeholders (conformance/connectors/services.py)
    services: dict[str, str] = field(default_factory=dict)
    # every engine built, so that the test's teardown shuts down what a failed check left open, as vLLM's engine
    # does on an error: a connector left to its __del__ would close against a server stopped by then
    engines: list[EngineStandIn] = field(default_factory=list, repr=False)
    # an engine of several tensor-parallel ranks (engine/ranks.py): its TP size, and the engine id every rank and
    # its scheduler share (vLLM sets one KVTransferConfig per engine); one rank and a fresh id by default
    tensor_parallel_size: int = 1
    # how the pair checks' waits for a connector's own threads scale (--kvconform-wait-scale; checks/pair_core.py)
    wait_scale: float = 1.0
    engine_id: str | None = None
    # the model runner stand-in to build (the bench swaps in a timed one)
    runner_class: ClassVar[type[ModelRunnerStandIn]] = ModelRunnerStandIn
    # the blocks the KV events of every engine over this storage announced (engine/published.py): engines sharing a
    # tier evict each other's blocks; a copy of the rig (``replace``, the workload's peer) shares it too
    published_blocks: PublishedBlocks = field(default_factory=PublishedBlocks, repr=False)

    def __post_init__(self) -> None:
        if self.shape.block_size is None:  # what vLLM's config would pick for this backend
            preferred = backend_class(self.effective_backend).get_preferred_block_size(VLLM_DEFAULT_BLOCK_SIZE)
            self.shape = replace(self.shape, block_size=preferred)

    @property
    def block_size(self) -> int:
        """Tokens per block: the shape's, or (a shape without one) what ``__post_init__`` resolved."""
        size = self.shape.block_size
        assert size is not None, "Rig.__post_init__ resolves a shape's block size"
        return size

    def block_size_refusal(self) -> str | None:
        """Why the backend under test cannot run this block size, in vLLM's words; None when it can."""
        backend = backend_class(self.effective_backend)
        if backend.supports_block_size(self.block_size):
            return None
        sizes = ", ".join(str(s) for s in backend.get_supported_kernel_block_sizes())
        return (f"{self.effective_backend} does not run block size {self.block_size} "
                f"(vLLM: its kernel block sizes are {sizes})")

    # Sizing hooks: the checks use the tiny model; the bench overrides these for long requests.
    @property
    def num_blocks(self) -> int:
        return kvcache.NUM_BLOCKS

    def layer_names(self) -> list[str]:
        return attention_layer_names()

    def attention_spec(self) -> AttentionSpec:
        return self.shape.attention_spec()

    def scheduler_limits(self) -> tuple[int, int]:
        """(max_num_seqs, max_num_batched_tokens): several whole prompts per step."""
        return 16, self.max_model_len * 4

    @property
    def effective_backend(self) -> str:
        """The backend the caches are built for: an MLA shape needs an MLA backend (the platform's default one
        unless the test's backend is one of its MLA backends, as in the ``mla``-marked checks)."""
        if self.shape.mla and self.backend not in self.platform.mla_backends:
            return MLA_BACKENDS[self.platform.name]
        return self.backend

    def layout(self) -> str:
        return self.shape.layout or kvcache.preferred_layout(backend_class(self.effective_backend))

    def vllm_config(self, role: str) -> VllmConfig:
        from vllm.config import (
            AttentionConfig,
            CacheConfig,
            DeviceConfig,
            KVTransferConfig,
            ModelConfig,
            ParallelConfig,
            SchedulerConfig,
            VllmConfig,
        )
        AttentionBackendEnum = vllm_api.find("AttentionBackendEnum")

        profile = self.connector.profile
        transfer = KVTransferConfig(
            kv_role=role,
            kv_connector_extra_config=profile.render_extra_config(self.storage, self.services),
            **({"kv_buffer_device": profile.kv_buffer_device.replace("{device}", self.platform.torch_device_type)}
               if profile.kv_buffer_device else {}),
            **self.connector.transfer_config_fields(),
            **({"engine_id": self.engine_id} if self.engine_id else {}),
        )
        model = ModelConfig(model=str(self.model_dir), skip_tokenizer_init=True, dtype=self.shape.model_dtype,
                            seed=0, max_model_len=self.max_model_len)
        max_num_seqs, max_num_batched_tokens = self.scheduler_limits()
        config = VllmConfig(
            # the backend under test, so what a connector asks vLLM (get_current_attn_backends) is that backend
            attention_config=AttentionConfig(backend=AttentionBackendEnum[self.effective_backend]),
            model_config=model,
            device_config=DeviceConfig(self.platform.torch_device_type),
            # the run's --kvconform-scheduler-cls, where a user's --scheduler-cls goes (engine/scheduler_class.py)
            scheduler_config=SchedulerConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                                             max_model_len=self.max_model_len, is_encoder_decoder=False,
                                             **scheduler_class.config_fields()),
            cache_config=CacheConfig(block_size=self.block_size, enable_prefix_caching=True,
                                     cache_dtype=self.shape.cache_dtype),
            kv_transfer_config=transfer,
            **({"parallel_config": ParallelConfig(tensor_parallel_size=self.tensor_parallel_size)}
               if self.tensor_parallel_size > 1 else {}),
        )
        kvcache.record_layout(config, self.layout())
        return config

    def engine(self, role: str = "kv_both", fill_seed: int | None = None) -> EngineStandIn:
        """A fresh scheduler + worker pair; caches random (``fill_seed``) or zeroed."""
        with refusal_as(ConnectorRefused, self.connector):  # vLLM's config validation may refuse it too
            config = self.vllm_config(role)
        layers = self.layer_names()
        kv_cache_config = kvcache.build_kv_cache_config(config, [(layers, self.attention_spec())], self.num_blocks)
        caches = kvcache.allocate(kv_cache_config, config, self.device)
        if fill_seed is not None:
            kvcache.fill_random(caches, fill_seed)
        metadata = {name: metadata_instance(self.effective_backend) for name in layers}
        with refusal_as(ConnectorRefused, self.connector):
            runner = self.runner_class(config, kv_cache_config, caches, self.connector.name, self.device, metadata)
            with _shut_down_if_raised(runner):
                scheduler = SchedulerDriver(config, kv_cache_config, published_blocks=self.published_blocks)
        engine = EngineStandIn(config, kv_cache_config, caches, scheduler, runner)
        self.engines.append(engine)
        return engine

    def close_engines(self) -> None:
        """Shut down every engine a check left open (one that failed before its own ``close()``).

        Errors are not raised here: the check's own ``close()`` is where shutdown is judged; this only
        frees what a check that already failed (or never closed) held."""
        for engine in self.engines:
            try:
                engine.close()
            except Exception:  # noqa: BLE001 - judged where the check closes its sides, not in this backstop
                pass

    def roles(self) -> tuple[str, str]:
        """(producer role, consumer role) from the profile."""
        roles = self.connector.profile.roles or ["kv_both"]
        if self.connector.profile.is_pair():
            return "kv_producer", "kv_consumer"
        return roles[0], roles[0]


AnyRig = TypeVar("AnyRig", bound=Rig)


class MakeRig(Protocol):
    """The ``make_rig`` fixture (conformance/conftest.py): a ``Rig`` (or ``rig_class``) for one cache shape of the
    test's connector, platform and backend, shut down at the test's end."""

    @overload
    def __call__(self, shape: CacheShape) -> Rig: ...

    @overload
    def __call__(self, shape: CacheShape, rig_class: type[AnyRig]) -> AnyRig: ...
