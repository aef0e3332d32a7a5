"""ExampleConnector subclasses that misbehave as processes, not as KV code.

The suite must survive each of them and name it: one kills the process, one
hangs, one deadlocks in native code where no Python handler runs, one leaves
a thread running, one writes outside its storage folder.
Others answer a load failure (stored data gone or damaged after the scheduler
counted on it) well or badly. tests/reliability proves what the suite does
with every one; ``TidyThreadConnector`` and ``ReportingLoadConnector`` are the
well-behaved controls that must pass.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import threading
import time

import safetensors
import safetensors.torch
import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
from vllm.distributed.kv_transfer.kv_connector.v1.example_connector import ExampleConnector

LITTER_DIR_VAR = "KVCONFORM_LITTER_DIR"


def _loads_anything(connector: ExampleConnector) -> bool:
    return any(not request.is_store for request in connector._get_connector_metadata().requests)


# --- the process ---------------------------------------------------------------------------


class SegfaultLoadConnector(ExampleConnector):
    """A native load path that dereferences NULL: the process dies of SIGSEGV mid-test."""

    def start_load_kv(self, forward_context, **kwargs) -> None:
        if _loads_anything(self):
            ctypes.string_at(0)
        super().start_load_kv(forward_context, **kwargs)


class ExitLoadConnector(ExampleConnector):
    """Gives up on a load by ending the process: ``os._exit`` skips every handler."""

    def start_load_kv(self, forward_context, **kwargs) -> None:
        if _loads_anything(self):
            os._exit(3)
        super().start_load_kv(forward_context, **kwargs)


class NativeDeadlockLoadConnector(ExampleConnector):
    """A native load path that waits on a lock it already holds, holding the interpreter lock, as a pyo3 core's
    futex wait does: no Python handler runs again in its process (pytest-timeout's SIGALRM, Ctrl-C)."""

    def start_load_kv(self, forward_context, **kwargs) -> None:
        if _loads_anything(self):
            libc = ctypes.PyDLL(None)  # PyDLL: the call keeps the interpreter lock
            mutex = ctypes.create_string_buffer(64)  # all zeros: glibc's PTHREAD_MUTEX_INITIALIZER, a normal mutex
            libc.pthread_mutex_lock(mutex)
            libc.pthread_mutex_lock(mutex)  # a normal mutex locked twice by its owner: waits forever
        super().start_load_kv(forward_context, **kwargs)


class HangingSaveConnector(ExampleConnector):
    """``wait_for_save`` waits for a save that never completes."""

    def wait_for_save(self) -> None:
        while True:
            time.sleep(3600)


class LeakyThreadConnector(ExampleConnector):
    """Starts a non-daemon poller thread on the worker side and never stops it, not even in shutdown()."""

    def __init__(self, vllm_config, role, kv_cache_config):
        super().__init__(vllm_config, role, kv_cache_config)
        if role == KVConnectorRole.WORKER:
            threading.Thread(target=self._poll_forever, name="leaky-kv-poller", daemon=False).start()

    @staticmethod
    def _poll_forever() -> None:
        while True:
            time.sleep(0.2)


class TidyThreadConnector(ExampleConnector):
    """The control for the leak check: the same poller, stopped and joined in shutdown()."""

    def __init__(self, vllm_config, role, kv_cache_config):
        super().__init__(vllm_config, role, kv_cache_config)
        self._stop = threading.Event()
        self._poller = None
        if role == KVConnectorRole.WORKER:
            self._poller = threading.Thread(target=self._stop.wait, name="tidy-kv-poller", daemon=False)
            self._poller.start()

    def shutdown(self) -> None:
        self._stop.set()
        if self._poller is not None:
            self._poller.join()


class LitteringConnector(ExampleConnector):
    """Ignores the configured ``shared_storage_path`` and writes to its default location.

    The default is ``$KVCONFORM_LITTER_DIR`` (a folder the self-test owns) rather than
    ExampleConnector's ``/tmp``, so proving the check never litters the machine.
    """

    def __init__(self, vllm_config, role, kv_cache_config):
        super().__init__(vllm_config, role, kv_cache_config)
        if LITTER_DIR_VAR not in os.environ:
            raise RuntimeError(f"LitteringConnector needs ${LITTER_DIR_VAR}: the folder it may litter")
        self._storage_path = os.environ[LITTER_DIR_VAR]


# --- answers to a load failure ---------------------------------------------------------------


def _request_blocks(request, block_size: int) -> set[int]:
    return {int(b) for b in (request.slot_mapping // block_size).unique()}


class ReportingLoadConnector(ExampleConnector):
    """The control for the load-failure check: verifies before it writes, and reports what it could not load.

    Saves carry a digest of their bytes; a load reads every layer's file of a request
    first and writes nothing of a request whose files are missing, unreadable or do
    not match their digest: it reports that request's blocks instead.
    """

    DIGEST_KEY = "kvconform-sha256"

    def __init__(self, vllm_config, role, kv_cache_config):
        super().__init__(vllm_config, role, kv_cache_config)
        self._load_errors: set[int] = set()

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs) -> None:
        for request in self._get_connector_metadata().requests:
            if not request.is_store:
                continue
            slots = request.slot_mapping.to(kv_layer.device)
            kv = kv_layer[slots // self._block_size, :, slots % self._block_size].detach().cpu().contiguous()
            digest = hashlib.sha256(kv.view(torch.uint8).numpy().tobytes()).hexdigest()
            path = self._generate_filename_debug(layer_name, request.token_ids, request.mm_hashes)
            safetensors.torch.save_file({"kv_cache": kv}, path, metadata={self.DIGEST_KEY: digest})

    def _read_verified(self, path: str) -> torch.Tensor | None:
        try:
            with safetensors.safe_open(path, framework="pt") as stored:
                digest = (stored.metadata() or {}).get(self.DIGEST_KEY)
                kv = stored.get_tensor("kv_cache")
        except Exception:
            return None
        actual = hashlib.sha256(kv.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()
        return kv if digest == actual else None

    def start_load_kv(self, forward_context, **kwargs) -> None:
        if not isinstance(forward_context.attn_metadata, dict):
            return
        layers = {name: layer.kv_cache for name, layer in forward_context.no_compile_layers.items()
                  if getattr(layer, "kv_cache", None) is not None}
        for request in self._get_connector_metadata().requests:
            if request.is_store:
                continue
            loaded = {name: self._read_verified(self._generate_filename_debug(name, request.token_ids,
                                                                              request.mm_hashes))
                      for name in layers}
            if any(kv is None for kv in loaded.values()):
                self._load_errors |= _request_blocks(request, self._block_size)
                continue
            for name, cache in layers.items():
                slots = request.slot_mapping.to(cache.device)
                cache[slots // self._block_size, :, slots % self._block_size] = loaded[name].to(cache.device)

    def get_block_ids_with_load_errors(self) -> set[int]:
        errors, self._load_errors = self._load_errors, set()
        return errors


class SilentLoadFailureConnector(ExampleConnector):
    """Swallows a failed load: neither raises nor reports, so vLLM computes on whatever the blocks held."""

    def start_load_kv(self, forward_context, **kwargs) -> None:
        try:
            super().start_load_kv(forward_context, **kwargs)
        except Exception:
            pass


class LastBlockOnlyReportConnector(ExampleConnector):
    """Reports a failed load, but only the request's last block: vLLM keeps the earlier ones as loaded."""

    def __init__(self, vllm_config, role, kv_cache_config):
        super().__init__(vllm_config, role, kv_cache_config)
        self._load_errors: set[int] = set()

    def start_load_kv(self, forward_context, **kwargs) -> None:
        try:
            super().start_load_kv(forward_context, **kwargs)
        except Exception:
            for request in self._get_connector_metadata().requests:
                if not request.is_store:
                    self._load_errors.add(int(request.slot_mapping[-1]) // self._block_size)

    def get_block_ids_with_load_errors(self) -> set[int]:
        errors, self._load_errors = self._load_errors, set()
        return errors
